"""Commands for the graded labs: ``lab check`` (a learner's self-check) and ``lab time`` (how
long grading a class takes)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from vllm_course.cli.base import BadInput, main

if TYPE_CHECKING:
    from vllm_course.grading.spec import ProfileJob, ProfileLoad


@main.group()
def lab() -> None:
    """Graded labs (labs/README.md)."""


@lab.command("check")
@click.argument("notebook", type=click.Path(dir_okay=False, path_type=Path))
def lab_check(notebook: Path) -> None:
    """Run NOTEBOOK as the autograder does and print each test's points.

    The visible tests only: hidden tests run when the instructor grades. The notebook runs in
    its own folder, with real vLLM servers started by its run cell; nothing is saved into it.
    Exit status 1 unless every test earned all its points.
    """
    from vllm_course.grading.check import execute, first_error, score

    if not notebook.is_file():
        raise BadInput(f"{notebook}: no such notebook")
    click.echo(f"running {notebook} from the top (with a run cell that starts servers, a "
               "few minutes) ...")
    nb = execute(notebook)
    outcomes = score(nb)
    if not outcomes:
        raise BadInput(f"{notebook}: no autograded test cells: not a lab notebook")
    error = first_error(nb)
    if error:
        click.echo(f"the notebook raised an error outside its tests, in {error}\n"
                   "(the tests after it may fail only because of it; fix it first)")
    for o in outcomes:
        first = o.why.splitlines()[0] if o.why else ""
        shown = "    -" if o.hidden else f"{o.earned:5.2f}"
        click.echo(f"{o.grade_id:<16} {shown} / {o.points:g}   {first}")
    visible = [o for o in outcomes if not o.hidden]
    earned, total = sum(o.earned for o in visible), sum(o.points for o in visible)
    hidden = sum(o.points for o in outcomes if o.hidden)
    click.echo(f"{'total':<16} {earned:5.2f} / {total:g}"
               + (f"   (and {hidden:g} points of hidden tests)" if hidden else ""))
    if earned < total:
        raise SystemExit(1)


@lab.command("time")
@click.argument("lab_id")
@click.option("--learners", type=click.IntRange(min=1), required=True,
              help="Submissions to grade.")
def lab_time(lab_id: str, learners: int) -> None:
    """How long grading LAB_ID takes: learners x one submission's autograde time on this
    machine's profile (nbgrader grades one submission at a time)."""
    from vllm_course import env
    from vllm_course.grading import scenario

    sc = scenario(lab_id)
    profile = env.current_profile()
    per = sc.grading_s.get(profile.name)
    if per is None:
        measured = ", ".join(f"{p} {s:.0f} s" for p, s in sc.grading_s.items()) or "none"
        raise BadInput(f"{lab_id}'s grading time is not measured on profile {profile.name} "
                       f"(measured: {measured}); time one submission with `make lab "
                       f"LAB={lab_id}`")
    total = learners * per
    click.echo(f"{lab_id} on {profile.name}: {learners} x {per:.0f} s = {total / 60:.0f} min "
               f"({total / 3600:.1f} h), one submission at a time")


def _solution_flags(lab_id: str) -> dict:
    """``SERVER_FLAGS`` of the solution cell in ``labs/source/<lab>/<lab>.ipynb`` (run from the
    repository's root)."""
    import ast
    import json

    path = Path("labs") / "source" / lab_id / f"{lab_id}.ipynb"
    if not path.is_file():
        raise BadInput(f"no --flags and no {path} here to read the solution from: give "
                       "--flags '{\"max-num-seqs\": 8}' or run from the repository's root")
    for cell in json.loads(path.read_text())["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") != "config":
            continue
        try:
            for node in ast.parse("".join(cell["source"])).body:
                if isinstance(node, ast.Assign) and any(
                        getattr(t, "id", None) == "SERVER_FLAGS" for t in node.targets):
                    return ast.literal_eval(node.value)
        except (SyntaxError, ValueError) as exc:
            raise BadInput(f"{path}: its config cell's SERVER_FLAGS is not a literal dict "
                           f"({exc}): give --flags") from None
    raise BadInput(f"{path} has no SERVER_FLAGS = {{...}} in its config cell: give --flags")


def _calibration_load(lab_id: str, rate: float | None, vs_start: float | None,
                      slo_ttft_ms: float | None,
                      slo_tpot_ms: float | None) -> ProfileLoad | None:
    """The load ``vllm-course calibrate`` runs at from its --rate/--vs-start/--slo-* options:
    ``None`` (the profile's) when none is given.

    Raises:
        BadInput: both --rate and --vs-start, options for a lab at no per-profile rate, or a
            profile without a rate and SLO and not all of them given.
    """
    from vllm_course import env
    from vllm_course.config import SLO
    from vllm_course.grading.spec import SCENARIOS, ProfileLoad

    if rate is not None and vs_start is not None:
        raise BadInput("give --rate (requests/s) or --vs-start (a multiple of the starting "
                       "configuration's capacity), not both")
    if all(v is None for v in (rate, vs_start, slo_ttft_ms, slo_tpot_ms)):
        return None
    sc = SCENARIOS[lab_id]
    if not sc.per_profile:
        raise BadInput(f"{lab_id} sends its requests at no per-profile rate: --rate, "
                       "--vs-start and --slo-* apply to a lab graded at a Poisson rate (lab04)")
    profile = env.current_profile().name
    here = sc.per_profile.get(profile)
    if here is None and (rate is None and vs_start is None
                         or slo_ttft_ms is None or slo_tpot_ms is None):
        raise BadInput(f"{lab_id} has no rate and SLO for profile {profile}: give --rate or "
                       "--vs-start, --slo-ttft-ms and --slo-tpot-ms")
    slo = SLO(ttft_ms=slo_ttft_ms if slo_ttft_ms is not None else here.slo.ttft_ms,
              tpot_ms=slo_tpot_ms if slo_tpot_ms is not None else here.slo.tpot_ms)
    if rate is not None:       # a fixed rate: the profile's relative one no longer applies
        return ProfileLoad(rate_rps=rate, slo=slo, how="vllm-course calibrate --rate")
    multiple = vs_start if vs_start is not None else here.vs_start
    if multiple is None:       # only the SLO changes: the profile's fixed rate
        return ProfileLoad(rate_rps=here.rate_rps, slo=slo, how="vllm-course calibrate --slo-*")
    # relative: rate_rps is only what is shown before the run measures the starting
    # configuration: the profile's measured one, none for a multiple given here
    return ProfileLoad(rate_rps=here.rate_rps if vs_start is None else None, slo=slo,
                       vs_start=multiple, how="vllm-course calibrate --vs-start/--slo-*")


def _flags_json(text: str, option: str) -> dict:
    """``text`` given to ``option`` as a JSON object of vLLM flags.

    Raises:
        BadInput: not JSON, or not an object (the message shows how to write one).
    """
    import json

    try:
        flags = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{option} is not JSON ({exc.msg}): write e.g. "
                       "'{\"max-num-seqs\": 8}'") from None
    if not isinstance(flags, dict):
        raise BadInput(f"{option} must be a JSON object of flag names and values")
    return flags


def _job_option(lab_id: str, num_requests: int | None,
                baseline_json: str | None) -> ProfileJob | None:
    """The job ``vllm-course calibrate`` runs from its --requests/--baseline-flags options:
    ``None`` (the profile's) when neither is given.

    Raises:
        BadInput: --baseline-flags for a lab that runs no starting configuration, or not a
            JSON object.
    """
    from vllm_course.grading.spec import SCENARIOS, ProfileJob

    if num_requests is None and baseline_json is None:
        return None
    if baseline_json is not None and SCENARIOS[lab_id].baseline_args is None:
        raise BadInput(f"{lab_id} runs no starting configuration beside the answer: "
                       "--baseline-flags applies to a lab that does (lab02 on)")
    return ProfileJob(num_requests=num_requests,
                      baseline_args=None if baseline_json is None
                      else _flags_json(baseline_json, "--baseline-flags"),
                      how="vllm-course calibrate --requests/--baseline-flags")


def _partial_path(path: Path) -> Path:
    """Where ``vllm-course calibrate`` keeps the finished runs of a calibration that is to be
    written to ``path``, until the last run (``LAB.partial.json`` beside ``LAB.json``)."""
    return path.with_name(f"{path.stem}.partial.json")


def _calibration_job(lab_id: str, flags: dict, load: ProfileLoad | None,
                     job: ProfileJob | None) -> dict:
    """What decides a calibration's runs, as its partial file records it (JSON values), so
    that a resumed calibration only adds runs of the same kind: the lab, this machine's profile
    and the model it serves (the generic ``gpu`` profile picks it by GPU memory), the vLLM
    version, the answer, the load and the job."""
    import json

    from vllm_course import env

    profile = env.current_profile()
    return json.loads(json.dumps({
        "lab": lab_id, "profile": profile.name, "model": profile.model,
        "vllm_version": env.vllm_version(), "flags": flags,
        "load": None if load is None else load.model_dump(mode="json"),
        "job": None if job is None else job.model_dump(mode="json")}))


def _same(a: object, b: object) -> bool:
    """``a`` and ``b`` are the same JSON (``true`` is not ``1``, nor ``8`` ``8.0``: a server
    gets them as different flags), whatever the keys' order."""
    import json

    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _partial_calibration(partial: Path) -> dict:
    """The partial file ``partial``, checked.

    Raises:
        BadInput: not JSON, or not what ``vllm-course calibrate`` writes there.
    """
    import json

    try:
        data = json.loads(partial.read_text())
        ok = (isinstance(data, dict) and isinstance(data.get("runs"), list)
              and all(isinstance(r, dict) and isinstance(r.get("metrics"), dict)
                      and isinstance(r.get("baseline"), dict | None) for r in data["runs"])
              and type(data.get("runs_wanted")) is int and data["runs_wanted"] >= 3
              and {"lab", "profile", "flags", "load", "job"} <= data.keys())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        ok = False
    if not ok:
        raise BadInput(f"{partial} is not a partial calibration (vllm-course calibrate writes "
                       "one as it runs): remove it, or run without --resume to replace it")
    return data


def _resumed(partial: Path, kind: dict, runs: int | None) -> tuple[list[dict], int]:
    """The runs kept in ``partial`` and the number of runs to reach, for ``--resume``.

    Args:
        kind: this invocation's :func:`_calibration_job`.
        runs: ``--runs`` if given; else the stopped calibration's.

    Raises:
        BadInput: no such file, a damaged one, one made with another lab, profile, model, vLLM
            version, answer, load or job (both values named), or more runs kept than
            ``--runs``.
    """
    import json

    if not partial.is_file():
        raise BadInput(f"--resume: no {partial} here: nothing was kept to resume (run "
                       "without --resume)")
    data = _partial_calibration(partial)
    for key, now in kind.items():
        if not _same(data.get(key), now):
            raise BadInput(f"--resume: {partial} was run with {key}="
                           f"{json.dumps(data.get(key))}; this one with {key}={json.dumps(now)}: "
                           "give the same options, or run without --resume")
    wanted = data["runs_wanted"] if runs is None else runs
    if len(data["runs"]) > wanted:
        asked = "--runs" if runs is not None else "the runs it was started with,"
        raise BadInput(f"--resume: {partial} keeps {len(data['runs'])} runs, more than "
                       f"{asked} {wanted}")
    return data["runs"], wanted


def _kept_runs(lab_id: str, partial: Path, kind: dict, runs: int | None,
               resume: bool) -> tuple[list[dict], int]:
    """The runs a calibration starts from (those of ``partial`` with ``--resume``, else none)
    and the number of runs it makes in all; says which.

    Raises:
        BadInput: as :func:`_resumed`.
    """
    if resume:
        kept, wanted = _resumed(partial, kind, runs)
        click.echo(f"calibrate {lab_id}: {len(kept)} of {wanted} runs kept from {partial}; "
                   f"running {wanted - len(kept)}")
        return kept, wanted
    if partial.is_file():
        try:
            _partial_calibration(partial)
            what = "holds runs of a calibration that stopped (--resume would keep them)"
        except BadInput:
            what = "is not a partial calibration"
        click.echo(f"calibrate {lab_id}: {partial} {what}; this one replaces it after its "
                   "first run")
    return [], 3 if runs is None else runs


@main.command("calibrate")
@click.argument("lab_id")
@click.option("--profile", "profile_name", default=None,
              help="Hardware profile to calibrate (default: this machine's, as doctor says); "
                   "it must be one this machine runs.")
@click.option("--flags", "flags_json", default=None,
              help="The answer's SERVER_FLAGS as JSON (default: the solution in "
                   "labs/source/LAB/LAB.ipynb).")
@click.option("--runs", type=click.IntRange(min=3), default=None,
              help="Runs of the lab's run cell, at least 3 (each measures the baseline, then "
                   "the answer); default 3, or with --resume the stopped calibration's.")
@click.option("--resume", is_flag=True,
              help="Keep the runs a stopped calibration with the same options saved beside "
                   "--out (NAME.partial.json for --out NAME.json; LAB.partial.json by "
                   "default), and run only the rest.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where the JSON goes (default: the course home's "
                   "calibration/PROFILE/LAB.json, where grading on this machine reads it).")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=None,
              help="A lab graded at a Poisson rate (lab04): the mean arrival rate to calibrate "
                   "at, requests/s (default: the profile's).")
@click.option("--vs-start", type=click.FloatRange(min=0, min_open=True), default=None,
              help="A lab graded at a Poisson rate (lab04): the rate as a multiple of the "
                   "starting configuration's capacity, measured in each run (default: the "
                   "profile's); not with --rate.")
@click.option("--slo-ttft-ms", type=click.FloatRange(min=0, min_open=True), default=None,
              help="With --rate or --vs-start: the SLO's TTFT limit, ms (default: the profile's).")
@click.option("--slo-tpot-ms", type=click.FloatRange(min=0, min_open=True), default=None,
              help="With --rate or --vs-start: the SLO's TPOT limit, ms (default: the profile's).")
@click.option("--requests", "num_requests", type=click.IntRange(min=1), default=None,
              help="The job's number of requests (same lengths and seed), instead of the "
                   "profile's: to size a job for this machine.")
@click.option("--baseline-flags", "baseline_json", default=None,
              help="The starting configuration's flags as JSON, instead of the profile's "
                   "(a lab that runs one beside the answer: lab02 on).")
def calibrate_cmd(lab_id: str, profile_name: str | None, flags_json: str | None,
                  runs: int | None, resume: bool, out: Path | None, rate: float | None,
                  vs_start: float | None,
                  slo_ttft_ms: float | None, slo_tpot_ms: float | None,
                  num_requests: int | None, baseline_json: str | None) -> None:
    """Measure LAB_ID's targets on this machine: its run cell --runs times with the answer.

    Each target's proposal is the worst run moved by 3 standard deviations towards leniency; the
    lab is valid here if the baseline misses at least one target by more than that margin.
    Prints both and the targets grading here would use, and writes every run's numbers as JSON.
    Each finished run is saved at once beside that file (LAB.partial.json): if the calibration
    stops (Ctrl-C, a failed server, the end of a device call), the same command with --resume
    runs only the rest.
    On a profile the lab brings no measured targets for (an estimate, the generic gpu profile),
    that file in its default place sets the targets grading on this machine uses: the lab's own
    or the calibrated ones, whichever is more lenient (labs/README.md). Exit status 1 if the lab
    is not valid here, or if on a profile with measured targets one is stricter than the runs
    allow.
    """
    import asyncio
    import json
    import os

    from vllm_course import env
    from vllm_course.cli.base import INPUT_CAUSES, writable
    from vllm_course.grading.calibrate import calibrate, report
    from vllm_course.grading.spec import SCENARIOS
    from vllm_course.grading.targets import calibration_path
    from vllm_course.server import ServerError

    if profile_name:
        os.environ["PROFILE"] = profile_name
    if lab_id not in SCENARIOS:
        raise BadInput(f"unknown lab {lab_id!r}; the labs are {', '.join(SCENARIOS)}")
    flags = _solution_flags(lab_id) if flags_json is None else _flags_json(flags_json, "--flags")
    load = _calibration_load(lab_id, rate, vs_start, slo_ttft_ms, slo_tpot_ms)
    job = _job_option(lab_id, num_requests, baseline_json)
    path = out or calibration_path(lab_id, env.current_profile().name)
    writable(str(path.parent), "--out")           # now, not after the runs
    partial = _partial_path(path)
    for p in (path, partial):
        if p.is_dir():
            raise BadInput(f"{p} is a folder: give --out a file name, e.g. --out "
                           f"{p.parent / (lab_id + '.json')}")
    kind = _calibration_job(lab_id, flags, load, job)
    kept, runs = _kept_runs(lab_id, partial, kind, runs, resume)
    in_file = len(kept)                       # the runs the partial file holds for this run

    def save(records: list[dict]) -> None:
        nonlocal in_file
        tmp = partial.with_name(partial.name + ".tmp")
        try:
            tmp.write_text(json.dumps({**kind, "runs_wanted": runs, "runs": records},
                                      indent=1) + "\n")
            os.replace(tmp, partial)          # whole or not at all, even if stopped mid-write
            in_file = len(records)
        except OSError as exc:                # the runs go on; only resuming them is lost
            tmp.unlink(missing_ok=True)
            click.echo(f"calibrate: cannot save the finished runs in {partial} "
                       f"({exc.strerror or exc}): a stop now loses them", err=True)

    try:
        result = asyncio.run(calibrate(lab_id, flags, runs=runs, echo=click.echo, load=load,
                                       job=job, resume=kept, on_run=save))
    except BaseException as exc:
        _say_what_was_kept(partial, runs, in_file)
        if isinstance(exc, ServerError) and exc.cause in INPUT_CAUSES:
            raise BadInput(str(exc)) from None    # a flag vLLM rejects, before anything started
        raise
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    partial.unlink(missing_ok=True)
    click.echo(report(result))
    click.echo(f"wrote {path}")
    if not result["valid"] or not (result["applies"] or result["current_ok"]):
        raise SystemExit(1)


def _say_what_was_kept(partial: Path, runs: int, n: int) -> None:
    """After a calibration stopped early: where its ``n`` finished runs are and how to go on,
    when this invocation saved or resumed any (an older file it did not touch is not news)."""
    if n == 0:
        return
    if n < runs:
        click.echo(f"calibrate: stopped; {n} of {runs} runs are kept in {partial}: the same "
                   "command with --resume runs the rest", err=True)
    else:
        click.echo(f"calibrate: all {n} runs are kept in {partial}, but judging them failed: "
                   f"the same command with --resume --runs {n + 1} adds a run", err=True)
