"""Typed configuration: server settings, workload, load (arrivals), SLO, and a run file.

All models are frozen pydantic models that reject unknown fields, so a typo in a YAML file is an
error that names the field instead of a silently ignored setting.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Scalar = bool | int | float | str | None
Endpoint = Literal["completions", "chat"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# flags the harness itself passes; setting them in `args` would silently override it
_OWNED = {"host": "server.host", "port": "server.port", "model": "server.model"}


class ServerConfig(_Frozen):
    """How to start one vLLM server.

    Attributes:
        model: an offline card name (``tiny-mistral``, ``mistral-7b-v0.3``), a hub id or a path.
        args: vLLM flags without the leading dashes, e.g. ``{"max-num-seqs": 64}``. ``True``
            passes a bare flag, ``False`` passes ``--no-<flag>``, ``None`` leaves it out.
            Underscores are accepted and turned into dashes.
        host: the loopback address to bind (127.0.0.1, another 127.x address or ``localhost``;
            IPv4, as the URLs the course builds from it are): the course's
            servers run with vLLM's development endpoints on (``VLLM_SERVER_DEV_MODE=1``, for
            ``/reset_prefix_cache``), so they are never exposed to the network.
        port: a fixed port, or ``None`` for a free one.
        env: extra environment variables for the server process.
        startup_timeout_s: how long to wait for ``/health`` before giving up, in seconds
            (finite, > 0).
    """

    model: str = "tiny-mistral"
    args: dict[str, Scalar] = Field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int | None = Field(None, ge=1, le=65535)
    env: dict[str, str] = Field(default_factory=dict)
    startup_timeout_s: float = Field(900.0, gt=0, allow_inf_nan=False)

    @field_validator("host")
    @classmethod
    def _loopback(cls, v: str) -> str:
        import ipaddress

        try:
            loopback = v == "localhost" or (ipaddress.ip_address(v).version == 4
                                            and ipaddress.ip_address(v).is_loopback)
        except ValueError:
            loopback = False
        if not loopback:
            raise ValueError(f"host {v!r}: a course server binds an IPv4 loopback address only "
                             "(127.0.0.1 or localhost); its development endpoints are on")
        return v

    @field_validator("args")
    @classmethod
    def _normalise(cls, v: dict[str, Scalar]) -> dict[str, Scalar]:
        out: dict[str, Scalar] = {}
        for key, value in v.items():
            name = key.lstrip("-").replace("_", "-")
            if name in out:
                raise ValueError(f"flag {name!r} is given twice")
            if name in _OWNED:
                raise ValueError(f"do not pass --{name} in args: set {_OWNED[name]} instead "
                                 "(the harness passes it and polls that address)")
            out[name] = value
        return dict(sorted(out.items()))

    def argv(self) -> list[str]:
        """The flags as vLLM's command line expects them (model and host/port excluded)."""
        out: list[str] = []
        for name, value in self.args.items():
            if value is None:
                continue
            if value is True:
                out.append(f"--{name}")
            elif value is False:
                out.append(f"--no-{name}")
            else:
                out += [f"--{name}", str(value)]
        return out

    def key(self) -> str:
        """A stable identity for reuse: two configs with equal keys start identical servers."""
        return self.model_dump_json(exclude={"startup_timeout_s"})


class SyntheticWorkload(_Frozen):
    """Seeded synthetic requests with exact prompt lengths (as the server counts them).

    Attributes:
        num_requests: how many measured requests.
        input_len: prompt length in tokens, as ``usage.prompt_tokens`` for ``endpoint``.
        output_len: generated tokens per request (``max_tokens`` with ``ignore_eos``).
        input_len_range: if > 0, lengths are uniform in ``input_len * (1 +- range)``.
        output_len_range: the same for output lengths.
        seed: random seed; the same seed gives the same requests byte for byte.
    """

    kind: Literal["synthetic"] = "synthetic"
    num_requests: int = Field(200, gt=0)
    input_len: int = Field(256, gt=0)
    output_len: int = Field(64, gt=0)
    input_len_range: float = Field(0.0, ge=0, lt=1)
    output_len_range: float = Field(0.0, ge=0, lt=1)
    seed: int = 0


class FileWorkload(_Frozen):
    """Requests read from a JSONL file (see :mod:`vllm_course.workload` for the line format)."""

    kind: Literal["file"] = "file"
    path: Path
    num_requests: int | None = Field(None, gt=0)


class TraceWorkload(_Frozen):
    """Requests imported from a public-trace file (see :mod:`vllm_course.workload.trace`).

    Attributes:
        path: the trace file.
        format: ``azure`` (CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``) or ``mooncake``
            (JSONL ``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``);
            ``None`` picks by extension (``.csv`` is azure, anything else mooncake).
        time_scale: replay speed-up: send times are trace times divided by it (2.0 replays twice
            as fast, 0.5 at half speed).
        window_s: ``(start, end)`` in trace seconds from the file's first request; only requests
            with ``start <= t < end`` are kept, and the first kept one is sent at t=0.
        limit: keep at most this many requests (the first ones, after the window).
        block_size: tokens one Mooncake hash id stands for (512 in the public traces).
        seed: salt of the token/word choice; the same file and seed give the same prompts.
        drop_empty: skip rows with a zero input or output length instead of raising.
    """

    kind: Literal["trace"] = "trace"
    path: Path
    format: Literal["azure", "mooncake"] | None = None
    time_scale: float = Field(1.0, gt=0)
    window_s: tuple[float, float] | None = None
    limit: int | None = Field(None, gt=0)
    block_size: int = Field(512, gt=0)
    seed: int = 0
    drop_empty: bool = False

    @field_validator("window_s")
    @classmethod
    def _window_is_ordered(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and not 0 <= v[0] < v[1]:
            raise ValueError(f"window_s must be (start, end) with 0 <= start < end, got {v}")
        return v

    @property
    def trace_format(self) -> Literal["azure", "mooncake"]:
        """``format``, or the one the file extension implies."""
        if self.format is not None:
            return self.format
        return "azure" if self.path.suffix.lower() == ".csv" else "mooncake"


WorkloadSpec = SyntheticWorkload | FileWorkload | TraceWorkload


class LoadSpec(_Frozen):
    """How requests are sent.

    Attributes:
        endpoint: ``completions`` (``/v1/completions``) or ``chat`` (``/v1/chat/completions``).
        rate_rps: mean request rate in requests/s; ``inf`` sends everything at t=0.
        burstiness: gamma shape of the inter-arrival times as vLLM's ``--burstiness``: 1 is
            Poisson, below 1 burstier, ``inf`` a constant rate.
        max_concurrency: closed-loop cap on requests in flight (``None``: no cap). Time spent
            waiting for a slot is reported as client queue time.
        num_warmups: requests sent (and excluded) before the measured run.
        seed: seed of the arrival process.
        timeout_s: per-request timeout in seconds, from send to the end of the stream (waiting
            for a concurrency slot not included).
        arrivals: ``process`` sends at times drawn from ``rate_rps``/``burstiness``/``seed``;
            ``trace`` replays each request's ``timestamp_s`` (relative to the first request; every
            request needs one). ``None`` (default): ``trace`` for a ``kind: trace`` workload,
            ``process`` otherwise. With ``trace``, ``rate_rps`` and ``burstiness`` must keep
            their defaults.
        reset_prefix_cache: empty the server's prefix cache before the run (before the
            warmups), so a reused server starts every run in the same state: no prompt hits
            blocks an earlier run left (``POST /reset_prefix_cache``, as ``vllm bench sweep``
            does between runs). Hits within the run still happen and are counted.
        workers: client processes the run is spread over (``vllm_course.loadgen.workers``):
            one Python process times a few tens of thousands of streamed tokens per second at
            most. ``None`` (default): one on machines with fewer than 8 cores, else one per
            384 streams that can be in flight at once, up to half the cores and 8.
    """

    endpoint: Endpoint = "completions"
    rate_rps: float = Field(math.inf, gt=0)
    burstiness: float = Field(1.0, gt=0)
    max_concurrency: int | None = Field(None, gt=0)
    num_warmups: int = Field(0, ge=0)
    seed: int = 0
    timeout_s: float = Field(600.0, gt=0)
    arrivals: Literal["process", "trace"] | None = None
    reset_prefix_cache: bool = True
    workers: int | None = Field(None, ge=1)

    @field_validator("rate_rps", "burstiness", mode="before")
    @classmethod
    def _null_rate_is_infinite(cls, v: object) -> object:
        # JSON has no infinity: pydantic writes rate_rps=inf (and burstiness=inf, a constant
        # rate) as null (summary.json), so read it back
        return math.inf if v is None else v

    @model_validator(mode="after")
    def _trace_has_no_process(self) -> LoadSpec:
        if self.arrivals == "trace":
            _reject_process_fields(self)
        return self


def _reject_process_fields(load: LoadSpec) -> None:
    given = [
        name
        for name, default in (("rate_rps", math.inf), ("burstiness", 1.0))
        if getattr(load, name) != default
    ]
    if given:
        raise ValueError(
            f"load.{given[0]} does not apply when arrivals replay a trace's timestamps; "
            "remove it, or set load.arrivals: process to use the trace's lengths with a "
            "rate/burstiness arrival process"
        )


class SLO(_Frozen):
    """Per-request service-level objectives in ms; a request is good if every given one holds."""

    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    e2el_ms: float | None = Field(None, gt=0)


class RunConfig(_Frozen):
    """One experiment: a server, a workload and a load, as read from ``--config FILE``."""

    name: str = "run"
    server: ServerConfig = Field(default_factory=ServerConfig)
    workload: WorkloadSpec = Field(default_factory=SyntheticWorkload, discriminator="kind")
    load: LoadSpec = Field(default_factory=LoadSpec)
    slo: SLO | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_workload_kind(cls, data: object) -> object:
        return default_workload_kind(data)

    @model_validator(mode="after")
    def _trace_arrivals_fit(self) -> RunConfig:
        if self.arrivals == "trace":
            _reject_process_fields(self.load)
        return self

    @property
    def arrivals(self) -> Literal["process", "trace"]:
        """How send times are chosen: ``load.arrivals``, or the default for the workload kind."""
        if self.load.arrivals is not None:
            return self.load.arrivals
        return "trace" if isinstance(self.workload, TraceWorkload) else "process"

    @model_validator(mode="after")
    def _name_is_a_folder_name(self) -> RunConfig:
        check_folder_name(self.name)
        return self

    @classmethod
    def from_file(cls, path: str | Path) -> RunConfig:
        """Load a YAML (or JSON) run file.

        A file must have a ``workload:`` and a ``load:`` section: a run that silently sent 200
        default requests would measure something nobody asked for.

        Raises:
            FileNotFoundError: if the file does not exist.
            ValueError: for an empty file or one without a ``workload`` or ``load`` section.
            pydantic.ValidationError: naming each bad or unknown field.
        """
        data = read_mapping(path)
        missing = [key for key in ("workload", "load") if key not in data]
        if missing:
            raise ValueError(
                f"{path}: no {' and no '.join(missing)} section; a run file says what to send "
                "(workload:) and how (load:), as examples/run.yaml does")
        return cls.model_validate(data)


def default_workload_kind(data: object) -> object:
    """Fill in a workload's ``kind`` when a file leaves it out: a workload with a ``path`` is a
    file (a trace if it has a ``format`` or ends in ``.csv``), anything else synthetic."""
    if isinstance(data, dict) and isinstance(data.get("workload"), dict):
        wl = data["workload"]
        if "kind" not in wl:
            kind = "synthetic"
            if "path" in wl:
                trace = "format" in wl or str(wl["path"]).lower().endswith(".csv")
                kind = "trace" if trace else "file"
            data = {**data, "workload": {"kind": kind, **wl}}
    return data


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (plain YAML keeps the last
    one, so a sweep spec with ``servers:`` written twice would lose the first block silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue                # the safe loader names an unhashable key itself
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice in one mapping",
                    key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                 _UniqueKeyLoader.construct_mapping)


def read_mapping(path: str | Path) -> dict:
    """A YAML (or JSON) file whose top level is a mapping.

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: if the file is empty or its top level is not a mapping.
        yaml.YAMLError: not valid YAML, or a key given twice in one mapping (line and column
            named).
    """
    data = yaml.load(Path(path).read_text(), Loader=_UniqueKeyLoader)   # noqa: S506 (safe)
    if data is None:
        raise ValueError(f"{path}: the file is empty")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def check_folder_name(name: str, what: str = "name") -> str:
    """``name`` if it is a plain folder name (not empty, no slash, not starting with a dot).

    Raises:
        ValueError: naming ``what`` and the bad value.
    """
    if not name or any(c in name for c in "/\\") or name.startswith("."):
        raise ValueError(f"{what} {name!r} must be a plain folder name")
    return name
