"""The CI performance guard (``scripts/perf_guard``) fails a deliberate 10% slowdown.

The slowdown is injected from outside the code under test: a ``sitecustomize`` on the
workloads' ``PYTHONPATH`` makes every step attempt (in process and on a fleet worker) do
about 390,000 instructions of extra work first, about 10% of a no-op step's cost (3.8 M
instructions per in-process step, 4.5 M per fleet branch, on Python 3.11, in December 2026:
as steps get cheaper, this shrinks with them).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # four runs under valgrind

SLOWDOWN = """
import little_dist.runtime as runtime

_real = runtime.execute_step_attempt


def _slowed(*args, **kwargs):
    total = 0
    for index in range(950):  # about 410 instructions a turn (Python 3.11)
        total += index
    return _real(*args, **kwargs)


runtime.execute_step_attempt = _slowed
"""


def test_a_ten_percent_slowdown_of_every_step_fails_the_guard(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(SLOWDOWN, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "perf_guard")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout
    for line in lines:
        assert "SLOWER than the budget" in line, line
        change = float(line.split("(")[1].split("%")[0])
        assert 5.0 < change < 15.0, line
