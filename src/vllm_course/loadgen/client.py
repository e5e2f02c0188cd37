"""One streamed ``/v1/completions`` or ``/v1/chat/completions`` call, recorded chunk by chunk.

Each request asks for ``ignore_eos`` with a fixed ``max_tokens`` (so every request generates
exactly that many tokens) and for ``stream_options`` with ``include_usage`` and
``continuous_usage_stats``: vLLM then puts cumulative usage on every chunk, so the tokens in each
chunk are known exactly even when one chunk carries several (``--stream-interval N``, speculative
decoding). If a server sends no per-chunk usage, each chunk with text counts as one token and the
record says so (``token_count_source = "chunks"``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import httpx

from vllm_course.config import Endpoint
from vllm_course.records import RequestRecord
from vllm_course.workload import Request

ChunkHook = Callable[[RequestRecord], None]

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


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


def _chunk_text(choice: dict) -> str:
    if "text" in choice:
        return choice.get("text") or ""
    delta = choice.get("delta") or {}
    return delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or ""


async def sse_lines(resp: httpx.Response):
    """Lines of an SSE body, split on ``\\n`` only (a trailing ``\\r`` is dropped).

    ``httpx``'s ``aiter_lines`` splits like ``str.splitlines``, also on U+2028, U+0085 and other
    Unicode separators, which JSON may carry unescaped inside a string: generated text (random
    weights produce any token) would then be cut mid-object.
    """
    buffer = b""
    async for data in resp.aiter_bytes():
        buffer += data
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            yield line.rstrip(b"\r").decode("utf-8", "replace")
    if buffer:
        yield buffer.rstrip(b"\r").decode("utf-8", "replace")


class _Stream:
    """Folds SSE events into a RequestRecord."""

    def __init__(self, record: RequestRecord, t0: float):
        self.r = record
        self.t0 = t0
        self.seen_tokens = 0
        self.final_usage: dict | None = None
        self.per_chunk_usage = True
        self.done = False

    def event(self, data: str) -> None:
        now = time.perf_counter() - self.t0
        if data == "[DONE]":
            self.done = True
            return
        obj = json.loads(data)
        if not isinstance(obj, dict):
            raise ValueError(f"malformed SSE event: expected a JSON object, got {data[:80]!r}")
        if "error" in obj and not obj.get("choices"):
            err = obj["error"]
            raise RuntimeError(
                "server error in stream: "
                f"{err.get('message', err) if isinstance(err, dict) else err}"
            )
        usage = obj.get("usage")
        choices = obj.get("choices") or []
        if not choices:
            if usage:
                self.final_usage = usage
            return
        self.r.last_choice_s = now
        choice = choices[0]
        if choice.get("finish_reason"):
            self.r.finish_reason = choice["finish_reason"]
        if usage and "completion_tokens" in usage:
            n = usage["completion_tokens"] - self.seen_tokens
            self.seen_tokens = usage["completion_tokens"]
            self.final_usage = usage
        else:
            self.per_chunk_usage = False
            n = 1 if _chunk_text(choice) else 0
        if n > 0:
            self.r.chunk_s.append(now)
            self.r.chunk_tokens.append(n)
        elif not self.r.chunk_s and (choice.get("delta") or {}).get("role"):
            self.r.role_chunk_s = now

    def settle(self) -> None:
        """Fill the token counts from what arrived (also for a stream cut short)."""
        r = self.r
        r.token_count_source = "continuous_usage" if self.per_chunk_usage else "chunks"
        if self.final_usage:
            r.prompt_tokens = self.final_usage.get("prompt_tokens")
            r.output_tokens = self.final_usage.get("completion_tokens", sum(r.chunk_tokens))
        else:
            r.output_tokens = sum(r.chunk_tokens)

    def finish(self) -> None:
        """Raise if the stream ended without the request finishing."""
        if not self.done and self.r.finish_reason is None:
            raise RuntimeError(
                "stream ended before the request finished (no finish_reason, no [DONE])"
            )


async def send(
    client: httpx.AsyncClient,
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
    timeouts end up in ``record.error`` with the chunks received so far kept.

    Args:
        client: an ``httpx.AsyncClient`` whose ``base_url`` is the server (``http://host:port``).
        request: what to send.
        record: the record to fill (``index``, ``scheduled_s`` already set by the caller).
        model: the served model name.
        endpoint: ``completions`` or ``chat``.
        t0: the run's start on the ``time.perf_counter()`` clock; record times are relative to it.
        on_chunk: called with ``record`` after each chunk that carried generated tokens (e.g. a
            live display). It runs on the event loop that times every request: slow work here
            makes the client, not the server, the bottleneck (``diagnose`` reports that).
    """
    record.prompt_len = request.prompt_len
    record.max_tokens = request.output_len
    stream = _Stream(record, t0)
    try:
        body = request_body(request, model, endpoint)
        record.sent_s = time.perf_counter() - t0
        async with client.stream("POST", PATHS[endpoint], json=body) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode("utf-8", "replace")
                record.error = f"HTTP {resp.status_code}: {text[:300]}"
                return record
            # Read the body to its end, also past [DONE] (only the chunked encoding's last,
            # empty chunk follows): httpx returns a connection to its keep-alive pool only
            # when the body was read through, and closes it otherwise, so leaving at [DONE]
            # made every request open a new TCP connection (vllm bench serve's aiohttp client
            # reads to the end and keeps its connections).
            async for line in sse_lines(resp):
                if line.startswith("data:") and not stream.done:
                    chunks = len(record.chunk_s)
                    stream.event(line[5:].strip())
                    if on_chunk is not None and len(record.chunk_s) > chunks:
                        on_chunk(record)
        stream.finish()
    except (httpx.HTTPError, RuntimeError, ValueError) as exc:  # json errors are ValueErrors
        record.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    except asyncio.CancelledError:
        record.error = "cancelled"
        raise
    finally:
        stream.settle()
        record.end_s = time.perf_counter() - t0
    return record
