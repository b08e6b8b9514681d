"""How a fleet process tunes its interpreter: the garbage collector and the thread switch.

Both are set once at start-up by ``little worker`` and ``little scheduler``.

**Garbage collection** (:func:`tune_gc_for_service`). A worker or scheduler allocates
thousands of short-lived objects per step (decoded events, their payloads, folded state),
while it keeps a large, long-lived heap: the imported modules, compiled workflow versions,
and each followed run's folded state. With CPython's default first-generation threshold (700
allocations) the collector runs every few events, and its older-generation passes walk that
whole heap: measured on a 1000-branch run's 13,000 events, reading them back took 0.33 s
with the defaults and 0.20 s with either change below.

* :func:`gc.freeze` after start-up moves everything alive then (imports, the app's
  workflows and tools) out of the collector's sight for good;
* a first-generation threshold of :data:`GEN0_THRESHOLD` collects the young objects a few
  times less often. Reference counting still frees almost everything at once; only cycles
  wait a little longer.

**Thread switches** (:func:`tune_switch_interval`), in a worker with a threads pool. A
``little worker --pool threads`` runs all its slots in one interpreter, and each slot mixes
short bursts of Python (folding events, deciding, building the next events) with Redis round
trips. A thread whose reply has arrived waits for the interpreter lock until the running
thread lets it go: at that thread's next I/O, or after the switch interval (CPython's
default is 5 ms). On a fan-out those waits sit in every look at the run, which the slots of
a process take in turn. Measured on ``bench/fleet.py`` (b) (1000 no-op branches on two
workers of 16 threads), alternating two settings in one process pair by pair: 2 ms ran the
fan-out 5.5 % faster than 5 ms (median of 8 pairs), 1 ms about as fast as 2 ms, and 0.5 ms
and 0.2 ms slower again (the switches themselves cost).
"""

from __future__ import annotations

import gc
import sys

__all__ = ["GEN0_THRESHOLD", "SWITCH_INTERVAL_S", "tune_gc_for_service", "tune_switch_interval"]

#: Allocations (net) between two first-generation collections in a fleet process.
GEN0_THRESHOLD = 20_000

#: The switch interval of a threads-pool worker, in seconds.
SWITCH_INTERVAL_S = 0.002


def tune_gc_for_service() -> tuple[int, int, int]:
    """Freeze the start-up heap and raise the first-generation threshold (never lowers
    one already set higher); the thresholds now in force."""
    gc.collect()
    gc.freeze()
    first, second, third = gc.get_threshold()
    gc.set_threshold(max(first, GEN0_THRESHOLD), second, third)
    return gc.get_threshold()


def tune_switch_interval(pool: str) -> float:
    """Shorten the switch interval for a ``threads`` pool (never lengthens one set shorter);
    the interval now in force."""
    if pool == "threads":
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
    return sys.getswitchinterval()
