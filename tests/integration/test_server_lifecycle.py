"""Starting, failing and stopping real vLLM servers. (A server killed in the middle of a run is
in test_diagnose.py: it kills a shared server after its last use, which saves a start.)"""

from __future__ import annotations

import json
import os
import time

import pytest

from vllm_course.config import ServerConfig
from vllm_course.server import ServerError, UnknownFlagError, VLLMServer, registry


def test_misspelled_flag_fails_before_launch(tmp_path):
    before = {e["pid"] for e in registry.entries()}
    server = VLLMServer(ServerConfig(args={"max-num-seq": 8}), log_path=tmp_path / "s.log")
    t0 = time.monotonic()
    with pytest.raises(UnknownFlagError, match=r"--max-num-seq\b.*did you mean --max-num-seqs"):
        server.start()
    assert time.monotonic() - t0 < 5          # no 40-second start: nothing was launched
    assert server.proc is None and not (tmp_path / "s.log").exists()
    assert {e["pid"] for e in registry.entries()} == before


def test_missing_local_model_path_fails_before_launch(tmp_path):
    server = VLLMServer(ServerConfig(model=str(tmp_path / "no-such-model")))
    with pytest.raises(ServerError, match="does not exist") as info:
        server.start()
    assert info.value.cause == "model_not_found"
    assert server.proc is None


def test_unknown_hub_model_is_named_as_the_cause(tmp_path):
    # vLLM itself fails here (offline hub lookup); the error must name the cause and show the log
    server = VLLMServer(ServerConfig(model="no-such-org/no-such-model", startup_timeout_s=300,
                                     env={"HF_HUB_OFFLINE": "1"}),
                        log_path=tmp_path / "s.log")
    with pytest.raises(ServerError) as info:
        server.start()
    assert info.value.cause == "model_not_found", str(info.value)
    assert "last lines of" in str(info.value)
    assert server.proc is None


OWNER = """
import sys, time
from vllm_course.config import ServerConfig
from vllm_course.server import ServerPool
pool = ServerPool(max_live=1, profile_args={"kv-cache-memory-bytes": 1 << 28})
pool.acquire(ServerConfig(args={"enforce-eager": True}), log_path=sys.argv[1])
time.sleep(600)
"""


def test_server_dies_with_its_owner(tmp_path):
    import subprocess
    import sys

    from conftest import _group_alive

    env = {**os.environ, "VLLM_COURSE_HOME": str(tmp_path / "home")}
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path / "s.log")], env=env)
    try:
        deadline = time.monotonic() + 120
        servers = tmp_path / "home" / "servers"
        while time.monotonic() < deadline and not list(servers.glob("*.json")):
            assert owner.poll() is None, "the owner process exited early"
            time.sleep(0.2)
        (entry,) = list(servers.glob("*.json"))
        pid = json.loads(entry.read_text())["pid"]
        time.sleep(3.0)                       # let the server spawn its engine processes
        assert _group_alive(pid)
        owner.kill()                          # SIGKILL: no atexit, no cleanup code runs
        owner.wait()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _group_alive(pid):
            time.sleep(0.5)
        assert not _group_alive(pid), "the vLLM server outlived its owner"
    finally:
        if owner.poll() is None:
            owner.kill()
