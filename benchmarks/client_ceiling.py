#!/usr/bin/env python
"""How many streamed events per second our client can time before it limits what it measures.

Not vLLM: a synthetic local stream server (``--serve``, started here in a process of its own)
answers ``/v1/completions`` with server-sent events shaped like vLLM's (one ``choices`` event per
token with ``continuous_usage_stats``, a final usage event, ``[DONE]``), one event per stream
every ``--interval-ms``, each sent at an absolute deadline, and logs the
``time.perf_counter_ns()`` at which it wrote every event. Our client
(:func:`vllm_course.loadgen.run_load`, exactly as a run uses it) reads the streams. On Linux
``perf_counter`` is the system-wide ``CLOCK_MONOTONIC`` in every process, so an event's
**timestamp error** is the client's stamp minus the server's write time.

For each level (concurrent streams x events per stream, all requests at once) it reports the
event rate reached, the client's CPU per event (µs) and share of a core, the timestamp error
P50/P99 (ms), and **bunching**: the share of event gaps the client saw under 0.5 ms that the
server wrote at least 1 ms apart (events read in one gulp, so ITL and TPOT are distorted). The
verdict names the highest event rate whose error P99 stays under 1 ms.

A second table splits TTFT: the server also logs when each request reached its handler, and
writes the first event ``--first-ms`` after that (its TTFT), so each stream's TTFT as the client
measured it differs from the server's by the **send lag** (the client's send stamp to the
arrival: connecting, writing, the server accepting) plus the **first read lag** (the server's
write to the client's stamp). With thousands of requests sent at once this is where two clients
of one server can disagree on TTFT while agreeing on everything else.

Usage (from the repository root; the server and the client share this machine's cores)::

    .venv/bin/python benchmarks/client_ceiling.py                      # default levels
    .venv/bin/python benchmarks/client_ceiling.py --streams 50 100 200 --interval-ms 10 5 2
    .venv/bin/python benchmarks/client_ceiling.py --client ours vllm --streams 1000 \
        --events 64 --interval-ms 76 --first-ms 500          # a burst: where TTFT differs
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import math
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from vllm_course.config import LoadSpec
from vllm_course.loadgen import run_load, warm_up
from vllm_course.workload import Request

ERROR_P99_LIMIT_MS = 1.0
BUNCHED_GAP_MS = 0.5          # a client gap this short ...
SPACED_GAP_MS = 1.0           # ... between events the server wrote at least this far apart


# ---- the synthetic stream server (runs in a process of its own) ---------------------------

def _event(k: int, n: int) -> bytes:
    """vLLM's shape of a /v1/completions chunk with continuous usage: token ``k`` of ``n``."""
    done = "length" if k == n else None
    body = {"id": "cmpl-x", "object": "text_completion", "model": "fake",
            "choices": [{"index": 0, "text": "x", "logprobs": None, "finish_reason": done}],
            "usage": {"prompt_tokens": 1, "total_tokens": 1 + k, "completion_tokens": k}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def serve(port: int, interval_s: float, log_path: Path, first_s: float | None = None) -> None:
    """Serve streams on 127.0.0.1:``port`` until killed (``SO_REUSEPORT``: several such
    processes share the port, the kernel spreads connections over them); append one JSON line
    per finished request to ``log_path`` + ``.<pid>``: its prompt, the perf_counter_ns at which
    its handler started (``arrived_ns``: the request had reached this server) and of every event
    written (``sent_ns``). Each next event is due ``interval_s`` after the one before; the first
    one ``first_s`` after the arrival (the server's TTFT) or, without ``first_s``, one interval
    after the response's headers went out."""
    from aiohttp import web

    log = Path(f"{log_path}.{os.getpid()}").open("a", buffering=1)

    async def completions(request: web.Request) -> web.StreamResponse:
        arrived = time.perf_counter_ns()
        body = await request.json()
        n = int(body["max_tokens"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        start = (time.perf_counter() if first_s is None
                 else arrived / 1e9 + first_s - interval_s)
        sent = []
        for k in range(1, n + 1):
            delay = start + k * interval_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent.append(time.perf_counter_ns())
            await resp.write(_event(k, n))
        usage = {"prompt_tokens": 1, "total_tokens": 1 + n, "completion_tokens": n}
        await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode()
                         + b"\n\n" + b"data: [DONE]\n\n")
        await resp.write_eof()
        log.write(json.dumps({"prompt": body["prompt"], "arrived_ns": arrived,
                              "sent_ns": sent}) + "\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, reuse_port=True,
                backlog=4096)


# ---- the driver -------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(interval_ms: float, log_path: Path, procs: int = 1,
                  first_ms: float | None = None) -> tuple[list[subprocess.Popen], str]:
    """``procs`` server processes on one port; returns them and the base URL once each has
    started listening (a process that is not listening yet gets no connection)."""
    port = _free_port()
    first = "" if first_ms is None else str(first_ms)
    started = [subprocess.Popen([sys.executable, __file__, "--serve", str(port), str(interval_ms),
                                 str(log_path), first], start_new_session=True)
               for _ in range(procs)]
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _listening(port) >= procs:
            return started, url
        time.sleep(0.2)
    _stop(started)
    raise RuntimeError(f"the stream servers did not all listen on port {port} within 60 s")


def _listening(port: int) -> int:
    """Sockets listening on 127.0.0.1:``port`` (Linux's /proc/net/tcp: state 0A is LISTEN)."""
    local = f"0100007F:{port:04X}"
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[1] == local and row.split()[3] == "0A")


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
    for proc in procs:
        proc.wait(timeout=10)


class _Raw:
    """What a stamping-only reader keeps of one stream: its send time, (arrival, events) per
    read (s after the reader's start)."""

    def __init__(self) -> None:
        self.sent_s: float | None = None
        self.chunk_s: list[float] = []
        self.chunk_tokens: list[int] = []
        self.error: str | None = None


async def _raw_load(url: str, requests: list[Request]) -> tuple[list[_Raw], float]:
    """The floor of a fast reader: aiohttp (no connection cap), each read stamped on arrival
    and its events counted (``\n\n``), nothing parsed; the last two events of a stream (usage
    and ``[DONE]``) carry no token. Returns the streams and the start on perf_counter."""
    import aiohttp

    t0 = time.perf_counter()
    out = [_Raw() for _ in requests]

    async def one(session: aiohttp.ClientSession, req: Request, raw: _Raw) -> None:
        body = {"model": "fake", "prompt": req.prompt, "max_tokens": req.output_len,
                "stream": True}
        tail = b""
        raw.sent_s = time.perf_counter() - t0
        async with session.post(url + "/v1/completions", json=body) as resp:
            async for chunk in resp.content.iter_any():
                now = time.perf_counter() - t0
                raw.chunk_s.append(now)
                # an event ends at a blank line; its "\n\n" may straddle two reads
                raw.chunk_tokens.append((tail + chunk).count(b"\n\n"))
                tail = chunk[-1:] if chunk[-2:] != b"\n\n" else b""
        # one stamp per token: a read that carried n events stamps all n at its arrival
        stamps = [t for t, n in zip(raw.chunk_s, raw.chunk_tokens, strict=True)
                  for _ in range(n)][:req.output_len]
        raw.chunk_s, raw.chunk_tokens = stamps, [1] * len(stamps)

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        await one(session, Request(prompt="warm-up", output_len=1), _Raw())   # one alone first
        t0 = time.perf_counter()           # the streams' times count from here (one() reads it)
        await asyncio.gather(*(one(session, r, x) for r, x in zip(requests, out, strict=True)))
    return out, t0


async def _vllm_load(url: str, requests: list[Request]) -> tuple[list[_Raw], float]:
    """vLLM's own reader (``vllm bench serve``'s ``async_request_openai_completions``, from the
    installed vLLM) on one aiohttp session opened as ``vllm bench serve`` opens it (no
    connection cap; vllm/benchmarks/serve.py), after one request alone, as its "initial test
    run" sends (the first request of a process pays one-time costs); each event's arrival is
    rebuilt from its start, TTFT and ITLs."""
    import aiohttp
    from vllm.benchmarks.lib.endpoint_request_func import (
        RequestFuncInput,
        async_request_openai_completions,
    )

    def one(prompt: str, output_len: int) -> RequestFuncInput:
        return RequestFuncInput(prompt=prompt, api_url=url + "/v1/completions", prompt_len=1,
                                output_len=output_len, model="fake", ignore_eos=True)

    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300,
                                     use_dns_cache=True, keepalive_timeout=60,
                                     enable_cleanup_closed=True, force_close=False)
    async with aiohttp.ClientSession(connector=connector, trust_env=True,
                                     timeout=aiohttp.ClientTimeout(total=6 * 3600)) as session:
        await async_request_openai_completions(one("warm-up", 1), session)
        t0 = time.perf_counter()
        outs = await asyncio.gather(*(async_request_openai_completions(
            one(r.prompt, r.output_len), session) for r in requests))
    streams = []
    for out in outs:
        raw = _Raw()
        raw.sent_s = out.start_time - t0       # vLLM's TTFT counts from this stamp
        if out.success:
            first = out.start_time + out.ttft - t0
            raw.chunk_s = list(np.cumsum([first, *out.itl]))
            raw.chunk_tokens = [1] * len(raw.chunk_s)
        else:
            raw.error = (out.error or "failed")[-200:]
        streams.append(raw)
    return streams, t0


def _cpu_s() -> float:
    """CPU seconds of this process and its reaped children (the client's worker processes;
    the stream servers are reaped only after the measurement)."""
    own, kids = (resource.getrusage(resource.RUSAGE_SELF),
                 resource.getrusage(resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@dataclasses.dataclass
class TTFTParts:
    """Where each stream's TTFT as a client measures it differs from the server's (ms, one
    value per stream, in the same order).

    A client's TTFT is its stamp of the first event minus its own send stamp (``vllm bench
    serve``'s ``st``, taken before ``session.post``; our ``RequestRecord.sent_s``); the server's
    is its write of the first event minus the request's arrival at its handler (stamped when the
    handler starts, before the body is read). Per stream, their difference, the client's
    **bias**, is exactly the sum of two lags: the **send lag** (the arrival minus the client's
    send stamp: connecting, writing the request, the server accepting it and parsing its head)
    and the **first read lag** (the client's stamp minus the server's write of the first
    event). The means add up the same way; P99s do not."""

    client_ttft_ms: np.ndarray
    server_ttft_ms: np.ndarray
    send_lag_ms: np.ndarray
    read_lag_ms: np.ndarray
    sends_s: np.ndarray
    arrivals_s: np.ndarray

    @property
    def bias_ms(self) -> np.ndarray:
        return self.client_ttft_ms - self.server_ttft_ms

    def summary(self) -> dict[str, float]:
        """Mean and P99 of each part (ms), and how long the sends and the arrivals took from
        the first to the last (ms): a burst sent in 0.1 s may reach the server over longer."""
        out = {}
        for name in ("client_ttft", "server_ttft", "bias", "send_lag", "read_lag"):
            values = getattr(self, f"{name}_ms")
            out[f"{name}_mean_ms"] = float(np.mean(values))
            out[f"{name}_p99_ms"] = float(np.percentile(values, 99))
        out["sends_spread_ms"] = float(np.ptp(self.sends_s) * 1000)
        out["arrivals_spread_ms"] = float(np.ptp(self.arrivals_s) * 1000)
        return out


def ttft_parts(sent_s: np.ndarray, arrived_s: np.ndarray, first_write_s: np.ndarray,
               first_read_s: np.ndarray) -> TTFTParts:
    """The parts of each stream's TTFT from four times on one ``perf_counter`` clock (s, one
    value per stream): the client's send stamp, the server's arrival stamp, the server's write
    of the first event and the client's stamp of it."""
    return TTFTParts(client_ttft_ms=(first_read_s - sent_s) * 1000,
                     server_ttft_ms=(first_write_s - arrived_s) * 1000,
                     send_lag_ms=(arrived_s - sent_s) * 1000,
                     read_lag_ms=(first_read_s - first_write_s) * 1000,
                     sends_s=sent_s, arrivals_s=arrived_s)


async def measure(streams: int, events: int, interval_ms: float, client: str = "ours",
                  server_procs: int = 1, workers: int = 1,
                  first_ms: float | None = None) -> dict:
    """One level: ``streams`` requests at once, ``events`` events each, the first ``first_ms``
    after the request reached the server (default: one interval after the response's headers
    went out), then one per ``interval_ms`` per stream (``server_procs`` server processes),
    read by ``client`` (``ours``: :func:`run_load` over ``workers`` processes; ``raw``: the
    stamping-only aiohttp reader; ``vllm``: ``vllm bench serve``'s reader); returns the level's
    figures. With ``first_ms``, the event rate reached counts the wait for the first events."""
    with tempfile.TemporaryDirectory(prefix="client-ceiling-") as tmp:
        log_path = Path(tmp) / "sent.jsonl"
        procs, url = _start_server(interval_ms, log_path, server_procs, first_ms)
        try:
            requests = [Request(prompt=f"stream-{i}", output_len=events) for i in range(streams)]
            load = LoadSpec(timeout_s=((first_ms or 0) + events * interval_ms) / 1000 * 5 + 30,
                            workers=workers)
            if client == "vllm":    # importing vLLM takes seconds of CPU: not the reader's
                import vllm.benchmarks.lib.endpoint_request_func  # noqa: F401
            cpu0, wall0 = _cpu_s(), time.perf_counter()
            if client == "ours":      # one request first, as the readers below send too
                await warm_up(url, [Request(prompt="warm-up", output_len=1)], load, "fake")
                result = await run_load(url, "fake", requests, load)
                records, t0, duration_s = result.records, result.t0, result.duration_s
                # a worker's start (a fresh interpreter) is not reading streams
                busy = [w.cpu_s for w in result.workers if w.cpu_s is not None]
            else:
                reader = _raw_load if client == "raw" else _vllm_load
                records, t0 = await reader(url, requests)
                duration_s = time.perf_counter() - t0
                busy = []
            cpu_s, wall_s = _cpu_s() - cpu0, time.perf_counter() - wall0
            if busy:      # workers: their CPU over the run; the parent only waited
                cpu_s, wall_s = sum(busy), duration_s
        finally:
            _stop(procs)
        sent, arrived = {}, {}
        for part in Path(tmp).glob("sent.jsonl.*"):
            for line in part.read_text().splitlines():
                row = json.loads(line)
                sent[row["prompt"]] = np.asarray(row["sent_ns"], dtype=float) / 1e9
                arrived[row["prompt"]] = row["arrived_ns"] / 1e9
    errors, bunched, spaced, firsts = [], 0, 0, []
    for req, rec in zip(requests, records, strict=True):
        got = np.asarray(rec.chunk_s, dtype=float) + t0
        wrote = sent.get(req.prompt)
        if rec.error or wrote is None or len(got) != len(wrote):
            continue
        errors.append((got - wrote) * 1000)
        firsts.append((rec.sent_s + t0, arrived[req.prompt], wrote[0], got[0]))
        server_gaps, client_gaps = np.diff(wrote) * 1000, np.diff(got) * 1000
        mask = server_gaps >= SPACED_GAP_MS
        spaced += int(mask.sum())
        bunched += int((client_gaps[mask] < BUNCHED_GAP_MS).sum())
    err = np.concatenate(errors) if errors else np.array([math.nan])
    received = sum(sum(r.chunk_tokens) for r in records if not r.error)
    ttft = ttft_parts(*(np.asarray(c) for c in zip(*firsts, strict=True))) if firsts else None
    return {
        "client": client if workers == 1 else f"{client} x{workers}", "workers": workers,
        "streams": streams, "events_per_stream": events,
        "interval_ms": interval_ms,
        "target_events_s": streams * 1000 / interval_ms,
        "events_s": received / duration_s if duration_s else math.nan,
        "failed": sum(1 for r in records if r.error),
        "client_cpu_us_per_event": cpu_s / received * 1e6 if received else math.nan,
        "client_cpu_share": cpu_s / wall_s,      # of one core; summed over workers
        "error_p50_ms": float(np.percentile(err, 50)),
        "error_p99_ms": float(np.percentile(err, 99)),
        "bunched_share": bunched / spaced if spaced else math.nan,
        "first_ms": first_ms,          # None: one interval after the response's headers
        **(ttft.summary() if ttft else {}),
    }


def report(rows: list[dict]) -> str:
    head = ("client", "streams", "interval ms", "target ev/s", "reached ev/s", "CPU µs/event",
            "CPU of a core", "error P50 ms", "error P99 ms", "bunched")
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        lines.append(" | ".join([
            r["client"], f"{r['streams']}", f"{r['interval_ms']:g}", f"{r['target_events_s']:,.0f}",
            f"{r['events_s']:,.0f}", f"{r['client_cpu_us_per_event']:.1f}",
            f"{r['client_cpu_share']:.0%}", f"{r['error_p50_ms']:.2f}",
            f"{r['error_p99_ms']:.2f}", f"{r['bunched_share']:.1%}"]))
    verdicts = []
    for client in dict.fromkeys(r["client"] for r in rows):
        ok = [r["events_s"] for r in rows if r["client"] == client
              and r["error_p99_ms"] < ERROR_P99_LIMIT_MS and not r["failed"]]
        verdicts.append(f"{client}: highest event rate with timestamp error P99 < "
                        f"{ERROR_P99_LIMIT_MS:g} ms: {max(ok):,.0f} events/s" if ok else
                        f"{client}: no level kept the timestamp error P99 under "
                        f"{ERROR_P99_LIMIT_MS:g} ms")
    return "\n".join(lines) + "\n\n" + "\n".join(verdicts) + ttft_report(rows)


def ttft_report(rows: list[dict]) -> str:
    """The second table: each level's TTFT as the client measured it beside the server's, and
    the client's bias split into send lag and first read lag (ms, mean / P99)."""
    rows = [r for r in rows if "bias_mean_ms" in r]
    if not rows:
        return ""
    head = ("client", "streams", "server TTFT ms", "client TTFT ms", "bias ms", "send lag ms",
            "first read lag ms", "sends / arrivals over ms")
    lines = ["", "", "TTFT, mean / P99 (bias = client TTFT - server TTFT = send lag + first "
             "read lag, per stream and in the means)", " | ".join(head),
             " | ".join("---" for _ in head)]
    for r in rows:
        pair = [f"{r[f'{k}_mean_ms']:.1f} / {r[f'{k}_p99_ms']:.1f}"
                for k in ("server_ttft", "client_ttft", "bias", "send_lag", "read_lag")]
        lines.append(" | ".join([r["client"], f"{r['streams']}", *pair,
                                 f"{r['sends_spread_ms']:.0f} / {r['arrivals_spread_ms']:.0f}"]))
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) == 6 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), float(sys.argv[3]) / 1000, Path(sys.argv[4]),
              float(sys.argv[5]) / 1000 if sys.argv[5] else None)
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, nargs="+", default=[25, 50, 100, 200],
                   help="concurrent streams per level")
    p.add_argument("--interval-ms", type=float, nargs="+", default=[10.0],
                   help="ms between one stream's events (each level: every streams x interval)")
    p.add_argument("--events", type=int, default=200, help="events per stream")
    p.add_argument("--first-ms", type=float, default=None,
                   help="ms from a request's arrival to its first event (the server's TTFT; "
                        "default: the interval)")
    p.add_argument("--client", nargs="+", choices=("ours", "raw", "vllm"), default=["ours"],
                   help="ours: the course's client (run_load); raw: a stamping-only aiohttp "
                        "reader, the floor of a fast design; vllm: vllm bench serve's reader "
                        "(needs vLLM installed)")
    p.add_argument("--workers", type=int, nargs="+", default=[1],
                   help="ours: client worker processes (load.workers), one level each")
    p.add_argument("--server-procs", type=int, default=1,
                   help="stream server processes sharing the port (one writes ~20-40k events/s)")
    p.add_argument("--uvloop", action="store_true",
                   help="run the client on uvloop's event loop (the server always uses it)")
    p.add_argument("--out", type=Path, default=None, help="also write the rows as JSON here")
    a = p.parse_args()
    if min(a.streams) < 1 or a.events < 1 or min(a.workers) < 1 or a.server_procs < 1:
        p.error("--streams, --events, --workers and --server-procs must be at least 1")
    if min(a.interval_ms) <= 0 or (a.first_ms is not None and a.first_ms < 0):
        p.error("--interval-ms must be above 0 and --first-ms at least 0")
    rows = []
    levels = [(c, w, i, n) for c in a.client for w in (a.workers if c == "ours" else [1])
              for i in a.interval_ms for n in a.streams]
    for client, workers, interval, streams in levels:
        level = measure(streams, a.events, interval, client, a.server_procs, workers,
                        a.first_ms)
        if a.uvloop:
            import uvloop
            row = uvloop.run(level)
        else:
            row = asyncio.run(level)
        row["loop"] = "uvloop" if a.uvloop else "asyncio"
        rows.append(row)
        print(f"{row['client']}: {streams} streams every {interval:g} ms: {row['events_s']:,.0f} "
              f"events/s, error P99 {row['error_p99_ms']:.2f} ms, CPU "
              f"{row['client_cpu_us_per_event']:.1f} µs/event, TTFT bias mean "
              f"{row.get('bias_mean_ms', math.nan):.1f} ms", flush=True)
    print()
    print(report(rows))
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
