"""The result cache: a finished measurement is never run again.

A point (one server setting, one workload, one load level) is stored under a key made of
everything that decides what it measures:

* the server's effective flags (the hardware profile's defaults overridden by the config's), its
  model and its environment (:func:`server_environment`: the variables of this process it
  inherits that can change a measurement, and the config's; host, port and start-up timeout
  are left out);
* the model card (its ``config.json`` contents and the tokenizer package's version) or model id;
* the workload spec (and, for a file or trace, the file's SHA-256, so an edited file is a new
  key) and the load spec (rate, burstiness, concurrency cap, warmups, seeds, timeout);
* the vLLM version and build (read from ``vllm/_version.py``: the lookup never imports vLLM);
* the hardware (architecture, CPU model, logical CPUs, GPU names).

The run's name and SLO are not part of the key: goodput is recomputed from the saved request
records when a cached point is read with another SLO.

Layout under the cache root (``results/cache`` by default)::

    <key[:16]>/        a finished point: summary.json, requests.jsonl, ..., cache_key.json
    partial/<run>/     runs in progress, and runs that were interrupted or failed (kept, never
                       deleted: their requests.jsonl holds what was measured)

A point is committed by renaming its finished run folder into place, so an interrupted run
never leaves a half-written entry. Graded lab runs never read or write this cache: they pass
``cache=None`` to :func:`~vllm_course.tuning.grid.sweep` (and will to the SLO search and compare).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vllm_course import models
from vllm_course.config import FileWorkload, RunConfig, Scalar, ServerConfig, TraceWorkload
from vllm_course.env import machine
from vllm_course.loadgen import ProgressFn
from vllm_course.loadgen.selfcheck import limited_sentence
from vllm_course.results import RunResult
from vllm_course.server import ServerPool

KEY_SCHEMA = 1
"""Part of every key. The key holds no version of this course's own measuring code: bump this
when what a point measures or how its summary is computed changes, so older points are measured
again instead of read."""
KEY_FILE = "cache_key.json"
DEFAULT_ROOT = "cache"
"""The cache's folder name under the results root (``results/cache``)."""


def effective_args(server: ServerConfig, profile_args: Mapping[str, Scalar]) -> dict[str, Scalar]:
    """The flags a server is started with (:func:`vllm_course.server.effective_args`), sorted by
    name: the cache key does not depend on their order."""
    from vllm_course import server as servers

    return dict(sorted(servers.effective_args(server, profile_args).items()))


def model_identity(model: str) -> dict[str, Any]:
    """What identifies the model: a card's ``config.json`` hash and tokenizer version, or the
    hub id / path as given (plus the SHA-256 of a local directory's ``config.json``)."""
    if models.is_card(model):
        config = json.dumps(models.CARDS[model].config, sort_keys=True)
        try:
            tokenizer = importlib.metadata.version("mistral_common")
        except importlib.metadata.PackageNotFoundError:
            tokenizer = None
        return {"card": model, "config_sha256": _sha256(config.encode()),
                "mistral_common": tokenizer}
    out: dict[str, Any] = {"model": model}
    config_file = Path(model).expanduser() / "config.json"
    if config_file.is_file():
        out["config_sha256"] = _sha256(config_file.read_bytes())
    return out


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_FILE_HASHES: dict[tuple[str, int, int], str] = {}


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes (remembered per path, size and mtime within this process).

    Raises:
        FileNotFoundError: if the file does not exist.
    """
    p = Path(path)
    stat = p.stat()
    memo = (str(p.resolve()), stat.st_size, stat.st_mtime_ns)
    if memo not in _FILE_HASHES:
        digest = hashlib.sha256()
        with p.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        _FILE_HASHES[memo] = digest.hexdigest()
    return _FILE_HASHES[memo]


def _json(model: Any) -> Any:
    return json.loads(model.model_dump_json())


ENV_PREFIXES = ("VLLM_", "CUDA_", "OMP_", "MKL_", "TORCH_", "NCCL_")
"""Environment variables that can change what a server measures (vLLM's own, CUDA device
selection, thread counts): those of this process a server inherits, and those of its config."""


def server_environment(server: ServerConfig) -> dict[str, str]:
    """The server's measured environment: this process's variables named with
    :data:`ENV_PREFIXES` (a server inherits them), overridden by ``server.env``, sorted;
    ``VLLM_SERVER_DEV_MODE``, which only opens development endpoints, is left out."""
    from vllm_course.server import DEV_MODE

    inherited = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}
    merged = {**inherited, **server.env}
    merged.pop(DEV_MODE, None)
    return dict(sorted(merged.items()))


def key_material(config: RunConfig, profile_args: Mapping[str, Scalar]) -> dict[str, Any]:
    """Everything the cache key is made of, as a JSON-able dict (see the module docstring).

    Raises:
        FileNotFoundError: if a file or trace workload's file is missing.
    """
    workload = _json(config.workload)
    if isinstance(config.workload, (FileWorkload, TraceWorkload)):
        workload["file_sha256"] = file_sha256(config.workload.path)
        workload.pop("path")   # the same bytes elsewhere are the same workload
    return {
        "schema": KEY_SCHEMA,
        "server": {"args": effective_args(config.server, profile_args),
                   "env": server_environment(config.server)},
        "model": model_identity(config.server.model),
        "workload": workload,
        "load": _json(config.load),
        "vllm": {"version": machine.vllm_version(), "build": machine.vllm_build()},
        "hardware": machine.hardware(),
    }


def cache_key(config: RunConfig, profile_args: Mapping[str, Scalar]) -> str:
    """The SHA-256 (hex) of :func:`key_material`'s canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(key_material(config, profile_args), sort_keys=True, separators=(",", ":"))
    return _sha256(text.encode())


class ResultCache:
    """Finished points under ``root`` (see the module docstring for the layout).

    Args:
        root: the cache folder, e.g. ``results/cache``; created on first write.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"ResultCache({str(self.root)!r})"

    @property
    def partial(self) -> Path:
        """Where runs in progress, interrupted runs and failed runs are kept."""
        return self.root / "partial"

    def entry(self, key: str) -> Path:
        """The folder of the point with ``key`` (it may not exist)."""
        return self.root / key[:16]

    def _valid(self, key: str) -> bool:
        folder = self.entry(key)
        try:
            stored = json.loads((folder / KEY_FILE).read_text())
        except (OSError, ValueError):
            return False
        return stored.get("key") == key and (folder / "summary.json").is_file()

    def has(self, config: RunConfig, profile_args: Mapping[str, Scalar]) -> bool:
        """True if the point of ``config`` is finished and stored."""
        return self._valid(cache_key(config, profile_args))

    def get(self, config: RunConfig, profile_args: Mapping[str, Scalar]) -> RunResult | None:
        """The stored result of ``config``'s point, or ``None``.

        The result carries ``config`` (its name and SLO); when the SLO differs from the one it
        was measured with, the summary (goodput) is recomputed from ``requests.jsonl``.
        """
        key = cache_key(config, profile_args)
        if not self._valid(key):
            return None
        result = RunResult.load(self.entry(key))
        return _with_config(result, config)

    def put(self, config: RunConfig, profile_args: Mapping[str, Scalar], run_dir: str | Path
            ) -> RunResult:
        """Store a finished run folder as ``config``'s point (the folder is moved into the
        cache); returns the stored result. If the point is stored already, that entry wins and
        ``run_dir`` stays where it is.

        Raises:
            FileNotFoundError: if ``run_dir`` has no ``summary.json``.
        """
        material = key_material(config, profile_args)
        key = cache_key(config, profile_args)
        run_dir = Path(run_dir)
        if not (run_dir / "summary.json").is_file():
            raise FileNotFoundError(f"{run_dir} has no summary.json: not a finished run")
        (run_dir / KEY_FILE).write_text(json.dumps({"key": key, "material": material},
                                                   indent=2, sort_keys=True) + "\n")
        target = self.entry(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        if not self._valid(key):
            try:
                os.rename(run_dir, target)
                run_dir = target
            except OSError:   # a half-written or concurrent entry: leave ours where it is
                pass
        return _with_config(RunResult.load(self.entry(key) if self._valid(key) else run_dir),
                            config)

    def keys(self) -> list[str]:
        """Keys of every stored point."""
        out = []
        for path in sorted(self.root.glob(f"*/{KEY_FILE}")):
            try:
                key = json.loads(path.read_text())["key"]
            except (OSError, ValueError, KeyError):
                continue
            if self._valid(key):
                out.append(key)
        return out


def _with_config(result: RunResult, config: RunConfig) -> RunResult:
    """``result`` as a result of ``config``: its name and SLO, goodput recomputed if needed."""
    update: dict[str, Any] = {"config": config, "name": config.name}
    s = result.summary
    if s is not None and s.slo != config.slo and result.path is not None:
        from vllm_course.metrics import summarize

        update["summary"] = summarize(result.records(), config.slo, s.duration_s)
    return result.model_copy(update=update)


async def run_cached(
    config: RunConfig,
    *,
    pool: ServerPool,
    cache: ResultCache | None,
    results_root: str | Path,
    progress: ProgressFn | None = None,
) -> tuple[RunResult, bool]:
    """One point: the cached result if ``cache`` has it, else a run (then stored).

    Runs go to ``cache.partial`` (moved into the cache once finished) or, without a cache, to
    ``results_root/<name>-<time>/``. A run that stopped early or produced no summary is not
    cached (it stays under ``partial/``), so it is measured again next time. The run empties
    the server's prefix cache first (``load.reset_prefix_cache``, on by default), so a point
    reads no prefix an earlier one left.

    Returns:
        ``(result, cached)``: ``cached`` is True when nothing was run.

    Raises:
        ServerError, WorkloadError: as :func:`~vllm_course.experiment.run_experiment`; the
            partial run folder is kept.
    """
    from vllm_course.experiment import run_experiment

    if cache is not None:
        hit = cache.get(config, pool.profile_args)
        if hit is not None:
            return hit, True
    root = cache.partial if cache is not None else Path(results_root)
    result = await run_experiment(config, root, pool=pool, progress=progress)
    if cache is None or result.summary is None or result.stopped_early or result.path is None:
        return result, False
    return cache.put(config, pool.profile_args, result.path), False


def prefix_warning(what: str, result: RunResult) -> str | None:
    """A sentence if a run's prompts hit the prefix cache (``Δvllm:prefix_cache_hits_total >
    0``): the workload shares prefixes, or an earlier run on that server sent these prompts."""
    m = result.server_metrics
    hits = m.prefix_cache_hits if m is not None else None
    if not hits:
        return None
    return (f"{what}: {hits:.0f} prompt tokens hit the prefix cache (the workload shares "
            "prefixes, or an earlier run on this server sent these prompts)")


def client_warning(what: str, result: RunResult) -> str | None:
    """A sentence if the client's self-checks say it limited a run
    (:attr:`~vllm_course.loadgen.selfcheck.ClientChecks.saturated`): its latencies then include
    the client's own delay, e.g. a P99 TPOT of 0 ms when every request's tokens were read in
    one go."""
    c = result.client
    if c is None or not c.saturated:
        return None
    return f"{what}: {limited_sentence(c.reasons)}"


def open_cache(cache: ResultCache | str | Path | bool | None, results_root: str | Path
               ) -> ResultCache | None:
    """The cache a run function uses: ``True`` is ``results_root/cache``, a path or a
    :class:`ResultCache` is that cache, ``None`` or ``False`` is no cache (graded labs)."""
    if cache is None or cache is False:
        return None
    if cache is True:
        return ResultCache(Path(results_root) / DEFAULT_ROOT)
    if isinstance(cache, ResultCache):
        return cache
    return ResultCache(cache)
