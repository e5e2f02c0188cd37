"""lab01's grading without a server: what a results file must prove, the learner's functions
against the reference definitions, and the points awarded."""

from __future__ import annotations

import json
import secrets

import numpy as np
import pytest

from vllm_course import grading
from vllm_course.grading import lab01, results, session
from vllm_course.records import RequestRecord

SLO = {"ttft_ms": 100.0, "tpot_ms": 20.0, "e2el_ms": None}


def rec(index: int, sent: float, chunks: list[float], tokens: list[int], error=None) -> dict:
    return RequestRecord(index=index, prompt_len=8, max_tokens=sum(tokens) or 4, sent_s=sent,
                         chunk_s=chunks, chunk_tokens=tokens,
                         last_choice_s=chunks[-1] if chunks else None,
                         end_s=(chunks[-1] if chunks else sent) + 0.01, prompt_tokens=8,
                         output_tokens=sum(tokens), finish_reason="length",
                         error=error).to_dict()


RECORDS = [
    rec(0, 0.00, [0.05, 0.06, 0.08], [1, 1, 1]),          # fast
    rec(1, 0.10, [0.30, 0.33], [1, 1]),                    # misses the TTFT limit (200 ms)
    rec(2, 0.20, [0.25], [1]),                             # one token: TPOT undefined
    rec(3, 0.30, [0.34, 0.44, 0.50], [1, 3, 1]),           # a chunk of 3 tokens
    rec(4, 0.40, [], [], error="HTTP 500"),                # failed
]


# the solution's definitions, written the way a learner would
def ttft_ms(r):
    return None if r["error"] is not None or not r["chunk_s"] else \
        1000.0 * (r["chunk_s"][0] - r["sent_s"])


def e2el_ms(r):
    if r["error"] is not None or not r["chunk_s"]:
        return None
    last = r["last_choice_s"] if r["last_choice_s"] is not None else r["chunk_s"][-1]
    return 1000.0 * (last - r["sent_s"])


def tpot_ms(r):
    t, e = ttft_ms(r), e2el_ms(r)
    return None if t is None or r["output_tokens"] <= 1 else (e - t) / (r["output_tokens"] - 1)


def itl_ms(r):
    c = r["chunk_s"] if r["error"] is None else []
    return [1000.0 * (b - a) for a, b in zip(c[:-1], c[1:], strict=False)]


def percentile(values, p):
    return float(np.percentile(values, p))


def goodput_rps(records, slo, duration_s):
    good = 0
    for r in records:
        t = ttft_ms(r)
        if t is None or (slo.get("ttft_ms") and t > slo["ttft_ms"]):
            continue
        tp = tpot_ms(r)
        good += not (slo.get("tpot_ms") and tp is not None and tp > slo["tpot_ms"])
    return good / duration_s


SOLUTION = dict(ttft_ms=ttft_ms, tpot_ms=tpot_ms, itl_ms=itl_ms, e2el_ms=e2el_ms,
                percentile=percentile, goodput_rps=goodput_rps)


def issued(tmp_path, measure_part: dict, generated: float = 11.0) -> dict:
    """A results file as the run cell writes it (nonce kept in this process), without a
    server: 11 tokens reached the client from the 5 records (4 more may count for the failed one)."""
    result = {"lab": "lab01", "nonce": secrets.token_hex(16), "profile": "cpu-tiny",
              "server_counters": {"generation_tokens": generated},
              "client_totals": results.client_totals(RECORDS), **measure_part}
    results.issue("lab01", result, tmp_path)
    return result


def test_the_reference_follows_vllm_bench_serve_definitions():
    ref = lab01.reference_answers(RECORDS, SLO, duration_s=2.0)
    assert ref["ttft_ms"] == pytest.approx([50.0, 200.0, 50.0, 40.0, None])
    assert ref["e2el_ms"][3] == pytest.approx(200.0) and ref["e2el_ms"][4] is None
    # TPOT divides by output tokens - 1 (5 tokens in 3 chunks), undefined for one token
    assert ref["tpot_ms"][3] == pytest.approx(40.0) and ref["tpot_ms"][2] is None
    # ITL: one gap per chunk, none for a failed request
    assert ref["itl_ms"][3] == pytest.approx([100.0, 60.0]) and ref["itl_ms"][4] == []
    assert ref["percentile"][0] == pytest.approx(50.0)
    # good: 0 (TTFT 50, TPOT 15), 2 (one token passes TPOT), 3 (TTFT 40, TPOT 40 > 20: not)
    assert ref["goodput_rps"] == pytest.approx(2 / 2.0)


def test_the_solution_scores_full_points_and_each_test_prints_its_share(tmp_path, capsys):
    measure = lab01.answers_of(**SOLUTION)
    issued(tmp_path, measure(RECORDS, {"duration_s": 2.0, "slo": SLO}))
    for name in (*lab01.LAB01_FUNCTIONS, "percentile", "goodput_rps"):
        assert lab01.score_answers("lab01", name, 2, tmp_path) == 2.0, name
    assert "5 of 5 values equal the reference -> 2.00 / 2 points" in capsys.readouterr().out


def test_a_wrong_definition_earns_the_share_it_got_right_and_names_the_first_mismatch(
        tmp_path, capsys):
    def tpot_by_chunks(r):        # the classic mistake: divide by chunks, not tokens - 1
        t, e = ttft_ms(r), e2el_ms(r)
        return None if t is None or len(r["chunk_s"]) <= 1 else (e - t) / (len(r["chunk_s"]) - 1)

    def broken_itl(r):
        raise KeyError("chunks")

    measure = lab01.answers_of(**{**SOLUTION, "tpot_ms": tpot_by_chunks, "itl_ms": broken_itl})
    issued(tmp_path, measure(RECORDS, {"duration_s": 2.0, "slo": SLO}))
    assert lab01.score_answers("lab01", "tpot_ms", 2, tmp_path) == pytest.approx(2 * 4 / 5)
    out = capsys.readouterr().out
    assert "4 of 5 values" in out and "first mismatch (#3)" in out
    # a function that raises costs its own points only; its error is what was recorded
    assert lab01.score_answers("lab01", "itl_ms", 2, tmp_path) == 0.0
    assert "KeyError" in capsys.readouterr().out
    assert lab01.score_answers("lab01", "ttft_ms", 2, tmp_path) == 2.0


def test_functions_that_call_the_library_or_are_all_unwritten_are_refused_before_a_run():
    from vllm_course import metrics

    def ttft_by_library(r):
        return 1000 * metrics.ttft_s(RequestRecord.from_dict(r))

    with pytest.raises(grading.LabError,
                       match=r"ttft_ms uses \['RequestRecord', 'metrics'\], from the course's"):
        lab01.answers_of(ttft_ms=ttft_by_library)

    def stub(*args):
        raise NotImplementedError()

    with pytest.raises(grading.LabError, match="still raises NotImplementedError"):
        lab01.answers_of(**{name: stub for name in SOLUTION})
    # one written function is enough to run (the others score 0)
    assert callable(lab01.answers_of(**{**{name: stub for name in SOLUTION},
                                        "ttft_ms": ttft_ms}))


def test_a_results_file_scores_only_as_the_run_cell_wrote_it_in_this_kernel(tmp_path):
    measure_part = lab01.answers_of(**SOLUTION)(RECORDS, {"duration_s": 2.0, "slo": SLO})
    path = results.results_path("lab01", tmp_path)

    # no file
    results._ISSUED.pop("lab01", None)
    with pytest.raises(grading.LabError, match="does not exist"):
        lab01.score_answers("lab01", "ttft_ms", 2, tmp_path)
    # a file written by hand (or copied, or left from an earlier kernel): its nonce was never
    # issued here
    forged = {"lab": "lab01", "nonce": "0" * 32, **measure_part}
    path.write_text(json.dumps(forged))
    with pytest.raises(grading.LabError, match="nonce is not the one issued"):
        lab01.score_answers("lab01", "ttft_ms", 2, tmp_path)
    # the run cell's own file, edited afterwards (the nonce still matches)
    result = issued(tmp_path, measure_part)
    path.write_text(path.read_text().replace('"ttft_ms": [', '"ttft_ms": [ '))
    with pytest.raises(grading.LabError, match="changed after the run cell wrote it"):
        lab01.score_answers("lab01", "ttft_ms", 2, tmp_path)
    # a server that generated other tokens than the client received: not trustworthy
    issued(tmp_path, measure_part, generated=16.0)
    with pytest.raises(grading.LabError, match="counted 16 generated tokens, the client "
                                               "received 11"):
        lab01.score_answers("lab01", "ttft_ms", 2, tmp_path)
    assert result["nonce"] != forged["nonce"]


def _notebook(source: str) -> dict:
    """The globals of a notebook kernel that ran ``source``."""
    scope = {"__name__": "__main__"}
    exec(source, scope)
    return scope


# (what the learner's cell holds, whether it uses the course's library)
LEARNER_CELLS = {
    "a helper of the learner's named like the library's": (
        "def ttft_s(r):\n    return r['chunk_s'][0] - r['sent_s']\n"
        "def ttft_ms(r):\n    return 1000 * ttft_s(r)\n", False),
    "a dict of the learner's named metrics": (
        "metrics = {}\ndef ttft_ms(r):\n    metrics['seen'] = r\n    return 1.0\n", False),
    "numpy": ("import numpy as np\ndef ttft_ms(r):\n"
              "    return 1000 * float(np.subtract(r['chunk_s'][0], r['sent_s']))\n", False),
    "the library's module": ("from vllm_course import metrics\n"
                             "def ttft_ms(r):\n    return 1000 * metrics.ttft_s(r)\n", True),
    "an alias": ("from vllm_course import metrics\nf = metrics.ttft_s\n"
                 "def ttft_ms(r):\n    return 1000 * f(r)\n", True),
    "a default argument": ("from vllm_course import metrics\n"
                           "def ttft_ms(r, f=metrics.ttft_s):\n    return 1000 * f(r)\n", True),
    "a helper that calls it": ("from vllm_course import metrics\n"
                               "def helper(r):\n    return metrics.ttft_s(r)\n"
                               "def ttft_ms(r):\n    return 1000 * helper(r)\n", True),
    "the grading module of the set-up cell": (
        "from vllm_course import grading as lab\n"
        "def ttft_ms(r):\n    return lab.reference_answers([r], None, 1.0)['ttft_ms'][0]\n",
        True),
}


@pytest.mark.parametrize("case", LEARNER_CELLS)
def test_library_use_is_found_by_what_a_name_holds_not_by_its_spelling(case):
    source, uses = LEARNER_CELLS[case]
    assert bool(lab01.library_uses(_notebook(source)["ttft_ms"])) == uses


def test_the_library_passed_directly_or_through_partial_is_refused():
    import functools

    from vllm_course import metrics

    for fn in (metrics.ttft_s, functools.partial(metrics.ttft_s)):
        with pytest.raises(grading.LabError, match="from the course's library"):
            lab01.answers_of(ttft_ms=fn)
    # the solution's own functions pass
    assert all(not lab01.library_uses(fn) for fn in SOLUTION.values())


def test_the_run_cell_refuses_to_run_before_the_set_up_cell_and_checks_flags_first(tmp_path):
    import asyncio

    session._PINS.pop("lab01", None)
    stale = results.results_path("lab01", tmp_path)
    stale.write_text("{}")
    with pytest.raises(grading.LabError, match=r"set-up cell first"):
        asyncio.run(grading.run("lab01", results_dir=tmp_path))
    assert not stale.exists(), "an old results file is deleted before anything else"
    assert session.check_flags("lab01", {"--max_num_seqs": 8}) == {"max-num-seqs": 8}
    for flags, why in (({"enforce-eager": False}, "part of lab01's scenario"),
                       ({"model": "x"}, "would change the model"),
                       ({"max-num-seqs 8": 1}, "a flag's name only"),
                       ({"max-num-seqs": [8]}, "str, int, float or bool"),
                       ({"max-num-seqs": 8, "max_num_seqs": 4}, "given twice")):
        with pytest.raises(grading.LabError, match=why):
            session.check_flags("lab01", flags)
    with pytest.raises(grading.LabError, match="unknown lab 'lab99'"):
        grading.setup("lab99")
