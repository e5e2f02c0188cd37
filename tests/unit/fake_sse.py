"""A scriptable fake of vLLM's OpenAI-style streaming endpoints, for unit tests only.

:meth:`FakeSSE.serve` runs a minimal HTTP/1.1 server on 127.0.0.1 (``asyncio.start_server``,
``Transfer-Encoding: chunked``, persistent connections): the course's client talks to it over
real sockets, as to vLLM. Each event is written and drained on its own, so events the client
reads together waited in the socket for it.

A :class:`Script` is a status code plus a list of events, sent in order:

* a ``dict``: one SSE event ``data: <json>\\n\\n``;
* a ``str`` or ``bytes``: written as is (``DONE``, malformed lines, comments);
* :class:`Delay`: sleep before the next event;
* :class:`Drop`: the connection dies here (the TCP connection is aborted mid-body).

The chunk builders reproduce the shapes vLLM sends with
``stream_options={"include_usage": true, "continuous_usage_stats": true}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

DONE = "data: [DONE]\n\n"


@dataclass(frozen=True)
class Delay:
    """Sleep ``seconds`` before sending the next event."""

    seconds: float


@dataclass(frozen=True)
class Drop:
    """Abort the TCP connection here, mid-body."""


@dataclass
class Script:
    """One scripted HTTP response."""

    events: list = field(default_factory=list)
    status: int = 200
    content_type: str = "text/event-stream"


def encode(event: dict | str | bytes) -> bytes:
    """The bytes one event puts on the wire."""
    if isinstance(event, dict):
        return b"data: " + json.dumps(event).encode() + b"\n\n"
    if isinstance(event, str):
        return event.encode()
    return bytes(event)


def _usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


def completion_stream(
    texts: Sequence[str],
    *,
    tokens: Sequence[int] | None = None,
    prompt_tokens: int = 4,
    continuous: bool = True,
    finish_reason: str | None = "length",
    final_usage: bool = True,
    done: bool = True,
    delay_s: float = 0.0,
) -> list:
    """Events of a ``/v1/completions`` stream: one chunk per text, the last one finishing.

    Args:
        texts: each chunk's ``text``.
        tokens: tokens each chunk carries (default 1 each); with ``continuous`` the chunks carry
            the cumulative count in ``usage.completion_tokens``.
        continuous: put usage on every chunk (``continuous_usage_stats``).
        finish_reason: on the last chunk (``None`` for none).
        final_usage: send the usage-only chunk (``choices: []``) at the end.
        done: send ``data: [DONE]`` at the end.
        delay_s: pause before each text chunk.
    """
    tokens = list(tokens) if tokens is not None else [1] * len(texts)
    assert len(tokens) == len(texts)
    events: list = []
    total = 0
    for i, (text, k) in enumerate(zip(texts, tokens, strict=True)):
        total += k
        last = i == len(texts) - 1
        chunk: dict = {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "text": text,
                    "logprobs": None,
                    "finish_reason": finish_reason if last else None,
                    "stop_reason": None,
                }
            ],
        }
        if continuous:
            chunk["usage"] = _usage(prompt_tokens, total)
        if delay_s:
            events.append(Delay(delay_s))
        events.append(chunk)
    if final_usage:
        events.append(
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "created": 1,
                "model": "m",
                "choices": [],
                "usage": _usage(prompt_tokens, total),
            }
        )
    if done:
        events.append(DONE)
    return events


def chat_stream(
    contents: Sequence[str],
    *,
    tokens: Sequence[int] | None = None,
    prompt_tokens: int = 6,
    continuous: bool = True,
    finish_reason: str | None = "length",
    final_usage: bool = True,
    done: bool = True,
    delay_s: float = 0.0,
    role_delay_s: float = 0.0,
) -> list:
    """Events of a ``/v1/chat/completions`` stream: the empty role chunk, then content deltas."""
    tokens = list(tokens) if tokens is not None else [1] * len(contents)
    assert len(tokens) == len(contents)
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    role: dict = {
        **head,
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
    }
    if continuous:
        role["usage"] = _usage(prompt_tokens, 0)
    events: list = [role]
    if role_delay_s:
        events.append(Delay(role_delay_s))
    total = 0
    for i, (content, k) in enumerate(zip(contents, tokens, strict=True)):
        total += k
        last = i == len(contents) - 1
        chunk: dict = {
            **head,
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": content},
                    "logprobs": None,
                    "finish_reason": finish_reason if last else None,
                }
            ],
        }
        if continuous:
            chunk["usage"] = _usage(prompt_tokens, total)
        if delay_s:
            events.append(Delay(delay_s))
        events.append(chunk)
    if final_usage:
        events.append({**head, "choices": [], "usage": _usage(prompt_tokens, total)})
    if done:
        events.append(DONE)
    return events


def error_body(message: str, *, code: int = 400, err_type: str = "BadRequestError") -> dict:
    """vLLM's error object (``ErrorResponse``): ``{"error": {...}}``."""
    return {"error": {"message": message, "type": err_type, "param": None, "code": code}}


def http_error(status: int, message: str) -> Script:
    """A non-streaming error response with vLLM's JSON error body."""
    return Script(
        events=[json.dumps(error_body(message, code=status))],
        status=status,
        content_type="application/json",
    )


@dataclass
class Call:
    """One request the fake received."""

    path: str
    body: dict
    start: float  # time.perf_counter() when it arrived
    end: float | None = None  # when its response body finished or was closed
    connection: int = 0  # which TCP connection it came on (0, 1, ... in accept order)


ScriptFn = Callable[[int, str, dict], Script]


class FakeSSE:
    """Serves scripts; records every call and how many were in flight at once.

    Args:
        script: the response to every call, or ``fn(call_index, path, body) -> Script``.
    """

    def __init__(self, script: Script | ScriptFn):
        self._script = script
        self.calls: list[Call] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.connections = 0  # TCP connections accepted

    # -- bookkeeping --------------------------------------------------------------------
    def _begin(self, path: str, body: dict, connection: int) -> tuple[Call, Script]:
        index = len(self.calls)
        call = Call(path=path, body=body, start=time.perf_counter(), connection=connection)
        self.calls.append(call)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        script = self._script(index, path, body) if callable(self._script) else self._script
        return call, script

    def _end(self, call: Call) -> None:
        if call.end is None:
            call.end = time.perf_counter()
            self.in_flight -= 1

    # -- real socket server ---------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[str]:
        """Run on 127.0.0.1 (a free port); yields the base URL ``http://127.0.0.1:PORT``."""
        conns: set[asyncio.Task] = set()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            conns.add(asyncio.current_task())
            connection = self.connections
            self.connections += 1
            try:
                while await self._serve_one(reader, writer, connection):
                    pass
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()
                conns.discard(asyncio.current_task())

        server = await asyncio.start_server(on_connect, "127.0.0.1", 0, backlog=1024)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.close()
            for task in list(conns):
                task.cancel()
            await asyncio.gather(*conns, return_exceptions=True)
            await server.wait_closed()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         connection: int) -> bool:
        """Answer one request; whether the connection stays open for the next one."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False   # the client closed the connection between requests
        lines = head.decode("latin-1").split("\r\n")
        _method, path, _version = lines[0].split(" ", 2)
        headers = {
            k.strip().lower(): v.strip()
            for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)
        }
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
        call, script = self._begin(path, json.loads(raw) if raw else {}, connection)
        try:
            reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(script.status, "Error")
            if script.status != 200:
                payload = b"".join(encode(e) for e in script.events)
                writer.write(
                    f"HTTP/1.1 {script.status} {reason}\r\nContent-Type: "
                    f"{script.content_type}\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
                    + payload
                )
                await writer.drain()
                return True
            writer.write(
                f"HTTP/1.1 200 OK\r\nContent-Type: {script.content_type}\r\n"
                "Transfer-Encoding: chunked\r\n\r\n".encode()
            )
            for event in script.events:
                if isinstance(event, Delay):
                    await asyncio.sleep(event.seconds)
                    continue
                if isinstance(event, Drop):
                    await writer.drain()
                    writer.transport.abort()
                    return False
                data = encode(event)
                writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        finally:
            self._end(call)
