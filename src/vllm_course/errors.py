"""Bad input, and a reference run that stopped, said in one line.

The command line turns every error in this module's :data:`INPUT_ERRORS` into one line on stderr
and exit status 2 (a run that failed for another reason exits 1); ``vllm-course --debug ...``
shows the traceback instead. The library raises :class:`InputError` (or a ``ValueError`` of its
own, such as ``WorkloadError``) for what a user must change, and names the input in the message.
:func:`stopped_claim` says in one line, the same way everywhere, the claim a reference run
stopped at.
"""

from __future__ import annotations

import json

import yaml
from pydantic import ValidationError


class InputError(ValueError):
    """A file, flag or value the user gave that cannot be used; the message says which and what
    to change."""


INPUT_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,                 # InputError, WorkloadError, pydantic's ValidationError, json
    yaml.YAMLError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
    UnicodeDecodeError,
)
"""What the command line reports as bad input (exit status 2)."""


def _loc(loc: tuple) -> str:
    path = ".".join(str(part) for part in loc if not str(part).startswith("function-"))
    return f"{path}: " if path else ""


def one_line(exc: BaseException) -> str:
    """``exc`` as one line for people: a pydantic error lists each bad field as ``field: what is
    wrong (got value)``; YAML and JSON errors keep their line and column; others their message
    with newlines folded."""
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors(include_url=False):
            msg = err["msg"].removeprefix("Value error, ")
            got = err.get("input")
            shown = "" if err["type"] in {"missing", "extra_forbidden"} or isinstance(
                got, (dict, list)) else f" (got {got!r})"
            if err["type"] == "extra_forbidden":
                msg = "unknown field"
            parts.append(f"{_loc(err['loc'])}{msg}{shown}")
        return "; ".join(parts)
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"not valid YAML at line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not a text file (byte {exc.start} is not UTF-8)"
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return " ".join(str(exc).split()) or type(exc).__name__


def stopped_claim(failed: object) -> str:
    """The claim a reference run summary (``run.json``, as ``vllm-course reference run`` writes
    it) stopped at, from its ``failed`` text, in one line: the first line without the exception's
    name ``CheckFailed: ``, the check's ``expected: `` or the runner's ``stopped: ``, and without
    the evidence a check prints after it as ``  [...]`` (:func:`vllm_course.notebook.check`).
    ``""`` when ``failed`` is empty or ``None`` (the run did not stop)."""
    lines = str(failed or "").splitlines()
    if not lines:
        return ""
    claim = lines[0]
    for prefix in ("CheckFailed: ", "expected: ", "stopped: "):
        claim = claim.removeprefix(prefix)
    return claim.split("  [")[0]
