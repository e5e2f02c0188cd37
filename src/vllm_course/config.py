"""Typed configuration: server settings, workload, load (arrivals), SLO, and a run file.

All models are frozen pydantic models that reject unknown fields, so a typo in a YAML file is an
error that names the field instead of a silently ignored setting.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Scalar = Union[bool, int, float, str, None]
Endpoint = Literal["completions", "chat"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ServerConfig(_Frozen):
    """How to start one vLLM server.

    Attributes:
        model: an offline card name (``tiny-mistral``, ``mistral-7b-v0.3``), a hub id or a path.
        args: vLLM flags without the leading dashes, e.g. ``{"max-num-seqs": 64}``. ``True``
            passes a bare flag, ``False`` passes ``--no-<flag>``, ``None`` leaves it out.
            Underscores are accepted and turned into dashes.
        host: address to bind; 127.0.0.1 unless you mean to expose the server.
        port: a fixed port, or ``None`` for a free one.
        env: extra environment variables for the server process.
        startup_timeout_s: how long to wait for ``/health`` before giving up, in seconds.
    """

    model: str = "tiny-mistral"
    args: dict[str, Scalar] = Field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int | None = None
    env: dict[str, str] = Field(default_factory=dict)
    startup_timeout_s: float = 900.0

    @field_validator("args")
    @classmethod
    def _normalise(cls, v: dict[str, Scalar]) -> dict[str, Scalar]:
        out: dict[str, Scalar] = {}
        for key, value in v.items():
            name = key.lstrip("-").replace("_", "-")
            if name in out:
                raise ValueError(f"flag {name!r} is given twice")
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


WorkloadSpec = Union[SyntheticWorkload, FileWorkload]


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
    """

    endpoint: Endpoint = "completions"
    rate_rps: float = Field(math.inf, gt=0)
    burstiness: float = Field(1.0, gt=0)
    max_concurrency: int | None = Field(None, gt=0)
    num_warmups: int = Field(0, ge=0)
    seed: int = 0
    timeout_s: float = Field(600.0, gt=0)


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
        # `kind` may be left out: a workload with a `path` is a file, anything else synthetic
        if isinstance(data, dict) and isinstance(data.get("workload"), dict):
            wl = data["workload"]
            if "kind" not in wl:
                data = {**data, "workload": {"kind": "file" if "path" in wl else "synthetic", **wl}}
        return data

    @model_validator(mode="after")
    def _name_is_a_folder_name(self) -> RunConfig:
        if not self.name or any(c in self.name for c in "/\\") or self.name.startswith("."):
            raise ValueError(f"name {self.name!r} must be a plain folder name")
        return self

    @classmethod
    def from_file(cls, path: str | Path) -> RunConfig:
        """Load a YAML (or JSON) run file.

        Raises:
            FileNotFoundError: if the file does not exist.
            pydantic.ValidationError: naming each bad or unknown field.
        """
        data = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(
                f"{path}: expected a mapping at the top level, got {type(data).__name__}"
            )
        return cls.model_validate(data)
