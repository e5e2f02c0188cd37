"""The ``vllm-course`` command line: thin wrappers over the library's functions.

``base`` holds the group and what every command shares (one-line errors, checks before a server
starts); ``runs`` one run (``run``, ``demo``, ``diagnose``); ``workloads`` request sets;
``experiments`` sweeps, SLO searches and compares; ``admin`` this machine (``cards``,
``doctor``, ``servers``).

May import: everything below it (it is the top of the package with ``notebook``).
"""

from vllm_course.cli import admin, experiments, runs, workloads  # noqa: F401 (registers commands)
from vllm_course.cli.base import main

__all__ = ["main"]
