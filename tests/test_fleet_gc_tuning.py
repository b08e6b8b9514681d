"""The fleet processes' garbage-collector settings (in a child process: the test run's own
collector stays as it is)."""

from __future__ import annotations

import json
import subprocess
import sys

from little_dist.fleet.gc_tuning import GEN0_THRESHOLD

_CHILD = """
import gc, json
from little_dist.fleet.gc_tuning import tune_gc_for_service
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
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True, timeout=60
    )
    seen = json.loads(out.stdout)
    assert seen["before"][0] < GEN0_THRESHOLD
    assert seen["now"] == [GEN0_THRESHOLD, *seen["before"][1:]]
    assert seen["frozen"] > 1000  # the imported modules' objects, at least
    # A threshold already set higher is kept.
    assert seen["again"][0] == 10 * GEN0_THRESHOLD
