"""One request (:class:`Request`) and request sets in JSONL: read (errors name the line), written.

Prompt length means what the server reports as ``usage.prompt_tokens`` for the endpoint used:
for ``/v1/completions`` the BOS token is included, for ``/v1/chat/completions`` the chat template
tokens too. Prompts are readable text (whole words from the tokenizer's vocabulary), their word
count adjusted with the model's own tokenizer until the count is exact (``PromptBuilder``).

JSONL line format (one request per line)::

    {"prompt": "some text", "output_len": 64, "prompt_len": 256}
    {"prompt_token_ids": [1, 3, 5], "output_len": 64}        # /v1/completions only

``prompt_len`` is optional: the length the prompt was built for, checked against the server's
count after a run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vllm_course.config import Endpoint

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
        return (isinstance(self.prompt, tuple) and bool(self.prompt)
                and isinstance(self.prompt[0], tuple))

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
    if ts is not None and (not isinstance(ts, (int, float)) or isinstance(ts, bool)
                           or not math.isfinite(ts) or ts < 0):
        raise WorkloadError(f"{where}: 'timestamp_s' must be a finite number >= 0, got {ts!r}")
    return Request(prompt, out, plen, priority, None if ts is None else float(ts))


def read_jsonl(path: str | Path, limit: int | None = None) -> list[Request]:
    """Read a request set; blank lines are skipped.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        WorkloadError: for the first bad line (not JSON, a bad field, not UTF-8), naming
            ``path:line``.
    """
    path = Path(path)
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    requests: list[Request] = []
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise WorkloadError(f"{path}:{number}: not UTF-8 text (byte {exc.start + 1} "
                                    "of the line)") from None
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
    """Raise if a request cannot be sent to ``endpoint`` (token ids need completions, messages
    chat).

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
                            f"only work with the {need} endpoint, not {endpoint}: set the "
                            f"load's endpoint to {need} (load: {{endpoint: {need}}} in a YAML "
                            "file)")
