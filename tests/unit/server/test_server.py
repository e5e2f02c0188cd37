"""``vllm_course.server`` without launching anything: flags, argv, startup log, failure causes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from vllm_course import server
from vllm_course.config import ServerConfig
from vllm_course.env import machine as env
from vllm_course.server import (
    ServerError,
    StartupFacts,
    UnknownFlagError,
    VLLMServer,
    check_flags,
    classify_failure,
    default_max_num_seqs,
    flag_kinds,
    flags,
    known_flags,
    parse_startup_log,
    process,
)

FLAGS = sorted(
    [
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--max-model-len",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--gpu-memory-utilization",
        "--kv-cache-memory-bytes",
        "--enforce-eager",
        "--no-enforce-eager",
        "--block-size",
        "--seed",
        "--help",
        "-h",
    ]
)


# what vLLM 0.32.0's own parser said each flag takes (as flag_kinds() probed it): a test that
# starts a server without launching one reads these instead of the installed vLLM's parser, whose
# answer is cached under the course home only after its first read (a fresh machine has none)
KINDS = json.loads((Path(__file__).parents[1] / "data" / "vllm_0.32.0_flag_kinds.json").read_text())


@pytest.fixture
def recorded_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flags, "known_flags", lambda: sorted({*KINDS, *FLAGS, "--kv-cache-dtype"}))
    monkeypatch.setattr(flags, "flag_kinds", lambda: KINDS)


@pytest.fixture
def fixed_version(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(env, "vllm_version", lambda: "0.32.0")
    return "0.32.0"


# -- check_flags ----------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["--max-num-seq", "8"], ["--max-num-seq=8"]])
def test_unknown_flag_names_the_closest(fixed_version: str, argv: list[str]) -> None:
    with pytest.raises(UnknownFlagError) as info:
        check_flags(argv, flags=FLAGS)
    err = info.value
    assert isinstance(err, ServerError)
    assert err.cause == "bad_flag"
    msg = str(err)
    assert msg.startswith("vLLM 0.32.0 has no flag --max-num-seq; did you mean --max-num-seqs")
    assert msg.endswith("(nothing was launched)")
    assert "--max-num-seqs" in msg.split("did you mean", 1)[1].split(" or ")[0]


def test_unknown_flag_far_from_everything_has_no_hint(fixed_version: str) -> None:
    with pytest.raises(UnknownFlagError) as info:
        check_flags(["--zzzzzz"], flags=FLAGS)
    assert str(info.value) == "vLLM 0.32.0 has no flag --zzzzzz (nothing was launched)"


def test_first_bad_flag_is_reported(fixed_version: str) -> None:
    with pytest.raises(UnknownFlagError, match="no flag --blok-size"):
        check_flags(["--seed", "1", "--blok-size", "16", "--enforce-eagre"], flags=FLAGS)


def test_known_flags_pass_in_every_form() -> None:
    check_flags(
        [
            "--max-num-seqs",
            "8",
            "--max-num-batched-tokens=4096",
            "--no-enable-prefix-caching",
            "--enforce-eager",
            "--gpu-memory-utilization",
            "0.9",
            "--seed",
            "-1",  # a negative value is not a flag
            "positional",
            "-h",
        ],
        flags=FLAGS,
    )
    check_flags([], flags=FLAGS)


def test_no_form_needs_to_be_known(fixed_version: str) -> None:
    with pytest.raises(UnknownFlagError, match="no flag --no-max-num-seqs"):
        check_flags(["--no-max-num-seqs"], flags=FLAGS)


# -- known_flags cache ----------------------------------------------------------------------


def test_known_flags_reads_the_cache_without_a_subprocess(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fixed_version: str
) -> None:
    monkeypatch.setenv("VLLM_COURSE_HOME", str(tmp_path))
    cache = tmp_path / "flags" / "0.32.0.json"
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps(["--max-num-seqs", "--seed"]))

    def no_subprocess(*args, **kwargs):
        raise AssertionError("known_flags must not start a subprocess when cached")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    assert known_flags() == ["--max-num-seqs", "--seed"]
    # check_flags without an explicit list uses the same cache
    check_flags(["--seed", "3"])
    with pytest.raises(UnknownFlagError, match="did you mean --max-num-seqs"):
        check_flags(["--max-num-seq", "3"])


def test_known_flags_fills_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fixed_version: str
) -> None:
    monkeypatch.setenv("VLLM_COURSE_HOME", str(tmp_path))
    calls: list[list[str]] = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(
            cmd, 0, stdout='noise\nFLAGS=["--a", "--b"]\nKINDS={"--a": {"kind": "int"}}\n',
            stderr="warnings"
        )

    monkeypatch.setattr(subprocess, "run", fake_run)
    assert known_flags() == ["--a", "--b"]
    assert len(calls) == 1
    assert json.loads((tmp_path / "flags" / "0.32.0.json").read_text()) == ["--a", "--b"]
    assert known_flags() == ["--a", "--b"]
    assert flag_kinds() == {"--a": {"kind": "int"}}
    assert len(calls) == 1  # later calls served from the cache, the kinds too
    assert sorted((tmp_path / "flags").iterdir()) == [tmp_path / "flags" / "0.32.0.json",
                                                       tmp_path / "flags" / "0.32.0.kinds.json"]


def test_known_flags_subprocess_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fixed_version: str
) -> None:
    monkeypatch.setenv("VLLM_COURSE_HOME", str(tmp_path))
    monkeypatch.setattr(
        subprocess,
        "run",
        lambda cmd, **kw: subprocess.CompletedProcess(
            cmd, 1, stdout="", stderr="ImportError: no module named vllm.entrypoints"
        ),
    )
    with pytest.raises(ServerError, match="could not read vLLM 0.32.0's flags") as info:
        known_flags()
    assert info.value.log_tail == "ImportError: no module named vllm.entrypoints"
    assert not (tmp_path / "flags" / "0.32.0.json").exists()


def test_known_flags_without_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(env, "vllm_version", lambda: None)
    with pytest.raises(ServerError, match="vLLM is not installed") as info:
        known_flags()
    assert info.value.cause == "not_installed"


# -- ServerConfig.argv ----------------------------------------------------------------------


def test_server_config_argv() -> None:
    cfg = ServerConfig(
        args={
            "max_num_seqs": 64,
            "enable-prefix-caching": False,
            "enforce-eager": True,
            "seed": None,
            "--gpu-memory-utilization": 0.9,
            "served-model-name": "x",
            "block-size": 0,
        }
    )
    assert list(cfg.args) == [
        "block-size",
        "enable-prefix-caching",
        "enforce-eager",
        "gpu-memory-utilization",
        "max-num-seqs",
        "seed",
        "served-model-name",
    ]
    assert cfg.argv() == [
        "--block-size",
        "0",
        "--no-enable-prefix-caching",
        "--enforce-eager",
        "--gpu-memory-utilization",
        "0.9",
        "--max-num-seqs",
        "64",
        "--served-model-name",
        "x",
    ]


def test_server_config_values_keep_their_types() -> None:
    cfg = ServerConfig(args={"a": 1, "b": 1.5, "c": "1", "d": True})
    assert cfg.args == {"a": 1, "b": 1.5, "c": "1", "d": True}
    assert type(cfg.args["a"]) is int and type(cfg.args["d"]) is bool
    assert cfg.argv() == ["--a", "1", "--b", "1.5", "--c", "1", "--d"]


@pytest.mark.parametrize(
    "args",
    [
        {"max_num_seqs": 1, "max-num-seqs": 2},
        {"--seed": 1, "seed": 2},
    ],
)
def test_server_config_duplicate_after_normalisation(args: dict) -> None:
    with pytest.raises(ValidationError, match="is given twice"):
        ServerConfig(args=args)


def test_server_config_key_ignores_startup_timeout() -> None:
    a = ServerConfig(args={"max_num_seqs": 4}, startup_timeout_s=10)
    b = ServerConfig(args={"max-num-seqs": 4}, startup_timeout_s=99)
    c = ServerConfig(args={"max-num-seqs": 5})
    assert a.key() == b.key()
    assert a.key() != c.key()


def test_server_config_rejects_unknown_fields() -> None:
    with pytest.raises(ValidationError, match="flags"):
        ServerConfig(flags={"x": 1})


def test_effective_args_profile_then_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(env, "vllm_build", lambda: "cuda")
    srv = VLLMServer(
        ServerConfig(args={"max_model_len": 2048, "max-num-seqs": 8}),
        log_path=Path("unused.log"),
        profile_args={"kv-cache-memory-bytes": 1 << 28, "max-model-len": 4096},
    )
    assert srv.effective_args() == {
        "kv-cache-memory-bytes": 1 << 28,
        "max-model-len": 2048,
        "max-num-seqs": 8,
    }
    assert not srv.alive()


def test_effective_args_cpu_default_kv_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(env, "vllm_build", lambda: "cpu")
    srv = VLLMServer(ServerConfig(), log_path=Path("unused.log"))
    assert srv.effective_args() == {"kv-cache-memory-bytes": 1 << 30}


def test_full_argv_for_a_card(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_COURSE_HOME", str(tmp_path))
    monkeypatch.setattr(env, "vllm_build", lambda: "cuda")
    srv = VLLMServer(ServerConfig(args={"max-num-seqs": 8}, port=8123), log_path=tmp_path / "l")
    argv = srv.argv()
    card = tmp_path / "cards" / "tiny-mistral"
    assert argv[1:] == [
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(card),
        "--served-model-name",
        "tiny-mistral",
        "--load-format",
        "dummy",
        "--tokenizer-mode",
        "mistral",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--max-num-seqs",
        "8",
    ]
    assert (card / "config.json").is_file() and (card / "tokenizer.model.v3").is_file()
    assert srv.base_url == "http://127.0.0.1:8123"


# -- parse_startup_log ----------------------------------------------------------------------

CPU_LOG = """\
INFO 11-29 10:24:31 [api_server.py:1880] vLLM API server version 0.32.0
INFO 11-29 10:24:31 [utils.py:253] non-default args: {'model': '/x/cards/tiny-mistral', 'load_format': 'dummy'}
INFO 11-29 10:24:38 [model.py:631] Resolved architecture: MistralForCausalLM
(EngineCore pid=2109) INFO 11-29 10:24:40 [core.py:134] Initializing a V1 LLM engine (v0.32.0) with config: model='/x/cards/tiny-mistral', speculative_config=None, tokenizer='/x/cards/tiny-mistral', skip_tokenizer_init=False, dtype=torch.bfloat16, max_seq_len=2048, device_config=cpu
(EngineCore pid=2109) INFO 11-29 10:25:14 [cpu_worker.py:95] Memory profiling takes 0.12 seconds
(EngineCore pid=2109) INFO 11-29 10:25:15 [kv_cache_utils.py:2327] CPU KV cache size: 131,072 tokens, Maximum concurrency for 2,048 tokens per request: 64.00x
(EngineCore pid=2109) INFO 11-29 10:25:15 [core.py:403] init engine (profile, create kv cache, warmup model) took 35.42 s
INFO 11-29 10:25:17 [api_server.py:1950] Starting vLLM API server 0 on http://127.0.0.1:8123
INFO:     Application startup complete.
"""  # noqa: E501

GPU_LOG = """\
INFO 03-02 08:00:01 [api_server.py:1880] vLLM API server version 0.32.0
(EngineCore_DP0 pid=77) INFO 03-02 08:00:09 [core.py:134] Initializing a V1 LLM engine (v0.32.0) with config: model='mistralai/Mistral-7B-Instruct-v0.3'
(EngineCore_DP0 pid=77) INFO 03-02 08:00:12 [cuda.py:507] Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN'].
(EngineCore_DP0 pid=77) INFO 03-02 08:01:00 [kv_cache_utils.py:2327] GPU KV cache size: 1,234,567 tokens, Maximum concurrency for 32,768 tokens per request: 37.68x
(EngineCore_DP0 pid=77) INFO 03-02 08:01:31 [core.py:396] init engine (profile, create kv cache, warmup model) took 88.10 s (compilation: 41.20 s)
"""  # noqa: E501


def test_parse_cpu_startup_log() -> None:
    facts = parse_startup_log(CPU_LOG)
    assert facts == StartupFacts(
        vllm_version="0.32.0",
        kv_cache_tokens=131072,
        max_concurrency=64.0,
        max_concurrency_at_len=2048,
        attention_backend=None,
        engine_init_s=35.42,
        ready_s=None,
        max_model_len=2048,
    )


def test_parse_gpu_startup_log() -> None:
    facts = parse_startup_log(GPU_LOG)
    assert facts.vllm_version == "0.32.0"
    assert facts.kv_cache_tokens == 1234567
    assert facts.max_concurrency == 37.68
    assert facts.max_concurrency_at_len == 32768
    assert facts.attention_backend == "FLASH_ATTN"
    assert facts.engine_init_s == 88.10


@pytest.mark.parametrize(
    ("line", "backend"),
    [
        ("INFO [cuda.py:446] Using AttentionBackendEnum.FLASH_ATTN backend.", "FLASH_ATTN"),
        ("INFO [cuda.py:446] Using FLASHINFER backend.", "FLASHINFER"),
        (
            "INFO [cuda.py:507] Using TRITON_ATTN attention backend out of potential backends: [].",
            "TRITON_ATTN",
        ),
        ("INFO [cpu.py:175] Using CPU_MLA backend.", "CPU_MLA"),
        ("INFO [cuda.py:300] Using Flash Attention backend on V1 engine.", None),
    ],
)
def test_parse_attention_backend_variants(line: str, backend: str | None) -> None:
    assert parse_startup_log(line).attention_backend == backend


def test_parse_separate_kv_and_concurrency_lines_and_seconds() -> None:
    text = (
        "INFO [kv_cache_utils.py:1087] GPU KV cache size: 9,000 tokens\n"
        "INFO [kv_cache_utils.py:1091] Maximum concurrency for 4,096 tokens per request: "
        "1,234.50x\n"
        "INFO [core.py:80] init engine (profile, create kv cache, warmup model) "
        "took 2.50 seconds\n"
    )
    facts = parse_startup_log(text)
    assert facts.kv_cache_tokens == 9000
    assert facts.max_concurrency_at_len == 4096
    assert facts.max_concurrency == 1234.5
    assert facts.engine_init_s == 2.5


def test_parse_version_from_banner_only() -> None:
    assert parse_startup_log("INFO vLLM API server version 0.11.2rc1\n").vllm_version == "0.11.2rc1"


def test_parse_empty_log() -> None:
    assert parse_startup_log("") == StartupFacts()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # vLLM 0.26 (H200 reference) and 0.32 (CPU) log both lines; config/model.py logs the first
        (
            "(APIServer pid=1) INFO 11-29 11:13:25 [model.py:1711] Using max model len 8192\n"
            "(EngineCore pid=885) INFO 11-29 11:14:33 [core.py:116] Initializing a V1 LLM engine "
            "(v0.26.0) with config: model='/x/mistral-7b-v0.3', dtype=torch.bfloat16, "
            "max_seq_len=8192, download_dir=None\n",
            8192,
        ),
        ("INFO 11-29 11:25:09 [model.py:2152] Using max model len 4096\n", 4096),
        (
            "INFO [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='m', "
            "max_seq_len=2048, device_config=cpu\n",
            2048,
        ),
        # the "Using" line wins; a max_seq_len outside the engine config line is not the limit
        ("Using max model len 1024\nLLM engine (v0.32.0) with config: max_seq_len=2048\n", 1024),
        ("INFO [flydsl.py:804] TGPP=4 max_bps=2 block_size=16 max_seq_len=999\n", None),
    ],
)
def test_parse_max_model_len(text: str, expected: int | None) -> None:
    assert parse_startup_log(text).max_model_len == expected


# lines of a real vLLM 0.32 CPU server log (tiny-mistral, --max-num-batched-tokens 64); the engine
# config line is cut after max_seq_len
PROBE_LOG = """\
(APIServer pid=8704) INFO 11-29 13:07:12 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0
(APIServer pid=8704) INFO 11-29 13:07:12 [api_utils.py:286] non-default args: {'host': '127.0.0.1', 'port': 39019, 'model': '/root/.cache/vllm-course/cards/tiny-mistral', 'tokenizer_mode': 'mistral', 'max_model_len': 4096, 'served_model_name': ['tiny-mistral'], 'load_format': 'dummy', 'kv_cache_memory_bytes': 1073741824, 'max_num_batched_tokens': 64}
(APIServer pid=8704) INFO 11-29 13:07:12 [model.py:733] Resolved architecture: MistralForCausalLM
(APIServer pid=8704) INFO 11-29 13:07:12 [model.py:2152] Using max model len 4096
(APIServer pid=8704) INFO 11-29 13:07:12 [scheduler.py:307] Chunked prefill is enabled with max_num_batched_tokens=64.
(EngineCore pid=8716) INFO 11-29 13:07:19 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='/root/.cache/vllm-course/cards/tiny-mistral', speculative_config=None, tokenizer='/root/.cache/vllm-course/cards/tiny-mistral', skip_tokenizer_init=False, tokenizer_mode=mistral, revision=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=4096, download_dir=None,
(EngineCore pid=8716) INFO 11-29 13:07:53 [kv_cache_utils.py:2327] CPU KV cache size: 524,288 tokens, Maximum concurrency for 4,096 tokens per request: 128.00x
(EngineCore pid=8716) INFO 11-29 13:07:53 [core.py:402] init engine (profile, create kv cache, warmup model) took 25.71 s
"""  # noqa: E501


def test_parse_real_cpu_log_with_a_step_budget() -> None:
    assert parse_startup_log(PROBE_LOG) == StartupFacts(
        vllm_version="0.32.0",
        kv_cache_tokens=524288,
        max_concurrency=128.0,
        max_concurrency_at_len=4096,
        engine_init_s=25.71,
        max_model_len=4096,
        max_num_batched_tokens=64,
        # vLLM does not log its default max_num_seqs: the server fills it in after start-up
        max_num_seqs=None,
        max_num_seqs_source=None,
    )


NON_DEFAULT = "INFO 11-29 13:07:12 [api_utils.py:286] non-default args: {{'model': 'm', {}}}\n"
CHUNKED = "INFO [scheduler.py:307] Chunked prefill is enabled with max_num_batched_tokens={}.\n"


@pytest.mark.parametrize(
    ("text", "budget", "seqs"),
    [
        (CHUNKED.format(2048), 2048, None),
        (NON_DEFAULT.format("'max_num_batched_tokens': 512"), 512, None),
        (NON_DEFAULT.format("'max_num_seqs': 8"), None, 8),
        (NON_DEFAULT.format("'max_num_seqs': 16, 'max_num_batched_tokens': 256"), 256, 16),
        # the value the scheduler logs wins over the flag
        (NON_DEFAULT.format("'max_num_batched_tokens': 100") + CHUNKED.format(4096), 4096, None),
        # only the non-default args say what was asked for: a max_num_seqs elsewhere is not read
        ("INFO [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
         "max_num_seqs=256\n", None, None),
        (NON_DEFAULT.format("'max_num_seqs': None"), None, None),
    ],
)
def test_parse_step_budget_and_batch_size(text: str, budget: int | None, seqs: int | None) -> None:
    facts = parse_startup_log(text)
    assert facts.max_num_batched_tokens == budget
    assert facts.max_num_seqs == seqs
    assert facts.max_num_seqs_source == ("flag" if seqs is not None else None)


GiB = 2**30
MiB = 2**20


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("cpu",), 128),
        (("cpu", None, "", "throughput"), 256),
        (("cpu", None, "", None, 64), 64),   # capped at the step budget (the probe server)
        (("cpu", None, "", "throughput", 4096), 256),
        (("gpu", 143771 * MiB, "NVIDIA H200"), 1024),
        (("gpu", 81559 * MiB, "NVIDIA H100 80GB HBM3"), 1024),
        (("gpu", 81920 * MiB, "NVIDIA A100-SXM4-80GB"), 256),
        (("gpu", 23034 * MiB, "NVIDIA L4"), 256),
        (("gpu", None, "NVIDIA H200"), 256),   # memory unknown counts as small
        (("gpu", 70 * GiB, "x"), 1024),
        (("gpu", 70 * GiB - 1, "x"), 256),
        (("gpu", 143771 * MiB, "NVIDIA H200", "throughput"), 2048),
        (("gpu", 143771 * MiB, "NVIDIA H200", "throughput", 512), 512),
        (("gpu", 23034 * MiB, "NVIDIA L4", "latency"), 256),
    ],
)
def test_default_max_num_seqs(args: tuple, expected: int) -> None:
    assert default_max_num_seqs(*args) == expected


def test_this_machine_is_what_the_defaults_read(monkeypatch) -> None:
    """Chapter 12's default budget and the server facts' fallback both come from here."""
    monkeypatch.setattr(env, "vllm_build", lambda: "cpu")
    assert server.this_machine() == ("cpu", None, "")
    monkeypatch.setattr(env, "vllm_build", lambda: "cuda")
    monkeypatch.setattr(env, "gpu_info", lambda: (env.GPUInfo("NVIDIA H100 80GB HBM3", 81559),))
    assert server.this_machine() == ("gpu", 81559 * 2**20, "NVIDIA H100 80GB HBM3")
    assert server.default_max_num_batched_tokens(*server.this_machine()) == 8192
    monkeypatch.setattr(env, "gpu_info", lambda: ())
    assert server.default_max_num_batched_tokens(*server.this_machine()) == 2048


def test_default_max_num_seqs_by_keyword() -> None:
    assert default_max_num_seqs(
        "gpu", gpu_memory_bytes=141 * GiB, gpu_name="NVIDIA H200",
        performance_mode=None, max_num_batched_tokens=8192,
    ) == 1024


# -- classify_failure -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("log", "cause"),
    [
        (
            'Traceback (most recent call last):\n  File "uvicorn/server.py", line 161\n'
            "OSError: [Errno 98] Address already in use",
            "port_in_use",
        ),
        (
            "ERROR [core.py:700] EngineCore failed to start.\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
            "GPU 0 has a total capacity of 139.81 GiB of which 1.06 GiB is free.",
            "out_of_memory",
        ),
        (
            "(EngineCore pid=12) ERROR [cpu_worker.py:120] RuntimeError: "
            "Available memory on node 0 "
            "(8.1 GiB) is less than desired CPU memory utilization (0.9, 14.4 GiB).",
            "out_of_memory",
        ),
        (
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine.",
            "out_of_memory",
        ),
        (
            "OSError: nonexistent/model is not a local folder and is not a valid model identifier "
            "listed on 'https://huggingface.co/models'",
            "model_not_found",
        ),
        (
            "huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. "
            "Repository Not Found "
            "for url: https://huggingface.co/api/models/nope/nope",
            "model_not_found",
        ),
        (
            "ValueError: To serve at least one request with the models's max seq len (32768), "
            "4.00 GiB "
            "KV cache is needed, which is larger than the available KV cache memory (1.00 GiB).",
            "max_model_len",
        ),
        (
            "ValueError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': "
            "'/a/b/c'. Use `repo_type` argument if needed.",
            "model_not_found",
        ),
        (
            "huggingface_hub.errors.LocalEntryNotFoundError: "
            "Cannot find the requested files in the "
            "disk cache and outgoing traffic has been disabled.",
            "model_not_found",
        ),
        ("huggingface_hub.errors.GatedRepoError: 403 Client Error.", "model_not_found"),
        ("api_server.py: error: unrecognized arguments: --max-num-seq 8", "bad_flag"),
        ("api_server.py: error: argument --dtype: invalid choice: 'fp7'", "bad_flag"),
        ("RuntimeError: Engine core initialization failed. See root cause above.", "unknown"),
        ("", "unknown"),
    ],
)
def test_classify_failure(log: str, cause: str) -> None:
    assert classify_failure(log) == cause


def test_start_with_a_missing_model_path_launches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorded_flags: None
) -> None:
    monkeypatch.setattr(env, "vllm_build", lambda: "cuda")

    def no_launch(*args, **kwargs):
        raise AssertionError("nothing may be launched")

    monkeypatch.setattr(subprocess, "Popen", no_launch)
    missing = tmp_path / "no-such-model"
    srv = VLLMServer(
        ServerConfig(model=str(missing), args={"max-num-seqs": 2}), log_path=tmp_path / "s.log"
    )
    with pytest.raises(ServerError) as info:
        srv.start()
    assert info.value.cause == "model_not_found"
    assert str(info.value).startswith(f"model path {missing} does not exist (nothing was launched)")
    assert srv.proc is None and srv.port is None
    assert not (tmp_path / "s.log").exists()


def test_start_checks_flags_before_anything_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fixed_version: str
) -> None:
    monkeypatch.setattr(env, "vllm_build", lambda: "cuda")
    monkeypatch.setattr(flags, "known_flags", lambda: FLAGS)
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("launched"))
    srv = VLLMServer(ServerConfig(args={"max_num_seq": 2}), log_path=tmp_path / "s.log")
    with pytest.raises(UnknownFlagError, match="did you mean --max-num-seqs"):
        srv.start()
    assert srv.proc is None


def test_server_error_carries_the_log_tail(tmp_path: Path) -> None:
    err = ServerError(
        "it died", cause="crashed", log_tail="line 1\nline 2", log_path=tmp_path / "s.log"
    )
    assert str(err) == f"it died\n--- last lines of {tmp_path / 's.log'} ---\nline 1\nline 2"
    assert err.cause == "crashed"
    assert str(ServerError("plain")) == "plain"
    assert ServerError("plain").cause == "unknown"


def test_tail(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_text("".join(f"line {i}\n" for i in range(100)))
    assert server.tail(path, 3) == "line 97\nline 98\nline 99"
    assert server.tail(tmp_path / "missing") == ""


def test_free_port_is_bindable() -> None:
    import socket

    port = server.free_port()
    assert 0 < port < 65536
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))


# -- POST /reset_prefix_cache ---------------------------------------------------------------

def _reset_with(monkeypatch, answers, wait_s=2.0):
    """Run reset_prefix_cache against a transport that gives ``answers`` in turn (a status
    and body, or an exception); returns how many requests were made."""
    import asyncio

    import httpx

    calls = []

    def handler(request):
        calls.append(request.url.path)
        answer = answers[min(len(calls), len(answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        status, body = answer
        return httpx.Response(status, content=body)

    real = httpx.AsyncClient
    monkeypatch.setattr(process.httpx, "AsyncClient",
                        lambda **kw: real(transport=httpx.MockTransport(handler), **kw))
    monkeypatch.setattr("asyncio.sleep", _no_sleep)
    asyncio.run(process.reset_prefix_cache("http://127.0.0.1:9", wait_s=wait_s))
    return len(calls)


async def _no_sleep(_s):
    return None


@pytest.mark.parametrize("answers, calls", [
    ([(200, b'{"success": true}')], 1),
    ([(200, b'{"success": false}'), (200, b'{"success": true}')], 2),   # vLLM 0.32: held blocks
    ([(409, b"busy"), (200, b"")], 2),                                  # other versions
    ([(503, b""), (200, b"null")], 2),
])
def test_reset_retries_a_refusal_until_it_succeeds(monkeypatch, answers, calls):
    assert _reset_with(monkeypatch, answers) == calls


@pytest.mark.parametrize("answers, message", [
    ([(404, b"")], "has no /reset_prefix_cache: it was started with VLLM_SERVER_DEV_MODE=0"),
    ([(400, b"bad")], "answered 400: bad"),
    ([(200, b'{"success": false}')], "refused to reset its prefix cache for 0 s"),
])
def test_reset_failures_are_server_errors(monkeypatch, answers, message):
    with pytest.raises(ServerError, match=re.escape(message)):
        _reset_with(monkeypatch, answers, wait_s=0.0)


def test_reset_on_an_unreachable_server_is_a_server_error(monkeypatch):
    import httpx

    with pytest.raises(ServerError, match="POST /reset_prefix_cache failed: ConnectError"):
        _reset_with(monkeypatch, [httpx.ConnectError("refused")])


@pytest.mark.parametrize(
    ("cpu", "ok"),
    [(["avx2"], False), (["asimd"], False), ([], False), (["avx2", "avx512f"], True),
     (["avx2", "amx_bf16"], True)],
)
def test_supports_cpu_fp8_kv(cpu: list[str], ok: bool) -> None:
    assert env.supports_cpu_fp8_kv(cpu) is ok


def test_check_cpu_kv_dtype_refuses_what_the_cpu_build_stops_on() -> None:
    check = flags.check_cpu_kv_dtype
    check({}, ["avx2"])                                   # auto: the model's dtype
    check({"kv-cache-dtype": "auto", "dtype": "float32"}, ["avx2"])
    check({"kv-cache-dtype": "fp8"}, ["avx2", "avx512f"])
    check({"kv-cache-dtype": "fp8_e5m2", "dtype": "float32"}, ["amx_bf16"])
    check({"kv-cache-dtype": "bfloat16", "dtype": "bfloat16"}, ["avx2"])
    with pytest.raises(ServerError, match=r"^--kv-cache-dtype fp8 needs a CPU with AVX-512 or AMX "
                                          r"in vLLM's CPU build, and this one has avx2 ") as info:
        check({"kv-cache-dtype": "fp8"}, ["avx2"])
    assert info.value.cause == "bad_value"
    with pytest.raises(ServerError, match="this one has neither"):
        check({"kv-cache-dtype": "fp8_e4m3"}, [])
    for dtype, kv in (("float32", "bfloat16"), ("float", "float16"), ("float32", "half")):
        with pytest.raises(ServerError, match=rf"^--kv-cache-dtype {kv} under --dtype {dtype} "
                                              "stops vLLM's CPU engine") as info:
            check({"kv-cache-dtype": kv, "dtype": dtype}, ["avx2", "avx512f"])
        assert info.value.cause == "bad_value"


def test_start_refuses_an_fp8_kv_cache_on_an_avx2_cpu_before_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorded_flags: None
) -> None:
    monkeypatch.setattr(env, "vllm_build", lambda: "cpu")
    monkeypatch.setattr(env, "cpu_flags", lambda: ["avx2"])
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("launched"))
    srv = VLLMServer(ServerConfig(args={"kv-cache-dtype": "fp8"}), log_path=tmp_path / "s.log")
    with pytest.raises(ServerError, match="needs a CPU with AVX-512 or AMX") as info:
        srv.start()
    assert info.value.cause == "bad_value" and srv.proc is None
    with pytest.raises(ServerError, match="needs a CPU with AVX-512 or AMX"):
        server.check_config(ServerConfig(args={"kv-cache-dtype": "fp8"}), {})
    monkeypatch.setattr(env, "vllm_build", lambda: "cuda")   # a GPU build: the flag is fine
    server.check_config(ServerConfig(args={"kv-cache-dtype": "fp8"}), {})


FAKE_VLLM = r"""
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
print("(EngineCore pid=1) INFO [kv_cache_utils.py:1] CPU KV cache size: 1,024 tokens", flush=True)
print("(EngineCore pid=1) INFO [core.py:1] init engine (profile, create kv cache, warmup model) "
      "took 1.50 s", flush=True)

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"")

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def test_each_start_writes_its_log_anew_and_reads_its_own_facts(tmp_path, monkeypatch):
    # a notebook run again passes the same log path: its facts must be this start's
    log = tmp_path / "restart-server.log"
    log.write_text("init engine (profile, create kv cache, warmup model) took 99.00 s\n"
                   "CPU KV cache size: 5 tokens\n")
    monkeypatch.setattr(server.process, "check_args", lambda args: None)
    monkeypatch.setattr(server.VLLMServer, "argv",
                        lambda self: [sys.executable, "-c", FAKE_VLLM, "--port", str(self.port)])
    with server.VLLMServer(ServerConfig(startup_timeout_s=30), log_path=log) as srv:
        assert srv.facts.engine_init_s == 1.5 and srv.facts.kv_cache_tokens == 1024
    assert "99.00" not in log.read_text() and "took 1.50 s" in log.read_text()
