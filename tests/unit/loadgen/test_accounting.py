"""``RequestRecord.accounting_errors``: the token invariants the integration tests assert.

A real vLLM server may put several tokens in one chunk (``--stream-interval``, or a stream whose
reader fell behind); the client's count must survive that, and a client that drops or counts a
token twice must be caught. Each case runs the real client
(:func:`vllm_course.loadgen.client.send`) on a
fake stream, then breaks the record the way a faulty client would.
"""

from __future__ import annotations

import dataclasses

from fake_sse import completion_stream
from test_client import _send

from vllm_course.experiment import cross_checks
from vllm_course.prom import ServerMetrics
from vllm_course.workload import Request

REQ13 = Request("x", output_len=13, prompt_len=9)
COALESCED = completion_stream(["a b c d", "e f g h", "i j k l", "m"], tokens=[4, 4, 4, 1],
                              prompt_tokens=9)


def _coalesced():
    record, _ = _send(COALESCED, request=REQ13)
    return record


def test_a_coalesced_stream_adds_up() -> None:
    r = _coalesced()
    assert r.chunk_tokens == [4, 4, 4, 1]
    assert r.output_tokens == r.max_tokens == 13
    assert r.accounting_errors() == []
    checks = cross_checks([r], ServerMetrics(generation_tokens=13))
    assert checks.warnings == []


def test_a_dropped_token_is_caught() -> None:
    r = _coalesced()
    r.chunk_tokens[1] -= 1                      # a chunk counted one token short
    assert r.accounting_errors() == ["chunks carry 12 tokens, usage says 13"]


def test_a_token_counted_twice_is_caught() -> None:
    r = _coalesced()
    r.chunk_s.insert(2, r.chunk_s[1])           # the same chunk taken twice: its cumulative
    r.chunk_tokens.insert(2, 0)                 # usage adds 0 the second time
    assert r.accounting_errors() == ["a chunk without tokens among [4, 4, 0, 4, 1]"]
    r.chunk_tokens[2] = 4                       # ...or its tokens added again
    assert r.accounting_errors() == ["chunks carry 17 tokens, usage says 13"]


def test_usage_short_of_max_tokens_is_caught() -> None:
    r = dataclasses.replace(_coalesced(), output_tokens=12, chunk_tokens=[4, 4, 3, 1])
    assert r.accounting_errors() == ["12 tokens for max_tokens 13 (finish_reason length)"]


def test_counting_chunks_on_a_coalescing_server_is_caught() -> None:
    # without per-chunk usage the client can only count text chunks: on a server that puts
    # several tokens in a chunk that undercounts, and the final usage says so
    events = completion_stream(["a b c d", "e f g h", "i j k l", "m"], tokens=[4, 4, 4, 1],
                               prompt_tokens=9, continuous=False)
    r, _ = _send(events, request=REQ13)
    assert r.token_count_source == "chunks"
    assert r.accounting_errors() == ["chunks carry 4 tokens, usage says 13"]


def test_client_and_server_totals_must_agree() -> None:
    checks = cross_checks([_coalesced()], ServerMetrics(generation_tokens=14))
    assert checks.warnings == ["client received 13 output tokens, the server counted 14 "
                               "(Δvllm:generation_tokens_total)"]


def test_a_failed_request_is_checked_for_chunk_shape_only() -> None:
    r = dataclasses.replace(_coalesced(), error="connection dropped", output_tokens=0)
    assert r.accounting_errors() == []
    r.chunk_tokens.append(0)
    assert r.accounting_errors() == [
        "4 chunk times for 5 chunks", "a chunk without tokens among [4, 4, 4, 1, 0]"]
