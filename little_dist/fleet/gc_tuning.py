"""Garbage-collector settings for the fleet's long-running processes.

A worker or scheduler allocates thousands of short-lived objects per step (decoded events,
their payloads, folded state), while it keeps a large, long-lived heap: the imported modules,
compiled workflow versions, and each followed run's folded state. With CPython's default
first-generation threshold (700 allocations) the collector runs every few events, and its
older-generation passes walk that whole heap: measured on a 1000-branch run's 13,000 events,
reading them back took 0.33 s with the defaults and 0.20 s with either change below.

* :func:`gc.freeze` after start-up moves everything alive then (imports, the app's
  workflows and tools) out of the collector's sight for good;
* a first-generation threshold of :data:`GEN0_THRESHOLD` collects the young objects a few
  times less often. Reference counting still frees almost everything at once; only cycles
  wait a little longer.
"""

from __future__ import annotations

import gc

__all__ = ["GEN0_THRESHOLD", "tune_gc_for_service"]

#: Allocations (net) between two first-generation collections in a fleet process.
GEN0_THRESHOLD = 20_000


def tune_gc_for_service() -> tuple[int, int, int]:
    """Freeze the start-up heap and raise the first-generation threshold (never lowers
    one already set higher); the thresholds now in force."""
    gc.collect()
    gc.freeze()
    first, second, third = gc.get_threshold()
    gc.set_threshold(max(first, GEN0_THRESHOLD), second, third)
    return gc.get_threshold()
