"""Flag values are judged by what the installed vLLM's own parser accepts: the kinds probed from it
(vllm_course.server.flag_kinds) are the ones the unit tests record
(tests/unit/data/vllm_0.32.0_flag_kinds.json), and a value
vLLM refuses is refused before a server starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_course.server import ServerError, check_values, flag_kinds

KINDS = json.loads(
    (Path(__file__).parents[1] / "unit" / "data" / "vllm_0.32.0_flag_kinds.json").read_text())


def test_the_recorded_kinds_are_the_installed_parsers() -> None:
    kinds = flag_kinds()
    assert {flag: kinds.get(flag) for flag in KINDS} == KINDS


@pytest.mark.parametrize(("args", "says"), [
    ({"max-num-seqs": "abc"}, "--max-num-seqs must be an integer"),
    ({"dtype": "float33"}, "--dtype must be one of"),
    ({"max-model-len": "lots"}, "--max-model-len must be an integer, a size"),
    ({"kv-cache-memory-bytes": "1.5G"}, "--kv-cache-memory-bytes must be an integer or a size"),
    ({"enforce-eager": "maybe"}, "--enforce-eager must be true or false"),
])
def test_values_the_parser_refuses_are_refused(args: dict, says: str) -> None:
    with pytest.raises(ServerError, match=says):
        check_values(args)


def test_values_the_parser_accepts_pass() -> None:
    check_values({"max-num-seqs": 8, "max-model-len": "4k", "kv-cache-memory-bytes": "1G",
                  "gpu-memory-utilization": 0.5, "dtype": "float32", "enforce-eager": True})
    check_values({"max-model-len": "auto", "max-num-batched-tokens": "25.6k"})
