"""What each graded lab runs: its scenario (workload, load, the flags it fixes, the SLO).

lab01 grades exact definitions, so its scenario is the same on every hardware profile and has no
performance target; the labs graded on tok/s and P99 (lab02 on) add targets per profile.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from vllm_course.config import SLO, LoadSpec, Scalar, SyntheticWorkload


class Scenario(BaseModel):
    """What a lab runs.

    Attributes:
        workload: the requests (synthetic and seeded: the same prompts at every run).
        load: arrivals and client settings.
        fixed_args: vLLM flags the scenario sets and the learner may not change.
        slo: per-request SLO (ms) that goodput counts against.
        about: the scenario in one line, as :func:`vllm_course.grading.setup` prints it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    workload: SyntheticWorkload
    load: LoadSpec
    fixed_args: dict[str, Scalar] = Field(default_factory=dict)
    slo: SLO | None = None
    about: str = ""


SCENARIOS: dict[str, Scenario] = {
    # a short Poisson run with varied lengths, so requests overlap, finish at different times and
    # some miss the SLO: enough variety for every definition to matter; --enforce-eager because
    # the lab is about the client's clock, not about how fast the server computes (it saves the
    # ~12 s torch.compile adds to a start on the CPU build, chapter 14)
    "lab01": Scenario(
        workload=SyntheticWorkload(num_requests=24, input_len=128, input_len_range=0.5,
                                   output_len=24, output_len_range=0.5, seed=101),
        load=LoadSpec(rate_rps=8.0, burstiness=1.0, seed=101),
        fixed_args={"enforce-eager": True},
        slo=SLO(ttft_ms=100.0, tpot_ms=20.0),
        about="24 requests, 64-192 prompt tokens, 12-36 output tokens, Poisson 8 req/s",
    ),
}
"""Each lab's scenario, by lab id."""
