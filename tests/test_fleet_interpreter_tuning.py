"""How fleet processes tune their interpreter: garbage collection and the thread switch
interval (each in a child process: the test run's own interpreter keeps its settings)."""

from __future__ import annotations

import json
import subprocess
import sys

from little_dist.fleet.interpreter_tuning import GEN0_THRESHOLD, SWITCH_INTERVAL_S

_GC_CHILD = """
import gc, json
from little_dist.fleet.interpreter_tuning import tune_gc_for_service
before = gc.get_threshold()
kept = [object() for _ in range(10)]
now = tune_gc_for_service()
frozen = gc.get_freeze_count()
gc.set_threshold(10 * now[0], now[1], now[2])
again = tune_gc_for_service()
print(json.dumps({"before": before, "now": now, "frozen": frozen, "again": again}))
"""


def test_start_up_heap_is_frozen_and_young_collections_are_rarer() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _GC_CHILD], capture_output=True, text=True, check=True, timeout=60
    )
    seen = json.loads(out.stdout)
    assert seen["before"][0] < GEN0_THRESHOLD
    assert seen["now"] == [GEN0_THRESHOLD, *seen["before"][1:]]
    assert seen["frozen"] > 1000  # the imported modules' objects, at least
    # A threshold already set higher is kept.
    assert seen["again"][0] == 10 * GEN0_THRESHOLD


_SWITCH_CHILD = """
import json, sys
from little_dist.fleet.interpreter_tuning import tune_switch_interval
default = sys.getswitchinterval()
prefork = tune_switch_interval("prefork")
threads = tune_switch_interval("threads")
sys.setswitchinterval(0.0005)
kept = tune_switch_interval("threads")
print(json.dumps({"default": default, "prefork": prefork, "threads": threads, "kept": kept}))
"""


def test_a_threads_pool_switches_threads_sooner_and_other_pools_keep_the_default() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SWITCH_CHILD],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    seen = json.loads(out.stdout)
    assert seen["default"] == 0.005
    assert seen["prefork"] == seen["default"]
    assert abs(seen["threads"] - SWITCH_INTERVAL_S) < 1e-9
    assert abs(seen["kept"] - 0.0005) < 1e-9  # one set shorter already is kept
