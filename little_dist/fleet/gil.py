"""The interpreter's thread switch interval in a worker with a threads pool.

A ``little worker --pool threads`` runs all its slots in one interpreter, and each slot
mixes short bursts of Python (folding events, deciding, building the next events) with Redis
round trips. A thread whose reply has arrived waits for the interpreter lock until the
running thread lets it go: at that thread's next I/O, or after the switch interval
(CPython's default is 5 ms). On a fan-out those waits sit in every look at the run, which the
slots of a process take in turn. Measured on ``bench/fleet.py`` (b) (1000 no-op branches on
two workers of 16 threads), alternating two settings in one process pair by pair: 2 ms ran
the fan-out 5.5 % faster than 5 ms (median of 8 pairs), 1 ms about as fast as 2 ms, and
0.5 ms and 0.2 ms slower again (the switches themselves cost).
"""

from __future__ import annotations

import sys

__all__ = ["SWITCH_INTERVAL_S", "tune_switch_interval"]

#: The switch interval of a threads-pool worker, in seconds.
SWITCH_INTERVAL_S = 0.002


def tune_switch_interval(pool: str) -> float:
    """Shorten the switch interval for a ``threads`` pool (never lengthens one set shorter);
    the interval now in force."""
    if pool == "threads":
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
    return sys.getswitchinterval()
