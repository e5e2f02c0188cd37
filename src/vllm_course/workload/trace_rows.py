"""Reading public traces into rows: the Azure LLM inference CSVs and Mooncake's JSONL (the layouts
are described in :mod:`vllm_course.workload.trace`, which turns rows into requests). Rows are
sorted by timestamp (stably); every problem is a
:class:`~vllm_course.workload.WorkloadError` naming ``path:line``."""


import csv
import datetime as dt
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from vllm_course.workload.request import WorkloadError, json_object

TraceFormat = Literal["azure", "mooncake"]

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")
MOONCAKE_BLOCK_SIZE = 512

_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s*(Z|[+-]\d{2}:?\d{2})?"
)


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of a trace file, before prompts are built.

    Attributes:
        line: 1-based line in the file.
        time_s: trace time in seconds (Azure: POSIX seconds of ``TIMESTAMP``, naive times read as
            UTC; Mooncake: ``timestamp / 1000``). Only differences matter.
        input_len: prompt tokens (``ContextTokens`` / ``input_length``).
        output_len: generated tokens (``GeneratedTokens`` / ``output_length``).
        hash_ids: Mooncake block hash ids (empty for Azure).
    """

    line: int
    time_s: float
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] = ()


def detect_format(path: str | Path) -> TraceFormat:
    """``azure`` for a ``.csv`` file, ``mooncake`` otherwise."""
    return "azure" if Path(path).suffix.lower() == ".csv" else "mooncake"


def parse_timestamp(text: str) -> tuple[float, bool]:
    """``(seconds, has_offset)`` of an Azure ``TIMESTAMP`` or a plain number of seconds.

    Any number of fractional digits is kept (the 2023 files have 7). Naive times are read as UTC.

    Raises:
        ValueError: if ``text`` is neither.
    """
    text = text.strip()
    m = _TIME.fullmatch(text)
    if m is None:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"unreadable timestamp {text!r}") from None
        if not math.isfinite(value):
            raise ValueError(f"unreadable timestamp {text!r}")
        return value, False
    y, mo, d, h, mi, s, frac, tz = m.groups()
    offset = dt.timedelta(0)
    if tz and tz != "Z":
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        offset = sign * dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    try:
        when = dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=dt.timezone.utc)
    except ValueError as exc:
        raise ValueError(f"unreadable timestamp {text!r} ({exc})") from None
    seconds = (when - offset).timestamp() + (float("0." + frac) if frac else 0.0)
    return seconds, tz is not None


def _int_field(value: object, name: str, where: str) -> int:
    if isinstance(value, str):
        value = value.strip()
        if re.fullmatch(r"[+-]?\d+", value):
            value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise WorkloadError(f"{where}: '{name}' must be an integer, got {value!r}")
    if value < 0:
        raise WorkloadError(f"{where}: '{name}' is negative ({value})")
    return value


def _usable(row: TraceRow, names: tuple[str, str], where: str, drop_empty: bool) -> bool:
    for value, name in zip((row.input_len, row.output_len), names, strict=True):
        if value == 0:
            if drop_empty:
                return False
            raise WorkloadError(
                f"{where}: '{name}' is 0; a request needs at least 1 token "
                "(drop_empty=True skips such rows)"
            )
    return True


def _csv_lines(fh, path: Path) -> Iterator[tuple[int, list[str]]]:
    """``(line number, cells)`` of a CSV file; a line the csv module cannot read (a field over
    its size limit, a NUL byte) is a :class:`WorkloadError` naming ``path:line``."""
    reader = csv.reader(fh)
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise WorkloadError(f"{path}:{reader.line_num}: not readable as CSV ({exc})") from None
        yield reader.line_num, cells


def _read_azure(path: Path, drop_empty: bool) -> list[TraceRow]:  # noqa: C901 - one check per cell
    rows: list[TraceRow] = []
    with path.open(encoding="utf-8-sig", newline="") as fh:
        header: list[str] | None = None
        cols: list[int] = []
        has_offset: bool | None = None
        for line, cells in _csv_lines(fh, path):
            where = f"{path}:{line}"
            if not cells or all(not c.strip() for c in cells):
                continue
            if header is None:
                header = [c.strip() for c in cells]
                missing = [c for c in AZURE_COLUMNS if c not in header]
                if missing:
                    raise WorkloadError(
                        f"{where}: missing column(s) {missing} in the header {header} "
                        f"(an Azure LLM trace has {','.join(AZURE_COLUMNS)})"
                    )
                cols = [header.index(c) for c in AZURE_COLUMNS]
                continue
            if len(cells) != len(header):
                raise WorkloadError(f"{where}: {len(cells)} field(s), the header has {len(header)}")
            stamp, ctx, gen = (cells[i] for i in cols)
            try:
                seconds, offset = parse_timestamp(stamp)
            except ValueError as exc:
                raise WorkloadError(f"{where}: 'TIMESTAMP': {exc}") from None
            if has_offset is None:
                has_offset = offset
            elif offset != has_offset:
                raise WorkloadError(
                    f"{where}: 'TIMESTAMP' {stamp!r} mixes times with and without a UTC offset"
                )
            row = TraceRow(
                line,
                seconds,
                _int_field(ctx, "ContextTokens", where),
                _int_field(gen, "GeneratedTokens", where),
            )
            if _usable(row, ("ContextTokens", "GeneratedTokens"), where, drop_empty):
                rows.append(row)
    if header is None:
        raise WorkloadError(f"{path}: empty file (expected the header {','.join(AZURE_COLUMNS)})")
    return rows


def _mooncake_row(line: str, number: int, where: str) -> TraceRow:
    data = json_object(line, where)
    missing = [k for k in MOONCAKE_FIELDS if k not in data]
    if missing:
        raise WorkloadError(f"{where}: missing field(s) {missing}")
    ts = data["timestamp"]
    if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not math.isfinite(ts):
        raise WorkloadError(f"{where}: 'timestamp' must be a number of ms, got {ts!r}")
    if ts < 0:
        raise WorkloadError(f"{where}: 'timestamp' is negative ({ts})")
    ids = data.get("hash_ids", [])
    if not isinstance(ids, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in ids
    ):
        raise WorkloadError(f"{where}: 'hash_ids' must be a list of integers >= 0")
    return TraceRow(
        number,
        ts / 1000.0,
        _int_field(data["input_length"], "input_length", where),
        _int_field(data["output_length"], "output_length", where),
        tuple(ids),
    )


def _read_mooncake(path: Path, block_size: int, drop_empty: bool) -> list[TraceRow]:
    rows: list[TraceRow] = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            row = _mooncake_row(line, number, where)
            if not _usable(row, ("input_length", "output_length"), where, drop_empty):
                continue
            n = len(row.hash_ids)
            if n and (n - 1) * block_size >= row.input_len:
                raise WorkloadError(
                    f"{where}: {n} hash_ids of {block_size} tokens need more than "
                    f"{(n - 1) * block_size} tokens, but input_length is {row.input_len} "
                    "(is block_size right?)"
                )
            rows.append(row)
    return rows


def read_rows(
    path: str | Path,
    format: TraceFormat | None = None,  # noqa: A002 - the trace format's name
    *,
    block_size: int = MOONCAKE_BLOCK_SIZE,
    drop_empty: bool = False,
) -> list[TraceRow]:
    """Every request of a trace file, validated and sorted by time (stable).

    Args:
        path: the trace file.
        format: ``azure`` or ``mooncake``; ``None`` picks by extension (:func:`detect_format`).
        block_size: tokens per Mooncake hash id, to check ``hash_ids`` against ``input_length``.
        drop_empty: skip rows with a zero length instead of raising.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        WorkloadError: for the first bad line (``path:line``: malformed, missing column or field,
            negative or zero length, too many hash ids), or a file without requests.
    """
    path = Path(path)
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    fmt = format or detect_format(path)
    if fmt == "azure":
        rows = _read_azure(path, drop_empty)
    elif fmt == "mooncake":
        rows = _read_mooncake(path, block_size, drop_empty)
    else:
        raise ValueError(f"unknown trace format {fmt!r}; use azure or mooncake")
    if not rows:
        raise WorkloadError(f"{path}: no requests in file")
    rows.sort(key=lambda r: r.time_s)
    return rows


def select(
    rows: Sequence[TraceRow],
    *,
    window_s: tuple[float, float] | None = None,
    limit: int | None = None,
) -> list[TraceRow]:
    """The rows in ``window_s`` (trace seconds from ``rows[0]``, ``start <= t < end``), then the
    first ``limit`` of them. ``rows`` must be sorted by time (as :func:`read_rows` returns them).

    Raises:
        WorkloadError: if nothing is left.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    out = list(rows)
    if window_s is not None:
        start, end = window_s
        if not 0 <= start < end:
            raise ValueError(f"window_s must be (start, end) with 0 <= start < end, got {window_s}")
        origin = out[0].time_s if out else 0.0
        out = [r for r in out if start <= r.time_s - origin < end]
        if not out:
            raise WorkloadError(
                f"no requests in the window {start:g}-{end:g} s (trace seconds from the first "
                f"request; the trace spans {rows[-1].time_s - origin:.3f} s)"
            )
    return out[:limit] if limit is not None else out


def replay_times(rows: Sequence[TraceRow], time_scale: float = 1.0) -> list[float]:
    """Send times in seconds: ``(t - t_first) / time_scale``, rounded to microseconds."""
    if not time_scale > 0 or not math.isfinite(time_scale):
        raise ValueError(f"time_scale must be a finite number > 0, got {time_scale}")
    if not rows:
        return []
    t0 = rows[0].time_s
    return [round((r.time_s - t0) / time_scale, 6) for r in rows]


# -- prompts ------------------------------------------------------------------------------------
