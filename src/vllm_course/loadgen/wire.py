"""HTTP/1.1 for streamed responses, with each read stamped the moment it arrives.

Why a reader of its own: with aiohttp, every read wakes the coroutine that awaits the body, and
that wake-up (a task step through the event loop) is most of what a reader costs per streamed
token. Measured on the client-ceiling benchmark (``benchmarks/client_ceiling.py``), an aiohttp
reader that only stamps its reads cost 37-50 µs per event on a 2-core machine and 26 µs on the
H200 host: more than half of ``vllm bench serve``'s own reader, and the course holds its whole
client to at most half of that reader's CPU per streamed token. With this reader the whole
client cost 10.5-13.6 µs per event on the H200 host (``benchmarks/README.md``).

Here a connection is an :class:`asyncio.Protocol`. ``data_received`` runs straight from the
event loop's socket callback: it stamps the read with ``time.perf_counter()``, feeds the bytes
to llhttp (``httptools``, which vLLM's API server itself uses through uvicorn), and llhttp
hands the body, the chunked framing stripped, to the request's *sink* with that stamp. The
coroutine that sent the request wakes once, when the response ends (or fails).

What it does and does not do, for the streams a load generator reads from vLLM:

* ``POST`` of a body the caller built; ``http://`` only (a benchmark of a local server needs
  no TLS); no redirects, no proxies, no cookies, no compression asked for.
* Keep-alive: a connection whose response ended cleanly and that the server keeps alive goes
  back to a pool for ``keepalive_s`` seconds; no cap on connections (a cap would queue streams
  silently: the load generator holds ``max_concurrency`` itself, where the wait is recorded).
* No read buffer limit: bytes go to the sink as they come (aiohttp's 64 KiB default buffer
  throttled ``vllm bench serve`` at long contexts: https://github.com/vllm-project/vllm/issues/39963).
* Errors: :class:`StreamCut` (the connection closed or reset before the response ended),
  :class:`ReadTimeout` (no byte for ``read_timeout_s``), :class:`BadResponse` (not HTTP, or a
  response this client does not speak: 1xx, upgrade); connecting raises ``OSError`` or
  ``TimeoutError``; an exception raised by the sink ends the request and propagates as is.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

Sink = Callable[[bytes, float], None]
"""Receives each piece of a 200 response's body and the ``perf_counter`` time of the read that
brought it (several pieces of one read share its time)."""


class StreamCut(ConnectionError):
    """The connection closed or was reset before the response ended."""


class ReadTimeout(TimeoutError):
    """No byte of the response arrived for the read timeout."""


class BadResponse(ValueError):
    """The server's bytes are not an HTTP/1.1 response this client reads."""


@dataclass(frozen=True)
class Response:
    """A finished response: its status, and its body when no sink took it (bytes)."""

    status: int
    body: bytes = b""


class _Connection(asyncio.Protocol):
    """One TCP connection: a parser per response, at most one response at a time."""

    def __init__(self, session: StreamSession, key: tuple[str, int]):
        self.session = session
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.idle_timer: asyncio.TimerHandle | None = None
        self._reset()

    def _reset(self) -> None:
        self.waiter: asyncio.Future[Response] | None = None
        self.parser: httptools.HttpResponseParser | None = None
        self.sink: Sink | None = None
        self.body: list[bytes] = []
        self.status = 0
        self.framed = False          # Content-Length or chunked: the body's end is in the bytes
        self.complete = False
        self.keep_alive = False
        self.stamp = 0.0
        self.last_read = 0.0
        self.sink_error: BaseException | None = None
        self.read_timer: asyncio.TimerHandle | None = None

    # -- the request -------------------------------------------------------------------------

    def start(self, head_and_body: bytes, sink: Sink | None) -> asyncio.Future[Response]:
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        self.parser = httptools.HttpResponseParser(self)
        self.sink = sink
        self.last_read = time.perf_counter()
        timeout = self.session.read_timeout_s
        self.read_timer = loop.call_at(loop.time() + timeout, self._check_read_timeout)
        assert self.transport is not None
        self.transport.write(head_and_body)
        return self.waiter

    def _check_read_timeout(self) -> None:
        """One timer per period of ``read_timeout_s``, not one per read: when it fires, a read
        since it was set moves it to that read's time plus the timeout."""
        if self.waiter is None or self.waiter.done():
            return
        timeout = self.session.read_timeout_s
        quiet = time.perf_counter() - self.last_read
        if quiet >= timeout:
            self._fail(ReadTimeout(f"no response bytes for {timeout:g} s"))
            return
        loop = asyncio.get_running_loop()
        self.read_timer = loop.call_at(loop.time() + timeout - quiet, self._check_read_timeout)

    def _finish(self, result: Response | BaseException) -> None:
        waiter = self.waiter
        if self.read_timer is not None:
            self.read_timer.cancel()
        keep = isinstance(result, Response) and self.keep_alive and not self.lost
        self._reset()
        if keep:
            self.session._release(self)
        else:
            self.close()
        if waiter is not None and not waiter.done():
            if isinstance(result, BaseException):
                waiter.set_exception(result)
            else:
                waiter.set_result(result)

    def _fail(self, exc: BaseException) -> None:
        self.lost = True             # a response cut short leaves the connection unusable
        self._finish(exc)

    def cancel(self) -> None:
        """The request's coroutine was cancelled: drop the connection mid-response."""
        if self.waiter is not None:
            self.lost = True
            self._finish(asyncio.CancelledError())

    # -- llhttp's callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:            # a second response in the bytes of this one
            self.lost = True

    def on_header(self, name: bytes, value: bytes) -> None:
        low = name.lower()
        if low == b"content-length" or (low == b"transfer-encoding"
                                        and b"chunked" in value.lower()):
            self.framed = True

    def on_headers_complete(self) -> None:
        assert self.parser is not None
        if not self.complete:
            self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        if self.complete:
            return
        if self.status == 200 and self.sink is not None:
            try:
                self.sink(body, self.stamp)
            except BaseException as exc:
                self.sink_error = exc
                raise
        else:
            self.body.append(body)

    def on_message_complete(self) -> None:
        if not self.complete:        # llhttp forgets it once the message is over
            assert self.parser is not None
            self.keep_alive = self.parser.should_keep_alive()
        self.complete = True

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]   # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        stamp = time.perf_counter()
        if self.waiter is None:      # bytes nobody asked for: this connection is not reusable
            self.close()
            return
        self.stamp = self.last_read = stamp
        assert self.parser is not None
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if self.sink_error is not None:
                self._fail(self.sink_error)
            elif isinstance(exc, httptools.HttpParserUpgrade):
                self._fail(BadResponse("the server switched protocols (upgrade)"))
            elif self.complete and self.status >= 200:
                self.lost = True     # bytes after the response: the connection is not reused
                self._finish(Response(self.status, b"".join(self.body)))
            else:
                self._fail(BadResponse(f"not an HTTP/1.1 response: {exc}"))
            return
        if 100 <= self.status < 200:
            self._fail(BadResponse(f"informational response {self.status} (not supported)"))
        elif self.complete:
            self._finish(Response(self.status, b"".join(self.body)))

    def eof_received(self) -> bool:
        return False                 # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.session._forget(self)
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        if self.waiter is None:
            return
        if self.status and not self.framed and exc is None:
            # a body delimited by the connection's close (no Content-Length, not chunked)
            self._finish(Response(self.status, b"".join(self.body)))
        else:
            why = f": {exc}" if exc else ""
            self._fail(StreamCut(f"the connection closed before the response ended{why}"))

    def close(self) -> None:
        self.lost = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class StreamSession:
    """The HTTP client one run (or one warm-up) sends its streamed requests over.

    Use it as ``async with StreamSession(read_timeout_s=...) as session`` inside a running
    event loop; leaving the block closes every connection.

    Args:
        read_timeout_s: longest wait for the next byte of a response (s); the whole request's
            deadline is the load generator's.
        keepalive_s: how long an idle connection stays pooled (s).
        connect_timeout_s: longest wait for a TCP connection (s).
    """

    def __init__(self, *, read_timeout_s: float, keepalive_s: float = 2.0,
                 connect_timeout_s: float = 30.0):
        if read_timeout_s <= 0 or keepalive_s < 0 or connect_timeout_s <= 0:
            raise ValueError("read_timeout_s and connect_timeout_s must be > 0, keepalive_s >= 0")
        self.read_timeout_s = read_timeout_s
        self.keepalive_s = keepalive_s
        self.connect_timeout_s = connect_timeout_s
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._all: set[_Connection] = set()
        self._addresses: dict[tuple[str, int], list[tuple]] = {}
        self._closed = False

    async def __aenter__(self) -> StreamSession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every connection (idle or busy) and wait until their transports let go."""
        self._closed = True
        conns = list(self._all)
        for conn in conns:
            conn.close()
        self._idle.clear()
        if conns:
            await asyncio.sleep(0)   # let the transports run connection_lost

    async def post(self, url: str, body: bytes, *, headers: dict[str, str] | None = None,
                   sink: Sink | None = None) -> Response:
        """``POST body`` to ``url`` and wait until the response ends.

        A 200 response's body goes to ``sink`` piece by piece as it arrives (the returned
        :class:`Response` then has an empty body); any other status's body is returned whole.

        Raises:
            ValueError: a URL that is not ``http://host[:port]/path``.
            OSError, TimeoutError: no connection (refused, unreachable, no answer within
                ``connect_timeout_s``).
            StreamCut, ReadTimeout, BadResponse: see the module's docstring; whatever ``sink``
                raised, as it raised it.
        """
        if self._closed:
            raise RuntimeError("this StreamSession is closed")
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"only http://host[:port]/path URLs are supported, got {url!r}")
        host, port = parts.hostname, parts.port or 80
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        authority = f"[{host}]" if ":" in host else host
        lines = [f"POST {path} HTTP/1.1", f"Host: {authority}:{port}",
                 f"Content-Length: {len(body)}", "Accept-Encoding: identity"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        conn = await self._acquire((host, port))
        waiter = conn.start(head + body, sink)
        try:
            return await waiter
        except asyncio.CancelledError:
            conn.cancel()
            raise

    # -- the pool ----------------------------------------------------------------------------

    async def _acquire(self, key: tuple[str, int]) -> _Connection:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.idle_timer is not None:
                conn.idle_timer.cancel()
                conn.idle_timer = None
            if not conn.lost and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return await self._connect(key)

    async def _connect(self, key: tuple[str, int]) -> _Connection:
        loop = asyncio.get_running_loop()
        addresses = self._addresses.get(key)
        if addresses is None:
            infos = await loop.getaddrinfo(*key, type=socket.SOCK_STREAM)
            addresses = self._addresses[key] = [(fam, addr) for fam, _, _, _, addr in infos]
        last: BaseException | None = None
        for i, (family, addr) in enumerate(addresses):
            try:
                async with asyncio.timeout(self.connect_timeout_s):
                    _, conn = await loop.create_connection(
                        lambda: _Connection(self, key), addr[0], addr[1], family=family)
            except (OSError, TimeoutError) as exc:
                last = exc
                continue
            if i:                        # the address that answered is tried first next time
                addresses.insert(0, addresses.pop(i))
            if conn.lost:                # closed by the server while being opened
                raise StreamCut(f"the connection to {key[0]}:{key[1]} closed as it opened")
            self._all.add(conn)
            return conn
        if isinstance(last, TimeoutError):
            raise TimeoutError(f"no connection to {key[0]}:{key[1]} within "
                               f"{self.connect_timeout_s:g} s")
        assert last is not None
        raise last

    def _release(self, conn: _Connection) -> None:
        if self._closed or self.keepalive_s == 0:
            conn.close()
            return
        self._idle.setdefault(conn.key, []).append(conn)
        loop = asyncio.get_running_loop()
        conn.idle_timer = loop.call_later(self.keepalive_s, conn.close)

    def _forget(self, conn: _Connection) -> None:
        self._all.discard(conn)
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)
