"""Generators: exact prompt lengths per endpoint, shared prefixes token for token, multi-turn
growth, populations and priorities, limits, specs and sizes, byte reproducibility."""

from __future__ import annotations

import collections

import pytest
import yaml
from click.testing import CliRunner
from pydantic import ValidationError

from vllm_course.cli import main
from vllm_course.workload import PromptTokenizer, WorkloadError
from vllm_course.workload.generators import GeneratorSpec, _split, generate, load_spec

P = 48  # shared prefix tokens


@pytest.fixture(scope="module")
def tok() -> PromptTokenizer:
    return PromptTokenizer("tiny-mistral")


def spec(endpoint="completions", **changes) -> GeneratorSpec:
    data = {
        "endpoint": endpoint,
        "seed": 7,
        "num_requests": 60,
        "max_model_len": 1024,
        "populations": {
            "shared": {
                "weight": 2,
                "input_len": {"kind": "uniform", "low": 8, "high": 120},
                "output_len": {"kind": "lognormal", "median": 20, "sigma": 0.5, "max": 64},
                "shared_prefix": {"num_prefixes": 3, "length": P, "fraction": 0.75},
                "priority": {"values": [0, 5], "weights": [1, 3]},
            },
            "plain": {"input_len": {"kind": "normal", "mean": 60, "std": 20, "min": 8},
                      "output_len": 16, "priority": 9},
        },
    }
    data.update(changes)
    return GeneratorSpec.model_validate(data)


def chat_spec(**changes) -> GeneratorSpec:
    pops = {
        "talk": {
            "input_len": {"kind": "uniform", "low": 8, "high": 60},
            "output_len": {"kind": "uniform", "low": 4, "high": 40},
            "turns": {"kind": "uniform", "low": 2, "high": 4},
        },
        "system": {
            "input_len": {"kind": "uniform", "low": 8, "high": 60},
            "output_len": 8,
            "shared_prefix": {"num_prefixes": 2, "length": P},
        },
    }
    return spec(**{"endpoint": "chat", "populations": pops, **changes})


@pytest.fixture(scope="module")
def completions(tok):
    return generate(spec(), tok)


@pytest.fixture(scope="module")
def chats(tok):
    return generate(chat_spec(), tok)


def test_every_prompt_len_is_exact_on_completions(tok, completions):
    assert len(completions) == 60
    for r in completions:
        assert isinstance(r.prompt, str)
        assert tok.prompt_len(r.prompt, "completions") == r.prompt_len


def test_every_prompt_len_is_exact_on_chat(tok, chats):
    assert len(chats) == 60
    for r in chats:
        assert r.is_conversation
        assert tok.prompt_len(r.prompt, "chat") == r.prompt_len


def test_prompts_are_readable_vocabulary_words(tok, completions):
    vocab = set(tok.words)
    for r in completions:
        assert set(r.prompt.split()) <= vocab


def test_shared_prefix_is_the_same_token_ids_in_every_request(tok, completions):
    # completions: BOS, then the prefix's P tokens
    heads = collections.Counter(tuple(tok.prompt_ids(r.prompt, "completions")[1:1 + P])
                                for r in completions if r.priority != 9)
    shared = {h: n for h, n in heads.items() if n > 1}
    assert len(shared) == 3  # three prefixes
    assert sum(shared.values()) == 30  # 75% of the 40 requests of population "shared"
    assert max(shared.values()) - min(shared.values()) <= 1  # round robin


def test_shared_system_prompt_on_chat(tok, chats):
    with_system = [r for r in chats if r.prompt[0][0] == "system"]
    assert len(with_system) == 30
    systems = {r.prompt[0][1] for r in with_system}
    assert len(systems) == 2
    for r in with_system:
        ids = tok.prompt_ids(r.prompt, "chat")
        assert ids[2:2 + P] == tok.encode(r.prompt[0][1])  # BOS, [INST], then the prefix
        assert 8 <= r.prompt_len - P <= 60  # the prefix comes on top of input_len


def test_multi_turn_history_grows_turn_by_turn(tok, chats):
    seen: dict[tuple, object] = {}
    multi = [r for r in chats if r.prompt[0][0] != "system"]
    for r in multi:
        turn = len(r.prompt) // 2 + 1
        if turn > 1:
            previous = seen[r.prompt[:-2]]  # the earlier turn was sent before this one
            role, answer = r.prompt[-2]
            assert role == "assistant"
            assert len(tok.encode(answer)) == previous.output_len
            grown = r.prompt_len - previous.prompt_len - previous.output_len
            assert 8 <= grown <= 60  # this turn's input_len
        seen[r.prompt] = r
    assert max(len(r.prompt) for r in multi) >= 5  # some third turns
    assert [m[0] for m in max(multi, key=lambda r: len(r.prompt)).prompt][:4] == [
        "user", "assistant", "user", "assistant"]


def test_multi_turn_prefix_hits_from_history(tok, chats):
    from vllm_course.workload.prefix import expected_prefix_hit_rate

    stats = expected_prefix_hit_rate(chats, tok, "chat")
    assert stats.hit_rate > 0.2 and stats.sharing_ratio >= stats.hit_rate


def test_populations_priorities_and_lengths(completions):
    by_priority = collections.Counter(r.priority for r in completions)
    assert by_priority[9] == 20 and by_priority[0] + by_priority[5] == 40
    assert by_priority[0] > 0 and by_priority[5] > by_priority[0]
    for r in completions:
        if r.priority == 9:
            assert r.output_len == 16 and r.prompt_len >= 8
        else:
            assert 8 <= r.prompt_len <= 120 + P and 1 <= r.output_len <= 64


def test_same_spec_same_bytes_other_seed_other_requests(tok, completions):
    again = generate(spec(), tok)
    assert [r.to_json() for r in again] == [r.to_json() for r in completions]
    other = generate(spec(seed=8), tok)
    assert [r.to_json() for r in other] != [r.to_json() for r in completions]


def test_limits_end_conversations_and_reject_first_turns(tok):
    limited = generate(chat_spec(max_prompt_len=150, max_model_len=190), tok)
    assert len(limited) == 60
    assert all(r.prompt_len <= 150 and r.prompt_len + r.output_len <= 190 for r in limited)
    with pytest.raises(WorkloadError, match="first turn"):
        generate(spec(max_model_len=100), tok)


def test_too_short_for_the_template_is_an_error(tok):
    short = {"input_len": 2, "output_len": 4}
    with pytest.raises(WorkloadError, match="exactly 2 tokens"):
        generate(spec("chat", populations={"x": short}), tok)


def test_spec_validation():
    with pytest.raises(ValidationError, match="need endpoint: chat"):
        chat_spec(endpoint="completions")
    with pytest.raises(ValidationError):
        spec(unknown_field=1)
    with pytest.raises(ValidationError):
        spec(populations={})
    with pytest.raises(ValidationError):
        GeneratorSpec.model_validate({"num_requests": 5, "populations": {"x": {
            "input_len": 9, "output_len": 9, "priority": {"values": [1, 2], "weights": [1]}}}})


def test_split_is_exact():
    assert _split(60, [2, 1]) == [40, 20]
    assert _split(10, [1, 1, 1]) == [4, 3, 3]
    assert sum(_split(1000, [0.8, 0.15, 0.05])) == 1000


SPEC_YAML = """
endpoint: completions
seed: 3
num_requests: 20
populations:
  a:
    input_len: {kind: lognormal, median: 40, sigma: 0.5, min: 8, max: 200}
    output_len: 8
sizes:
  cpu:
    num_requests: 12
    populations: {a: {input_len: {max: 60}}}
  fixed:
    populations: {a: {input_len: {kind: fixed, value: 33}}}
"""


def test_sizes_override_fields_and_replace_distributions(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SPEC_YAML)
    base = load_spec(path)
    assert base.num_requests == 20 and base.populations["a"].input_len.max == 200
    cpu = load_spec(path, "cpu")
    assert cpu.num_requests == 12
    assert cpu.populations["a"].input_len.max == 60 and cpu.populations["a"].input_len.median == 40
    assert load_spec(path, "fixed").populations["a"].input_len.value == 33
    with pytest.raises(ValueError, match="no size 'gpu'"):
        load_spec(path, "gpu")
    path.write_text("- 1\n")
    with pytest.raises(ValueError, match="mapping"):
        load_spec(path)


def test_cli_generate_is_byte_reproducible(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SPEC_YAML)
    outs = []
    for name in ("a.jsonl", "b.jsonl"):
        argv = ["workload", "generate", "--spec", str(path), "--size", "cpu",
                "-o", str(tmp_path / name)]
        result = CliRunner().invoke(main, argv)
        assert result.exit_code == 0, result.output
        outs.append((tmp_path / name).read_bytes())
    assert outs[0] == outs[1] and outs[0].count(b"\n") == 12
    bad = CliRunner().invoke(main, ["workload", "generate", "--spec", str(path), "--size", "x",
                                    "-o", str(tmp_path / "c.jsonl")])
    assert bad.exit_code != 0 and "no size 'x'" in bad.output
    data = yaml.safe_load(SPEC_YAML)
    data["populations"]["a"]["turns"] = 2
    path.write_text(yaml.safe_dump(data))
    bad = CliRunner().invoke(main, ["workload", "generate", "--spec", str(path),
                                    "-o", str(tmp_path / "c.jsonl")])
    assert bad.exit_code != 0 and "need endpoint: chat" in bad.output
