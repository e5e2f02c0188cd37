"""The README's snippets stay true."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from vllm_course.config import RunConfig

ROOT = Path(__file__).resolve().parents[2]


def test_readme_run_config_is_the_example_file_and_valid():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", readme, re.S).group(1)
    example = yaml.safe_load((ROOT / "examples" / "run.yaml").read_text())
    assert yaml.safe_load(block) == example
    config = RunConfig.model_validate(example)
    assert config.server.args == {"max-num-seqs": 32}


def test_readme_names_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"^make demo\b", readme, re.M)
    assert re.search(r"^make test\b", readme, re.M)
