"""``vllm_course.loadgen.client``: one streamed request folded into a RequestRecord (fake SSE)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from fake_sse import (
    DONE,
    Delay,
    Drop,
    FakeSSE,
    Script,
    chat_stream,
    completion_stream,
    error_body,
    http_error,
)

from vllm_course.loadgen.client import PATHS, open_session, request_body, send
from vllm_course.records import RequestRecord
from vllm_course.workload import Request

REQ = Request("hello there", output_len=3, prompt_len=4)
CHAT_REQ = Request("hello there", output_len=3, prompt_len=6)
CUT = "StreamCut: the connection closed before the response ended"


def _send(
    script: Script | list,
    request: Request = REQ,
    endpoint: str = "completions",
    fake: FakeSSE | None = None,
    timeout_s: float = 10.0,
) -> tuple[RequestRecord, FakeSSE]:
    """Run ``send`` for one request against ``script`` served on a local socket; the record and
    the fake."""
    if fake is None:
        fake = FakeSSE(script if isinstance(script, Script) else Script(events=script))

    async def go() -> RequestRecord:
        record = RequestRecord(index=7, scheduled_s=0.0)
        async with fake.serve() as url, open_session(timeout_s) as session:
            t0 = time.perf_counter()
            out = await send(session, url, request, record, model="tiny-mistral",
                             endpoint=endpoint, t0=t0)
        assert out is record
        return record

    return asyncio.run(go()), fake


def _assert_times_ordered(r: RequestRecord) -> None:
    assert r.sent_s is not None and r.end_s is not None
    times = [r.sent_s] + ([r.role_chunk_s] if r.role_chunk_s is not None else []) + r.chunk_s
    assert times == sorted(times)
    assert r.end_s >= times[-1]
    if r.last_choice_s is not None:
        assert r.end_s >= r.last_choice_s


# -- request_body ---------------------------------------------------------------------------


def test_request_body_completions_text() -> None:
    body = request_body(Request("hi", 17, 3), "tiny-mistral", "completions")
    assert body == {
        "model": "tiny-mistral",
        "max_tokens": 17,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "prompt": "hi",
    }


def test_request_body_completions_token_ids_become_a_list() -> None:
    body = request_body(Request((1, 5, 9), 4), "m", "completions")
    assert body["prompt"] == [1, 5, 9]
    assert json.loads(json.dumps(body))["prompt"] == [1, 5, 9]
    assert "messages" not in body


def test_request_body_chat() -> None:
    body = request_body(Request("hi there", 5), "m", "chat")
    assert body["messages"] == [{"role": "user", "content": "hi there"}]
    assert "prompt" not in body
    assert body["max_tokens"] == 5
    assert body["ignore_eos"] is True
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


def test_request_body_chat_rejects_token_ids() -> None:
    with pytest.raises(ValueError, match="token-id prompts only work with the completions"):
        request_body(Request((1, 2, 3), 4), "m", "chat")


def test_paths() -> None:
    assert PATHS == {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


# -- happy paths ----------------------------------------------------------------------------


def test_completions_continuous_usage_one_token_per_chunk() -> None:
    r, fake = _send(completion_stream(["Lo", "rem", " ip"], prompt_tokens=4))
    assert [c.path for c in fake.calls] == ["/v1/completions"]
    assert fake.calls[0].body == request_body(REQ, "tiny-mistral", "completions")
    assert r.error is None
    assert r.success
    assert r.index == 7
    assert r.prompt_len == 4
    assert r.max_tokens == 3
    assert r.chunk_tokens == [1, 1, 1]
    assert len(r.chunk_s) == 3
    assert r.role_chunk_s is None
    assert r.output_tokens == 3
    assert r.prompt_tokens == 4
    assert r.token_count_source == "continuous_usage"
    assert r.finish_reason == "length"
    assert r.last_choice_s == r.chunk_s[-1]
    _assert_times_ordered(r)
    assert fake.in_flight == 0


def test_completions_multi_token_chunks_from_cumulative_usage() -> None:
    # --stream-interval / speculative decoding: one chunk carries several tokens
    r, _ = _send(
        completion_stream(["a b", "c", "d e f g"], tokens=[2, 1, 4], prompt_tokens=9),
        request=Request("x", 7, 9),
    )
    assert r.error is None
    assert r.chunk_tokens == [2, 1, 4]
    assert len(r.chunk_s) == 3
    assert r.output_tokens == 7
    assert r.prompt_tokens == 9
    assert r.token_count_source == "continuous_usage"
    assert r.finish_reason == "length"


def test_chat_role_chunk_is_not_a_token_chunk() -> None:
    events = chat_stream(["Hi", " the", "re"], prompt_tokens=6, role_delay_s=0.02)
    r, fake = _send(events, request=CHAT_REQ, endpoint="chat")
    assert [c.path for c in fake.calls] == ["/v1/chat/completions"]
    assert fake.calls[0].body["messages"] == [{"role": "user", "content": "hello there"}]
    assert r.error is None
    assert r.role_chunk_s is not None
    assert r.chunk_tokens == [1, 1, 1]
    assert len(r.chunk_s) == 3
    # the role chunk came first and the 20 ms pause lies between it and the first token
    assert r.chunk_s[0] - r.role_chunk_s >= 0.015
    assert r.prompt_tokens == 6
    assert r.output_tokens == 3
    assert r.token_count_source == "continuous_usage"
    assert r.finish_reason == "length"
    _assert_times_ordered(r)


def test_chat_without_per_chunk_usage_counts_chunks() -> None:
    events = chat_stream(["Hi", " the", "re", "!"], prompt_tokens=6, continuous=False)
    r, _ = _send(events, request=CHAT_REQ, endpoint="chat")
    assert r.error is None
    assert r.role_chunk_s is not None
    assert r.chunk_tokens == [1, 1, 1, 1]
    assert len(r.chunk_s) == 4
    assert r.token_count_source == "chunks"
    # the final usage-only chunk still gives the exact counts
    assert r.prompt_tokens == 6
    assert r.output_tokens == 4
    assert r.finish_reason == "length"


def test_completions_without_any_usage() -> None:
    events = completion_stream(["a", "b"], continuous=False, final_usage=False)
    r, _ = _send(events)
    assert r.error is None
    assert r.chunk_tokens == [1, 1]
    assert r.token_count_source == "chunks"
    assert r.output_tokens == 2  # sum of chunk_tokens
    assert r.prompt_tokens is None
    assert r.finish_reason == "length"


def test_chunks_without_usage_and_empty_text_carry_no_tokens() -> None:
    # a finishing chunk with empty text (as vLLM sends on stop) carries no token
    events = completion_stream(["a", "b", ""], continuous=False, finish_reason="stop")
    r, _ = _send(events)
    assert r.error is None
    assert r.chunk_tokens == [1, 1]
    assert len(r.chunk_s) == 2
    assert r.last_choice_s is not None and r.last_choice_s >= r.chunk_s[-1]
    assert r.finish_reason == "stop"
    assert r.output_tokens == 3  # from the final usage chunk: server's count wins


def test_finish_reason_without_done_is_fine() -> None:
    events = completion_stream(["a", "b"], done=False)
    r, _ = _send(events)
    assert r.error is None
    assert r.finish_reason == "length"
    assert r.output_tokens == 2


def test_done_ends_parsing_but_the_body_is_read_through() -> None:
    # events after [DONE] are not parsed (a malformed line there does no harm), but the body is
    # read to its end: a connection goes back to the pool only then (closing it would cost a
    # TCP connect per request), so three requests one after another share one connection
    events = completion_stream(["a"]) + ["data: {not json\n\n", "data: [DONE]\n\n"]
    fake = FakeSSE(Script(events=events))

    async def go() -> list[RequestRecord]:
        records = [RequestRecord(index=i) for i in range(3)]
        async with fake.serve() as url, open_session(10.0) as session:
            for record in records:
                await send(session, url, REQ, record, model="m", endpoint="completions",
                           t0=time.perf_counter())
        return records

    records = asyncio.run(go())
    assert [(r.error, r.chunk_tokens) for r in records] == [(None, [1])] * 3
    assert [c.connection for c in fake.calls] == [0, 0, 0]
    assert fake.connections == 1


def test_sse_comments_and_blank_lines_are_ignored() -> None:
    events = [": keep-alive\n\n", "\n"] + completion_stream(["a", "b"])
    r, _ = _send(events)
    assert r.error is None
    assert r.chunk_tokens == [1, 1]


def _raw(events: list) -> bytes:
    from fake_sse import encode

    return b"".join(encode(e) for e in events if not isinstance(e, (Delay, Drop)))


def test_unicode_line_separators_inside_json_do_not_split_events() -> None:
    # random weights generate any token; vLLM writes JSON without escaping U+2028/U+0085, which
    # str.splitlines would treat as line breaks
    texts = ["a\u2028b", "\u0085", "c\u2029\x1c\x1dd"]
    events = [
        ("data: " + json.dumps(e, ensure_ascii=False) + "\n\n") if isinstance(e, dict) else e
        for e in completion_stream(texts)
    ]
    assert "\u2028" in events[0]
    r, _ = _send(events)
    assert r.error is None
    assert r.chunk_tokens == [1, 1, 1]
    assert r.output_tokens == 3
    assert r.finish_reason == "length"


def test_events_split_across_network_reads() -> None:
    # the same bytes in 5-byte pieces: lines and UTF-8 characters cut across reads
    raw = b"".join(
        ("data: " + json.dumps(e, ensure_ascii=False) + "\n\n").encode()
        if isinstance(e, dict)
        else e.encode()
        for e in completion_stream(
            ["\u00e9t\u00e9", "\u4e2d\u6587", "\U0001f600"], tokens=[2, 2, 1], prompt_tokens=5
        )
    )
    pieces = [raw[i : i + 5] for i in range(0, len(raw), 5)]
    r, _ = _send(pieces)
    assert r.error is None
    assert r.chunk_tokens == [2, 2, 1]
    assert r.output_tokens == 5
    assert r.prompt_tokens == 5


def test_a_stream_that_arrives_in_one_read_shares_one_time() -> None:
    # what a starved vLLM API server sends (the project's CI, 2-core machine): it had not taken
    # the engine's outputs for a while, so they come as chunks written back to back and read in
    # one gulp. Every chunk then has the read's time: TTFT == E2EL, gaps of 0 (counted as
    # bunched by the self-check), and the accounting still adds up.
    r, _ = _send([_raw(completion_stream(["a", "b", "c"], tokens=[1, 1, 1]))])
    assert r.error is None
    assert r.chunk_tokens == [1, 1, 1] and r.output_tokens == 3
    assert r.chunk_s[0] == r.chunk_s[-1] == r.last_choice_s
    _assert_times_ordered(r)


def test_crlf_line_endings() -> None:
    raw = _raw(completion_stream(["a", "b"])).replace(b"\n", b"\r\n")
    r, _ = _send([raw])
    assert r.error is None
    assert r.chunk_tokens == [1, 1]
    assert r.finish_reason == "length"


def test_last_line_without_newline_is_read() -> None:
    # a server that closes right after "data: [DONE]" without the blank line
    raw = _raw(completion_stream(["a"], done=False)) + b"data: [DONE]"
    r, _ = _send([raw])
    assert r.error is None
    assert r.chunk_tokens == [1]


# -- failures -------------------------------------------------------------------------------


def test_dropped_connection_keeps_chunks_received() -> None:
    events = completion_stream(["a", "b", "c", "d"], tokens=[1, 2, 1, 1])
    # the connection is aborted after the second token chunk
    events = events[:2] + [Drop()] + events[2:]
    r, fake = _send(events)
    # the chunked body ended before its last chunk
    assert r.error is not None and r.error.startswith(CUT), r.error
    assert not r.success
    assert r.chunk_tokens == [1, 2]
    assert len(r.chunk_s) == 2
    assert r.finish_reason is None
    assert r.end_s is not None and r.end_s >= r.chunk_s[-1]
    # the stream never finished: the counts are what arrived before the drop
    assert r.output_tokens == 3
    assert r.prompt_tokens == 4
    assert fake.in_flight == 0


def test_malformed_json_is_an_error_with_chunks_kept() -> None:
    events = completion_stream(["a", "b"])[:1] + ['data: {"choices": [\n\n'] + [DONE]
    r, _ = _send(events)
    assert r.error is not None
    assert r.error.startswith("DecodeError: "), r.error
    assert r.chunk_tokens == [1]
    assert r.end_s is not None
    assert not r.success


def test_http_400_with_json_body() -> None:
    msg = "This model's maximum context length is 2048 tokens. However, you requested 4000 tokens"
    r, fake = _send(http_error(400, msg))
    assert r.error is not None
    assert r.error.startswith("HTTP 400: ")
    assert msg[:60] in r.error
    assert json.loads(r.error[len("HTTP 400: ") :]) == error_body(msg, code=400)
    assert r.chunk_s == [] and r.chunk_tokens == []
    assert r.sent_s is not None and r.end_s is not None and r.end_s >= r.sent_s
    assert r.finish_reason is None
    assert not r.success
    assert fake.in_flight == 0


def test_http_error_body_is_truncated() -> None:
    r, _ = _send(http_error(500, "x" * 1000))
    assert r.error is not None
    assert r.error.startswith("HTTP 500: ")
    assert len(r.error) == len("HTTP 500: ") + 300


def test_in_stream_error_object() -> None:
    events = completion_stream(["a", "b", "c"])[:2]
    events += [error_body("the engine died", code=500, err_type="InternalServerError"), DONE]
    r, _ = _send(events)
    assert r.error == "RuntimeError: server error in stream: the engine died"
    assert r.chunk_tokens == [1, 1]
    assert not r.success
    assert r.end_s is not None


def test_in_stream_error_before_any_token() -> None:
    r, _ = _send([error_body("bad request: max_tokens too large"), DONE])
    assert r.error == "RuntimeError: server error in stream: bad request: max_tokens too large"
    assert r.chunk_s == []


def test_stream_ending_without_finish_reason_or_done() -> None:
    events = completion_stream(["a", "b"], finish_reason=None, final_usage=False, done=False)
    r, _ = _send(events)
    assert r.error == (
        "RuntimeError: stream ended before the request finished (no finish_reason, no [DONE])"
    )
    assert r.chunk_tokens == [1, 1]
    assert len(r.chunk_s) == 2
    # finish() ran before raising: counts are folded in
    assert r.output_tokens == 2
    assert r.prompt_tokens == 4
    assert r.token_count_source == "continuous_usage"
    assert r.finish_reason is None
    assert not r.success


def test_empty_200_stream_is_an_error() -> None:
    r, _ = _send([])
    assert r.error is not None and "stream ended before the request finished" in r.error
    assert not r.success


def test_token_id_prompt_on_chat_is_recorded_not_raised() -> None:
    r, fake = _send(chat_stream(["a"]), request=Request((1, 2), 1), endpoint="chat")
    assert fake.calls == []  # nothing was sent
    assert r.error == "ValueError: token-id prompts only work with the completions endpoint"
    assert r.sent_s is None
    assert r.end_s is not None


def test_read_timeout_is_recorded() -> None:
    # no byte for longer than the read timeout: the request fails with what arrived before
    events = completion_stream(["a", "b"])
    r, _ = _send(Script(events=events[:1] + [Delay(2.0)] + events[1:]), timeout_s=0.2)
    assert r.error is not None and r.error == "ReadTimeout: no response bytes for 0.2 s"
    assert r.chunk_tokens == [1]
    assert r.end_s - r.sent_s < 1.5


def test_slow_stream_times_are_relative_to_t0() -> None:
    events = completion_stream(["a", "b"], delay_s=0.03)
    r, _ = _send(events)
    assert r.error is None
    assert r.chunk_s[0] - r.sent_s >= 0.025
    assert r.chunk_s[1] - r.chunk_s[0] >= 0.025
    assert r.end_s < 5.0  # seconds since t0, not an absolute perf_counter reading


@pytest.mark.parametrize("payload", ["null", "[1]", '"oops"', '{"choices": "a"}',
                                     '{"choices": [{"text": "a"}], "usage": {"completion_tokens": '
                                     '"2"}}'])
def test_valid_json_that_is_not_an_event_is_recorded_not_raised(payload: str) -> None:
    # not an object, or an object whose fields have the wrong types: the typed decoder says which
    events = completion_stream(["a"])[:1] + [f"data: {payload}\n\n", DONE]
    r, _ = _send(events)
    assert r.error is not None and r.error.startswith("ValueError: malformed SSE event ("), r.error
    assert payload[:20] in r.error
    assert r.chunk_tokens == [1]


def test_delay_marker_is_exported() -> None:
    # guard for the fake itself: Delay pauses, it does not emit bytes
    r, _ = _send([Delay(0.0)] + completion_stream(["a"]))
    assert r.error is None and r.chunk_tokens == [1]


# -- on_chunk -------------------------------------------------------------------------------


def _send_watched(
    events: list, request: Request = REQ, endpoint: str = "completions", work_s: float = 0.0
) -> tuple[RequestRecord, list[tuple[int, int, float]]]:
    """``send`` with an ``on_chunk`` hook; the record and, per call, (chunks, tokens, last
    chunk time) as the hook saw them."""
    seen: list[tuple[int, int, float]] = []
    fake = FakeSSE(Script(events=events))

    async def go() -> RequestRecord:
        record = RequestRecord(index=0)

        def hook(r: RequestRecord) -> None:
            assert r is record
            seen.append((len(r.chunk_s), sum(r.chunk_tokens), r.chunk_s[-1]))
            if work_s:
                time.sleep(work_s)   # a hook that does real work on the event loop

        async with fake.serve() as url, open_session(10.0) as session:
            await send(session, url, request, record, model="m", endpoint=endpoint,
                       t0=time.perf_counter(), on_chunk=hook)
        return record

    return asyncio.run(go()), seen


def test_on_chunk_once_per_token_chunk() -> None:
    r, seen = _send_watched(completion_stream(["a", "b", "c"]))
    assert r.error is None
    # not for the usage-only chunk, not for [DONE]
    assert [(n, tokens) for n, tokens, _ in seen] == [(1, 1), (2, 2), (3, 3)]
    assert [t for _, _, t in seen] == r.chunk_s   # called right after each chunk


def test_on_chunk_with_multi_token_chunks() -> None:
    r, seen = _send_watched(
        completion_stream(["a b", "c", "d e f g"], tokens=[2, 1, 4], prompt_tokens=9),
        request=Request("x", 7, 9),
    )
    assert [(n, tokens) for n, tokens, _ in seen] == [(1, 2), (2, 3), (3, 7)]


def test_on_chunk_skips_the_role_chunk_and_empty_chunks() -> None:
    _, seen = _send_watched(chat_stream(["Hi", " there"]), request=CHAT_REQ, endpoint="chat")
    assert [n for n, _, _ in seen] == [1, 2]
    _, seen = _send_watched(completion_stream(["a", "b", ""], continuous=False,
                                              finish_reason="stop"))
    assert [n for n, _, _ in seen] == [1, 2]


def test_on_chunk_until_the_connection_drops() -> None:
    events = completion_stream(["a", "b", "c"])
    r, seen = _send_watched(events[:2] + [Drop()] + events[2:])
    assert r.error is not None and r.error.startswith(CUT), r.error
    assert [n for n, _, _ in seen] == [1, 2]


def test_slow_on_chunk_delays_the_next_read() -> None:
    # the fake writes a chunk every 5 ms; a hook working 20 ms on the first chunk keeps the
    # client from reading, so the next chunk waits in the socket and is stamped when the
    # client reads again: what on_chunk does is measured as inter-token latency
    r, seen = _send_watched(completion_stream(["a", "b", "c", "d"], delay_s=0.005), work_s=0.02)
    assert len(seen) == 4
    assert r.chunk_s[1] - r.chunk_s[0] >= 0.019


# -- stamped on arrival, parsed after the request --------------------------------------------


def test_without_a_hook_events_are_parsed_after_the_stream_with_their_read_times(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # nothing is parsed while the stream lasts (parsing one stream must not delay reading
    # another), yet every event keeps the time its bytes arrived, not the time it was parsed
    from vllm_course.loadgen import client

    parsed_at: list[float] = []
    real_event = client._Stream.event

    def event(self, data: bytes, now: float) -> None:
        parsed_at.append(time.perf_counter() - self.t0)
        real_event(self, data, now)

    monkeypatch.setattr(client._Stream, "event", event)
    r, _ = _send(completion_stream(["a", "b", "c"], delay_s=0.03))
    assert r.error is None and r.chunk_tokens == [1, 1, 1]
    assert min(parsed_at) >= r.end_s                        # all parsed after reading ended
    gaps = [b - a for a, b in zip(r.chunk_s, r.chunk_s[1:], strict=False)]
    assert min(gaps) >= 0.025                               # but stamped 30 ms apart on arrival
    assert r.chunk_s[-1] <= r.end_s
