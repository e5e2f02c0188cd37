"""In a notebook, long calls say what they are doing: a server start shows its elapsed time and
its end, a run shows its requests, each as one line of the cell updated in place (no server)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from vllm_course import notebook
from vllm_course.config import ServerConfig
from vllm_course.server import pool


class FakeDisplay:
    """IPython's ``display(..., display_id=True)``: records the first text and every update."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, bundle, raw, display_id):
        assert raw and display_id
        self.lines.append(bundle["text/plain"])
        return SimpleNamespace(update=lambda b, raw: self.lines.append(b["text/plain"]))


@pytest.fixture
def shown(monkeypatch: pytest.MonkeyPatch) -> FakeDisplay:
    import IPython.display

    fake = FakeDisplay()
    monkeypatch.setattr(IPython.display, "display", fake)
    return fake


def test_request_progress_updates_one_line_and_always_shows_the_end(shown: FakeDisplay) -> None:
    progress = notebook.RequestProgress("paced")
    for done in range(49):
        progress(done, 48)
    assert shown.lines[0].startswith("paced: [....................] 0/48 requests")
    # throttled to 4 updates a second, but the last one always shows
    assert len(shown.lines) < 10
    assert shown.lines[-1].startswith("paced: [####################] 48/48 requests")


class FakeServer:
    def __init__(self, config: ServerConfig, log_path=None, profile_args=None) -> None:
        self.config = config
        self.facts = SimpleNamespace(kv_cache_tokens=None)

    def start(self) -> None:
        time.sleep(1.3)
        self.facts.kv_cache_tokens = 262144

    def alive(self) -> bool:
        return not getattr(self, "stopped", False)

    def stop(self, timeout_s: float = 20.0) -> None:     # as VLLMServer.stop
        self.stopped = True


def test_a_server_start_is_announced_with_its_time(shown: FakeDisplay,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool, "VLLMServer", FakeServer)
    owner = pool.ServerPool(max_live=1)
    owner.announce = notebook.server_start_notice
    try:
        config = ServerConfig(model="tiny-mistral", args={"max-num-seqs": 4})
        owner.acquire(config)
        owner.acquire(config)   # reused: not announced again
    finally:
        owner.close()
    assert shown.lines[0] == ("starting a vLLM server for tiny-mistral (--max-num-seqs 4) ...")
    assert any(line.startswith("starting a vLLM server for tiny-mistral (--max-num-seqs 4): 1 s")
               for line in shown.lines[1:-1])
    assert shown.lines[-1] == ("vLLM server for tiny-mistral (--max-num-seqs 4) ready in 1 s, "
                               "KV cache 262,144 tokens")


def test_a_failed_start_says_so(shown: FakeDisplay, monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken(FakeServer):
        def start(self) -> None:
            raise RuntimeError("no")

    monkeypatch.setattr(pool, "VLLMServer", Broken)
    owner = pool.ServerPool(max_live=1)
    owner.announce = notebook.server_start_notice
    try:
        with pytest.raises(RuntimeError):
            owner.acquire(ServerConfig())
    finally:
        owner.close()
    assert shown.lines[-1].startswith("the vLLM server for tiny-mistral (default flags) did not "
                                      "start")


def test_vllm_source_lines_quotes_the_installed_vllm():
    # the default block size as the installed vLLM declares it, with its file and line number
    lines = notebook.vllm_source_lines("config/cache.py", r"DEFAULT_BLOCK_SIZE: ClassVar")
    assert len(lines) == 1 and lines[0].startswith("config/cache.py:")
    assert "DEFAULT_BLOCK_SIZE" in lines[0] and int(lines[0].split(":")[1]) > 0
    with pytest.raises(FileNotFoundError):
        notebook.vllm_source_lines("no/such/file.py", "x")


def test_within_noise_is_a_symmetric_band_and_rejects_what_is_not_a_positive_timing():
    n = notebook.CPU_TIMING_NOISE
    assert notebook.within_noise(100.0, 100.0 * n) and notebook.within_noise(100.0 * n, 100.0)
    assert not notebook.within_noise(100.0, 100.0 * n * 1.01)
    assert not notebook.within_noise(100.0 * n * 1.01, 100.0)
    assert notebook.within_noise(1.0, 1.9, noise=2.0) and not notebook.within_noise(1.0, 2.1, 2.0)
    for a, b in ((0.0, 1.0), (1.0, 0.0), (-1.0, -1.0), (float("nan"), 1.0), (None, 1.0)):
        assert not notebook.within_noise(a, b)
