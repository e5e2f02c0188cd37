"""ServerPool.prestart, the broker's /prestart and nb.start_servers, with stand-in servers (the
real starts run in tests/notebooks, where chapters 09-18 use them)."""

from __future__ import annotations

import threading

import pytest

from vllm_course import notebook
from vllm_course.config import ServerConfig
from vllm_course.server import ServerError, pool
from vllm_course.server.broker import PoolBroker, RemotePool


def config(seqs: int) -> ServerConfig:
    return ServerConfig(model="tiny-mistral", args={"max-num-seqs": seqs})


class Server:
    """Records its starts; ``fail_seqs`` makes that config's start fail; ``barrier`` (when set)
    must be reached by every start at once, so it breaks if starts run one after the other."""

    started: list[int] = []
    stopped: list[int] = []
    barrier: threading.Barrier | None = None
    fail_seqs: int | None = None

    def __init__(self, config: ServerConfig, log_path=None, profile_args=None) -> None:
        self.config = config
        self.port = config.port
        self.up = False

    def start(self) -> None:
        if Server.barrier is not None:
            Server.barrier.wait(timeout=10)
        if self.config.args["max-num-seqs"] == Server.fail_seqs:
            raise ServerError("vLLM server exited during start-up", cause="bad_flag")
        self.up = True
        Server.started.append(self.config.args["max-num-seqs"])

    def alive(self) -> bool:
        return self.up

    def stop(self, timeout_s: float = 20.0) -> None:
        if self.up:
            Server.stopped.append(self.config.args["max-num-seqs"])
        self.up = False


@pytest.fixture
def owner(monkeypatch):
    monkeypatch.setattr(pool, "VLLMServer", Server)
    Server.started, Server.stopped, Server.barrier, Server.fail_seqs = [], [], None, None
    p = pool.ServerPool(max_live=2)
    yield p
    p.close()


def test_two_servers_start_side_by_side_on_distinct_ports(owner):
    Server.barrier = threading.Barrier(2)    # broken (an error) if the starts were sequential
    servers = owner.prestart([config(1), config(2), config(1)])
    assert [s.config.args["max-num-seqs"] for s in servers] == [1, 2]    # duplicates once
    assert sorted(Server.started) == [1, 2]
    assert servers[0].port != servers[1].port and None not in (servers[0].port, servers[1].port)
    # a run then finds its server running: nothing starts again
    Server.barrier = None
    assert owner.acquire(config(2)) is servers[1]
    assert sorted(Server.started) == [1, 2]


def test_running_ones_are_kept_and_idle_others_make_room(owner):
    owner.release(owner.acquire(config(1)))
    owner.release(owner.acquire(config(2)))
    owner.prestart([config(2), config(3)])
    assert Server.started == [1, 2, 3] and Server.stopped == [1]   # 2 kept, 1 (idle) stopped
    assert sorted(s.config.args["max-num-seqs"] for s in owner.servers) == [2, 3]


def test_servers_in_use_are_never_stopped_for_room(owner):
    in_use = owner.acquire(config(1))
    owner.release(owner.acquire(config(2)))
    with pytest.raises(RuntimeError, match="in use"):
        owner.prestart([config(3), config(4)])
    assert in_use.alive() and 1 not in Server.stopped


def test_more_servers_than_max_live_is_refused_before_anything_starts(owner):
    with pytest.raises(ValueError, match="at most 2"):
        owner.prestart([config(1), config(2), config(3)])
    assert Server.started == []


def test_a_failed_start_is_raised_and_the_other_server_kept(owner):
    Server.fail_seqs = 2
    with pytest.raises(ServerError, match="exited during start-up"):
        owner.prestart([config(1), config(2)])
    assert [s.config.args["max-num-seqs"] for s in owner.servers] == [1]


class _Pool:
    """A stand-in pool for the broker: records what /prestart asked for."""

    profile_args: dict = {}
    max_live = 2

    def __init__(self):
        self.asked: list[list[ServerConfig]] = []

    @property
    def servers(self):
        return [type("S", (), {"config": c, "proc": type("P", (), {"pid": 4000 + i})()})()
                for i, c in enumerate(c for configs in self.asked for c in configs)]

    def prestart(self, configs):
        self.asked.append(configs)
        if any(c.args.get("max-num-seqs") == 9 for c in configs):
            raise ServerError("vLLM server exited during start-up", cause="bad_flag",
                              log_tail="error: bad")
        return [type("S", (), {"base_url": f"http://127.0.0.1:{9000 + i}"})()
                for i, _ in enumerate(configs)]


def test_the_broker_starts_them_for_a_borrower():
    stand_in = _Pool()
    with PoolBroker(stand_in) as url:
        remote = RemotePool(url)
        assert remote.max_live == 2
        assert remote.servers == []
        remote.prestart([config(1), config(2)])
        assert stand_in.asked == [[config(1), config(2)]]
        # a sweep in a chapter kernel asks which settings run (to plan its order)
        assert [s.config for s in remote.servers] == [config(1), config(2)]
        # and their processes (a run waits until the other servers are idle)
        assert [s.proc.pid for s in remote.servers] == [4000, 4001]
        with pytest.raises(ServerError) as err:
            remote.prestart([config(9), config(2)])
        assert err.value.cause == "bad_flag" and err.value.log_tail == "error: bad"
        with pytest.raises(ValueError, match="at most 2"):
            remote.prestart([config(1), config(2), config(3)])
        assert len(stand_in.asked) == 2      # the third was refused before it was sent
        remote.close()


class _Recorder:
    max_live = 2

    def __init__(self):
        self.asked = []

    def prestart(self, configs):
        self.asked.append(configs)


def test_start_servers_only_when_there_is_something_to_gain(monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr("vllm_course.server.default_pool", lambda: rec)
    assert notebook.start_servers(config(1), config(2)) is True
    assert notebook.start_servers(config(1), config(1)) is False        # one distinct server
    assert notebook.start_servers(config(1), config(2), config(3)) is False   # > max_live
    assert rec.asked == [[config(1), config(2)]]


# -- closing while a start is in progress ----------------------------------------------------

def test_close_stops_a_start_in_progress_at_once(monkeypatch, tmp_path):
    """A start holds the pool's lock for minutes on a GPU; close() must not wait for it (the
    reference runner's call overran its limit by waiting for a 7B start after a notebook's time
    ran out). A real process that never answers /health stands in for the starting server."""
    import sys
    import time

    from vllm_course.server import process

    monkeypatch.setattr(process, "check_args", lambda args: None)
    monkeypatch.setattr(process.VLLMServer, "argv",
                        lambda self: [sys.executable, "-c", "import time; time.sleep(120)"])
    p = pool.ServerPool(max_live=1)
    cfg = ServerConfig(model="tiny-mistral", startup_timeout_s=300)
    raised: list[BaseException] = []

    def borrow():
        try:
            p.acquire(cfg, log_path=tmp_path / "starting.log")
        except BaseException as exc:  # noqa: BLE001 (inspected below)
            raised.append(exc)

    t = threading.Thread(target=borrow)
    t.start()
    deadline = time.monotonic() + 20
    while not (p._starting and next(iter(p._starting)).proc) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert p._starting, "the start never began"
    pid = next(iter(p._starting)).proc.pid
    t0 = time.monotonic()
    p.close()
    closed_in = time.monotonic() - t0
    t.join(10)
    assert closed_in < 10, f"close() waited {closed_in:.1f} s for the start"
    assert not t.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], ServerError)
    assert "stopped while starting" in str(raised[0])
    with pytest.raises(ProcessLookupError):
        import os
        os.kill(pid, 0)
    assert p.servers == [] and not p._starting


def test_stop_idle_stops_every_idle_server_and_none_in_use(owner):
    in_use = owner.acquire(config(1))
    owner.release(owner.acquire(config(2)))
    assert owner.stop_idle() == 1
    assert Server.stopped == [2] and in_use.alive()
    assert [s.config.args["max-num-seqs"] for s in owner.servers] == [1]
    owner.release(in_use)
    assert owner.stop_idle() == 1 and owner.servers == [] and Server.stopped == [2, 1]
