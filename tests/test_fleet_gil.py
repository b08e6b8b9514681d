"""A threads-pool worker's switch interval (in a child process: the test run's own
interpreter keeps its interval)."""

from __future__ import annotations

import json
import subprocess
import sys

from little_dist.fleet.gil import SWITCH_INTERVAL_S

_CHILD = """
import json, sys
from little_dist.fleet.gil import tune_switch_interval
default = sys.getswitchinterval()
prefork = tune_switch_interval("prefork")
threads = tune_switch_interval("threads")
sys.setswitchinterval(0.0005)
kept = tune_switch_interval("threads")
print(json.dumps({"default": default, "prefork": prefork, "threads": threads, "kept": kept}))
"""


def test_a_threads_pool_switches_threads_sooner_and_other_pools_keep_the_default() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True, timeout=60
    )
    seen = json.loads(out.stdout)
    assert seen["default"] == 0.005
    assert seen["prefork"] == seen["default"]
    assert abs(seen["threads"] - SWITCH_INTERVAL_S) < 1e-9
    assert abs(seen["kept"] - 0.0005) < 1e-9  # one set shorter already is kept
