"""Reference runs on a GPU machine lent in calls of limited time (the course's H200 results).

What runs (:mod:`.catalog`): chapter notebooks, lab calibrations, the harness-vs-``vllm bench
serve`` comparisons and the demo, each with the device seconds it is expected to take. How
they are split into calls (:mod:`.plan`): items that used the same server settings last time
stand together, so one call's shared pool starts that server once; a call holds at most the
call's limit of estimated seconds. What one call does (:mod:`.run`): it runs its items against
one server pool that it owns (chapters borrow from it through the broker, as in CI), writes
each item's results where ``reference/h200/`` keeps them, and packs them into files small
enough to come back from the machine.

``vllm-course reference plan`` prints the plan; ``vllm-course reference run --call K`` runs
call K on the machine it is typed on; ``vllm-course reference unpack`` puts what came back in
place.

May import: ``config``, ``env`` and ``server`` (it owns a pool and lends it; the items run in
their own processes and kernels).
"""

from vllm_course.reference.catalog import Item, catalog, select
from vllm_course.reference.plan import Call, plan

__all__ = ["Call", "Item", "catalog", "plan", "select"]
