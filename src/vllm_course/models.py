"""Offline model cards: a real architecture's ``config.json`` plus a real tokenizer, no weights.

A card is served with ``--load-format dummy`` (random weights: realistic speed, garbage text) and
``--tokenizer-mode mistral``. The tokenizer is Mistral's v3 SentencePiece model that ships inside
the installed ``mistral_common`` package (a vLLM dependency), so nothing is downloaded.

A model name that is not a card is passed to vLLM unchanged (a Hugging Face hub id or a local
directory), for learners with network access and real weights.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

TOKENIZER_FILE = "mistral_instruct_tokenizer_240323.model.v3"

#: bytes per value of the ``torch_dtype`` names the cards use
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

_MISTRAL_COMMON = {
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "rope_theta": 1_000_000.0,
    "vocab_size": 32768,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
    "sliding_window": None,
    "torch_dtype": "bfloat16",
}


@dataclass(frozen=True)
class ModelCard:
    """An offline model card: the shape of a real model, served with dummy weights.

    Attributes:
        name: the card's name, used as ``ServerConfig.model``.
        config: the Hugging Face ``config.json`` contents.
        same_shape_as: the public model whose architecture this copies (for the README/chapters).
    """

    name: str
    config: dict
    same_shape_as: str

    @property
    def dtype_bytes(self) -> int:
        """Bytes per value of the card's ``torch_dtype`` (2 for bfloat16, 4 for float32): the
        weights' and, with ``--kv-cache-dtype auto``, the KV cache's element size."""
        return DTYPE_BYTES[self.config["torch_dtype"]]

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache bytes per token in the card's dtype: 2 (K and V) x layers x KV heads x
        head_dim x :attr:`dtype_bytes` (bytes; vLLM's ``--kv-cache-dtype auto`` stores the KV
        cache in the model's dtype)."""
        c = self.config
        head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
        return 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * head_dim * self.dtype_bytes


CARDS: dict[str, ModelCard] = {
    "tiny-mistral": ModelCard(
        "tiny-mistral",
        {
            **_MISTRAL_COMMON,
            "hidden_size": 256,
            "intermediate_size": 1024,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 64,
            "max_position_embeddings": 8192,
            # float32, and the cpu-tiny profile passes --dtype float32 (vLLM's "auto" would
            # downcast a float32 config to bfloat16): on x86 CPUs without AVX512-BF16 or AMX,
            # which most laptops are, PyTorch's bfloat16 matmul runs ~100x slower than float32
            # (1.1 vs 133 GFLOPS measured on a 2-core AMD EPYC with AVX2), and vLLM's CPU
            # build served this card 4.6x faster in float32 (prefill-bound) and 2.1x (decode).
            "torch_dtype": "float32",
        },
        same_shape_as="none (a scaled-down Mistral for CPU runs)",
    ),
    "mistral-7b-v0.3": ModelCard(
        "mistral-7b-v0.3",
        {
            **_MISTRAL_COMMON,
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "max_position_embeddings": 32768,
        },
        same_shape_as="mistralai/Mistral-7B-Instruct-v0.3",
    ),
}


REPO_ROOT = Path(__file__).resolve().parents[2]
"""The course's repository this package runs from (``src/vllm_course/`` inside it): where
``chapters/``, ``labs/``, ``reference/`` and ``results/`` are. The package is installed editable
from the checkout (``make setup``), so this holds for every learner; one definition for the
notebooks, the CLI and the reference runner."""


def course_home() -> Path:
    """Where the course keeps generated files: ``$VLLM_COURSE_HOME`` or ``~/.cache/vllm-course``."""
    env = os.environ.get("VLLM_COURSE_HOME")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vllm-course"


def tokenizer_source() -> Path:
    """Path of the v3 tokenizer file inside the installed ``mistral_common``.

    Raises:
        FileNotFoundError: if ``mistral_common`` is missing or no longer ships the file.
    """
    try:
        import mistral_common
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise FileNotFoundError("mistral_common is not installed; run `make setup`") from exc
    path = Path(mistral_common.__file__).parent / "data" / TOKENIZER_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: this mistral_common version does not ship the v3 tokenizer"
        )
    return path


def is_card(model: str) -> bool:
    """True if ``model`` names one of the offline cards in :data:`CARDS`."""
    return model in CARDS


def card_dir(name: str) -> Path:
    """Build the card ``name`` if needed and return its directory (``config.json`` + tokenizer).

    Raises:
        KeyError: if ``name`` is not a card; the message lists the cards.
    """
    if name not in CARDS:
        raise KeyError(f"unknown model card {name!r}; cards: {', '.join(sorted(CARDS))}")
    card = CARDS[name]
    path = course_home() / "cards" / name
    config_text = json.dumps(card.config, indent=2, sort_keys=True) + "\n"
    tok = path / "tokenizer.model.v3"
    cfg = path / "config.json"
    if cfg.is_file() and cfg.read_text() == config_text and tok.is_file():
        return path
    path.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tokenizer_source(), tok)
    tmp = cfg.with_suffix(".tmp")
    tmp.write_text(config_text)
    tmp.replace(cfg)
    return path


def resolve(model: str) -> tuple[str, list[str]]:
    """Map a model name to vLLM's ``--model`` value and the extra flags it needs.

    Returns:
        ``(model_path_or_id, extra_argv)``; for a card, the extra flags are
        ``--load-format dummy --tokenizer-mode mistral``.
    """
    if is_card(model):
        return str(card_dir(model)), ["--load-format", "dummy", "--tokenizer-mode", "mistral"]
    return model, []
