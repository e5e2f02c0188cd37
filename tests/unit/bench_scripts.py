"""The benchmark scripts are files, not modules of the package: each test of one loads it
with :func:`load_script`."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def load_script(name: str) -> Iterator[ModuleType]:
    """``benchmarks/<name>.py`` as a module, registered in ``sys.modules`` while it is used (its
    dataclasses look their module up while it loads) and removed afterwards."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)
