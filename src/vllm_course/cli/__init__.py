"""The ``vllm-course`` command line: thin wrappers over the library's functions.

``base`` holds the group and what every command shares (one-line errors, checks before a server
starts); ``runs`` one run (``run``, ``demo``, ``diagnose``); ``workloads`` request sets;
``experiments`` sweeps, SLO searches and compares; ``admin`` this machine (``cards``,
``doctor``, ``servers``); ``labs`` the graded labs (``lab check``, ``lab time``); ``reference``
the GPU reference runs (``reference plan``, ``run``, ``unpack``).

May import: everything below it (it is the top of the package with ``notebook``).
"""

from vllm_course.cli import (  # noqa: F401 (registers commands)
    admin,
    experiments,
    labs,
    reference,
    runs,
    workloads,
)
from vllm_course.cli.base import main

__all__ = ["main"]
