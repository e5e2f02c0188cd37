"""``vllm_course.loadgen.wire``: HTTP/1.1 with each read stamped, against raw local servers that
write exactly the bytes a test needs (also the ones a real server writes only when it fails)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from vllm_course.loadgen.wire import BadResponse, ReadTimeout, Response, StreamCut, StreamSession

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

try:
    import uvloop
except ImportError:          # uvloop is optional; the worker processes use it when installed
    uvloop = None


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Callable:
    """Run a coroutine on asyncio's loop and on uvloop's (what client worker processes use)."""
    if request.param == "uvloop":
        if uvloop is None:
            pytest.skip("uvloop is not installed (it comes with vLLM's uvicorn[standard])")
        return lambda coro: uvloop.run(coro)
    return asyncio.run


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)


OK_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
LAST = b"0\r\n\r\n"
#: libuv's timer resolution (s): its loop clock counts whole milliseconds
TIMER_RESOLUTION_S = 0.001


class Server:
    """A local TCP server that answers each request with what ``handler`` writes; counts
    connections and the most open at once."""

    def __init__(self, handler: Handler):
        self.handler = handler
        self.connections = 0
        self.open = 0
        self.max_open = 0
        self.requests: list[bytes] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self.max_open = max(self.max_open, self.open)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                self.requests.append(head + await reader.readexactly(length))
                try:
                    await self.handler(reader, writer)
                except ConnectionError:      # the client went away mid-response
                    return
                if writer.is_closing():
                    return
        finally:
            self.open -= 1
            writer.close()

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=1024)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}/v1/completions"
        finally:
            server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)


def writes(*parts: bytes | float, close: bool = False) -> Handler:
    """A handler that writes ``parts`` in order (a float: sleep that many seconds first)."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for part in parts:
            if isinstance(part, float):
                await asyncio.sleep(part)
            else:
                writer.write(part)
                await writer.drain()
        if close:
            writer.close()
    return handler


def sleep(seconds: float) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(seconds)
    return handler


def sequence(*handlers: Handler) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for h in handlers:
            await h(reader, writer)
    return handler


async def collect(session: StreamSession, url: str) -> tuple[Response, list[tuple[bytes, float]]]:
    got: list[tuple[bytes, float]] = []
    resp = await session.post(url, b'{"x": 1}', headers={"Content-Type": "application/json"},
                              sink=lambda data, stamp: got.append((data, stamp)))
    return resp, got


def test_a_chunked_stream_goes_to_the_sink_piece_by_piece_and_the_connection_is_reused(run):
    written: list[float] = []

    def mark(part: bytes) -> Handler:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            written.append(time.perf_counter())
            writer.write(part)
            await writer.drain()
        return handler

    server = Server(sequence(writes(OK_CHUNKED), mark(chunked(b"data: 1\n\n")), sleep(0.05),
                             mark(chunked(b"data: 2\n\n")), writes(LAST)))

    async def go():
        async with server.serve() as url, StreamSession(read_timeout_s=5) as session:
            first = await collect(session, url)
            second = await collect(session, url)
            return first, second

    (resp, got), (resp2, got2) = run(go())
    assert resp == Response(200) and resp2 == Response(200)
    assert [d for d, _ in got] == [b"data: 1\n\n", b"data: 2\n\n"] == [d for d, _ in got2]
    # each piece stamped when its read arrived: never before the server wrote it (the two may
    # share a read, and so a time, when the loop was held up for longer than the 50 ms)
    (_, s1), (_, s2) = got
    assert written[0] <= s1 <= s2 and written[1] <= s2
    # the server slept 50 ms between the pieces; under uvloop that sleep is a libuv timer, whose
    # clock (uv_now, updated when the timer starts: uvloop/handles/timer.pyx) counts whole
    # milliseconds, so it may end up to 1 ms early on perf_counter (measured once: 49.5 ms)
    assert s2 - written[0] >= 0.05 - TIMER_RESOLUTION_S
    assert server.connections == 1                      # kept alive and reused
    assert server.requests[0].startswith(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:")
    assert server.requests[0].endswith(b'Content-Type: application/json\r\n\r\n{"x": 1}')


def test_an_error_status_returns_its_body_whole_and_keeps_the_connection(run):
    body = b'{"error": "bad request"}'
    server = Server(writes(b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s"
                           % (len(body), body)))

    async def go():
        async with server.serve() as url, StreamSession(read_timeout_s=5) as session:
            return [await collect(session, url) for _ in range(2)]

    results = run(go())
    assert results == [(Response(400, body), [])] * 2
    assert server.connections == 1


def test_a_body_ended_by_the_connection_closing_is_complete(run):
    server = Server(writes(b"HTTP/1.1 200 OK\r\n\r\n", b"data: 1\n\n", 0.02, b"data: 2\n\n",
                           close=True))

    async def go():
        async with server.serve() as url, StreamSession(read_timeout_s=5) as session:
            return await collect(session, url)

    resp, got = run(go())
    assert resp == Response(200)
    assert b"".join(d for d, _ in got) == b"data: 1\n\ndata: 2\n\n"


def test_a_stream_cut_before_its_last_chunk_raises_streamcut_after_the_pieces_before(run):
    server = Server(writes(OK_CHUNKED, chunked(b"data: 1\n\n"), 0.02, close=True))

    async def go():
        got: list[bytes] = []
        async with server.serve() as url, StreamSession(read_timeout_s=5) as session:
            with pytest.raises(StreamCut, match="closed before the response ended"):
                await session.post(url, b"{}", sink=lambda d, s: got.append(d))
        return got

    assert run(go()) == [b"data: 1\n\n"]


def test_a_silent_server_times_out_a_steady_one_does_not(run):
    steady = Server(writes(OK_CHUNKED, *[p for _ in range(6) for p in (0.1, chunked(b"x"))],
                           LAST))
    silent = Server(writes(OK_CHUNKED, chunked(b"x"), 5.0))

    async def go():
        async with steady.serve() as url, StreamSession(read_timeout_s=1.0) as session:
            resp, got = await collect(session, url)        # 0.6 s in all, never 1 s quiet
        async with silent.serve() as url, StreamSession(read_timeout_s=1.0) as session:
            t = time.perf_counter()
            with pytest.raises(ReadTimeout, match="no response bytes for 1 s"):
                await collect(session, url)
            return resp, len(got), time.perf_counter() - t

    resp, n, waited = run(go())
    assert resp == Response(200) and n == 6
    assert 1.0 <= waited < 4.0          # the timeout, not the server's 5 s


@pytest.mark.parametrize(("reply", "match"), [
    (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.1 response"),
    (b"HTTP/1.1 100 Continue\r\n\r\n", "informational response 100"),
    (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n",
     "switched protocols"),
])
def test_what_this_client_does_not_speak_is_a_badresponse(run, reply: bytes, match: str):
    server = Server(writes(reply, 1.0))

    async def go():
        async with server.serve() as url, StreamSession(read_timeout_s=5) as session:
            with pytest.raises(BadResponse, match=match):
                await collect(session, url)

    run(go())


def test_a_sink_error_ends_the_request_propagates_and_the_connection_is_not_reused(run):
    server = Server(writes(OK_CHUNKED, chunked(b"a"), chunked(b"b"), LAST))

    def sink(data: bytes, stamp: float) -> None:
        raise KeyError(data)

    async def go():
        async with server.serve() as url, StreamSession(read_timeout_s=5) as session:
            with pytest.raises(KeyError):
                await session.post(url, b"{}", sink=sink)
            return await collect(session, url)

    resp, got = run(go())
    assert resp == Response(200) and [d for d, _ in got] == [b"a", b"b"]
    assert server.connections == 2


@pytest.mark.parametrize(("tail", "reused"), [
    (b"", True),
    (b"HTTP/1.1 200 OK\r\n", False),       # bytes after the response: the connection is dropped
])
def test_bytes_after_a_response_drop_the_connection(run, tail: bytes, reused: bool):
    server = Server(writes(OK_CHUNKED + chunked(b"a") + LAST + tail))

    async def go():
        async with server.serve() as url, StreamSession(read_timeout_s=5) as session:
            return [await collect(session, url) for _ in range(2)]

    results = run(go())
    assert [(r, [d for d, _ in got]) for r, got in results] == [(Response(200), [b"a"])] * 2
    assert server.connections == (1 if reused else 2)


def test_connection_close_and_keepalive_expiry_open_a_new_connection(run):
    closing = Server(writes(b"HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: "
                            b"chunked\r\n\r\n" + chunked(b"a") + LAST))
    kept = Server(writes(OK_CHUNKED + chunked(b"a") + LAST))

    async def go():
        async with closing.serve() as url, StreamSession(read_timeout_s=5) as session:
            for _ in range(2):
                await collect(session, url)
        async with kept.serve() as url, StreamSession(read_timeout_s=5,
                                                      keepalive_s=1.0) as session:
            await collect(session, url)
            await collect(session, url)        # at once: reused
            await asyncio.sleep(1.5)
            await collect(session, url)        # idle for longer than keepalive_s: a new one

    run(go())
    assert closing.connections == 2
    assert kept.connections == 2


def test_no_connection_is_an_oserror_and_a_dead_address_is_skipped(run):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]              # nobody listens here once it is closed
    server = Server(writes(OK_CHUNKED + chunked(b"a") + LAST))

    async def go():
        async with StreamSession(read_timeout_s=5) as session:
            with pytest.raises(ConnectionRefusedError):
                await collect(session, f"http://127.0.0.1:{dead}/")
        async with server.serve() as url, StreamSession(read_timeout_s=5) as session:
            port = int(url.split(":")[2].split("/")[0])
            good = (socket.AF_INET, ("127.0.0.1", port))
            session._addresses[("127.0.0.1", port)] = [(socket.AF_INET, ("127.0.0.1", dead)),
                                                       good]
            resp, _ = await collect(session, url)
            return resp, session._addresses[("127.0.0.1", port)][0] == good

    assert run(go()) == (Response(200), True)   # and the address that answered comes first


def test_a_cancelled_request_closes_its_connection(run):
    # the server writes every 20 ms for 10 s: it sees the connection closed at its next writes
    server = Server(writes(OK_CHUNKED, *[p for _ in range(500) for p in (chunked(b"a"), 0.02)]))

    async def go():
        async with server.serve() as url, StreamSession(read_timeout_s=10) as session:
            task = asyncio.create_task(collect(session, url))
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            for _ in range(250):               # the server sees the connection close
                if server.open == 0:
                    break
                await asyncio.sleep(0.02)
            return server.open, session._all

    assert run(go()) == (0, set())


def test_hundreds_of_streams_at_once_are_not_capped(run):
    n = 300

    async def until_all_arrived(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        # every response stays open until all n requests reached the server
        while len(server.requests) < n:
            await asyncio.sleep(0.01)

    server = Server(sequence(writes(OK_CHUNKED, chunked(b"a")), until_all_arrived,
                             writes(LAST)))

    async def go():
        async with server.serve() as url, StreamSession(read_timeout_s=30) as session:
            return await asyncio.gather(*(collect(session, url) for _ in range(n)))

    results = run(go())
    assert all(r == Response(200) and [d for d, _ in got] == [b"a"] for r, got in results)
    assert server.max_open == n


@pytest.mark.parametrize("url", ["https://127.0.0.1/v1", "http:///v1", "ftp://x/"])
def test_only_plain_http_urls(url: str):
    async def go():
        async with StreamSession(read_timeout_s=1) as session:
            await session.post(url, b"{}")

    with pytest.raises(ValueError, match="only http://host"):
        asyncio.run(go())


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError):
        StreamSession(read_timeout_s=0)
