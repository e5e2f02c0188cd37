"""What a request set looks like: counts, length percentiles, prefix sharing, arrival rate.

``vllm-course workload describe FILE`` prints :meth:`WorkloadStats.report` and writes
:func:`save_histogram_png`. ``FILE`` is a JSONL request set (:mod:`vllm_course.workload`) or a
trace (:mod:`vllm_course.workload.trace`): ``.csv`` is read as an Azure trace, a ``.jsonl``
whose first request has ``input_length`` as a Mooncake trace, anything else as our JSONL;
``format`` forces one.

Percentiles are linear-interpolated (``np.percentile``'s default), the convention of the
numbers the datasets' cards quote from the public traces. Prefix sharing is given twice, as
:class:`vllm_course.workload.prefix.PrefixStats` defines it, for requests sent in file order to
a fresh server: the **sharing ratio** (tokens of each
prompt's longest common prefix with an earlier prompt, over all prompt tokens) and the **expected
prefix-cache hit rate** (tokens vLLM serves from its cache in whole ``cache_block_size`` blocks,
last prompt token always computed: Δ``prefix_cache_hits`` / Δ``prefix_cache_queries``). For a
Mooncake trace both come from the hash ids (each id fixes its ``block_size`` tokens, see
:mod:`vllm_course.workload.trace`), without building prompts; Azure traces carry no prompt
content, so their prompts share nothing; JSONL prompts are tokenized as the server will.
The **arrival rate** is ``(n - 1) / (last timestamp - first timestamp)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from vllm_course.config import Endpoint
from vllm_course.metrics import Dist
from vllm_course.workload import trace
from vllm_course.workload.request import Request, read_jsonl
from vllm_course.workload.tokenizer import PromptTokenizer

FileFormat = Literal["jsonl", "azure", "mooncake"]


@dataclass
class WorkloadStats:
    """Summary of one request set (lengths in tokens, times in seconds).

    Attributes:
        source: the file (or a label).
        format: ``jsonl``, ``azure`` or ``mooncake``.
        prompt_lens: ``usage.prompt_tokens`` per request, in send order.
        output_lens: output tokens per request.
        prompt: percentiles of ``prompt_lens``.
        output: percentiles of ``output_lens``.
        prefix_sharing: longest-common-prefix tokens with an earlier prompt over all prompt
            tokens (0-1).
        prefix_hit_rate: expected token-level prefix-cache hit rate (0-1) on a fresh server.
        prefix_note: how the two were obtained.
        timestamps_s: arrival times (trace seconds) when every request has one, else ``None``.
    """

    source: str
    format: FileFormat
    prompt_lens: list[int]
    output_lens: list[int]
    prefix_sharing: float | None = None
    prefix_hit_rate: float | None = None
    prefix_note: str = ""
    timestamps_s: list[float] | None = None
    prompt: Dist = field(init=False)
    output: Dist = field(init=False)

    def __post_init__(self) -> None:
        self.prompt = Dist.of(self.prompt_lens)
        self.output = Dist.of(self.output_lens)

    @property
    def num_requests(self) -> int:
        """How many requests."""
        return len(self.prompt_lens)

    @property
    def total_prompt_tokens(self) -> int:
        """Sum of prompt lengths."""
        return int(sum(self.prompt_lens))

    @property
    def total_output_tokens(self) -> int:
        """Sum of output lengths."""
        return int(sum(self.output_lens))

    @property
    def total_tokens(self) -> int:
        """Prompt plus output tokens."""
        return self.total_prompt_tokens + self.total_output_tokens

    @property
    def span_s(self) -> float | None:
        """Last minus first arrival time, or ``None`` without timestamps."""
        if not self.timestamps_s:
            return None
        return max(self.timestamps_s) - min(self.timestamps_s)

    @property
    def arrival_rate_rps(self) -> float | None:
        """``(n - 1) / span_s`` in requests/s; ``None`` without timestamps or a zero span."""
        span = self.span_s
        if span is None or span <= 0:
            return None
        return (self.num_requests - 1) / span

    def report(self) -> str:
        """A few lines of plain text for a terminal."""

        def dist(d: Dist) -> str:
            return (
                f"mean {d.mean:,.1f}  P50 {d.p50:,.0f}  P90 {d.p90:,.0f}  P99 {d.p99:,.0f}  "
                f"max {d.max:,.0f}"
            )

        lines = [
            f"{self.source} ({self.format})",
            f"  requests       {self.num_requests:,}",
            f"  prompt tokens  {dist(self.prompt)}",
            f"  output tokens  {dist(self.output)}",
            f"  total tokens   {self.total_tokens:,} ({self.total_prompt_tokens:,} prompt + "
            f"{self.total_output_tokens:,} output)",
        ]

        def pct(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.1%}"

        lines.append(
            f"  prefix sharing {pct(self.prefix_sharing)} of prompt tokens (longest common "
            "prefix with an earlier request)"
        )
        lines.append(
            f"  prefix cache   {pct(self.prefix_hit_rate)} expected hit rate on a fresh server"
            + (f" ({self.prefix_note})" if self.prefix_note else "")
        )
        rate = self.arrival_rate_rps
        if self.timestamps_s is None:
            lines.append("  arrivals       no timestamps (sent by an arrival process)")
        elif rate is None:
            lines.append(f"  arrivals       all {self.num_requests} at the same time")
        else:
            lines.append(
                f"  arrivals       {rate:.3f} req/s over {self.span_s:,.3f} s (trace timestamps)"
            )
        return "\n".join(lines)


# -- lengths and sharing ------------------------------------------------------------------------


def prompt_lengths(
    requests: Sequence[Request],
    endpoint: Endpoint = "completions",
    tokenizer: PromptTokenizer | str | None = None,
) -> list[int]:
    """Each request's ``usage.prompt_tokens``: its ``prompt_len``, the number of token ids, or
    (text and conversations without ``prompt_len``) the count by ``tokenizer``.

    ``tokenizer`` is a :class:`PromptTokenizer` or a model name; it is built only if needed.

    Raises:
        ValueError: if a prompt must be counted and no tokenizer was given.
    """
    tok = tokenizer
    out = []
    for r in requests:
        if r.prompt_len is not None:
            out.append(r.prompt_len)
        elif isinstance(r.prompt, tuple) and not r.is_conversation:
            out.append(len(r.prompt))
        else:
            if tok is None:
                raise ValueError("a tokenizer is needed to count text prompts without prompt_len")
            if isinstance(tok, str):
                tok = PromptTokenizer(tok)
            out.append(tok.prompt_len(r.prompt, endpoint))
    return out


def hash_id_prefix(
    rows: Sequence[trace.TraceRow], block_size: int = 512, cache_block_size: int = 16
) -> tuple[list[int], list[int]]:
    """``(shared, cached)`` tokens per request of a Mooncake trace, from the hash ids alone.

    The same numbers as :func:`vllm_course.workload.prefix.shared_tokens` and
    :func:`~vllm_course.workload.prefix.cached_tokens` on the prompts
    :func:`trace.import_trace` builds, without building them, except that ``shared`` leaves out
    the BOS token every prompt starts
    with (and chance equal tokens after a differing block). Tokens past the last hash id's block
    are unique to their request, so they never count.
    """
    seen_raw: dict[int, int] = {}  # hash id -> longest stretch of its block any prompt had
    seen_full: dict[int, int] = {}  # the same in whole cache blocks
    shared_out, cached_out = [], []
    for row in rows:
        usable = row.input_len // cache_block_size * cache_block_size
        shared = cached = 0
        open_raw = open_full = True
        for j, h in enumerate(row.hash_ids):
            raw = max(0, min(block_size, row.input_len - j * block_size))
            full = max(0, min(block_size, usable - j * block_size))
            before_raw, before_full = seen_raw.get(h, 0), seen_full.get(h, 0)
            if open_raw:
                shared += min(raw, before_raw)
                open_raw = before_raw >= raw
            if open_full:
                cached += min(full, before_full)
                open_full = before_full >= full
            seen_raw[h] = max(before_raw, raw)
            seen_full[h] = max(before_full, full)
        limit = max(row.input_len - 1, 0) // cache_block_size * cache_block_size
        shared_out.append(shared)
        cached_out.append(min(cached // cache_block_size * cache_block_size, limit))
    return shared_out, cached_out


def describe_requests(
    requests: Sequence[Request],
    *,
    endpoint: Endpoint = "completions",
    tokenizer: PromptTokenizer | str = "tiny-mistral",
    source: str = "requests",
    cache_block_size: int = 16,
) -> WorkloadStats:
    """:class:`WorkloadStats` of requests in memory (send order)."""
    from vllm_course.workload.prefix import expected_prefix_hit_rate

    tok = PromptTokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer
    times = [r.timestamp_s for r in requests]
    prefix = expected_prefix_hit_rate(requests, tok, endpoint, block_size=cache_block_size)
    return WorkloadStats(
        source=source,
        format="jsonl",
        prompt_lens=prompt_lengths(requests, endpoint, tok),
        output_lens=[r.output_len for r in requests],
        prefix_sharing=prefix.sharing_ratio,
        prefix_hit_rate=prefix.hit_rate,
        prefix_note=f"{endpoint} token ids, {cache_block_size}-token cache blocks",
        timestamps_s=None if any(t is None for t in times) else [float(t) for t in times],
    )


def detect_file_format(path: str | Path) -> FileFormat:
    """``azure`` for ``.csv``; ``mooncake`` if the first request line has ``input_length``;
    else ``jsonl``."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        return "azure"
    # a byte that is not UTF-8 is the reader's to report, with its line: sniff past it
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.strip():
                return "mooncake" if '"input_length"' in line else "jsonl"
    return "jsonl"


def describe_file(
    path: str | Path,
    *,
    format: FileFormat | None = None,  # noqa: A002
    endpoint: Endpoint | None = None,
    model: str = "tiny-mistral",
    block_size: int = trace.MOONCAKE_BLOCK_SIZE,
    cache_block_size: int = 16,
) -> WorkloadStats:
    """:class:`WorkloadStats` of a JSONL request set or a trace file (whole file, trace order).

    ``endpoint`` decides how prompt tokens are counted; ``None`` means ``chat`` for a file whose
    prompts are conversations (they can only be sent there) and ``completions`` otherwise.

    Traces are described from their rows (lengths as given, no prompts built), so large trace
    files are quick; ``model`` is only loaded for JSONL files.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        WorkloadError: for a bad line (``path:line``).
    """
    path = Path(path)
    fmt = format or detect_file_format(path)
    if fmt == "jsonl":
        requests = read_jsonl(path)
        if endpoint is None:
            chat = any(isinstance(r.prompt, tuple) and r.prompt
                       and not isinstance(r.prompt[0], int) for r in requests)
            endpoint = "chat" if chat else "completions"
        stats = describe_requests(
            requests,
            endpoint=endpoint,
            tokenizer=model,
            source=str(path),
            cache_block_size=cache_block_size,
        )
        return stats
    rows = trace.read_rows(path, fmt, block_size=block_size)
    prompt_lens = [r.input_len for r in rows]
    total = sum(prompt_lens)
    if fmt == "mooncake":
        shared, cached = hash_id_prefix(rows, block_size, cache_block_size)
        sharing, hit_rate = sum(shared) / total, sum(cached) / total
        note = f"from hash_ids of {block_size} tokens, {cache_block_size}-token cache blocks"
    else:
        sharing = hit_rate = 0.0
        note = "Azure traces carry no prompt content: every prompt is unique"
    t0 = rows[0].time_s
    return WorkloadStats(
        source=str(path),
        format=fmt,
        prompt_lens=prompt_lens,
        output_lens=[r.output_len for r in rows],
        prefix_sharing=sharing,
        prefix_hit_rate=hit_rate,
        prefix_note=note,
        timestamps_s=[round(r.time_s - t0, 6) for r in rows],
    )


# -- histogram ----------------------------------------------------------------------------------


def save_histogram_png(stats: WorkloadStats, path: str | Path, bins: int = 40) -> Path:
    """Histograms of prompt and output lengths (and arrivals per second with timestamps) to a
    PNG, through matplotlib's ``Figure`` (pyplot's global state is not touched)."""
    from matplotlib.figure import Figure

    panels = 3 if stats.timestamps_s and stats.span_s else 2
    fig = Figure(figsize=(4.2 * panels, 3.4), constrained_layout=True)
    fig.suptitle(f"{Path(stats.source).name}: {stats.num_requests:,} requests")
    axes = fig.subplots(1, panels)
    for ax, values, label, dist in (
        (axes[0], stats.prompt_lens, "prompt tokens", stats.prompt),
        (axes[1], stats.output_lens, "output tokens", stats.output),
    ):
        ax.hist(values, bins=bins, color="tab:blue", alpha=0.8)
        for p, style in (("p50", ":"), ("p99", "--")):
            ax.axvline(
                getattr(dist, p),
                color="grey",
                linestyle=style,
                linewidth=0.9,
                label=f"{p.upper()} {getattr(dist, p):,.0f}",
            )
        ax.set_xlabel(label)
        ax.set_ylabel("requests")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    if panels == 3:
        t = np.asarray(stats.timestamps_s, dtype=float)
        t -= t.min()
        edges = np.arange(0, float(t.max()) + 1.0, 1.0)
        ax = axes[2]
        ax.hist(t, bins=edges if len(edges) > 1 else 1, color="tab:orange", alpha=0.8)
        ax.set_xlabel("arrival time (s)")
        ax.set_ylabel("requests per second")
        ax.grid(alpha=0.3)
    path = Path(path)
    fig.savefig(path, dpi=100)
    return path
