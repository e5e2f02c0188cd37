"""Split reference items into device calls of limited time.

Items whose last runs used the same server settings are put side by side (in the order the
first of them comes), so the call's pool, which keeps one server live on a GPU, starts that
server once. Then the items fill calls in that order, each call up to ``call_s`` estimated
seconds; an item estimated longer than a call, or whose last run a call's end stopped
(``Item.ran_out``), gets a call of its own and is marked: the device may stop it, and what it
wrote by then still comes back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm_course.reference.catalog import Item

#: The device's limit per command is 600 s; a call plans 540 so the packing and a server's
#: stop still fit (s).
CALL_S = 540
#: Staging and installing vLLM on a fresh machine before the first call (about 2 minutes of
#: device time, measured 2026-11; s).
SETUP_S = 120


@dataclass
class Call:
    """One device command: its items, in the order they run.

    Attributes:
        number: 1-based.
        items: what it runs.
        limit_s: the seconds it may take (s).
    """

    number: int
    items: list[Item] = field(default_factory=list)
    limit_s: int = CALL_S

    @property
    def estimate_s(self) -> int:
        """Sum of the items' estimates (s)."""
        return sum(i.estimate_s for i in self.items)

    @property
    def over(self) -> bool:
        """True if the items' estimate passes the limit (a single long item)."""
        return self.estimate_s > self.limit_s

    @property
    def ran_out(self) -> bool:
        """True if its item's last run was stopped by a call's end (it has a call of its
        own)."""
        return any(i.ran_out for i in self.items)


def grouped(items: list[Item]) -> list[Item]:
    """``items`` with those that share their first server setting moved next to the first of
    them; items with no recorded server keep their place."""
    groups: dict[str, list[Item]] = {}
    for item in items:
        groups.setdefault(item.servers[0] if item.servers else f"item:{item.id}", []).append(item)
    return [i for members in groups.values() for i in members]


def plan(items: list[Item], call_s: int = CALL_S) -> list[Call]:
    """The calls that run ``items``, in order (see the module docstring).

    Raises:
        ValueError: ``call_s`` is not positive, or there is nothing to run.
    """
    if call_s <= 0:
        raise ValueError(f"a call's limit must be positive, not {call_s} s")
    if not items:
        raise ValueError("nothing to run: name items (e.g. ch01-ch08, lab03, bench-burst)")
    calls = [Call(1, limit_s=call_s)]
    for item in grouped(items):
        if calls[-1].items and (calls[-1].estimate_s + item.estimate_s > call_s
                                or item.ran_out or calls[-1].ran_out):
            calls.append(Call(len(calls) + 1, limit_s=call_s))
        calls[-1].items.append(item)
    return calls


def describe(calls: list[Call]) -> str:
    """The plan for a person: each call's items with their estimates, and the total device
    time with the first call's staging."""
    lines = []
    for call in calls:
        mark = ("  OVER the limit: the device may stop it" if call.over
                else "  RAN OUT of a call before: the device may stop it again" if call.ran_out
                else "")
        lines.append(f"call {call.number}: ~{call.estimate_s} s of {call.limit_s} s{mark}")
        for item in call.items:
            shared = f", server {item.servers[0][:12]}" if item.servers else ""
            lines.append(f"  {item.id:<14} ~{item.estimate_s:>4} s  ({item.estimate_from}{shared})")
    total = sum(c.estimate_s for c in calls) + SETUP_S
    lines.append(f"{len(calls)} call(s), ~{total / 60:.1f} device minutes with ~{SETUP_S} s of "
                 "staging on a fresh machine (a session has 30)")
    return "\n".join(lines)
