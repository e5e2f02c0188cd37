"""Run a few configurations against real vLLM and print each run's report and diagnosis.

Used to check the observability path on new hardware (e.g. the H200: NVML telemetry, server-side
histograms, the diagnosis on a GPU result). Runs with identical server settings share one server.

    python benchmarks/diagnose_runs.py examples/run.yaml [more.yaml ...] --out DIR

Each run folder is written under DIR (default ``results/``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from vllm_course import env
from vllm_course.config import RunConfig
from vllm_course.diagnosis import diagnose
from vllm_course.experiment import run_experiment
from vllm_course.server import ServerPool


async def _main(paths: list[str], out: str) -> None:
    profile = env.current_profile()
    with ServerPool(max_live=1, profile_args=profile.server_args) as pool:
        for path in paths:
            config = RunConfig.from_file(path)
            result = await run_experiment(config, out, pool=pool)
            print(result.report())
            print(diagnose(result).report())
            series = result.timeseries()
            keys = sorted({k for p in series.points for k in p.telemetry})
            print(f"telemetry keys: {', '.join(keys) or 'none'}; {len(series.points)} samples\n",
                  flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="+", help="run config YAML files (vllm-course run)")
    parser.add_argument("--out", default="results", help="results folder (default: results)")
    args = parser.parse_args(argv)
    asyncio.run(_main(args.configs, args.out))


if __name__ == "__main__":
    sys.exit(main())
