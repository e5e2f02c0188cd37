"""Run one call of a reference plan on this machine, and pack what it wrote.

Chapters execute unchanged in a fresh kernel each (nbclient, the engine papermill drives: the
notebooks take no parameters), borrowing servers from the call's own pool through the broker,
as CI runs them; labs, comparisons and the demo run as commands in their own process group.
Each item gets ``<out>/<dest>/`` with ``run.json`` (what ran, where, how long, its checks),
``outputs.txt`` and figures for a chapter, and the small files its run wrote; nothing runs
once the call's time is spent, and an item still running then is stopped, its partial output
kept. :func:`pack` turns the folder into at most 8 files of at most 16 MiB (what comes back
from the device machine); :func:`unpack` puts them under ``reference/<profile>/``.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from vllm_course import env
from vllm_course.env import doctor, machine
from vllm_course.reference.catalog import (
    CALIBRATION,
    KEPT_RUNS,
    PARTS_VAR,
    REFERENCE_ROOT,
    REPO_ROOT,
    Item,
    catalog,
)
from vllm_course.reference.plan import Call
from vllm_course.reference.status import source_digest
from vllm_course.server import ServerPool, registry
from vllm_course.server.broker import ENV_VAR, PoolBroker
from vllm_course.server.groups import stop_group

#: An item is not started with less than this left of the call (s): a 7B server alone needs
#: 100-130 s to start on the H200.
MIN_LEFT_S = 60
#: Files a run wrote are packed when they are at most this big (bytes) and of these kinds;
#: request logs and workloads are left out (the summaries carry their numbers).
MAX_FILE_BYTES = 2 * 2**20
KEEP_SUFFIXES = (".json", ".png", ".txt", ".md")
#: What is kept of a chapter's runs: their numbers (``summary.json``, ``timeseries.json``), not
#: the plots each run drew (the chapter's own figures are kept as ``figure-NN.png``; a run's
#: ``timeseries.png`` is redrawn from its JSON by :func:`vllm_course.plots.save_timeseries_png`;
#: its ``latency.png`` needs the request log, never packed). Those plots were 40-240 KB each,
#: 16.5 of the 22.4 MB of ``reference/`` on 2026-12-06.
CHAPTER_RUN_SUFFIXES = (".json", ".txt", ".md")
LEAVE_OUT = ("requests.jsonl", "workload.jsonl", "vllm-custom.jsonl")
#: Folders whose files never come back: vLLM's compile cache (``VLLM_CACHE_ROOT``, which
#: chapter 14 points into its results: ~180 Inductor/Triton JSON files, no measurement).
LEAVE_OUT_DIRS = ("vllm-cache",)
#: What comes back from the device machine: at most 8 files of 16 MiB each.
PART_BYTES = 16 * 2**20 - 4096
#: The pack's list of items and their folders (``{"ch11": "chapters/11_max_num_seqs"}``).
MANIFEST = "items.json"
#: The matplotlib backend a chapter runs with: ipykernel's own, which sends each figure back.
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
MAX_PARTS = 8


def server_id(key: str) -> str:
    """A short, stable name for a server's settings (``ServerConfig.key()``)."""
    return hashlib.sha1(key.encode()).hexdigest()[:12]


def machine_facts() -> dict:
    """Where the run happens: GPU (name and MiB), driver, vLLM, torch, profile, date (UTC)."""
    gpus = machine.gpu_info()
    gpu = ", ".join(f"{g.name} ({g.memory_mib:,} MiB)" for g in gpus) or "none (CPU)"
    return {"measured": dt.datetime.now(dt.UTC).date().isoformat(), "gpu": gpu,
            "driver": machine.driver_version(), "vllm_version": env.vllm_version(),
            "torch": doctor.torch_version(), "profile": env.current_profile().name}


def notebook_outputs(nb) -> tuple[str, list[bytes], list[str]]:
    """An executed notebook's printed text (streams and plain-text results, in order), its PNG
    figures, and its ``nb.check`` lines (``ok: ...``)."""
    text, pngs = [], []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text.append(out.get("text", ""))
            elif out.get("output_type") in ("execute_result", "display_data"):
                data = out.get("data", {})
                if "image/png" in data:
                    pngs.append(base64.b64decode(data["image/png"]))
                elif "text/plain" in data:
                    text.append(data["text/plain"] + "\n")
            elif out.get("output_type") == "error":
                text.append(f"{out.get('ename')}: {out.get('evalue')}\n")
    joined = "".join(text)
    checks = [line for line in joined.splitlines() if line.startswith("ok: ")]
    return joined, pngs, checks


def copy_small_files(src: Path, dest: Path, since: float,
                     suffixes: tuple[str, ...] = KEEP_SUFFIXES) -> list[str]:
    """Copy the files under ``src`` written since ``since`` (epoch s) that are worth packing
    (ending in one of ``suffixes``, at most :data:`MAX_FILE_BYTES`, not under a folder of
    :data:`LEAVE_OUT_DIRS`) to ``dest``, keeping their paths. Returns what was left out for its
    size, as ``path (why)``."""
    left_out = []
    if not src.is_dir():
        return left_out
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = path.relative_to(src)
        if path.stat().st_mtime < since:
            continue
        if (path.name in LEAVE_OUT or path.suffix not in suffixes
                or any(part in LEAVE_OUT_DIRS for part in rel.parts[:-1])):
            continue
        if path.stat().st_size > MAX_FILE_BYTES:
            left_out.append(f"{rel} ({path.stat().st_size / 2**20:.1f} MiB)")
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest / rel)
    return left_out


class _Recorder:
    """Records the server settings the pool hands out while an item runs."""

    def __init__(self, pool: ServerPool):
        self.keys: list[str] = []
        acquire, prestart = pool.acquire, pool.prestart

        def on_acquire(config, log_path=None):
            self._add(config.key())
            return acquire(config, log_path=log_path)

        def on_prestart(configs):
            for c in configs:
                self._add(c.key())
            return prestart(configs)

        pool.acquire, pool.prestart = on_acquire, on_prestart

    def _add(self, key: str) -> None:
        if server_id(key) not in self.keys:
            self.keys.append(server_id(key))

    def take(self) -> list[str]:
        keys, self.keys = self.keys, []
        return keys


def run_chapter(item: Item, dest: Path, broker_url: str, deadline: float) -> dict:
    """Execute a chapter notebook unchanged against the broker's servers (or a lab's solution
    notebook, whose run cell starts servers of its own and whose test cells then check it);
    write its ``outputs.txt`` and figures in ``dest``. Returns run.json's fields about the
    run."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    path = REPO_ROOT / item.source
    nb = nbformat.read(path, as_version=4)
    t0, failed, exit_code = time.time(), None, 0
    saved = {k: os.environ.get(k) for k in (ENV_VAR, "MPLBACKEND", PARTS_VAR)}
    # the kernel's inline backend turns plt.show() into PNG outputs; "Agg" (set in CI's
    # notebook tests) would draw nothing, and the run would come back without its figures
    os.environ.update({ENV_VAR: broker_url, "MPLBACKEND": INLINE_BACKEND,
                       PARTS_VAR: item.parts})
    try:
        NotebookClient(nb, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}},
                       timeout_func=lambda cell: max(1, int(deadline - time.monotonic()))
                       ).execute()
    except CellExecutionError as exc:
        failed, exit_code = f"{exc.ename}: {exc.evalue}", 1
    except (TimeoutError, DeadKernelError) as exc:
        failed, exit_code = f"stopped: {type(exc).__name__} (the call's time ran out?)", None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    text, pngs, checks = notebook_outputs(nb)
    (dest / "outputs.txt").write_text(text)
    for n, png in enumerate(pngs, start=1):
        (dest / f"figure-{n:02d}.png").write_bytes(png)
    # a chapter writes under results/chapters/<its name>/, a lab next to its notebook
    results = (REPO_ROOT / "results" / "chapters" / path.stem if item.kind == "chapter"
               else path.parent / "results")
    left_out = copy_small_files(results, dest / "runs", since=t0,
                                suffixes=CHAPTER_RUN_SUFFIXES)
    servers = ("servers borrowed from the call's pool" if item.kind == "chapter"
               else "its run cell started its own servers")
    return {"how": f"the notebook executed top to bottom, unchanged (nbclient), {servers}",
            "exit": exit_code, "failed": failed, "checks": checks, "left_out": left_out}


def run_command(item: Item, dest: Path, model: str, profile: str, deadline: float,
                root: Path = REFERENCE_ROOT) -> dict:
    """Run a lab calibration, comparison or the demo as a command writing into a scratch folder
    beside ``dest``, then copy the files worth packing into ``dest``; its console output goes to
    ``dest/log.txt``. Stopped (process group and all) at ``deadline``.

    A lab whose folder under ``root/<profile>/`` holds the runs an earlier call's calibration
    kept when it was stopped (:data:`KEPT_RUNS`, unpacked there) resumes from them
    (``vllm-course calibrate --resume``): a calibration longer than one call ends in the next.
    """
    work = dest.with_name(dest.name + ".work")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    argv = item.argv(model, profile, work)
    kept = root / profile / item.dest / KEPT_RUNS
    resumed, before = None, 0
    if item.kind == "lab" and argv and kept.is_file():
        shutil.copy2(kept, work / KEPT_RUNS)
        argv.append("--resume")
        resumed = kept.relative_to(root.parent).as_posix()     # reference/<profile>/...
        before = calibration_runs(work) or 0
    with (dest / "log.txt").open("w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT,
                                start_new_session=True)
        try:
            exit_code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            failed = None if exit_code == 0 else f"exit status {exit_code}"
        except subprocess.TimeoutExpired:
            exit_code, failed = None, "stopped: the call's time ran out"
        finally:   # also on Ctrl-C: the command's process group never outlives the call
            if proc.poll() is None:
                stop_group(proc.pid, leader=proc)
            stop_servers_of(proc.pid)
    fields: dict = {}
    if resumed and exit_code == 2:
        # --resume refused the kept runs (another answer, model or vLLM; a damaged file): they
        # do not go back, so that the item's next run starts afresh instead of failing again
        (work / KEPT_RUNS).unlink(missing_ok=True)
        fields["resume_refused"] = resumed
    elif resumed:
        fields["resumed_from"] = resumed
    if item.kind == "lab" and argv:
        after = calibration_runs(work)
        fields["runs_made"] = None if after is None else after - before
    left_out = copy_small_files(work, dest, since=0)
    shutil.rmtree(work, ignore_errors=True)
    shown = [Path(argv[0]).name, *(a.replace(str(work), "OUT") for a in argv[1:])]
    return {"how": " ".join(shown), "exit": exit_code, "failed": failed, "left_out": left_out,
            **fields}


def calibration_runs(folder: Path) -> int | None:
    """The calibration runs a lab item's command has in ``folder``: those its partial file
    keeps, else those of its finished calibration file; ``None`` if neither holds any."""
    for name in (KEPT_RUNS, CALIBRATION):
        try:
            return len(json.loads((folder / name).read_text())["runs"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def carry_kept_runs(item: Item, dest: Path, profile: str, root: Path = REFERENCE_ROOT) -> None:
    """Copy the runs an earlier call kept for ``item`` (:data:`KEPT_RUNS` under
    ``root/<profile>/``) into ``dest``, for an item this call did not start: unpacking its
    folder replaces the old one, and they would be lost."""
    kept = root / profile / item.dest / KEPT_RUNS
    if item.kind == "lab" and kept.is_file():
        shutil.copy2(kept, dest / KEPT_RUNS)


def stop_servers_of(owner_pid: int) -> None:
    """Stop the vLLM servers that process ``owner_pid`` started and left running (each leads a
    process group of its own, outside the command's): a command killed while it was still
    stopping them, after the grace period, would otherwise leave them holding the GPU for the
    next item."""
    for entry in registry.entries():
        if entry["owner_pid"] == owner_pid:
            registry.stop(entry["pid"])


def run_call(call: Call, out: Path, *, calls: int = 1,
             echo: Callable[[str], None] = print) -> list[dict]:
    """Run ``call``'s items in order into ``out/<dest>/``; returns their run.json contents.

    One pool, owned here and stopped at the end (process groups and all), serves every item;
    chapters borrow from it, commands start their own servers.
    """
    deadline = time.monotonic() + call.limit_s
    facts = machine_facts()
    profile = env.current_profile()
    pool = ServerPool(max_live=profile.max_live_servers, profile_args=profile.server_args)
    recorder = _Recorder(pool)
    done: list[dict] = []
    dests: dict[str, str] = {}
    try:
        with PoolBroker(pool) as url:
            for item in call.items:
                dest = out / item.dest
                if dest.exists():
                    shutil.rmtree(dest)
                dest.mkdir(parents=True)
                left = deadline - time.monotonic()
                t = time.monotonic()
                if left < MIN_LEFT_S:
                    fields = {"how": "not started", "exit": None, "checks": [], "left_out": [],
                              "failed": f"not started: {left:.0f} s of the call were left"}
                    carry_kept_runs(item, dest, profile.name)
                else:
                    echo(f"[{item.id}] running {item.source} (~{item.estimate_s} s, "
                         f"{left:.0f} s left in the call)")
                    if item.kind != "chapter":
                        # labs, comparisons and the demo start servers of their own: on a GPU
                        # an earlier chapter's idle server would still hold the memory
                        pool.stop_idle()
                    if item.source.endswith(".ipynb"):
                        fields = run_chapter(item, dest, url, deadline)
                    else:
                        fields = run_command(item, dest, profile.model, profile.name, deadline)
                wall = round(time.monotonic() - t)
                run = {"item": item.id, "kind": item.kind, **facts, "model": profile.model,
                       "device_call": f"{call.number} of {calls}", "wall_s": wall,
                       "estimate_s": item.estimate_s, **fields,
                       "servers": recorder.take(), "numbers": [],
                       # what the item's source executed (`reference status` compares it)
                       "source_sha256": source_digest(item)}
                run["headline"] = (
                    f"{facts['gpu']} run of {item.id}: {facts['measured']}, vLLM "
                    f"{facts['vllm_version']}, driver {facts['driver']}, profile "
                    f"{facts['profile']}, device call {call.number} of {calls}, {wall} s "
                    f"(estimated {item.estimate_s} s)")
                run["files"] = sorted(p.relative_to(dest).as_posix()
                                      for p in dest.rglob("*") if p.is_file()) + ["run.json"]
                (dest / "run.json").write_text(json.dumps(run, indent=1) + "\n")
                echo(f"[{item.id}] {'ok' if run['exit'] == 0 else run['failed']} in {wall} s")
                done.append(run)
                dests[item.id] = item.dest
                (out / MANIFEST).write_text(json.dumps(dests, indent=1) + "\n")
    finally:
        pool.close()
    return done


def pack(folder: Path, to: Path, name: str) -> list[Path]:
    """``folder`` as a gzipped tar split into parts ``<name>.tgz.NN`` of at most
    :data:`PART_BYTES` in ``to``.

    Raises:
        ValueError: it needs more than :data:`MAX_PARTS` parts (nothing written).
    """
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(folder, arcname=".")
    data = buf.getvalue()
    n = max(1, -(-len(data) // PART_BYTES))
    if n > MAX_PARTS:
        raise ValueError(f"{folder} packs to {len(data) / 2**20:.1f} MiB, more than "
                         f"{MAX_PARTS} parts of {PART_BYTES / 2**20:.0f} MiB: run fewer items")
    to.mkdir(parents=True, exist_ok=True)
    parts = []
    for i in range(n):
        part = to / f"{name}.tgz.{i:02d}"
        part.write_bytes(data[i * PART_BYTES:(i + 1) * PART_BYTES])
        parts.append(part)
    return parts


def _recorded_profile(run_json: bytes | None) -> str | None:
    """The ``profile`` an item's ``run.json`` records, if it can be read as a name."""
    try:
        profile = json.loads(run_json or b"{}").get("profile")
    except (ValueError, AttributeError, RecursionError):
        return None
    return profile if isinstance(profile, str) else None


#: The most a pack may hold once decompressed (bytes): a pack is at most 8 parts of 16 MiB of
#: files of at most 2 MiB each, mostly JSON, which gzip shrinks about tenfold.
MAX_UNPACKED_BYTES = 2 * 2**30


def _part_order(part: Path) -> tuple[str, str]:
    """Parts join in the order of their names (``.00``, ``.01``, ...), wherever they lie."""
    return part.name, str(part)


def _gunzip(data: bytes, names: str) -> bytes:
    """``data`` decompressed (every gzip member), refusing more than
    :data:`MAX_UNPACKED_BYTES` and anything after the gzip data."""
    out, rest = bytearray(), data
    while rest:
        d = zlib.decompressobj(wbits=31)               # one gzip member
        out += d.decompress(rest, MAX_UNPACKED_BYTES + 1 - len(out))
        if len(out) > MAX_UNPACKED_BYTES or d.unconsumed_tail:
            raise ValueError(f"{names} hold more than {MAX_UNPACKED_BYTES:,} bytes unpacked: "
                             "not a pack of `vllm-course reference run`")
        if not d.eof:
            raise EOFError("the gzip data ends early")
        rest = d.unused_data
    return bytes(out)


def _member_name(name: str) -> str:
    """A member's path inside the pack (``./`` dropped).

    Raises:
        ValueError: it is absolute, has empty, ``.`` or ``..`` segments, or control
            characters: not a plain path inside the pack.
    """
    path = name.removeprefix("./")
    segments = path.split("/")
    if (not path or any(s in ("", ".", "..") for s in segments)
            or any(not c.isprintable() for c in path)):
        raise ValueError(f"refusing {name!r}: not a plain file inside the pack")
    return path


def _read_pack(parts: list[Path]) -> dict[str, bytes]:
    """The files of a pack split into ``parts`` (joined in name order), by path.

    Raises:
        ValueError: the parts do not join into one gzip tar (a part missing, damaged, given
            twice, or parts of several calls), it unpacks to more than
            :data:`MAX_UNPACKED_BYTES`, a member is not a plain file or folder inside the pack
            or comes twice, or there is no manifest.
    """
    parts = sorted(parts, key=_part_order)
    names = ", ".join(p.name for p in parts)
    if len({p.resolve() for p in parts}) != len(parts) or \
            len({p.name for p in parts}) != len(parts):
        raise ValueError(f"{names}: a part is given twice; give each part of one call once")
    try:
        raw = _gunzip(b"".join(p.read_bytes() for p in parts), names)
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
            files = {}
            for m in tar.getmembers():
                if m.isdir():               # folders come from the files' paths
                    continue
                if not m.isfile():
                    raise ValueError(f"refusing {m.name!r}: not a plain file inside the pack")
                name = _member_name(m.name)
                if name in files:
                    raise ValueError(f"refusing {m.name!r}: it comes twice in the pack")
                files[name] = tar.extractfile(m).read()
            end = tar.offset
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:  # OSError: a short read
        raise ValueError(f"{names} do not join into a pack of `vllm-course reference run` "
                         f"({exc or type(exc).__name__}): give every part of one call "
                         "(reference-call-K.tgz.00, .01, ...), each once") from None
    if raw[end:].strip(b"\0"):
        raise ValueError(f"{names} hold more than one pack: give the parts of one call "
                         "(reference-call-K.tgz.*), and unpack each call on its own")
    if MANIFEST not in files:
        raise ValueError(f"the parts hold no {MANIFEST}: not a pack of `vllm-course reference "
                         "run`, or a part is missing")
    return files


def _json_object(data: bytes) -> dict | None:
    """``data`` as a JSON object, ``None`` if it is not one."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _manifest(files: dict[str, bytes]) -> dict[str, str]:
    """The pack's :data:`MANIFEST` (item id -> its folder), checked: each item is one of the
    course's, its folder the course's folder for it, and the pack holds its ``run.json`` as a
    JSON object.

    Raises:
        ValueError: any of these fails (nothing is written then).
    """
    try:
        manifest = json.loads(files[MANIFEST])
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"the pack's {MANIFEST} is not JSON ({type(exc).__name__}): the pack "
                         "is damaged") from None
    if not isinstance(manifest, dict) or not manifest:
        raise ValueError(f"the pack's {MANIFEST} lists no items: the call finished none")
    folders = {item.id: item.dest for item in catalog()}
    for item, dest in manifest.items():
        if item not in folders:
            raise ValueError(f"the pack's {MANIFEST} names {item!r}, not an item of the course")
        if dest != folders[item]:
            raise ValueError(f"the pack's {MANIFEST} puts {item} in {dest!r}, not in its "
                             f"folder {folders[item]}: the pack is damaged")
        if f"{dest}/run.json" not in files:
            raise ValueError(f"the pack holds no {dest}/run.json for {item}: a part is "
                             "missing, or the pack is damaged")
        if _json_object(files[f"{dest}/run.json"]) is None:
            raise ValueError(f"the pack's {dest}/run.json is not a JSON object: the pack is "
                             "damaged")
    return manifest


def _pack_profile(files: dict[str, bytes], dests: list[str], profile: str | None) -> str:
    """``profile``, or the one the items' ``run.json`` record when it is ``None``.

    Raises:
        ValueError: an item records another profile, none is given and the items record
            none or several, or the profile is not one of the course's GPU profiles.
    """
    recorded = {dest: _recorded_profile(files.get(f"{dest}/run.json")) for dest in dests}
    seen = sorted({p for p in recorded.values() if p})
    if profile is None:
        if len(seen) != 1:
            said = f"profiles {', '.join(seen)}" if seen else "no profile"
            raise ValueError(f"the items' run.json record {said}: name the folder of "
                             "reference/ they go to with --profile")
        profile = seen[0]
    gpu = [n for n in env.profile_names() if env.load_profile(n).device == "cuda"]
    if profile not in gpu:
        raise ValueError(f"{profile!r} is not one of the course's GPU profiles "
                         f"({', '.join(gpu)}): nothing unpacked")
    if wrong := {dest: p for dest, p in recorded.items() if p and p != profile}:
        dest, made_on = next(iter(wrong.items()))
        raise ValueError(f"nothing unpacked: {dest} was run on profile {made_on} (its run.json), "
                         f"not {profile}; pass --profile {made_on}")
    return profile


def _refuse_links(root: Path, profile: str, dests: list[str]) -> None:
    """Refuse an item folder, or a folder above it inside ``root``, that is a symbolic link:
    the writes would land elsewhere.

    Raises:
        ValueError: naming the link.
    """
    for dest in dests:
        for path in (root / profile / dest, *(root / profile / dest).parents):
            if path == root:
                break
            if path.is_symlink():
                raise ValueError(f"{path} is a symbolic link: replace it with a folder (or "
                                 "remove it); nothing unpacked")


def _swap(base: Path, dests: list[str], stage: Path) -> None:
    """Put ``stage/new/<dest>`` in place of ``base/<dest>`` for every dest, by renames only:
    the old folders go to ``stage/old`` first, so that one that cannot be moved stops
    everything before a file is lost; on any failure, what was there is put back.

    Raises:
        OSError: a rename failed (everything is as it was).
    """
    moved: list[str] = []            # dests whose old folder is in stage/old
    placed: list[str] = []           # dests whose new folder is in place
    try:
        for dest in dests:
            if (base / dest).exists() or (base / dest).is_symlink():
                (stage / "old" / dest).parent.mkdir(parents=True, exist_ok=True)
                os.replace(base / dest, stage / "old" / dest)
                moved.append(dest)
        for dest in dests:
            (base / dest).parent.mkdir(parents=True, exist_ok=True)
            os.replace(stage / "new" / dest, base / dest)
            placed.append(dest)
    except BaseException:
        for dest in reversed(placed):
            os.replace(base / dest, stage / "new" / dest)
        for dest in reversed(moved):
            os.replace(stage / "old" / dest, base / dest)
        raise


def unpack(parts: list[Path], profile: str | None = None,
           root: Path = REFERENCE_ROOT) -> list[str]:
    """Join ``parts`` (in name order) and put each item's folder they hold (as their
    :data:`MANIFEST` lists them) under ``root/<profile>/``, replacing what was there. Returns
    the folders written, relative to ``root``. ``profile`` defaults to the one the items'
    ``run.json`` record (the machine's, as the runner saw it), so an H100's runs cannot land
    in ``h200/`` by a forgotten option. The folders are written to a temporary folder in ``root``
    first and moved into place only when all of them were written.

    Raises:
        ValueError: the parts are not one whole pack (or hold more than one); a member is
            not a plain file inside the pack, or comes twice; the manifest is missing, names
            an item that is not the course's, or a folder that is not that item's, or an item
            whose ``run.json`` the pack lacks or holds as anything but a JSON object;
            ``profile`` is not one of the course's GPU profiles, or differs from the one an item's
            ``run.json`` records, or none is given and the items record none or several; an
            item's folder here, or a folder above it inside ``root``, is a symbolic link.
            Nothing is written then.
        OSError: writing or moving failed (the folders that were there are put back).
    """
    files = _read_pack(parts)
    dests = list(_manifest(files).values())
    profile = _pack_profile(files, dests, profile)
    _refuse_links(root, profile, dests)
    root.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".unpack-", dir=root))
    try:
        for dest in dests:
            for name, content in files.items():
                if name.startswith(dest + "/"):
                    out = stage / "new" / dest / name[len(dest) + 1:]
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(content)
        _swap(root / profile, dests, stage)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return [f"{profile}/{dest}" for dest in dests]
