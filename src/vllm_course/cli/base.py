"""The ``vllm-course`` group and what every command shares: one-line errors for bad input
(exit status 2), and the checks made before anything starts (server flags, a writable results
folder)."""

from __future__ import annotations

from pathlib import Path

import click


class BadInput(click.ClickException):
    """A file, flag or value that cannot be used: one line on stderr, exit status 2."""

    exit_code = 2


def bad_input(exc: BaseException, source: str | None = None) -> BaseException:
    """``exc`` as a :class:`BadInput`, its message on one line (a server's error keeps the log
    tail under its first line), prefixed with ``source`` (the file it came from) when given;
    ``exc`` itself under ``vllm-course --debug``, so that its traceback shows."""
    from vllm_course.errors import one_line
    from vllm_course.server import ServerError

    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.find_root().params.get("debug"):
        return exc
    text = str(exc) if isinstance(exc, ServerError) else one_line(exc)
    return BadInput(f"{source}: {text}" if source and not text.startswith(source) else text)


class _CourseGroup(click.Group):
    """The top-level group: bad input (vllm_course.errors.INPUT_ERRORS) raised anywhere below
    becomes one line and exit status 2, unless ``--debug`` asks for the traceback. SIGTERM (from
    ``timeout``, ``kill``, a CI runner) is handled as Ctrl-C is: it raises KeyboardInterrupt, so
    the command stops its servers, process groups and all, and saves what it has; without this,
    Python would exit at once and leave a starting server behind."""

    def invoke(self, ctx: click.Context):
        import signal
        import threading

        from vllm_course.errors import INPUT_ERRORS

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            return super().invoke(ctx)
        except click.ClickException:
            raise
        except INPUT_ERRORS as exc:
            if ctx.params.get("debug"):
                raise
            raise bad_input(exc) from None


@click.group(cls=_CourseGroup)
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
def main(debug: bool) -> None:
    """vLLM Throughput Tuning: measure and tune real vLLM servers."""


def writable(results_root: str, option: str = "--results") -> None:
    """Fail now, not after a server start, if ``results_root`` (given as ``option``) cannot be
    written.

    Raises:
        BadInput: naming the folder and why.
    """
    import tempfile

    try:
        Path(results_root).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=results_root):
            pass
    except OSError as exc:
        raise BadInput(f"{option} {results_root}: cannot write there "
                       f"({exc.strerror or exc}); choose another folder") from None


def check_server(server) -> None:
    """Check a server's flags, names and values, with the installed vLLM before anything starts
    (the profile's flags included, as the server would get them).

    Raises:
        BadInput: naming the flag, and the closest real ones or what the value must be.
    """
    from vllm_course.env import machine
    from vllm_course.server import ServerError, check_config

    try:
        check_config(server, machine.current_profile().server_args)
    except ServerError as exc:
        if exc.cause in INPUT_CAUSES:
            raise BadInput(str(exc)) from None
        raise


def is_input(exc: BaseException) -> bool:
    """Whether ``exc`` is the user's input (exit 2), not a failure of the run (exit 1): a server
    flag vLLM rejected or a request longer than ``max_model_len`` count as input."""
    from vllm_course.errors import INPUT_ERRORS
    from vllm_course.server import ServerError

    if isinstance(exc, ServerError):
        return exc.cause in INPUT_CAUSES
    return isinstance(exc, INPUT_ERRORS)


INPUT_CAUSES = {"bad_flag", "bad_value", "max_model_len"}
"""``ServerError.cause`` values that mean the user's settings, not the server, were at fault."""


def failure(exc: BaseException) -> tuple[str, int]:
    """(message, exit status) for a run that failed: 2 and one line for bad input, 1 and the
    whole message (a server's log tail included) otherwise; under ``--debug`` bad input is
    re-raised, traceback and all."""
    if not is_input(exc):
        return str(exc), 1
    err = bad_input(exc)
    if not isinstance(err, BadInput):
        raise exc
    return err.message, 2
