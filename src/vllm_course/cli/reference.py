"""``vllm-course reference``: the GPU reference runs (plan, run one device call, unpack)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from vllm_course.cli.base import BadInput, main, writable


def _calls(items: tuple[str, ...], profile: str, call_s: int):
    from vllm_course.reference import catalog, plan, select

    try:
        return plan(select(list(items), catalog(profile)), call_s=call_s)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


@main.group()
def reference() -> None:
    """GPU reference runs: chapters, labs and comparisons split into device calls."""


def _plan_profile(profile: str | None) -> str:
    """``--profile``, else ``$PROFILE``, else ``h200``: the profile ``reference run`` plans with
    on a device machine whose ``PROFILE`` is set the same way.

    Raises:
        BadInput: the name is not one of the course's profiles.
    """
    from vllm_course.env import profile_names

    name = profile or os.environ.get("PROFILE") or "h200"
    if name not in profile_names():
        given = "--profile" if profile else "$PROFILE"
        raise BadInput(f"{given} {name!r} is not a profile; choose one of "
                       f"{', '.join(profile_names())}")
    return name


@reference.command("plan")
@click.argument("items", nargs=-1, required=True)
@click.option("--profile", default=None,
              help="The reference profile whose last runs give the estimates [default: "
                   "$PROFILE if set, else h200, as 'reference run' plans on a device machine "
                   "with that PROFILE].")
@click.option("--call-s", type=click.IntRange(min=60, max=600), default=540,
              show_default=True,
              help="Seconds one device call may take (at most 600: the device machine's "
                   "limit for one command).")
def reference_plan(items: tuple[str, ...], profile: str | None, call_s: int) -> None:
    """Print how ITEMS (ch01-ch08, lab03, bench-burst, demo, chapters, labs, bench, all) split
    into device calls, with the estimated device time; runs nothing."""
    from vllm_course.reference.plan import describe

    name = _plan_profile(profile)
    calls = _calls(items, name, call_s)               # a bad item: one line, no plan header
    click.echo(f"plan for profile {name}")
    click.echo(describe(calls))


@reference.command("status")
@click.argument("items", nargs=-1)
def reference_status(items: tuple[str, ...]) -> None:
    """Print, for ITEMS (default: every item, chapter parts included) and each GPU profile
    under reference/, the last run's date, whether every check held or the claim it stopped
    at, and whether the item's source (a chapter's or a lab's code cells, a comparison's
    script) changed since that run: a run to redo; runs nothing."""
    from vllm_course.reference import catalog, select
    from vllm_course.reference.status import describe, standings

    every = catalog("h200")
    try:
        chosen = select(list(items), every) if items else every   # every: chapter parts too
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    rows = standings(chosen)
    click.echo(describe(rows))
    labs = sorted({r.item for r in rows if r.item.startswith("lab")})
    if labs:
        click.echo(_lab_targets(labs, sorted({r.profile for r in rows})))


def _lab_targets(labs: list[str], profiles: list[str]) -> str:
    """Which of ``labs`` grade ``profiles`` on measured targets (the profiles each lab's
    ``Scenario.calibrated`` names, as grading reads them): a calibration file's ``valid`` in
    the lines above is the calibrate command's verdict when it ran, not whether the lab's
    targets there are measured (lab03's on ``h200`` are, by the course's rule, though its
    command said not valid)."""
    from vllm_course.grading.spec import SCENARIOS

    said = []
    for profile in profiles:
        mine = [lab for lab in labs if profile in SCENARIOS[lab].calibrated]
        said.append(f"{profile}: {' '.join(mine) or 'none'}")
    return ("measured lab targets (src/vllm_course/grading/spec.py; elsewhere estimates): "
            + "; ".join(said) + ". A file's 'valid' above is its calibrate run's own verdict.")


def _gpu_here(profile) -> None:
    """Refuse, before the plan, to run reference items where they would measure nothing the
    reference folders hold: a CPU profile, or a GPU profile this machine's GPU and vLLM build
    do not fit (the doctor's profile check).

    Raises:
        BadInput: what is missing and what to do.
    """
    from vllm_course.env import doctor, machine

    name = profile.name
    if profile.device != "cuda":
        raise BadInput(f"reference runs are GPU runs, and this machine's profile is {name} "
                       "(no NVIDIA GPU, or the CPU build of vLLM): run it on the GPU machine")
    check = doctor.check_profile(name, machine.vllm_build(), machine.gpu_info())
    if not check.ok:
        raise BadInput(check.message)


@reference.command("run")
@click.argument("items", nargs=-1, required=True)
@click.option("--call", "number", type=click.IntRange(min=1), required=True,
              help="Which call of the plan to run (1-based).")
@click.option("--call-s", type=click.IntRange(min=60, max=600), default=540,
              show_default=True,
              help="Seconds one device call may take, as given to 'reference plan': it splits "
                   "ITEMS into calls, so keep it the same for every call of one plan.")
@click.option("--time-s", type=click.IntRange(min=60), default=None,
              help="Seconds this call may run, if less than --call-s (device time running "
                   "out): nothing starts after, a running item stops. The plan, and so which "
                   "items call NUMBER runs, stays that of --call-s.")
@click.option("--out", default="results/reference", show_default=True,
              help="Where the items' folders go.")
@click.option("--pack", "pack_to", default=None,
              help="Also pack the call's folder into at most 8 files of 16 MiB here (e.g. $OUT).")
def reference_run(items: tuple[str, ...], number: int, call_s: int, time_s: int | None,
                  out: str, pack_to: str | None) -> None:
    """Run call NUMBER of the plan for ITEMS on this machine (the device machine); the plan is
    printed first, as 'reference plan ITEMS --call-s' prints it for this machine's profile
    ($PROFILE, else the one its GPU gets)."""
    from vllm_course import env
    from vllm_course.reference.plan import describe
    from vllm_course.reference.run import pack, run_call

    profile = env.current_profile()
    _gpu_here(profile)
    name = profile.name
    calls = _calls(items, name, call_s)
    if number > len(calls):
        raise BadInput(f"the plan has {len(calls)} call(s), not {number}")
    click.echo(f"plan for profile {name}")
    click.echo(describe(calls))
    call = calls[number - 1]
    if time_s is not None and time_s < call.limit_s:
        call.limit_s = time_s
        click.echo(f"call {number} may run {time_s} s (--time-s), not {call_s} s")
    folder = Path(out) / f"call-{number}"
    writable(out, "--out")    # folders that cannot take the results fail now, not after the call
    if pack_to:
        writable(pack_to, "--pack")
    runs = run_call(call, folder, calls=len(calls), echo=click.echo)
    ok = sum(r["exit"] == 0 for r in runs)
    click.echo(f"call {number}: {ok} of {len(call.items)} item(s) ok; {folder}")
    if pack_to:
        for part in pack(folder, Path(pack_to), f"reference-call-{number}"):
            click.echo(f"packed {part} ({part.stat().st_size / 2**20:.1f} MiB)")


@reference.command("unpack")
@click.argument("parts", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--profile", default=None,
              help="The folder of reference/ to fill [default: the profile the runs record].")
def reference_unpack(parts: tuple[str, ...], profile: str | None) -> None:
    """Put what a call packed (PARTS: reference-call-K.tgz.NN) under reference/PROFILE/."""
    from vllm_course.reference.run import unpack

    try:
        written = unpack([Path(p) for p in parts], profile)
    except (ValueError, OSError) as exc:
        raise BadInput(str(exc)) from None
    for folder in written:
        click.echo(f"reference/{folder}")
