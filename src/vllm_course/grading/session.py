"""What every lab shares: the set-up cell's pin, the flags a lab accepts, and the run cell.

:func:`run` deletes any old ``results/<lab>.json`` first, rejects flags that would change the
scenario, the model or the workload, starts a server of its own (never a reused one, never
cached results), runs the scenario's workload and writes the results file through
:mod:`vllm_course.grading.results`, which holds the proof that the file is this kernel's own.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import re
import secrets
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_course import env
from vllm_course.config import LoadSpec, RunConfig, Scalar, ServerConfig
from vllm_course.grading import results
from vllm_course.grading.results import RESULTS_DIR, LabError
from vllm_course.grading.spec import PROBE_REQUESTS, SCENARIOS, ProfileJob, ProfileLoad, Scenario
from vllm_course.grading.targets import h200_lines, local_calibration
from vllm_course.loadgen.selfcheck import limited_sentence

LAB_IDS = tuple(SCENARIOS)

# Flags that would change what is measured rather than how the server serves it: the model or
# its shape, the tokenizer, the requests' lengths, the KV cache size behind the scenario's back,
# or the server's address. vLLM accepts them all; a lab does not.
FORBIDDEN_FLAGS = frozenset({
    "model", "host", "port", "served-model-name", "tokenizer", "tokenizer-mode",
    "tokenizer-revision", "hf-config-path", "hf-overrides", "hf-token", "revision",
    "code-revision", "model-impl", "model-loader-extra-config", "load-format", "download-dir",
    "generation-config", "override-generation-config", "num-gpu-blocks-override",
    "override-attention-dtype", "logits-processors", "chat-template", "api-key",
    "uvicorn-log-level", "disable-log-stats", "max-logprobs", "skip-tokenizer-init",
    "kv-cache-memory-bytes", "max-model-len",
    # a YAML file of flags (vLLM's --config) would set any of the above behind this check
    "config",
})
# Flags that set how many bytes a token of KV cache takes, or over how many GPUs the pool is
# split: a scenario whose KV cache is fixed in tokens sizes it from the model's dtype on one GPU
# (scenario_args), so these would change how many tokens it holds.
KV_SIZE_FLAGS = frozenset({
    "dtype", "kv-cache-dtype", "tensor-parallel-size", "pipeline-parallel-size",
    "data-parallel-size", "decode-context-parallel-size", "prefill-context-parallel-size",
})
_FLAG_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


@dataclass(frozen=True)
class Pin:
    """What :func:`setup` fixed before the learner's cells ran.

    Attributes:
        lab: the lab id, e.g. ``"lab01"``.
        profile: the hardware profile's name the lab runs on.
    """

    lab: str
    profile: str


_PINS: dict[str, Pin] = {}
_CALIBRATING: contextvars.ContextVar[
    tuple[str, ProfileLoad | None, ProfileJob | None] | None] = \
    contextvars.ContextVar("calibrating", default=None)


@contextlib.contextmanager
def calibrating(lab: str, load: ProfileLoad | None = None,
                job: ProfileJob | None = None) -> Iterator[None]:
    """Inside the block, :func:`scenario` gives ``lab`` as the library brings it (no calibration
    file of this machine applies) and, if ``load`` is given, at its rate and SLO on the profile
    asked for, and, if ``job`` is given, with its number of requests and starting configuration
    there: what ``vllm-course calibrate`` measures against."""
    token = _CALIBRATING.set((lab, load, job))
    try:
        yield
    finally:
        _CALIBRATING.reset(token)


def scenario(lab: str, profile: str | None = None) -> Scenario:
    """``lab``'s scenario; on ``profile``, with that profile's rate and SLO
    (:meth:`Scenario.on`) and the targets grading there uses: the lab's own, or those of a
    valid calibration of this machine on a profile the lab brings no measured targets for
    (:func:`vllm_course.grading.targets.local_calibration`).

    Raises:
        LabError: for an unknown lab id (the message lists the known ones), a profile the lab
            has no rate and SLO for, or an unreadable calibration file (named).
    """
    if lab not in SCENARIOS:
        raise LabError(f"unknown lab {lab!r}; the labs are {', '.join(LAB_IDS)}")
    sc = SCENARIOS[lab]
    if profile is None:
        return sc
    override = _CALIBRATING.get()
    if override is not None and override[0] == lab:
        _, load, job = override
        if load is not None:
            sc = sc.model_copy(update={"per_profile": {**sc.per_profile, profile: load}})
        if job is not None:
            sc = sc.model_copy(update={"profile_jobs": {**sc.profile_jobs, profile: job}})
    elif (local := local_calibration(lab, profile, sc)) is not None and local.scenario:
        sc = local.scenario
    try:
        return sc.on(profile)
    except KeyError as exc:
        raise LabError(f"{lab}: {exc.args[0]}") from None


def setup(lab: str) -> Pin:
    """The locked set-up cell: pin this machine's hardware profile for ``lab`` before the
    learner's cells run, and print the scenario.

    Raises:
        LabError: for an unknown lab.
        ValueError: ``PROFILE`` names no bundled profile.
    """
    profile = env.current_profile()
    sc = scenario(lab, profile.name)
    fixed_args = scenario_args(lab, profile)
    pin = Pin(lab, profile.name)
    _PINS[lab] = pin
    fixed = ", ".join(f"--{k}" if v is True else f"--{k} {v}" for k, v in fixed_args.items())
    print(f"{lab} on profile {profile.name} ({profile.model}): {sc.about}")
    if fixed:
        print(f"  fixed by the scenario: {fixed}")
    for line in _conditions(lab, sc, profile.name):
        print(f"  {line}")
    for t in sc.targets:
        print(f"  target {t.id} ({t.points:g} points): {t.about}")
    if sc.targets:
        how = sc.calibrated.get(profile.name)
        print(f"  targets {'set by ' + how if how else 'are estimates on this profile'}")
        local = (None if _CALIBRATING.get() else
                 local_calibration(lab, profile.name, SCENARIOS[lab]))
        if local is not None:
            print(f"  {local.note}")
        elif not how:
            print(f"  (`vllm-course calibrate {lab}` on this machine sets them from the "
                  "solution's runs: labs/README.md)")
    if profile.name in sc.per_profile and not sc.calibrated.get(profile.name):
        print(f"  rate and SLO: {sc.per_profile[profile.name].how}")
    for line in h200_lines(lab):
        print(f"  {line}")
    return pin


def _conditions(lab: str, sc: Scenario, profile: str) -> list[str]:
    """What ``sc`` (``lab`` on ``profile``) runs, in lines for the set-up cell: its job where it
    is not the lab's own number of requests, its arrivals, SLO and baseline."""
    lines = []
    own = SCENARIOS[lab].workload.num_requests
    if sc.workload.num_requests != own:
        lines.append(f"on this profile the job is {sc.workload.num_requests} requests, not "
                     f"{own}: sized for this machine (the same lengths)")
    if (arrivals := _arrivals(sc, profile)) is not None:
        lines.append(f"arrivals: {arrivals}")
    if sc.slo:
        limits = ", ".join(f"{k} <= {v:g}" for k, v in sc.slo.model_dump().items() if v)
        lines.append(f"SLO per request (goodput counts the requests meeting it): {limits}")
    if sc.baseline_args is not None:
        base = " ".join(f"--{k}" if v is True else f"--{k} {v}"
                        for k, v in sc.baseline_args.items()) or "vLLM's defaults"
        lines.append(f"baseline, run first on the same requests: {base}")
    return lines


def _arrivals(sc: Scenario, profile: str) -> str | None:
    """How ``sc`` sends on ``profile``, in words; ``None``: all at once."""
    entry = sc.per_profile.get(profile)
    if entry is not None and entry.vs_start is not None:
        about = ("" if entry.rate_rps is None else
                 f" ({entry.rate_rps:g} requests/s on the machine where the targets were set)")
        return (f"Poisson, at {entry.vs_start:g} x the requests/s the starting configuration "
                f"serves on this machine, which the run cell measures first{about}")
    if sc.load.rate_rps != float("inf"):
        return f"Poisson, {sc.load.rate_rps:g} requests/s on average"
    return None


def scenario_args(lab: str, profile: env.Profile) -> dict[str, Scalar]:
    """The flags ``lab``'s scenario fixes on ``profile``: its ``fixed_args``, plus
    ``--kv-cache-memory-bytes`` for a KV cache fixed in tokens (tokens × the model card's KV
    bytes per token, so the pool holds as many tokens on every machine).

    Raises:
        LabError: the scenario fixes the KV cache in tokens and the profile's model has no
            model card to size it from.
    """
    from vllm_course.models import CARDS

    sc = scenario(lab)
    args: dict[str, Scalar] = dict(sc.fixed_args)
    if sc.kv_cache_tokens:
        card = CARDS.get(profile.model)
        if card is None:
            raise LabError(f"{lab} fixes the KV cache at {sc.kv_cache_tokens:,} tokens, sized from "
                           f"a model card; profile {profile.name}'s model {profile.model} has "
                           "none: run it on a profile with a bundled card (PROFILE=...)")
        args["kv-cache-memory-bytes"] = sc.kv_cache_tokens * card.kv_bytes_per_token
    return args


def _pinned(lab: str) -> Pin:
    pin = _PINS.get(lab)
    if pin is None:
        raise LabError(f"run the lab's set-up cell first (setup({lab!r}))")
    now = env.detect_profile_name()
    if now != pin.profile:
        raise LabError(f"the profile changed from {pin.profile} to {now} after the set-up cell; "
                       "restart the kernel and run the notebook from the top")
    return pin


def check_flags(lab: str, server_flags: Mapping[str, Any],
                profile: env.Profile | None = None) -> dict[str, Scalar]:
    """The learner's server flags, normalised (``max_num_seqs``, ``--max-num-seqs`` and
    ``max-num-seqs`` are one flag), before anything starts. A ``no-`` flag (vLLM's way to turn
    an on/off flag off, ``--no-enforce-eager``) is checked as the flag it turns off. Unknown
    vLLM flags are rejected by the server's own pre-launch check
    (:func:`vllm_course.server.flags.check_args`).

    Args:
        lab: the lab id.
        server_flags: the learner's ``SERVER_FLAGS``.
        profile: the hardware profile the lab runs on; its ``server_args`` (e.g. cpu-tiny's
            ``--dtype float32``) are the same for the baseline's server and the learner's, so
            they cannot be changed either.

    Raises:
        LabError: a key that is not a plain flag name (lower case, no value in it), a value that
            is not a str, int, float or bool, a flag given twice, one the scenario or the
            profile fixes, one that would change the model, the workload or the KV cache size
            (:data:`FORBIDDEN_FLAGS`), or, where the scenario fixes the KV cache in tokens, one
            that changes the bytes a token takes (:data:`KV_SIZE_FLAGS`).
    """
    sc = scenario(lab)
    fixed = sc.fixed_args
    profile_args = {} if profile is None else profile.server_args
    flags: dict[str, Scalar] = {}
    for name, value in server_flags.items():
        key = str(name).strip().removeprefix("--").replace("_", "-")
        if not _FLAG_NAME.fullmatch(key):
            raise LabError(f"SERVER_FLAGS key {name!r}: write a flag's name only, in lower case, "
                           "e.g. 'max-num-seqs' (no '=', spaces or values in the key)")
        if not isinstance(value, (str, int, float, bool)):
            raise LabError(f"SERVER_FLAGS[{name!r}] = {value!r}: use a str, int, float or bool")
        base = key.removeprefix("no-")          # the flag a --no-X turns off
        named = f"--{key}" if base == key else f"--{key} (it turns off --{base})"
        if base in fixed:
            raise LabError(f"{named}: --{base} is part of {lab}'s scenario ({fixed[base]!r}) "
                           "and cannot be changed; tune the other flags")
        if base in profile_args:
            raise LabError(f"{named}: --{base} is set by profile {profile.name} for every "
                           f"server ({profile_args[base]!r}), the baseline's and yours, and "
                           "cannot be changed; tune the other flags")
        if base in FORBIDDEN_FLAGS:
            raise LabError(f"{named} would change the model, the requests or the KV cache "
                           f"behind the scenario's back; {lab} does not accept it")
        if sc.kv_cache_tokens and base in KV_SIZE_FLAGS:
            raise LabError(f"{named} would change how many tokens {lab}'s KV cache holds (fixed "
                           f"at {sc.kv_cache_tokens:,} tokens of the model's dtype on one GPU); "
                           f"{lab} does not accept it")
        if key in flags:
            raise LabError(f"--{key} is given twice in SERVER_FLAGS")
        flags[key] = value
    return flags


Measure = Callable[[list[dict], dict], dict]
"""A lab's hook into :func:`run`: called with the measured request records (dicts as in
``requests.jsonl``) and ``{"duration_s", "slo"}``; returns ``{"answers": ..., "reference": ...}``
to store in the results file."""


async def run(lab: str, server_flags: Mapping[str, Any] | None = None, *,
              measure: Measure | None = None, results_dir: Path | str = RESULTS_DIR) -> dict:
    """The locked run cell: run ``lab``'s scenario on a fresh server and write its results.

    Deletes ``results/<lab>.json`` first; checks the flags (:func:`check_flags`); starts a
    server of its own, stopped (process group and all) when the run ends or fails, never a
    shared one and never a cached result; runs the workload; checks every completed request got
    its prompt and output lengths; writes ``results/<lab>.json`` with a nonce and the server's
    counter deltas. ``measure`` (see :data:`Measure`) adds the lab's own part.

    Returns:
        The results file's content.

    Raises:
        LabError: the set-up cell did not run, the flags are not acceptable (nothing started),
            or the server did not serve the requests the scenario asked for.
        UnknownFlagError: a vLLM flag this vLLM does not have (nothing started).
        ServerError: the server failed to start or died (its log tail included).
    """
    path = results.discard(lab, results_dir)
    pin = _pinned(lab)
    sc = scenario(lab, pin.profile)
    profile = env.load_profile(pin.profile)
    flags = check_flags(lab, server_flags or {}, profile)
    nonce = secrets.token_hex(16)
    started = time.time()
    measured = await _run_once(lab, profile, flags, Path(results_dir))
    if measure is not None:
        measured.update(measure(results.records_of(Path(measured["run_dir"])), {
            "duration_s": measured["metrics"]["duration_s"],
            "slo": sc.slo.model_dump() if sc.slo else None}))
    result: dict[str, Any] = {
        "lab": lab,
        "nonce": nonce,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "profile": pin.profile,
        "hardware": env.hardware(),
        "vllm_version": env.vllm_version(),
        "server_flags": flags,
        "slo": sc.slo.model_dump() if sc.slo else None,
        "targets": {t.id: {"op": t.op, "value": t.value, "zero_at": t.zero_at}
                    for t in sc.targets},
        "targets_set_by": sc.calibrated.get(pin.profile, "estimate") if sc.targets else None,
        **measured,
    }
    results.issue(lab, result, results_dir)
    m = measured["metrics"]
    print(f"{lab}: results written to {path} ({m['completed']} of {m['requests']} requests "
          f"completed in {m['duration_s']:.1f} s)")
    if sc.targets and (why := results.dropped_requests(result)):
        print(f"{lab}: {why}")
    for line in client_notes(result):
        print(f"{lab}: {line}")
    return result


def client_notes(result: dict) -> list[str]:
    """A sentence per run of a results file (the learner's, the baseline's) whose client, not
    its server, limited it (``client_limited``: the self-checks' reasons,
    :mod:`vllm_course.loadgen.selfcheck`): its latencies include the client's own delay."""
    parts = ((result, "your run"), (result.get("baseline") or {}, "the baseline's run"))
    return [f"{limited_sentence(reasons, whose)}; close other busy programs and run this cell "
            "again" for part, whose in parts if (reasons := part.get("client_limited"))]


async def _run_once(lab: str, profile: env.Profile, flags: dict[str, Scalar],
                    results_dir: Path) -> dict:
    """Fresh servers on ``profile`` with the scenario's workload: the learner's ``flags``, and,
    for a scenario with a baseline, the baseline's flags first (``Scenario.baseline_args``
    beside the scenario's fixed flags; none: vLLM's defaults): the measured part of a results
    file."""
    from vllm_course.experiment import run_experiment
    from vllm_course.server import ServerPool, check_config

    sc = scenario(lab, profile.name)
    fixed = scenario_args(lab, profile)
    configs = {"yours": ServerConfig(model=profile.model, args={**fixed, **flags})}
    if sc.baseline_args is not None:   # a label keeps it a server of its own, even with the
        base = ServerConfig(model=profile.model, args={**fixed, **sc.baseline_args},  # same flags
                            env={"VLLM_COURSE_LAB_RUN": "baseline"})
        configs = {"baseline": base, **configs}
    # every server's flags, names and values, before the first one starts: a misspelled flag of
    # the learner's must not wait for (or behind) the baseline's start
    for config in configs.values():
        check_config(config, profile.server_args)
    # a CPU machine runs both servers at once (started side by side, measured one at a time); a
    # GPU holds one server at its memory utilization, so the defaults' server stops first
    live = len(configs) if env.vllm_build() == "cpu" else 1
    runs = {}
    entry = sc.per_profile.get(profile.name)
    load, capacity = sc.load, None
    # a pool of this run only: fresh servers, stopped when the block ends (even on error)
    with ServerPool(max_live=live, profile_args=profile.server_args) as own:
        if live > 1:
            own.prestart(list(configs.values()))
        if entry is not None and entry.vs_start is not None:
            capacity = await start_capacity(lab, sc, configs["baseline"], results_dir, own)
            load = load.model_copy(update={"rate_rps": entry.vs_start * capacity["rps"]})
            print(f"{lab}: the starting configuration served {capacity['completed']} requests "
                  f"at once at {capacity['output_tok_s']:.0f} output tok/s, "
                  f"{capacity['rps']:.2f} requests/s of this scenario on this machine; "
                  f"requests arrive at {entry.vs_start:g} x that: {load.rate_rps:.2f} requests/s")
        for name, server in configs.items():
            config = RunConfig(name=f"{lab}-{name}", server=server, workload=sc.workload,
                               load=load, slo=sc.slo)
            runs[name] = await run_experiment(config, results_root=results_dir / "runs", pool=own)
    measured = {name: _measured(result, profile) for name, result in runs.items()}
    out = measured.pop("yours")
    if math.isfinite(load.rate_rps):
        out["load"] = {"rate_rps": load.rate_rps,
                       "vs_start": None if capacity is None else entry.vs_start,
                       "start_capacity": capacity}
    if "baseline" in measured:
        out["baseline"] = measured["baseline"]
        base = out["baseline"]["metrics"]["output_tok_s"]
        out["metrics"]["output_tok_s_vs_baseline"] = (
            out["metrics"]["output_tok_s"] / base if base else None)
    return out


async def start_capacity(lab: str, sc: Scenario, server: ServerConfig, results_dir: Path,
                         pool: Any) -> dict:
    """The starting configuration's capacity on this machine, for a rate relative to it
    (:attr:`ProfileLoad.vs_start`): :data:`PROBE_REQUESTS` requests shaped as the scenario's (its
    workload with the next seed: other prompts) sent at once, after the scenario's warm-ups, to
    the baseline ``server`` in ``pool``.

    Returns:
        ``{"completed", "duration_s" (s), "output_tok_s" (tok/s), "rps"}``: ``rps`` is the output
        tok/s over the mean output length the scenario asks for (tokens), so the requests/s of
        the scenario's own mix this configuration serves at full load.

    Raises:
        LabError: a probe request failed (the server is not serving the scenario).
        ServerError: the server failed or died (its log tail included).
    """
    from vllm_course.experiment import run_experiment

    workload = sc.workload.model_copy(update={"num_requests": PROBE_REQUESTS,
                                              "seed": sc.workload.seed + 1})
    config = RunConfig(name=f"{lab}-start-capacity", server=server, workload=workload,
                       load=LoadSpec(num_warmups=sc.load.num_warmups))
    result = await run_experiment(config, results_root=results_dir / "runs", pool=pool)
    s = result.summary
    if s.completed != PROBE_REQUESTS or not s.output_throughput_tok_s:
        raise LabError(f"{lab}: measuring the starting configuration's capacity, "
                       f"{s.completed} of {PROBE_REQUESTS} requests completed ({result.path})")
    return {"completed": s.completed, "duration_s": s.duration_s,
            "output_tok_s": s.output_throughput_tok_s,
            "rps": s.output_throughput_tok_s / sc.workload.output_len}


def _measured(result: Any, profile: env.Profile) -> dict:
    """One run's part of a results file (its records checked for the workload's lengths)."""
    records = results.records_of(Path(result.path))
    results.check_lengths(records)
    s, m = result.summary, result.server_metrics
    return {
        "run_dir": result.path,
        "argv": ServerConfig(args={**profile.server_args, **result.config.server.args}).argv(),
        "metrics": {"requests": s.num_requests, "completed": s.completed, "failed": s.failed,
                    "duration_s": s.duration_s, "output_tok_s": s.output_throughput_tok_s,
                    "preemptions": None if m is None else m.preemptions,
                    "p99_ttft_ms": s.ttft_ms.p99, "p99_tpot_ms": s.tpot_ms.p99,
                    "goodput_rps": s.goodput_rps, **_slo_metrics(s)},
        "server_counters": {} if m is None else {
            "generation_tokens": m.generation_tokens, "prompt_tokens": m.prompt_tokens,
            "preemptions": m.preemptions, "samples": m.samples},
        "client_totals": results.client_totals(records),
        # the client's self-checks: reasons it, not the server, limited the run (none: it kept up)
        "client_limited": list(result.client.reasons)
        if result.client is not None and result.client.saturated else [],
    }


def _slo_metrics(s: Any) -> dict[str, float | None]:
    """With an SLO: ``slo_attainment`` (the share of the requests sent that completed within
    every limit: goodput x duration / requests) and each P99 as a ratio to its limit
    (``p99_ttft_ms_vs_slo``, ``p99_tpot_ms_vs_slo``; at most 1 means the P99 meets it)."""
    if s.slo is None:
        return {}
    out: dict[str, float | None] = {
        "slo_attainment": s.good_requests / s.num_requests if s.num_requests else None}
    for name, dist in (("ttft", s.ttft_ms), ("tpot", s.tpot_ms)):
        limit = getattr(s.slo, f"{name}_ms")
        if limit:
            out[f"p99_{name}_ms_vs_slo"] = None if dist.p99 is None else dist.p99 / limit
    return out


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Inside a test cell anything written to stderr (a library's warning) would zero the cell
    in nbgrader (nbgrader/utils.py ``determine_grade``); send it to stdout instead."""
    with contextlib.redirect_stderr(sys.stdout):
        yield
