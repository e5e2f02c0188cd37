"""Graded labs, autograded by nbgrader as an instructor would, against real vLLM."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.vllm)
