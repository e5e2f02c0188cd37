"""Unit tests mirror the package (tests/unit/server/ tests vllm_course/server/, ...); the fakes
they share (fake_runs, fake_sse) and recorded data (data/) stay here, on the import path."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
