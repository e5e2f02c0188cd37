"""One streamed ``/v1/completions`` or ``/v1/chat/completions`` call, recorded chunk by chunk.

Each request asks for ``ignore_eos`` with a fixed ``max_tokens`` (so every request generates
exactly that many tokens) and for ``stream_options`` with ``include_usage`` and
``continuous_usage_stats``: vLLM then puts cumulative usage on every chunk, so the tokens in each
chunk are known exactly even when one chunk carries several (``--stream-interval N``, speculative
decoding). If a server sends no per-chunk usage, each chunk with text counts as one token and the
record says so (``token_count_source = "chunks"``).

How a stream is read, so that the client never limits what it measures: while the response
streams, the only work per read is one clock reading, llhttp's pass over the bytes and two list
appends, all in the event loop's socket callback (:mod:`vllm_course.loadgen.wire`): the
request's coroutine does not wake per read. The body's bytes are stamped with
``time.perf_counter()`` when they arrive and kept, and parsed only when the request has ended,
so parsing one stream never delays reading another. An event's arrival time is the stamp of the
read that completed its line. Several events in one read (a *bunched* read) mean they waited in
the socket for the client (the client was busy elsewhere) or were written together by the
server. With an ``on_chunk`` hook every read is parsed as it arrives instead (the hook must see
the record grow), which costs the parse on the hot path.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import msgspec

from vllm_course.config import Endpoint
from vllm_course.loadgen.wire import StreamSession
from vllm_course.records import RequestRecord
from vllm_course.workload import Request

ChunkHook = Callable[[RequestRecord], None]

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}

KEEPALIVE_EXPIRY_S = 2.0
"""Seconds an idle connection stays in the client's pool, shorter than the server's keep-alive
(vLLM's API server closes an idle connection after ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE`` = 5 s,
vllm/envs.py), so that no request is sent on a pooled connection just as the server closes it
(it would fail with a read error). aiohttp's default is 15 s."""

_JSON = {"Content-Type": "application/json", "Accept": "text/event-stream"}


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Delta(msgspec.Struct):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class _Choice(msgspec.Struct):
    text: str | None = None
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Event(msgspec.Struct):
    """The fields of an OpenAI-style stream event the client reads (completions and chat,
    as vllm/entrypoints/openai/protocol.py streams them); every other field is skipped
    without building a Python object for it."""

    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: object = None


_decode = msgspec.json.Decoder(_Event).decode
"""An event's JSON to :class:`_Event` (msgspec, a vLLM dependency too). Parsing is most of the
client's CPU per streamed token: this is ~3x faster than ``json.loads`` to dicts, and decoding
into a typed struct skips the fields nobody reads (id, object, model, logprobs...)."""


def open_session(timeout_s: float) -> StreamSession:
    """The HTTP client one run (or one warm-up) sends all its requests over
    (:class:`~vllm_course.loadgen.wire.StreamSession`).

    No connection cap (a cap would queue streams silently; a run's ``max_concurrency`` is held
    by the load generator, where the wait is recorded), idle connections kept
    :data:`KEEPALIVE_EXPIRY_S`, no read buffer limit, and no read of the body waiting longer
    than ``timeout_s`` seconds (the whole request's deadline is the load generator's). Use it as
    ``async with open_session(...) as session`` inside a running event loop.
    """
    return StreamSession(read_timeout_s=timeout_s, keepalive_s=KEEPALIVE_EXPIRY_S)


def request_body(request: Request, model: str, endpoint: Endpoint) -> dict:
    """The JSON body for ``request`` on ``endpoint`` (streaming, fixed length, usage on)."""
    body: dict = {
        "model": model,
        "max_tokens": request.output_len,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if endpoint == "chat":
        if request.is_conversation:
            body["messages"] = [{"role": r, "content": c} for r, c in request.prompt]
        elif isinstance(request.prompt, str):
            body["messages"] = [{"role": "user", "content": request.prompt}]
        else:
            raise ValueError("token-id prompts only work with the completions endpoint")
    elif request.is_conversation:
        raise ValueError("conversation prompts only work with the chat endpoint")
    else:
        body["prompt"] = request.prompt if isinstance(request.prompt, str) else list(request.prompt)
    if request.priority is not None:
        body["priority"] = request.priority
    return body


def _chunk_text(choice: _Choice) -> str:
    if choice.text is not None:
        return choice.text
    delta = choice.delta
    if delta is None:
        return ""
    return delta.content or delta.reasoning_content or delta.reasoning or ""


class _Stream:
    """Folds an SSE body into a RequestRecord, read by read.

    Lines are split on ``\\n`` only (a trailing ``\\r`` is dropped): ``str.splitlines`` would
    also split on U+2028, U+0085 and other separators, which JSON may carry unescaped inside a
    string, and generated text (random weights produce any token) would be cut mid-object.
    """

    def __init__(self, record: RequestRecord, t0: float):
        self.r = record
        self.t0 = t0
        self.seen_tokens = 0
        self.final_usage: _Usage | None = None
        self.per_chunk_usage = True
        self.done = False
        self.rest = b""

    def feed(self, data: bytes, stamp: float, on_chunk: ChunkHook | None = None) -> None:
        """Fold one read's bytes, which arrived at ``stamp`` (``perf_counter``).

        Raises:
            ValueError: a malformed event (``msgspec.DecodeError`` is a ValueError).
            RuntimeError: the server sent an error object in the stream.
        """
        *lines, self.rest = (self.rest + data).split(b"\n")
        for line in lines:
            self._line(line, stamp, on_chunk)

    def close(self, stamp: float) -> None:
        """Fold a last line the server ended without a newline (same errors as :meth:`feed`)."""
        if self.rest:
            line, self.rest = self.rest, b""
            self._line(line, stamp, None)

    def _line(self, line: bytes, stamp: float, on_chunk: ChunkHook | None) -> None:
        if not line.startswith(b"data:") or self.done:
            return
        chunks = len(self.r.chunk_s)
        self.event(line[5:].strip(), stamp - self.t0)
        if on_chunk is not None and len(self.r.chunk_s) > chunks:
            on_chunk(self.r)

    def event(self, data: bytes, now: float) -> None:
        """Fold one event's payload that arrived at ``now`` (s since the run's start)."""
        if data == b"[DONE]":
            self.done = True
            return
        try:
            obj = _decode(data)
        except msgspec.ValidationError as exc:     # JSON, but not an event's shape
            text = data.decode("utf-8", "replace")
            raise ValueError(f"malformed SSE event ({exc}): {text[:80]!r}") from None
        if obj.error is not None and not obj.choices:
            err = obj.error
            raise RuntimeError(
                "server error in stream: "
                f"{err.get('message', err) if isinstance(err, dict) else err}"
            )
        usage = obj.usage
        if not obj.choices:
            if usage is not None:
                self.final_usage = usage
            return
        self.r.last_choice_s = now
        choice = obj.choices[0]
        if choice.finish_reason:
            self.r.finish_reason = choice.finish_reason
        if usage is not None and usage.completion_tokens is not None:
            n = usage.completion_tokens - self.seen_tokens
            self.seen_tokens = usage.completion_tokens
            self.final_usage = usage
        else:
            self.per_chunk_usage = False
            n = 1 if _chunk_text(choice) else 0
        if n > 0:
            self.r.chunk_s.append(now)
            self.r.chunk_tokens.append(n)
        elif not self.r.chunk_s and choice.delta is not None and choice.delta.role:
            self.r.role_chunk_s = now

    def fold(self, stamps: list[float], reads: list[bytes]) -> Exception | None:
        """Fold the reads kept during the stream, in order; the first malformed or error event
        ends the folding and is returned (the events before it stay folded)."""
        try:
            for stamp, data in zip(stamps, reads, strict=True):
                self.feed(data, stamp)
            if stamps:
                self.close(stamps[-1])
        except (ValueError, RuntimeError) as exc:
            return exc
        return None

    def settle(self) -> None:
        """Fill the token counts from what arrived (also for a stream cut short)."""
        r = self.r
        r.token_count_source = "continuous_usage" if self.per_chunk_usage else "chunks"
        if self.final_usage is not None:
            usage = self.final_usage
            r.prompt_tokens = usage.prompt_tokens
            r.output_tokens = (sum(r.chunk_tokens) if usage.completion_tokens is None
                               else usage.completion_tokens)
        else:
            r.output_tokens = sum(r.chunk_tokens)

    def unfinished(self) -> RuntimeError | None:
        """The error of a stream that ended without the request finishing, else ``None``."""
        if not self.done and self.r.finish_reason is None:
            return RuntimeError(
                "stream ended before the request finished (no finish_reason, no [DONE])"
            )
        return None


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def send(
    session: StreamSession,
    base_url: str,
    request: Request,
    record: RequestRecord,
    *,
    model: str,
    endpoint: Endpoint,
    t0: float,
    on_chunk: ChunkHook | None = None,
) -> RequestRecord:
    """Send one streamed request and fill ``record`` in place (also returned).

    Never raises for a failed request: HTTP errors, dropped connections, malformed SSE and
    read timeouts end up in ``record.error`` with the chunks received before them kept. A
    cancelled request (the load generator's deadline, an interrupted run) keeps its chunks too,
    with ``error = "cancelled"``, and the cancellation propagates.

    Args:
        session: the run's client (:func:`open_session`).
        base_url: the server, ``http://host:port``.
        request: what to send.
        record: the record to fill (``index``, ``scheduled_s`` already set by the caller).
        model: the served model name.
        endpoint: ``completions`` or ``chat``.
        t0: the run's start on the ``time.perf_counter()`` clock; record times are relative to it.
        on_chunk: called with ``record`` after each chunk that carried generated tokens (e.g. a
            live display). It makes the client parse each read as it arrives, on the event loop
            that times every request: slow work here makes the client, not the server, the
            bottleneck (``diagnose`` reports that).
    """
    record.prompt_len = request.prompt_len
    record.max_tokens = request.output_len
    stream = _Stream(record, t0)
    stamps: list[float] = []
    reads: list[bytes] = []
    failure: Exception | None = None
    try:
        body = json.dumps(request_body(request, model, endpoint)).encode()
        record.sent_s = time.perf_counter() - t0
        url = base_url.rstrip("/") + PATHS[endpoint]
        # The body is read to its end, also past [DONE] (only the chunked encoding's last,
        # empty chunk follows): a connection goes back to the pool only when its response
        # ended, and is closed otherwise.
        if on_chunk is None:
            def sink(data: bytes, stamp: float) -> None:
                stamps.append(stamp)
                reads.append(data)
        else:
            def sink(data: bytes, stamp: float) -> None:
                stream.feed(data, stamp, on_chunk)
        resp = await session.post(url, body, headers=_JSON, sink=sink)
        if resp.status != 200:
            text = resp.body.decode("utf-8", "replace")
            record.error = f"HTTP {resp.status}: {text[:300]}"
            return record
        if on_chunk is not None:
            stream.close(time.perf_counter())
    except (OSError, ValueError, RuntimeError) as exc:
        # OSError: no connection, StreamCut, ReadTimeout; ValueError: BadResponse, a malformed
        # event seen by an on_chunk hook (msgspec's DecodeError is one); RuntimeError: an error
        # object in the stream
        failure = exc
    except asyncio.CancelledError:
        record.error = "cancelled"
        raise
    finally:
        record.end_s = time.perf_counter() - t0
        # what arrived is parsed now; a bad event came before any later transport failure
        bad_event = stream.fold(stamps, reads)
        if record.error is None:
            problem = bad_event or failure or stream.unfinished()
            if problem is not None:
                record.error = _describe(problem)
        stream.settle()
    return record
