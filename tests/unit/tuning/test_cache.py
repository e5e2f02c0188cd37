"""The result cache: what the key is made of, storing and reading points, SLO recomputation."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys

import fake_runs
import pytest

from vllm_course.config import (
    SLO,
    FileWorkload,
    LoadSpec,
    RunConfig,
    ServerConfig,
    SyntheticWorkload,
)
from vllm_course.env import machine as env
from vllm_course.tuning import cache as cache_mod
from vllm_course.tuning.cache import ResultCache, cache_key, key_material, open_cache, run_cached

PROFILE = {"kv-cache-memory-bytes": 1 << 30, "max-model-len": 4096}


def _config(**kw) -> RunConfig:
    base = dict(name="a", server=ServerConfig(args={"max-num-seqs": 8}),
                workload=SyntheticWorkload(num_requests=10, input_len=32, output_len=4),
                load=LoadSpec(rate_rps=4.0))
    return RunConfig(**{**base, **kw})


def test_key_ignores_name_slo_host_port_and_timeout():
    a = cache_key(_config(), PROFILE)
    assert len(a) == 64 and a == cache_key(_config(), PROFILE)
    same = _config(name="other", slo=SLO(ttft_ms=100),
                   server=ServerConfig(args={"max-num-seqs": 8}, port=8123, host="127.0.0.2",
                                       startup_timeout_s=5))
    assert cache_key(same, PROFILE) == a


@pytest.mark.parametrize("change", [
    {"server": ServerConfig(args={"max-num-seqs": 16})},
    {"server": ServerConfig(args={"max-num-seqs": 8}, env={"VLLM_CPU_OMP_THREADS_BIND": "0"})},
    {"load": LoadSpec(rate_rps=4.0, reset_prefix_cache=False)},
    {"server": ServerConfig(model="mistral-7b-v0.3", args={"max-num-seqs": 8})},
    {"workload": SyntheticWorkload(num_requests=10, input_len=32, output_len=4, seed=1)},
    {"workload": SyntheticWorkload(num_requests=11, input_len=32, output_len=4)},
    {"load": LoadSpec(rate_rps=8.0)},
    {"load": LoadSpec(rate_rps=4.0, max_concurrency=2)},
    {"load": LoadSpec(rate_rps=4.0, num_warmups=2)},
])
def test_key_changes_with_what_is_measured(change):
    assert cache_key(_config(**change), PROFILE) != cache_key(_config(), PROFILE)


def test_key_changes_with_profile_flags_vllm_version_and_hardware(monkeypatch):
    a = cache_key(_config(), PROFILE)
    assert cache_key(_config(), {**PROFILE, "max-model-len": 2048}) != a
    # a config flag overrides the profile's: the effective flags are what count
    overridden = _config(server=ServerConfig(args={"max-num-seqs": 8, "max-model-len": 2048}))
    assert cache_key(overridden, PROFILE) == cache_key(overridden, {**PROFILE,
                                                                    "max-model-len": 1024})
    monkeypatch.setattr(env, "vllm_version", lambda: "0.99.0")
    b = cache_key(_config(), PROFILE)
    assert b != a
    monkeypatch.setattr(env, "hardware", lambda: {"machine": "x86_64", "cpu": "other",
                                                  "cpu_count": 64, "gpus": ["NVIDIA H200"]})
    assert cache_key(_config(), PROFILE) not in (a, b)


def test_key_follows_the_environment_a_server_inherits(monkeypatch):
    for name in [k for k in __import__("os").environ if k.startswith(cache_mod.ENV_PREFIXES)]:
        monkeypatch.delenv(name)
    a = cache_key(_config(), PROFILE)
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")     # opens endpoints, measures nothing
    monkeypatch.setenv("HOME", "/elsewhere")            # not a variable a server reads
    assert cache_key(_config(), PROFILE) == a
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")   # exported in the shell
    inherited = cache_key(_config(), PROFILE)
    assert inherited != a
    # the same value given in the config is the same environment
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND")
    given = _config(server=ServerConfig(args={"max-num-seqs": 8},
                                        env={"VLLM_CPU_OMP_THREADS_BIND": "0"}))
    assert cache_key(given, PROFILE) == inherited


def test_key_material_names_its_parts():
    m = key_material(_config(), PROFILE)
    assert set(m) == {"schema", "server", "model", "workload", "load", "vllm", "hardware"}
    assert m["server"]["args"] == {"kv-cache-memory-bytes": 1 << 30, "max-model-len": 4096,
                                   "max-num-seqs": 8}
    assert m["model"]["card"] == "tiny-mistral" and len(m["model"]["config_sha256"]) == 64
    assert m["load"]["rate_rps"] == 4.0 and m["vllm"]["version"] == env.vllm_version()
    assert m["hardware"]["cpu_count"] == env.hardware()["cpu_count"]


def test_file_workload_key_is_the_file_content_not_its_path(tmp_path):
    a = tmp_path / "a.jsonl"
    a.write_text('{"prompt": "hi", "output_len": 4}\n')
    b = tmp_path / "sub" / "b.jsonl"
    b.parent.mkdir()
    shutil.copy(a, b)
    key_a = cache_key(_config(workload=FileWorkload(path=a)), PROFILE)
    assert cache_key(_config(workload=FileWorkload(path=b)), PROFILE) == key_a
    b.write_text('{"prompt": "hello", "output_len": 4}\n')
    assert cache_key(_config(workload=FileWorkload(path=b)), PROFILE) != key_a


def _run(monkeypatch, tmp_path, config, store, calls, model=None):
    fake_runs.install(monkeypatch, model or fake_runs.constant(0.05, 0.01), calls)
    return asyncio.run(run_cached(config, pool=fake_runs.FakePool(profile_args=PROFILE),
                                  cache=store, results_root=tmp_path / "runs"))


def test_run_cached_runs_once_then_reads_the_cache(monkeypatch, tmp_path):
    store, calls = ResultCache(tmp_path / "cache"), []
    first, cached = _run(monkeypatch, tmp_path, _config(), store, calls)
    assert not cached and len(calls) == 1
    assert first.path.startswith(str(store.entry(cache_key(_config(), PROFILE))))
    stored = json.loads((store.entry(cache_key(_config(), PROFILE)) / "cache_key.json")
                        .read_text())
    assert stored["key"] == cache_key(_config(), PROFILE)
    again, cached = _run(monkeypatch, tmp_path, _config(name="renamed"), store, calls)
    assert cached and len(calls) == 1
    assert again.name == "renamed" and again.summary == first.summary
    assert store.keys() == [cache_key(_config(), PROFILE)]
    assert list((store.root / "partial").iterdir()) == []   # the run folder moved into place


def test_a_cached_point_read_with_another_slo_gets_its_goodput_recomputed(monkeypatch, tmp_path):
    store, calls = ResultCache(tmp_path / "cache"), []
    model = lambda c: [(0.05, 0.01)] * 5 + [(0.5, 0.01)] * 5  # noqa: E731 - half are slow
    first, _ = _run(monkeypatch, tmp_path, _config(slo=SLO(ttft_ms=100)), store, calls, model)
    assert first.summary.good_requests == 5
    loose, cached = _run(monkeypatch, tmp_path, _config(slo=SLO(ttft_ms=1000)), store, calls,
                         model)
    assert cached and loose.summary.good_requests == 10
    assert loose.summary.goodput_rps == pytest.approx(2 * first.summary.goodput_rps)
    none, _ = _run(monkeypatch, tmp_path, _config(), store, calls, model)
    assert none.summary.goodput_rps is None and len(calls) == 1


def test_without_a_cache_every_call_runs_and_nothing_is_stored(monkeypatch, tmp_path):
    calls = []
    for _ in range(2):
        result, cached = _run(monkeypatch, tmp_path, _config(), None, calls)
        assert not cached
    assert len(calls) == 2 and not (tmp_path / "cache").exists()
    assert result.path.startswith(str(tmp_path / "runs"))


def test_a_damaged_entry_is_a_miss(monkeypatch, tmp_path):
    store, calls = ResultCache(tmp_path / "cache"), []
    _run(monkeypatch, tmp_path, _config(), store, calls)
    key = cache_key(_config(), PROFILE)
    (store.entry(key) / "cache_key.json").write_text('{"key": "something else"}')
    assert not store.has(_config(), PROFILE) and store.get(_config(), PROFILE) is None


def test_put_refuses_a_folder_without_a_summary(tmp_path):
    with pytest.raises(FileNotFoundError, match="summary.json"):
        ResultCache(tmp_path / "cache").put(_config(), PROFILE, tmp_path)


def test_open_cache_switch(tmp_path):
    assert open_cache(None, tmp_path) is None and open_cache(False, tmp_path) is None
    assert open_cache(True, tmp_path).root == tmp_path / "cache"
    assert open_cache(tmp_path / "x", "results").root == tmp_path / "x"
    store = ResultCache(tmp_path / "y")
    assert open_cache(store, "results") is store


def test_looking_up_the_cache_does_not_import_vllm(tmp_path):
    code = (
        "import sys\n"
        "from vllm_course.tuning.cache import ResultCache, cache_key\n"
        "from vllm_course.tuning.grid import SweepSpec, plan\n"
        "spec = SweepSpec(servers={'a': {}}, rate_rps=[1, 2], workload={'num_requests': 4})\n"
        "print(plan(spec, cache=sys.argv[1]))\n"
        "print(cache_key(spec.point_config('a', 1), {}))\n"
        "print('vllm' in sys.modules, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, check=True).stdout.split("\n")
    assert out[0].startswith("1 server start(s), 2 point(s): 2 to run, 0 from the cache")
    assert out[2] == "False False"


def test_effective_args_match_the_server_module():
    server = ServerConfig(args={"max-num-seqs": 4, "max-model-len": 1024})
    assert cache_mod.effective_args(server, PROFILE) == {
        "kv-cache-memory-bytes": 1 << 30, "max-model-len": 1024, "max-num-seqs": 4}
