"""What sweeps, SLO searches and compares are given: :class:`ExperimentSpec` (a name, one
workload, the base load and an optional SLO) and labelled server settings."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator, model_validator

from vllm_course.config import (
    SLO,
    LoadSpec,
    RunConfig,
    ServerConfig,
    SyntheticWorkload,
    WorkloadSpec,
    _Frozen,
    check_folder_name,
    default_workload_kind,
    read_mapping,
)


def server_label(server: ServerConfig) -> str:
    """A short label for a server setting: ``default`` without flags, else its flags, e.g.
    ``max-num-seqs=8,enforce-eager``."""
    if not server.args:
        return "default"
    parts = [k if v is True else f"{k}={v}" for k, v in server.args.items()]
    return ",".join(parts).replace("/", "_")


class ExperimentSpec(_Frozen):
    """What sweeps, SLO searches and compares share: a name, the workload, the base load (each
    point changes its rate or concurrency) and an optional SLO (for goodput).

    Attributes:
        name: a plain folder name; results go to ``<results>/<name>-<time>/``.
        workload: synthetic, a JSONL file, or a trace (``kind`` may be left out, as in a run
            file).
        load: endpoint, arrivals, warmups, seeds; the point's level replaces ``rate_rps`` or
            ``max_concurrency``.
        slo: per-request SLOs (ms) for goodput.
    """

    name: str = "experiment"
    workload: WorkloadSpec = Field(default_factory=SyntheticWorkload, discriminator="kind")
    load: LoadSpec = Field(default_factory=LoadSpec)
    slo: SLO | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_workload_kind(cls, data: object) -> object:
        return default_workload_kind(data)

    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        return check_folder_name(v)

    @classmethod
    def from_file(cls, path: str | Path):
        """Load a YAML (or JSON) file into this spec.

        Raises:
            FileNotFoundError: if the file does not exist.
            pydantic.ValidationError: naming each bad or unknown field.
        """
        return cls.model_validate(read_mapping(path))

    def run_config(self, name: str, server: ServerConfig, **load: object) -> RunConfig:
        """The :class:`RunConfig` of one point: this spec's workload and SLO, ``server``, and
        the base load with the fields in ``load`` replaced (validated). Every point sends the
        same prompts; each run starts from an empty prefix cache (``load.reset_prefix_cache``)."""
        data = {**self.load.model_dump(), **load}
        return RunConfig(name=name, server=server, workload=self.workload,
                         load=LoadSpec.model_validate(data), slo=self.slo)


def labelled_servers(value: object) -> object:
    """Accept servers as ``{label: server}`` or as a list (labels from :func:`server_label`,
    suffixed ``-2``, ``-3`` when two are equal). For ``mode="before"`` validators."""
    if not isinstance(value, list):
        return value
    out: dict[str, object] = {}
    for item in value:
        server = item if isinstance(item, ServerConfig) else ServerConfig.model_validate(item)
        label, n = server_label(server), 1
        while label in out:
            n += 1
            label = f"{server_label(server)}-{n}"
        out[label] = server
    return out


def check_labels(servers: dict[str, ServerConfig]) -> dict[str, ServerConfig]:
    """``servers`` if it is not empty and every label is a plain folder name.

    Raises:
        ValueError: for no servers or a bad label.
    """
    if not servers:
        raise ValueError("give at least one server setting under `servers`")
    for label in servers:
        check_folder_name(label, "server label")
    return servers


class SettingsSpec(ExperimentSpec):
    """An experiment over several server settings (a sweep, a compare).

    Attributes:
        servers: ``{label: ServerConfig}``; a list is accepted, labelled by its flags
            (:func:`labelled_servers`). Labels are plain folder names.
    """

    servers: dict[str, ServerConfig]

    @field_validator("servers", mode="before")
    @classmethod
    def _servers_as_list(cls, v: object) -> object:
        return labelled_servers(v)

    @field_validator("servers")
    @classmethod
    def _labels_ok(cls, v: dict[str, ServerConfig]) -> dict[str, ServerConfig]:
        return check_labels(v)
