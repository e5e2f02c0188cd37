"""How to send a workload: the client side, readable in one sitting.

``arrivals`` computes send times (Poisson or gamma, as ``vllm bench serve``); ``wire`` speaks
HTTP/1.1 with each read stamped as it arrives (asyncio protocol + llhttp); ``client`` sends one
streamed request over it and parses the reads into a :class:`RequestRecord` after the request
ends; ``runner`` sends a request set on schedule over pooled connections (:func:`run_load`)
after the warm-ups (:func:`warm_up`, the one warm-up path), in this process or spread over
client processes (``workers``); ``selfcheck`` tells whether the client kept up (loop lag, late
sends, client CPU), so a slow client is never blamed on the server.

May import: ``config``, ``records``, ``metrics`` and ``workload``. Never ``server``: a load
generator only needs a base URL.
"""

from vllm_course.loadgen.arrivals import achieved_rate, schedule
from vllm_course.loadgen.client import (
    KEEPALIVE_EXPIRY_S,
    PATHS,
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
from vllm_course.loadgen.wire import BadResponse, ReadTimeout, StreamCut, StreamSession

__all__ = [
    "KEEPALIVE_EXPIRY_S", "PATHS", "BadResponse", "ChunkHook", "ClientChecks", "LoadHooks",
    "LoadResult", "LoopLagMonitor", "ProgressFn", "ReadTimeout", "RecordSink", "StreamCut",
    "StreamSession", "achieved_rate", "client_checks", "open_session", "request_body",
    "run_load", "schedule", "send", "warm_up",
]
