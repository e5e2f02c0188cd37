"""Commands for the graded labs: ``lab check`` (a learner's self-check) and ``lab time`` (how
long grading a class takes)."""

from __future__ import annotations

from pathlib import Path

import click

from vllm_course.cli.base import BadInput, main


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
    from vllm_course.grading.check import check_notebook

    if not notebook.is_file():
        raise BadInput(f"{notebook}: no such notebook")
    click.echo(f"running {notebook} from the top (a lab takes a few minutes) ...")
    outcomes = check_notebook(notebook)
    if not outcomes:
        raise BadInput(f"{notebook}: no autograded test cells: not a lab notebook")
    for o in outcomes:
        first = o.why.splitlines()[0] if o.why else ""
        click.echo(f"{o.grade_id:<16} {o.earned:5.2f} / {o.points:g}   {first}")
    earned, total = sum(o.earned for o in outcomes), sum(o.points for o in outcomes)
    click.echo(f"{'total':<16} {earned:5.2f} / {total:g}")
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
