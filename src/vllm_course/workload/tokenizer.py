"""Prompts of an exact token length, built and counted with the model's own tokenizer.

Prompt length means what the server reports as ``usage.prompt_tokens`` for the endpoint used:
for ``/v1/completions`` the BOS token is included, for ``/v1/chat/completions`` the chat template
tokens too. Prompts are readable text (whole words from the tokenizer's vocabulary, joined with
spaces), and :class:`PromptBuilder` adjusts their word count with the model's own tokenizer until
the count is exact.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property

import numpy as np

from vllm_course import models
from vllm_course.config import Endpoint
from vllm_course.workload.request import Message, WorkloadError


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
        self._builders: dict[str, PromptBuilder] = {}   # per endpoint, for make_prompt
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
        """Readable text whose ``prompt_len(text, endpoint)`` is exactly ``length`` tokens
        (:meth:`PromptBuilder.fit` with no prefix and no history).

        Raises:
            WorkloadError: if ``length`` is below the endpoint's fixed overhead (BOS, template)
                plus one token, or no exact prompt was found.
        """
        builder = self._builders.get(endpoint)
        if builder is None:
            builder = self._builders[endpoint] = PromptBuilder(self, endpoint)
        overhead = self.prompt_len("hello", endpoint) - len(self.encode("hello"))
        if length - overhead < 1:
            raise WorkloadError(
                f"a {endpoint} prompt needs at least {overhead + 1} tokens ({overhead} for BOS/"
                f"template); {length} was asked for"
            )
        return builder.fit(None, [], length, rng)[2]   # the text (chat: the one user message)


class PromptBuilder:
    """Readable prompts of exact lengths for one tokenizer and endpoint: the one prompt builder
    (synthetic sets, trace replays, warm-ups and the spec-driven generators all use it).

    A prompt is whole vocabulary words joined with spaces (each word is one token on its own), so
    its length is adjusted a word at a time and checked with the tokenizer the server uses."""

    def __init__(self, tokenizer: PromptTokenizer, endpoint: Endpoint):
        self.tok, self.endpoint = tokenizer, endpoint
        self.vocab = tokenizer.words
        self.overhead: dict[tuple, int] = {}  # template tokens beyond the words, per prompt shape

    def words(self, n: int, rng: np.random.Generator) -> str:
        """``n`` random vocabulary words: exactly ``n`` tokens on their own (checked)."""
        text = " ".join(self.vocab[i] for i in rng.integers(0, len(self.vocab), size=n))
        if len(self.tok.encode(text)) != n:
            raise WorkloadError(f"{n} vocabulary words did not tokenize to {n} tokens")
        return text

    def prompt(self, prefix: str | None, history: list[Message], user: str):
        """The request prompt: completions text, or the chat conversation."""
        if self.endpoint == "completions":
            return f"{prefix} {user}" if prefix else user
        system = ((("system", prefix),) if prefix else ())
        return system + tuple(history) + (("user", user),)

    def fit(self, prefix: str | None, history: list[Message], target: int, rng):
        """``(prompt, ids, user_text)`` of exactly ``target`` tokens: pick the user message's word
        count from the template overhead, tokenize as the server does, adjust until exact."""
        fixed = sum(len(c.split()) for _, c in history) + (len(prefix.split()) if prefix else 0)
        shape = (len(history), prefix is not None)
        n = max(1, target - fixed - self.overhead.get(shape, 1))
        # as many words as the target: the draws do not depend on the first guess
        pool = [int(i) for i in rng.integers(0, len(self.vocab), size=target)]
        for _ in range(8):
            while len(pool) < n:
                pool.append(int(rng.integers(0, len(self.vocab))))
            user = " ".join(self.vocab[i] for i in pool[:n])
            prompt = self.prompt(prefix, history, user)
            ids = self.tok.prompt_ids(prompt, self.endpoint)
            self.overhead[shape] = len(ids) - fixed - n
            if len(ids) == target:
                return prompt, ids, user
            n += target - len(ids)
            if n < 1:
                break
        raise WorkloadError(f"no {self.endpoint} prompt of exactly {target} tokens ({fixed} "
                            f"tokens of prefix and history + template); raise input_len's min")
