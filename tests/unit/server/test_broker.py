"""The server broker's protocol, with a stand-in pool (the real one runs in tests/notebooks)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vllm_course import server as pool_module
from vllm_course.config import ServerConfig
from vllm_course.server import ServerError, StartupFacts
from vllm_course.server.broker import ENV_VAR, PoolBroker, RemotePool, RemoteServer


class _Proc:
    def __init__(self, pid):
        self.pid = pid


class _Server:
    def __init__(self, config, pid):
        self.config = config
        self.proc = _Proc(pid)
        self.base_url = f"http://127.0.0.1:{9000 + len(config.args)}"
        self.log_path = Path(f"/tmp/server-{pid}.log")
        self.facts = StartupFacts(vllm_version="0.32.0", kv_cache_tokens=524288, max_num_seqs=1,
                                  max_num_seqs_source="flag")


class _Pool:
    """Records acquire/release; the first config with flag `fail` fails like a bad start."""

    profile_args = {"max-model-len": 4096}
    max_live = 2

    def __init__(self):
        self.acquired, self.released = [], []

    def acquire(self, config, log_path=None):
        if config.args.get("fail"):
            raise ServerError("vLLM server exited during start-up (exit code 1)",
                              cause="bad_flag", log_tail="error: unrecognized arguments",
                              log_path=log_path)
        self.acquired.append((config, log_path))
        return _Server(config, pid=os.getpid())   # a live pid: alive() is True

    def release(self, server):
        self.released.append(server.proc.pid)


def test_a_borrowed_server_carries_what_a_run_needs():
    pool = _Pool()
    with PoolBroker(pool) as url:
        remote = RemotePool(url)
        assert remote.profile_args == {"max-model-len": 4096}
        config = ServerConfig(model="tiny-mistral", args={"max-num-seqs": 1})
        server = remote.acquire(config, log_path=Path("/tmp/x/server.log"))
        assert isinstance(server, RemoteServer)
        assert server.base_url == "http://127.0.0.1:9001"
        assert server.proc.pid == os.getpid()
        assert server.log_path == Path(f"/tmp/server-{os.getpid()}.log")
        assert server.facts.kv_cache_tokens == 524288 and server.facts.max_num_seqs == 1
        assert server.alive()
        server.check_alive()
        # the broker got the exact settings and log path
        (got, log_path), = pool.acquired
        assert got == config and log_path == Path("/tmp/x/server.log")
        remote.release(server)
        assert pool.released == [os.getpid()]
        remote.close()


def test_a_failed_start_reaches_the_borrower_with_cause_and_log():
    with PoolBroker(_Pool()) as url:
        remote = RemotePool(url)
        with pytest.raises(ServerError) as err:
            remote.acquire(ServerConfig(model="tiny-mistral", args={"fail": True}))
    assert err.value.cause == "bad_flag"
    assert err.value.log_tail == "error: unrecognized arguments"
    assert str(err.value).count("unrecognized arguments") == 1     # not repeated


def test_a_gone_server_is_not_alive():
    reply = {"key": "1", "base_url": "http://127.0.0.1:1", "pid": 2**22 + 12345,
             "log_path": "/tmp/none.log", "facts": {}}
    server = RemoteServer(ServerConfig(model="tiny-mistral"), reply)
    assert not server.alive()
    with pytest.raises(ServerError, match="is gone"):
        server.check_alive()


def test_default_pool_borrows_when_the_variable_is_set(monkeypatch):
    with PoolBroker(_Pool()) as url:
        monkeypatch.setenv(ENV_VAR, url)
        monkeypatch.setattr(pool_module, "_default", None)
        pool = pool_module.default_pool()
        assert isinstance(pool, RemotePool) and pool.url == url
        assert pool_module.default_pool() is pool
        pool.close()
    monkeypatch.setattr(pool_module, "_default", None)


def test_no_broker_at_the_address_says_what_to_do(monkeypatch):
    with pytest.raises(RuntimeError, match="unset it"):
        RemotePool("http://127.0.0.1:9")
