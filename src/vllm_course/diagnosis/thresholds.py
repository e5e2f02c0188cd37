"""The thresholds the diagnosis rules compare a run against (see :mod:`.rules` for what each
rule does with them, and docs/diagnose.md for why these values)."""

KV_FULL = 0.90
"""KV cache usage peak (fraction) at or above which the cache counts as full."""
KV_FREE = 0.80
"""KV cache usage peak (fraction) below which memory was not what limited the batch."""
BUDGET_SHARE = 0.80
"""Mean tokens per step at or above this share of ``max_num_batched_tokens``: budget saturated."""
PINNED_SHARE = 0.50
"""Share of in-run samples with running at ``max_num_seqs`` for the cap to count as reached."""
ITL_SPREAD = 3.0
"""ITL P99 / P50 at or above this means decode is stalled now and then."""
STALL_FACTOR = 4.0
"""A gap between chunks longer than this times the median gap is a decode stall."""
STALL_SHARE = 0.50
"""Share of decode stalls that must overlap a long prefill for prefill interference."""
STALLS_MIN_SHARE = 0.05
"""Decode stalls must be at least this share of all gaps between chunks (they reach the P95 ITL):
on the H200 a light run with 1.3 % stalls (ITL P99 4.3x P50) met every SLO."""
LONG_PROMPT_TOKENS = 512
"""A prompt at least this long (tokens) counts as long for prefill interference."""
BUSY_SHARE = 0.90
"""Share of samples with a running request for the server to count as busy."""
QUEUE_MEAN = 1.0
"""Mean waiting requests at or above which a queue formed."""
FULL_BATCH_SHARE = 0.5
"""Running mean at or above this share of ``max_num_seqs``: the batch is full enough that each
step's compute, not admission, sets the pace."""
CAP_MEAN_SHARE = 0.90
"""Time-averaged running requests at or above this share of ``max_num_seqs``: the cap held."""
QUEUE_WAIT_MS = 50.0
"""Mean server queue time (ms, ``vllm:request_queue_time_seconds``) at or above which requests
queued; read from counters, so it holds when no ``/metrics`` sample fell inside the run."""
SLOT_WAIT_SHARE = 0.10
"""Client slot wait P50 at or above this share of the mean E2EL: the client's cap held requests."""
SLO_MET_SHARE = 0.90
"""With an SLO, a run where fewer than this share of the requests met it is not called "too
light" when no rule fired: nothing queued, so the time went to the engine's own steps."""
