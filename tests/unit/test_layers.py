"""The package's dependency direction, read from the imports of every module under src/.

Rooms (a subpackage or a top-level module) sit on layers, bottom to top, as the package
docstring of ``vllm_course`` describes. A module may import from its own room and from rooms on
lower layers; never from a room on its own layer or above. Every import counts: at the top of a
module, inside a function (lazy) and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import vllm_course

SRC = Path(vllm_course.__file__).parent

LAYERS: list[set[str]] = [
    {"errors", "config", "records", "models"},     # plain data and the model cards
    {"env", "prom", "metrics"},                     # the machine; server's view; client metrics
    {"workload"},                                   # what to send
    {"server", "loadgen"},                          # a vLLM process; how to send (never each other)
    {"results"},                                    # one saved run
    {"diagnosis", "plots"},                         # read a run
    {"experiment"},                                 # one run, end to end
    {"tuning", "grading", "reference"},             # many runs; graded lab runs; GPU reference runs
    {"notebook", "cli"},                            # what learners touch
    {"__init__", "__main__"},                       # the public API; python -m vllm_course
]
LAYER = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """(line, imported module) for every ``vllm_course`` import in the file (or in ``source``,
    read as that file); ``from a import b`` counts as ``a.b`` where ``b`` is a module, else as
    ``a``."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    source = path.read_text() if source is None else source
    found = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("vllm_course")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if not base.startswith("vllm_course"):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                is_module = (SRC.parent / Path(*sub.split("."))).with_suffix(".py").exists() or \
                    (SRC.parent / Path(*sub.split("."))).is_dir()
                found.append((node.lineno, sub if is_module else base))
    return found


MODULES = sorted(SRC.rglob("*.py"))


def test_every_room_has_a_layer():
    rooms = {_room(_module_name(p)) for p in MODULES}
    assert rooms == set(LAYER), "add the new room to LAYERS (and to the package docstring)"


def _sideways_or_upward(path: Path, source: str | None = None) -> list[str]:
    room = _room(_module_name(path))
    return [
        f"line {line}: {target} ({_room(target)}, layer {LAYER[_room(target)]})"
        for line, target in _imports(path, source)
        if _room(target) != room
        and LAYER[_room(target)] >= LAYER[room]
    ]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_go_down_only(path):
    room = _room(_module_name(path))
    upward = _sideways_or_upward(path)
    assert not upward, f"{room} (layer {LAYER[room]}) imports sideways or upward: {upward}"


def test_no_import_cycles():
    graph = {_module_name(p): {t for _, t in _imports(p)} for p in MODULES}
    state: dict[str, int] = {}   # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt == node or nxt not in graph:
                continue
            # a package's __init__ re-exports its submodules: that edge is not a cycle
            if nxt.startswith(node + "."):
                continue
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*path, node, nxt]))
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


def test_loadgen_never_imports_server():
    for path in (SRC / "loadgen").rglob("*.py"):
        assert not [t for _, t in _imports(path) if _room(t) == "server"], path


@pytest.mark.parametrize("added, caught", [
    ("from vllm_course.experiment import run_experiment", True),      # upward, at the top
    ("def f():\n    from vllm_course import server\n", True),          # upward, lazy
    ("from ..server import pool", True),                               # upward, relative
    ("from vllm_course import metrics", False),                        # downward
    ("from vllm_course.workload.tokenizer import PromptTokenizer", False),  # own room
])
def test_the_check_catches_an_upward_import(added, caught):
    path = SRC / "workload" / "request.py"
    source = path.read_text() + "\n" + added + "\n"
    assert bool(_sideways_or_upward(path, source)) is caught
    assert not _sideways_or_upward(path)
