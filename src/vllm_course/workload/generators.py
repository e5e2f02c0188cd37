"""Seeded synthetic request sets from a spec: length distributions, shared prefixes, populations,
multi-turn chats and priorities.

A spec (YAML, see ``datasets/specs/``) lists weighted *populations*. Each population draws its
requests' lengths from :mod:`vllm_course.workload.lengths` distributions and may add:

* a **shared prefix**: ``num_prefixes`` texts of ``length`` tokens each (a leading text on
  ``completions``, the system prompt on ``chat``), used by a ``fraction`` of its conversations
  (round-robin over the prefixes). The prefix tokenizes to the same ids in every request that uses
  it (checked), and its tokens come *on top of* the drawn ``input_len``. (Mistral's v3 chat
  template puts the system prompt into the *last* user message, so in a multi-turn chat only the
  first turn starts with it, and later turns share their history but not the prefix.)
* **multi-turn chats** (``turns`` > 1, chat only): turn ``k`` resends every earlier user and
  assistant message, so its prompt grows turn by turn. The assistant messages are text of exactly
  the earlier turn's ``output_len`` tokens, standing for the answer the model was asked to write.
* a **priority**: fixed, or drawn from ``{values, weights}`` per request.

Prompt lengths are exact as the server counts them (``usage.prompt_tokens`` for the spec's
endpoint, BOS and template tokens included): request ``k`` of a conversation has
``prompt_len = prefix + Σ input_len[:k+1] + Σ output_len[:k]``, so a one-turn request's prompt is
``prefix + input_len``. A conversation ends early when its next turn would pass ``max_prompt_len``
or ``max_model_len`` (prompt + output); a first turn that does not fit is an error.

Text is built from the tokenizer's whole-word pieces (one token each), a word count is chosen for
the target length and checked with the server's tokenization, adjusting until exact. The same spec
and tokenizer give the same requests byte for byte; each population draws its lengths and its
text from its own random streams (``seed``, population index), and the sending order from a third.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from vllm_course.config import Endpoint, read_mapping
from vllm_course.workload.lengths import Fixed, LengthDist
from vllm_course.workload.request import Message, Request, WorkloadError
from vllm_course.workload.tokenizer import PromptBuilder, PromptTokenizer


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SharedPrefix(_Frozen):
    """``num_prefixes`` prefixes of ``length`` tokens, used by ``fraction`` of the conversations."""

    num_prefixes: int = Field(1, ge=1)
    length: int = Field(ge=1)
    fraction: float = Field(1.0, ge=0, le=1)


class PriorityChoice(_Frozen):
    """A priority drawn per request from ``values`` (``weights``: equal if left out)."""

    values: tuple[int, ...] = Field(min_length=1)
    weights: tuple[float, ...] | None = None

    @model_validator(mode="after")
    def _same_length(self):
        if self.weights is not None and (
            len(self.weights) != len(self.values) or min(self.weights) < 0 or sum(self.weights) <= 0
        ):
            raise ValueError("weights must be >= 0, one per value, with a positive sum")
        return self


class Population(_Frozen):
    """One kind of request; ``weight`` sets its share of ``num_requests``."""

    weight: float = Field(1.0, gt=0)
    input_len: LengthDist
    output_len: LengthDist
    turns: LengthDist = Fixed(value=1)
    shared_prefix: SharedPrefix | None = None
    priority: int | PriorityChoice | None = None


class GeneratorSpec(_Frozen):
    """A request set: ``num_requests`` requests from weighted ``populations``, for one endpoint."""

    description: str = ""
    model: str = "tiny-mistral"
    endpoint: Endpoint = "completions"
    seed: int = Field(0, ge=0)
    num_requests: int = Field(gt=0)
    max_model_len: int | None = Field(None, gt=0)
    max_prompt_len: int | None = Field(None, gt=0)
    populations: dict[str, Population] = Field(min_length=1)

    @model_validator(mode="after")
    def _turns_need_chat(self):
        multi = [n for n, p in self.populations.items() if p.turns != Fixed(value=1)]
        if multi and self.endpoint != "chat":
            raise ValueError(f"multi-turn populations {multi} need endpoint: chat")
        return self


def _merge(base: Any, override: Any) -> Any:
    """Override mapping keys recursively; a mapping with ``kind`` (a distribution) is replaced."""
    if isinstance(base, dict) and isinstance(override, dict) and "kind" not in override:
        return {**base, **{k: _merge(base.get(k), v) for k, v in override.items()}}
    return override


def load_spec(path: str | Path, size: str | None = None) -> GeneratorSpec:
    """Read a spec YAML; ``size`` applies the overrides under its ``sizes: {<size>: {...}}``.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: for an empty file, one that is not a mapping, or an unknown size;
            pydantic.ValidationError for a bad field.
    """
    data = read_mapping(path)
    sizes = data.pop("sizes", None) or {}
    if size is not None:
        if size not in sizes:
            known = ", ".join(sorted(sizes)) or "none"
            raise ValueError(f"{path}: no size {size!r} (sizes: {known})")
        data = _merge(data, sizes[size])
    return GeneratorSpec.model_validate(data)


@dataclass
class _Plan:
    """One conversation's numbers (a single-turn request is a one-turn conversation)."""

    group: int | None
    inputs: list[int]
    outputs: list[int]
    targets: list[int]
    priorities: list[int | None]


def _split(total: int, weights: list[float]) -> list[int]:
    """``total`` split by ``weights`` (largest remainder, ties to the earlier population)."""
    exact = [total * w / sum(weights) for w in weights]
    counts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: (counts[i] - exact[i], i))
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts


def _priorities(priority, n: int, rng: np.random.Generator) -> list[int | None]:
    if priority is None or isinstance(priority, int):
        return [priority] * n
    p = None if priority.weights is None else np.asarray(priority.weights) / sum(priority.weights)
    return [int(v) for v in rng.choice(priority.values, size=n, p=p)]


def _fit_turns(name: str, plan: _Plan, spec: GeneratorSpec, prefix: int) -> None:
    """Set the prompt targets; drop turns that do not fit the limits (an error on the first)."""
    targets, total = [], prefix
    for k, (i, o) in enumerate(zip(plan.inputs, plan.outputs, strict=True)):
        total += i + (plan.outputs[k - 1] if k else 0)
        too_long = (spec.max_prompt_len is not None and total > spec.max_prompt_len) or (
            spec.max_model_len is not None and total + o > spec.max_model_len)
        if too_long and k == 0:
            raise WorkloadError(
                f"population {name!r}: a first turn of {total} prompt + {o} output tokens does "
                f"not fit max_prompt_len {spec.max_prompt_len} / max_model_len "
                f"{spec.max_model_len}; lower the distributions' max")
        if too_long:
            break
        targets.append(total)
    n = len(targets)
    plan.inputs, plan.outputs = plan.inputs[:n], plan.outputs[:n]
    plan.priorities, plan.targets = plan.priorities[:n], targets


def _plan(name: str, pop: Population, count: int, spec: GeneratorSpec, rng) -> list[_Plan]:
    """Draw the numbers of ``count`` requests: turns, lengths, prefix group, priorities."""
    plans: list[_Plan] = []
    done = members = 0
    sp = pop.shared_prefix
    while done < count:
        turns = min(int(pop.turns.sample(1, rng)[0]), count - done)
        k = len(plans)
        group = None
        if sp is not None and math.floor((k + 1) * sp.fraction) > math.floor(k * sp.fraction):
            group, members = members % sp.num_prefixes, members + 1
        plan = _Plan(group, [int(x) for x in pop.input_len.sample(turns, rng)],
                     [int(x) for x in pop.output_len.sample(turns, rng)], [],
                     _priorities(pop.priority, turns, rng))
        _fit_turns(name, plan, spec, sp.length if group is not None else 0)
        plans.append(plan)
        done += len(plan.targets)
    return plans


def _find(ids: list[int], part: list[int]) -> int:
    """Index of ``part`` as a contiguous run in ``ids``, or -1."""
    first = part[0]
    for i in range(len(ids) - len(part) + 1):
        if ids[i] == first and ids[i:i + len(part)] == part:
            return i
    return -1


def _make_prefixes(sp: SharedPrefix | None, builder: PromptBuilder, rng) -> list[tuple[str, list]]:
    if sp is None:
        return []
    texts = [builder.words(sp.length, rng) for _ in range(sp.num_prefixes)]
    return [(t, builder.tok.encode(t)) for t in texts]


def _build(plan: _Plan, prefixes, builder: PromptBuilder, leads: dict, rng) -> list[Request]:
    """The requests of one planned conversation, with the shared prefix checked token for token."""
    prefix, pids = prefixes[plan.group] if plan.group is not None else (None, None)
    history: list[Message] = []
    out = []
    for k, target in enumerate(plan.targets):
        if k:
            history.append(("assistant", builder.words(plan.outputs[k - 1], rng)))
        prompt, ids, user = builder.fit(prefix, history, target, rng)
        if pids is not None:
            at = _find(ids, pids)
            if at < 0 or (k == 0 and leads.setdefault(plan.group, at) != at):
                raise WorkloadError("a shared prefix did not keep its token ids in a request")
        history.append(("user", user))
        out.append(Request(prompt, plan.outputs[k], target, plan.priorities[k]))
    return out


def _interleave(conversations: list[list[Request]], rng) -> list[Request]:
    """A random order of all requests that keeps each conversation's turns in order."""
    owners = rng.permutation(np.repeat(np.arange(len(conversations)),
                                       [len(c) for c in conversations]))
    taken = [0] * len(conversations)
    out = []
    for owner in owners:
        out.append(conversations[owner][taken[owner]])
        taken[owner] += 1
    return out


def generate(spec: GeneratorSpec, tokenizer: PromptTokenizer) -> list[Request]:
    """The spec's requests, in sending order; pure: the same spec gives the same requests.

    Raises:
        WorkloadError: if a first turn does not fit the limits or a length is below the
            endpoint's template overhead.
    """
    builder = PromptBuilder(tokenizer, spec.endpoint)
    counts = _split(spec.num_requests, [p.weight for p in spec.populations.values()])
    conversations: list[list[Request]] = []
    populations = zip(spec.populations.items(), counts, strict=True)
    for index, ((name, pop), count) in enumerate(populations):
        rng = np.random.default_rng([spec.seed, 1, index])
        plans = _plan(name, pop, count, spec, rng)
        text_rng = np.random.default_rng([spec.seed, 2, index])
        prefixes = _make_prefixes(pop.shared_prefix, builder, text_rng)
        leads: dict[int, int] = {}
        conversations += [_build(p, prefixes, builder, leads, text_rng) for p in plans]
    return _interleave(conversations, np.random.default_rng([spec.seed, 0]))
