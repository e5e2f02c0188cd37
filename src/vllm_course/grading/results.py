"""A lab's results file and the proof that this kernel's run cell wrote it.

What a results file proves (``labs/README.md`` states the whole threat model):

* :func:`vllm_course.grading.run` deletes any old ``results/<lab>.json`` first, runs the lab on
  a server of its own, checks that every request got the prompt and output lengths it asked for
  (:func:`check_lengths`), and hands the file to :func:`issue`, which writes it with a **nonce**
  drawn in this kernel and the server's own **counter deltas** (Δ ``vllm:*_total`` over the
  run, read from ``/metrics``) and keeps the nonce and the file's SHA-256 in this kernel's
  memory;
* :func:`load_results` accepts the file only if its nonce and its SHA-256 are the ones
  :func:`issue` kept, and the server's generated-token count agrees with what the client
  received. A file written by hand, copied from someone else or left from an earlier run scores
  nothing.

May import: ``errors`` only (``session`` builds on it).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from vllm_course.errors import InputError

RESULTS_DIR = Path("results")


class LabError(InputError):
    """A lab's configuration or results file is not acceptable; the message says what to do."""


_ISSUED: dict[str, tuple[str, str]] = {}      # lab -> (nonce, sha256 of the file written)


def discard(lab: str, results_dir: Path | str = RESULTS_DIR) -> Path:
    """Delete ``results/<lab>.json`` if it exists and forget its nonce (a run cell's first
    step, so that a failed run leaves nothing to grade).

    Returns:
        The file's path.
    """
    path = results_path(lab, results_dir)
    path.unlink(missing_ok=True)
    _ISSUED.pop(lab, None)
    return path


def results_path(lab: str, results_dir: Path | str = RESULTS_DIR) -> Path:
    """``results/<lab>.json``, relative to the notebook's folder unless ``results_dir`` is
    absolute."""
    return Path(results_dir) / f"{lab}.json"


def _succeeded(r: dict) -> bool:
    """A record dict's request succeeded: no error and at least one token-carrying chunk (as
    :attr:`vllm_course.records.RequestRecord.success`)."""
    return r["error"] is None and bool(r["chunk_s"])


def check_lengths(records: list[dict]) -> None:
    """Every completed request must have the output length it asked for (requests are sent with
    ``ignore_eos``) and its workload's prompt length: a flag that shortens outputs or reshapes
    prompts changes the workload, not the serving."""
    for r in filter(_succeeded, records):
        if r["output_tokens"] != r["max_tokens"]:
            raise LabError(f"request {r['index']} got {r['output_tokens']} output tokens for "
                           f"max_tokens={r['max_tokens']}: a server flag changed the workload")
        if r["prompt_len"] is not None and r["prompt_tokens"] not in (None, r["prompt_len"]):
            raise LabError(f"request {r['index']}'s prompt was {r['prompt_tokens']} tokens, the "
                           f"workload's {r['prompt_len']}: a server flag changed the workload")


def records_of(run_dir: Path) -> list[dict]:
    """The measured request records of a saved run (``requests.jsonl``, warm-ups left out)."""
    lines = (run_dir / "requests.jsonl").read_text().splitlines()
    return [r for r in (json.loads(line) for line in lines if line.strip())
            if not r.get("warmup")]


def client_totals(records: list[dict]) -> dict[str, int]:
    ok = [r for r in records if _succeeded(r)]
    failed = [r for r in records if not _succeeded(r)]
    return {
        "requests": len(records),
        "completed": len(ok),
        "output_tokens": sum(r["output_tokens"] for r in ok)
        + sum(sum(r["chunk_tokens"]) for r in failed),
        "failed_max_tokens": sum(r["max_tokens"] for r in failed),
        "prompt_tokens": sum(r["prompt_tokens"] or 0 for r in ok),
    }


def _jsonable(value: Any) -> Any:
    """NumPy scalars and arrays as plain numbers and lists (a learner's function may return
    them); everything else unchanged."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return _jsonable(value.tolist())
    return value


def issue(lab: str, result: dict, results_dir: Path | str = RESULTS_DIR) -> Path:
    """Write ``result`` (it carries its ``nonce``) as ``results/<lab>.json`` and keep its nonce
    and SHA-256 in this kernel's memory, the only place :func:`load_results` trusts. Only
    :func:`run` calls it in a lab; tests call it to stand in for a run.

    Returns:
        The file's path.
    """
    text = json.dumps(_jsonable(result), indent=1, sort_keys=True) + "\n"
    path = results_path(lab, results_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    _ISSUED[lab] = (result["nonce"], hashlib.sha256(text.encode()).hexdigest())
    return path


def load_results(lab: str, results_dir: Path | str = RESULTS_DIR) -> dict:
    """Read ``results/<lab>.json`` and prove :func:`run` wrote it in this kernel.

    Raises:
        LabError: no file; a file this kernel's run cell did not write (nonce or SHA-256 differ:
            written by hand, copied, edited, or left from an earlier run); or a server
            generated-token count that disagrees with what the client received.
    """
    path = results_path(lab, results_dir)
    if not path.is_file():
        raise LabError(f"{path} does not exist: run the lab's run cell (it writes the file)")
    text = path.read_text()
    issued = _ISSUED.get(lab)
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = {}
    if issued is None or not isinstance(data, dict) or data.get("nonce") != issued[0]:
        raise LabError(f"{path} was not written by this notebook's run cell in this session "
                       "(its nonce is not the one issued): re-run the run cell")
    if hashlib.sha256(text.encode()).hexdigest() != issued[1]:
        raise LabError(f"{path} was changed after the run cell wrote it: re-run the run cell")
    _check_counters(data, path, "your server")
    if isinstance(data.get("baseline"), dict):
        _check_counters(data["baseline"], path, "the baseline's server (the scenario's flags)")
    return data


def dropped_requests(data: dict) -> str | None:
    """Why a lab's run cannot meet a performance target because requests did not complete, in
    one line; ``None`` when every request sent completed, on the learner's server and on the
    baseline's. Throughput and percentiles count completed requests only (as
    ``vllm bench serve`` does), so a server that rejects requests (``--max-num-queued-reqs``
    answers HTTP 503 beyond its queue) would look faster for serving less."""
    baseline = data.get("baseline") or {}
    for part, whose in ((data, "your server"),
                        (baseline, "the baseline's server (the scenario's flags)")):
        m = part.get("metrics") or {}
        done, sent = m.get("completed"), m.get("requests")
        if done is not None and sent is not None and done < sent:
            run = part.get("run_dir", "its run folder")
            return (f"{whose} completed {done} of {sent} requests; a run that drops requests "
                    f"meets no performance target (the errors: requests.jsonl in {run})")
    return None


def _check_counters(data: dict, path: Path, whose: str) -> None:
    """The server's Δ ``vllm:generation_tokens_total`` must equal the tokens the client
    received; with failed requests, the server may have generated up to their ``max_tokens``
    more (tokens of a request the client gave up on are counted but never arrive)."""
    server, client = data.get("server_counters") or {}, data.get("client_totals") or {}
    gen = server.get("generation_tokens")
    if gen is None:
        raise LabError(f"{path}: {whose}'s counters were not read (no /metrics samples): "
                       "re-run the run cell")
    got, slack = client.get("output_tokens", -1), client.get("failed_max_tokens", 0)
    if not got <= round(gen) <= got + slack:
        raise LabError(f"{path}: {whose} counted {gen:.0f} generated tokens, the client "
                       f"received {got}, so this run cannot be graded: re-run the run cell (if "
                       "it happens again, show the instructor the run's folder, `run_dir`)")
