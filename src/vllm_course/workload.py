"""Request sets: prompts with exact token lengths, read from JSONL or generated from a seed.

Prompt length means what the server reports as ``usage.prompt_tokens`` for the endpoint used:
for ``/v1/completions`` the BOS token is included, for ``/v1/chat/completions`` the chat template
tokens too. Prompts are readable text (whole words from the tokenizer's vocabulary), tokenized
and trimmed with the model's own tokenizer until the count is exact.

JSONL line format (one request per line)::

    {"prompt": "some text", "output_len": 64, "prompt_len": 256}
    {"prompt_token_ids": [1, 3, 5], "output_len": 64}        # /v1/completions only

``prompt_len`` is optional: the length the prompt was built for, checked against the server's
count after a run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from vllm_course import models
from vllm_course.config import Endpoint, FileWorkload, SyntheticWorkload

Message = tuple[str, str]  # (role, content): "user", "assistant" or "system"


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a workload.

    Attributes:
        prompt: text, token ids (``/v1/completions`` only), or a conversation as
            ``((role, content), ...)`` ending with a user message (``/v1/chat/completions`` only;
            multi-turn chats whose history grows turn by turn).
        output_len: tokens to generate (sent as ``max_tokens`` with ``ignore_eos``).
        prompt_len: expected ``usage.prompt_tokens``, or ``None`` if not known.
        priority: the request's ``priority`` field (lower is served first under
            ``--scheduling-policy priority``); ``None`` leaves it out of the request body.
        timestamp_s: arrival time from a trace, in seconds from the trace's start; ``None`` for
            request sets without timing.
    """

    prompt: str | tuple[int, ...] | tuple[Message, ...]
    output_len: int
    prompt_len: int | None = None
    priority: int | None = None
    timestamp_s: float | None = None

    @property
    def is_conversation(self) -> bool:
        """True if ``prompt`` is a list of (role, content) messages."""
        return isinstance(self.prompt, tuple) and bool(self.prompt) and isinstance(self.prompt[0], tuple)

    def to_json(self) -> str:
        """One JSONL line (keys sorted, no trailing newline)."""
        data: dict = {"output_len": self.output_len}
        if isinstance(self.prompt, str):
            data["prompt"] = self.prompt
        elif self.is_conversation:
            data["messages"] = [{"role": r, "content": c} for r, c in self.prompt]
        else:
            data["prompt_token_ids"] = list(self.prompt)
        for key in ("prompt_len", "priority", "timestamp_s"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        return json.dumps(data, sort_keys=True, ensure_ascii=False)


class WorkloadError(ValueError):
    """A request set could not be read or built; the message names the file and line."""


@contextmanager
def _quiet_hub() -> Iterator[None]:
    """Silence the Hugging Face libraries' retry warnings while a tokenizer loads: a failure is
    reported once, as a WorkloadError, instead of after a page of retries."""
    import logging

    loggers = [logging.getLogger(name) for name in ("huggingface_hub", "transformers")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


class PromptTokenizer:
    """Counts prompt tokens exactly as the server will, for one model.

    Offline cards use Mistral's v3 tokenizer through ``mistral_common`` (what vLLM's
    ``--tokenizer-mode mistral`` uses); other models use ``transformers.AutoTokenizer``.

    Raises:
        WorkloadError: for a model that is neither an offline card nor a tokenizer that
            ``transformers`` can load (a mistyped hub id, or a hub id without network).
    """

    def __init__(self, model: str):
        self.model = model
        self._mistral = None
        self._hf = None
        if models.is_card(model):
            from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

            self._mistral = MistralTokenizer.from_file(str(models.tokenizer_source()))
        else:
            from transformers import AutoTokenizer

            try:
                with _quiet_hub():
                    self._hf = AutoTokenizer.from_pretrained(model)
            except (OSError, ValueError) as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise WorkloadError(
                    f"model {model!r} is not an offline card ({', '.join(models.CARDS)}) and "
                    f"transformers could not load its tokenizer: {first}") from None

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` alone, without BOS or any template tokens."""
        if self._mistral is not None:
            return self._mistral.instruct_tokenizer.tokenizer.encode(text, bos=False, eos=False)
        return self._hf.encode(text, add_special_tokens=False)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids."""
        if self._mistral is not None:
            return self._mistral.instruct_tokenizer.tokenizer.decode(list(ids))
        return self._hf.decode(list(ids))

    def prompt_len(self, prompt: str | tuple[Message, ...], endpoint: Endpoint) -> int:
        """``usage.prompt_tokens`` the server will report for ``prompt`` on ``endpoint``.

        ``prompt`` is text, or (chat only) a conversation of ``(role, content)`` messages.
        """
        return len(self.prompt_ids(prompt, endpoint))

    def prompt_ids(
        self, prompt: str | tuple[int, ...] | tuple[Message, ...], endpoint: Endpoint
    ) -> list[int]:
        """The prompt token ids the server will compute for ``prompt`` on ``endpoint``.

        Completions: BOS + the text's tokens (token-id prompts are sent as they are). Chat: the
        model's chat template applied to the conversation (text alone is one user message).

        Raises:
            WorkloadError: for a conversation on the completions endpoint, which takes text.
        """
        if isinstance(prompt, tuple) and prompt and isinstance(prompt[0], int):
            return list(prompt)
        if isinstance(prompt, tuple) and endpoint == "completions":
            raise WorkloadError("a prompt of chat messages goes to the chat endpoint, not "
                                "completions: use --endpoint chat (or endpoint: chat)")
        messages = prompt if isinstance(prompt, tuple) else (("user", prompt),)
        if self._mistral is not None:
            if endpoint == "completions":
                tok = self._mistral.instruct_tokenizer.tokenizer
                return tok.encode(prompt, bos=True, eos=False)
            from mistral_common.protocol.instruct.messages import (
                AssistantMessage,
                SystemMessage,
                UserMessage,
            )
            from mistral_common.protocol.instruct.request import ChatCompletionRequest

            kinds = {"user": UserMessage, "assistant": AssistantMessage, "system": SystemMessage}
            req = ChatCompletionRequest(messages=[kinds[r](content=c) for r, c in messages])
            return list(self._mistral.encode_chat_completion(req).tokens)
        if endpoint == "completions":
            return list(self._hf.encode(prompt, add_special_tokens=True))
        ids = self._hf.apply_chat_template(
            [{"role": r, "content": c} for r, c in messages], add_generation_prompt=True,
            tokenize=True,
        )
        return list(ids)

    @cached_property
    def words(self) -> list[str]:
        """Whole-word vocabulary pieces (ASCII letters, 3+ long), sorted: the prompt word source."""
        if self._mistral is not None:
            tok = self._mistral.instruct_tokenizer.tokenizer
            pieces = [tok.id_to_piece(i) for i in range(tok.n_words)]
            marker = "\u2581"
        else:
            pieces = list(self._hf.get_vocab())
            marker = "\u0120" if any(p.startswith("\u0120") for p in pieces[:5000]) else "\u2581"
        out = {
            p[1:]
            for p in pieces
            if p.startswith(marker)
            and len(p) >= 4
            and p[1:].isascii()
            and p[1:].isalpha()
            and p[1:].islower()
        }
        return sorted(out)

    def make_prompt(self, length: int, endpoint: Endpoint, rng: np.random.Generator) -> str:
        """Readable text whose ``prompt_len(text, endpoint)`` is exactly ``length`` tokens.

        Raises:
            WorkloadError: if ``length`` is below the endpoint's fixed overhead (BOS, template)
                plus one token, or no exact trim was found.
        """
        overhead = self.prompt_len("hello", endpoint) - len(self.encode("hello"))
        body = length - overhead
        if body < 1:
            raise WorkloadError(
                f"a {endpoint} prompt needs at least {overhead + 1} tokens ({overhead} for BOS/"
                f"template); {length} was asked for"
            )
        vocab = self.words
        words = [vocab[i] for i in rng.integers(0, len(vocab), size=body + 8)]
        ids = self.encode(" ".join(words))
        for n in (body, body - 1, body + 1, body - 2, body + 2):
            if n < 1:
                continue
            text = self.decode(ids[:n]).strip()
            if self.prompt_len(text, endpoint) == length:
                return text
            # a trim can merge into a different split; top up one word at a time
            for extra in range(3):
                candidate = f"{text} {vocab[(n + extra) % len(vocab)]}"
                if self.prompt_len(candidate, endpoint) == length:
                    return candidate
        raise WorkloadError(f"could not build a prompt of exactly {length} tokens")


def _lengths(center: int, spread: float, n: int, rng: np.random.Generator) -> np.ndarray:
    if spread == 0:
        return np.full(n, center, dtype=int)
    lo, hi = max(1, round(center * (1 - spread))), max(1, round(center * (1 + spread)))
    return rng.integers(lo, hi + 1, size=n)


def synthesize(
    spec: SyntheticWorkload, tokenizer: PromptTokenizer, endpoint: Endpoint = "completions"
) -> list[Request]:
    """Seeded synthetic requests with exact prompt lengths for ``endpoint``.

    The same ``spec`` (seed included) and tokenizer give the same requests byte for byte.

    Raises:
        WorkloadError: if a length is too short for the endpoint's template.
    """
    rng = np.random.default_rng(spec.seed)
    isl = _lengths(spec.input_len, spec.input_len_range, spec.num_requests, rng)
    osl = _lengths(spec.output_len, spec.output_len_range, spec.num_requests, rng)
    return [
        Request(tokenizer.make_prompt(int(i), endpoint, rng), int(o), int(i))
        for i, o in zip(isl, osl)
    ]


def warmup_requests(tokenizer: PromptTokenizer, n: int, endpoint: Endpoint) -> list[Request]:
    """``n`` short requests (32 prompt, 8 output tokens) that share no prefix with a workload."""
    rng = np.random.default_rng(2**31 - 1)
    return [Request(tokenizer.make_prompt(32, endpoint, rng), 8, 32) for _ in range(n)]


_FIELDS = {"prompt", "prompt_token_ids", "messages", "output_len", "prompt_len", "priority",
           "timestamp_s"}


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _parse_messages(value: object, where: str) -> tuple[Message, ...]:
    if not isinstance(value, list) or not value:
        raise WorkloadError(f"{where}: 'messages' must be a non-empty list")
    out = []
    for i, m in enumerate(value):
        if (not isinstance(m, dict) or set(m) != {"role", "content"}
                or m["role"] not in ("system", "user", "assistant")
                or not isinstance(m["content"], str)):
            raise WorkloadError(f"{where}: messages[{i}] must be {{'role': system|user|assistant, "
                                f"'content': str}}")
        out.append((m["role"], m["content"]))
    if out[-1][0] != "user":
        raise WorkloadError(f"{where}: the last message must be the user's")
    return tuple(out)


def json_object(line: str, where: str) -> dict:
    """Parse one JSONL line that must hold a JSON object.

    Raises:
        WorkloadError: naming ``where`` (``path:line``) if it is not valid JSON or not an object.
    """
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{where}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise WorkloadError(f"{where}: expected a JSON object")
    return data


def _parse_line(line: str, where: str) -> Request:  # noqa: C901 - one check per field
    data = json_object(line, where)
    unknown = set(data) - _FIELDS
    if unknown:
        raise WorkloadError(f"{where}: unknown field(s) {sorted(unknown)}")
    given = [k for k in ("prompt", "prompt_token_ids", "messages") if k in data]
    if len(given) != 1:
        raise WorkloadError(f"{where}: give exactly one of 'prompt', 'prompt_token_ids' or "
                            f"'messages' (got {given or 'none'})")
    if "prompt" in data:
        prompt = data["prompt"]
        if not isinstance(prompt, str):
            raise WorkloadError(f"{where}: 'prompt' must be a string")
    elif "messages" in data:
        prompt = _parse_messages(data["messages"], where)
    else:
        ids = data["prompt_token_ids"]
        if not isinstance(ids, list) or not ids or not all(_is_int(t) and t >= 0 for t in ids):
            raise WorkloadError(f"{where}: 'prompt_token_ids' must be non-empty ints >= 0")
        prompt = tuple(ids)
    if "output_len" not in data:
        raise WorkloadError(f"{where}: missing field 'output_len'")
    out = data["output_len"]
    if not _is_int(out) or out < 1:
        raise WorkloadError(f"{where}: 'output_len' must be an integer >= 1, got {out!r}")
    plen = data.get("prompt_len")
    if plen is not None and (not _is_int(plen) or plen < 1):
        raise WorkloadError(f"{where}: 'prompt_len' must be an integer >= 1, got {plen!r}")
    priority = data.get("priority")
    if priority is not None and not _is_int(priority):
        raise WorkloadError(f"{where}: 'priority' must be an integer, got {priority!r}")
    ts = data.get("timestamp_s")
    if ts is not None and (not isinstance(ts, (int, float)) or isinstance(ts, bool) or ts < 0):
        raise WorkloadError(f"{where}: 'timestamp_s' must be a number >= 0, got {ts!r}")
    return Request(prompt, out, plen, priority, None if ts is None else float(ts))


def read_jsonl(path: str | Path, limit: int | None = None) -> list[Request]:
    """Read a request set; blank lines are skipped.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        WorkloadError: for the first bad line, naming ``path:line``.
    """
    path = Path(path)
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    requests: list[Request] = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if line.strip():
                requests.append(_parse_line(line, f"{path}:{number}"))
                if limit is not None and len(requests) >= limit:
                    break
    if not requests:
        raise WorkloadError(f"{path}: no requests in file")
    return requests


def write_jsonl(requests: Sequence[Request], path: str | Path) -> None:
    """Write a request set, one line per request, ``\\n`` line endings."""
    Path(path).write_text("".join(r.to_json() + "\n" for r in requests), encoding="utf-8")


def check_endpoint(requests: Sequence[Request], endpoint: Endpoint, source: str) -> None:
    """Raise if a request cannot be sent to ``endpoint`` (token ids need completions, messages chat).

    Raises:
        WorkloadError: naming the first such request (1-based) and how many there are.
    """
    wrong = "conversation" if endpoint == "completions" else "token-id"
    bad = [i for i, r in enumerate(requests, 1)
           if (r.is_conversation if endpoint == "completions"
               else not isinstance(r.prompt, str) and not r.is_conversation)]
    if bad:
        need = "chat" if endpoint == "completions" else "completions"
        raise WorkloadError(f"{source}: {len(bad)} {wrong} prompt(s) (first: request {bad[0]}) "
                            f"only work with the {need} endpoint, not {endpoint}")


def load(
    spec: SyntheticWorkload | FileWorkload, model: str, endpoint: Endpoint = "completions"
) -> list[Request]:
    """The requests a run config describes (file or synthetic).

    Raises:
        WorkloadError: for a bad file line, or token-id prompts sent to the chat endpoint.
    """
    if isinstance(spec, FileWorkload):
        requests = read_jsonl(spec.path, spec.num_requests)
        check_endpoint(requests, endpoint, str(spec.path))
        return requests
    return synthesize(spec, PromptTokenizer(model), endpoint)
