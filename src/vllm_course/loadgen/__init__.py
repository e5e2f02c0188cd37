"""How to send a workload: the client side, readable in one sitting.

``arrivals`` computes send times (Poisson or gamma, as ``vllm bench serve``); ``client`` sends
one streamed request over aiohttp, stamps every read as it arrives and parses the reads into a
:class:`RequestRecord` after the request ends; ``runner`` sends a request set on schedule over
pooled connections (:func:`run_load`) after the warm-ups (:func:`warm_up`, the one warm-up
path); ``wire`` is HTTP/1.1 with each read stamped as it arrives and no coroutine wake-up per
read (the client's next reader, not used by it yet); ``selfcheck`` tells whether the client
kept up (loop lag, late sends, client CPU), so a slow client is never blamed on the server.

May import: ``config``, ``records``, ``metrics`` and ``workload``. Never ``server``: a load
generator only needs a base URL.
"""

from vllm_course.loadgen.arrivals import achieved_rate, schedule
from vllm_course.loadgen.client import (
    KEEPALIVE_EXPIRY_S,
    PATHS,
    READ_BUFSIZE,
    ChunkHook,
    open_session,
    request_body,
    send,
)
from vllm_course.loadgen.runner import (
    LoadHooks,
    LoadResult,
    ProgressFn,
    RecordSink,
    run_load,
    warm_up,
)
from vllm_course.loadgen.selfcheck import ClientChecks, LoopLagMonitor, client_checks

__all__ = [
    "KEEPALIVE_EXPIRY_S", "PATHS", "READ_BUFSIZE", "ChunkHook", "ClientChecks", "LoadHooks",
    "LoadResult", "LoopLagMonitor", "ProgressFn", "RecordSink", "achieved_rate",
    "client_checks", "open_session", "request_body", "run_load", "schedule", "send", "warm_up",
]
