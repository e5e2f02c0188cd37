"""benchmarks/compare_vllm_bench.py reads ``vllm bench serve --save-detailed`` results of the vLLM
versions the course runs: vLLM 0.26.0 (the H200 machine's) writes no ``latencies``; the script
once crashed on it with ``KeyError: 'latencies'``. The recorded file is a real 0.26.0 result."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from bench_scripts import load_script

from vllm_course import metrics

ROOT = Path(__file__).resolve().parents[3]
RECORDED = Path(__file__).resolve().parents[1] / "data" / "vllm_bench_0.26.0_detailed.json"
# every timing vLLM computed from the per-request timings the file carries (ms)
KEYS_MS = ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
           "mean_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms")
# E2EL rebuilt as TTFT + ITLs differs from vLLM's own by the sub-microsecond gap between the
# last chunk's timestamp and 0.26's later clock read for TTFT (0.15 us on average in this file)
ONE_US_MS = 1e-3


@pytest.fixture(scope="module")
def script():
    with load_script("compare_vllm_bench") as module:
        yield module


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(RECORDED.read_text())


def test_the_recorded_file_is_a_0_26_detailed_result(recorded):
    assert recorded["completed"] > 0 and recorded["failed"] == 0
    assert {"start_times", "ttfts", "itls", "output_lens", "input_lens"} <= set(recorded)
    assert "latencies" not in recorded


def test_our_formulas_on_vllm_0_26_timings_reproduce_its_numbers(script, recorded):
    ours = metrics.summarize(script.vllm_records(recorded),
                             duration_s=recorded["duration"]).to_vllm_keys()
    for key in KEYS_MS:
        assert ours[key] == pytest.approx(recorded[key], rel=0, abs=ONE_US_MS), key
    for key in ("completed", "total_output_tokens", "total_input_tokens"):
        assert ours[key] == recorded[key], key


def test_e2el_is_ttft_plus_itls_without_latencies_and_latencies_when_given(script, recorded):
    derived = script.detailed_latencies(recorded)
    done = [i for i, ttft in enumerate(recorded["ttfts"]) if ttft]
    mean_ms = sum(derived[i] for i in done) / len(done) * 1000
    assert mean_ms == pytest.approx(recorded["mean_e2el_ms"], rel=0, abs=ONE_US_MS)
    given = [0.5 + i for i in range(len(recorded["ttfts"]))]
    assert script.detailed_latencies({**recorded, "latencies": given}) == given


# -- --merge: one table over runs split across machine calls --------------------------------

BURST = ROOT / "reference" / "h200" / "bench" / "client-wire-2026-12-03" / "burst_comparison.json"
POISSON = ROOT / "reference" / "h200" / "bench" / "client-wire-2026-12-04-poisson"


def test_merging_recorded_runs_reads_every_repeat(script, tmp_path, capsys):
    # the recorded burst (3 repeats, output tok/s ratio 0.940) and a copy with the tools'
    # throughputs set equal: 6 repeats whose mean ratio is (3 x 0.940 + 3 x 1) / 6
    data = json.loads(BURST.read_text())
    for rep in data["repeats"]:
        rep["ours"]["output_throughput"] = rep["vllm"]["output_throughput"]
    (tmp_path / "comparison.json").write_text(json.dumps(data))
    rc = script.main(["--merge", str(BURST), str(tmp_path)])
    out = capsys.readouterr().out
    assert "merged: 6 repeats from 2 runs" in out
    _, pairs = script.load_pairs(BURST)
    recorded = [o.keys["output_throughput"] / v.keys["output_throughput"] for v, o in pairs]
    merged = (sum(recorded) + 3.0) / 6
    assert f"output_throughput ratio {merged:.3f}" in out
    assert "repeat 6: client CPU per output token, ours / vllm bench serve's: 0.50" in out
    # the diagnostics keep their header and every repeat's window; only the idle-server line,
    # which no merged run has, is left out (it had printed "nan%")
    assert "CPU diagnostics (" in out and "  repeat 1 vllm:" in out and "  repeat 6 ours:" in out
    # the cores are the recorded machine's (the H200 host's 16), not the merging machine's
    assert data["env"]["cpu_count"] == 16 and "CPU diagnostics (16 cores;" in out
    assert "idle server" not in out and "nan%" not in out
    assert rc == 1     # mean TPOT 1.100 in the recorded repeats: still outside 5 %


def test_merging_runs_of_different_workloads_is_refused(script, capsys):
    assert script.main(["--merge", str(BURST), str(POISSON)]) == 2
    err = capsys.readouterr().err
    assert "not the same workload" in err and "num_requests" in err


def test_request_timings_give_each_requests_send_time_and_ttft_in_order(script, recorded):
    records = script.vllm_records(recorded)
    got = script.request_timings(records)
    n = len(recorded["start_times"])
    assert [len(v) for v in got.values()] == [n, n, n]
    t0 = min(recorded["start_times"])
    for i in (0, n // 2, n - 1):
        assert got["sent_s"][i] == pytest.approx(recorded["start_times"][i] - t0, abs=1e-6)
        assert got["ttft_ms"][i] == pytest.approx(recorded["ttfts"][i] * 1000, abs=1e-3)
    assert min(got["sent_s"]) == 0.0
    # the P99 TTFT rebuilt from the file is vLLM's own (so a pack's timings can explain it)
    assert float(np.percentile(got["ttft_ms"], 99)) == pytest.approx(recorded["p99_ttft_ms"],
                                                                     abs=1e-2)
    records[1].error, records[1].chunk_s = "failed", []
    records[2].sent_s = None
    broken = script.request_timings(records)
    assert broken["ttft_ms"][1] is None and broken["e2el_ms"][1] is None
    assert broken["sent_s"][2] is None and broken["sent_s"][0] == got["sent_s"][0]
    assert len(json.dumps(got)) < 40 * n                     # small enough to pack


def test_explain_timings_finds_a_tail_made_by_late_sends(script, tmp_path, capsys):
    # 100 requests 0.1 s apart; ours sends the last ten 0.05 s late and those queue: 300 ms TTFT
    n = 100
    vllm = {"sent_s": [i * 0.1 for i in range(n)], "ttft_ms": [20.0] * n, "e2el_ms": [50.0] * n}
    ours = {"sent_s": [i * 0.1 + (0.05 if i >= 90 else 0.0) for i in range(n)],
            "ttft_ms": [20.0] * 90 + [300.0] * 10, "e2el_ms": [50.0] * n}
    vllm["ttft_ms"][7] = 40.0                                  # vLLM's one slow request
    lines = script.explain_timings(vllm, ours)
    text = "\n".join(lines)
    assert "100 of 100 requests completed by both tools" in text
    assert "median +0.0000" in text and "P99 +0.0500" in text
    assert "ours: P99 TTFT 300.0 ms" in text
    assert "vllm: P99 TTFT 20.2 ms; at or above it requests 7;" in text
    assert "at or above it requests 90, 91, 92, 93, 94, 95, 96, 97, 98, 99;" in text
    assert "first / last tenth of sends 20.0 / 300.0 ms" in text        # ours queued late
    assert "requests in both tails: 0 of 1 (vllm) and 10 (ours)" in text
    with pytest.raises(ValueError, match="not one workload"):
        script.explain_timings(vllm, {k: v[:50] for k, v in ours.items()})
    (tmp_path / "vllm-timings-1.json").write_text(json.dumps(vllm))
    (tmp_path / "ours-timings-1.json").write_text(json.dumps(ours))
    assert script.main(["--explain", str(tmp_path)]) == 0
    assert "repeat 1:" in capsys.readouterr().out
    assert script.main(["--explain", str(tmp_path / "none")]) == 1


def _exposition(ttft_sum_s: float, count: int, queue_sum_s: float) -> str:
    """vLLM's TTFT and queue-time histograms, as /metrics writes them (one bucket each)."""
    out = []
    for name, total in (("vllm:time_to_first_token_seconds", ttft_sum_s),
                        ("vllm:request_queue_time_seconds", queue_sum_s)):
        out += [f"# TYPE {name} histogram",
                f'{name}_bucket{{le="+Inf",model_name="m"}} {count}',
                f'{name}_sum{{model_name="m"}} {total}',
                f'{name}_count{{model_name="m"}} {count}']
    return "\n".join(out) + "\n"


def test_the_server_window_splits_a_ttft_gap_between_the_server_and_the_clients(script):
    # before vLLM's run the server had seen 10 requests; vLLM's run added 1,002 (2 warm-ups)
    # with a mean TTFT of 2,000 ms, ours 1,001 with 1,990 ms
    before = script.parse(_exposition(1.0, 10, 0.5))
    after_vllm = script.parse(_exposition(1.0 + 1002 * 2.0, 1012, 0.5 + 1002 * 0.9))
    after_ours = script.parse(_exposition(1.0 + 1002 * 2.0 + 1001 * 1.99, 2013,
                                          0.5 + 1002 * 0.9 + 1001 * 0.9))
    v_server = script.server_window(before, after_vllm)
    o_server = script.server_window(after_vllm, after_ours)
    assert v_server["requests"] == 1002 and o_server["requests"] == 1001
    assert v_server["ttft_mean_ms"] == pytest.approx(2000.0)
    assert o_server["ttft_mean_ms"] == pytest.approx(1990.0)
    assert o_server["queue_mean_ms"] == pytest.approx(900.0)
    # the clients measured 2,430 and 2,010 ms: 420 ms less on ours, of which 10 in the server
    vllm = script.ToolRun("vllm", {"mean_ttft_ms": 2430.0}, server=v_server)
    ours = script.ToolRun("ours", {"mean_ttft_ms": 2010.0}, server=o_server)
    split = script.ttft_gap_split([(vllm, ours)])
    assert "-420.0 ms = -10.0 ms in the server's own TTFT" in split
    assert "-410.0 ms outside its clock (ours 20.0, vLLM's 430.0)" in split
    assert "+430.0 ms outside the server's clock" in script.outside_server_line(vllm)
    assert script.ttft_gap_split([(script.ToolRun("vllm", {}), ours)]) is None
    assert script.server_window(None, after_vllm) == {}       # a scrape that failed
