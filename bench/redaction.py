"""What redaction costs a fleet process: the log filter on a worker's log lines.

Run from the repository root::

    .venv/bin/python bench/redaction.py [--records N]

A step that succeeds passes through :mod:`little_dist.redaction` only as log lines: one
``execute_step ...: completed`` line per step, plus Celery's "received" and "succeeded"
lines per task. Prints, each against a baseline measured the same way:

(a) the worker's per-step log line emitted through a ``StreamHandler`` (to an in-memory
    stream) with :class:`~little_dist.redaction.RedactingFilter` against without it;
(b) :func:`~little_dist.redaction.redact` of that line, and of a provider error that holds
    a key, against formatting the line (``LogRecord.getMessage``).
"""

from __future__ import annotations

import argparse
import io
import logging
import statistics
import time
from collections.abc import Callable

from little_dist.redaction import RedactingFilter, redact

STEP_LINE = (
    "%s %s %s#%d%s: %s",
    ("execute_step", "run_1ca625417f334b2e8b1795741", "s1", 1, " (inline)", "completed"),
)
ERROR_TEXT = (
    "model call to openai/gpt-4o failed: AuthenticationError: litellm.AuthenticationError: "
    "Incorrect API key provided: sk-proj-abc123DEF456ghi789JKL012mno345PQR678stu901vwx. "
    "headers={'Authorization': 'Bearer xyzBearerTok3n.0123456789-abcdefXYZ'}"
)


def _per_call(fn: Callable[[], object], count: int, rounds: int = 7) -> float:
    """Median seconds per call over ``rounds`` rounds of ``count`` calls."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(count):
            fn()
        times.append((time.perf_counter() - started) / count)
    return statistics.median(times)


def _logger(with_filter: bool) -> logging.Logger:
    logger = logging.getLogger(f"bench.redaction.{with_filter}")
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(
        logging.Formatter("[%(asctime)s: %(levelname)s/%(processName)s] %(message)s")
    )
    if with_filter:
        handler.addFilter(RedactingFilter())
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20000)
    count = parser.parse_args().records
    message, args = STEP_LINE

    plain, filtered = _logger(False), _logger(True)
    base = _per_call(lambda: plain.info(message, *args), count)
    with_filter = _per_call(lambda: filtered.info(message, *args), count)
    print(
        f"(a) step log line: {with_filter * 1e6:.1f} µs with the filter, {base * 1e6:.1f} µs "
        f"without: ratio {with_filter / base:.2f} (+{(with_filter - base) * 1e6:.1f} µs a line)"
    )

    record = logging.LogRecord("little.worker", logging.INFO, __file__, 1, message, args, None)
    line = record.getMessage()
    formatting = _per_call(record.getMessage, count)
    clean = _per_call(lambda: redact(line), count)
    dirty = _per_call(lambda: redact(ERROR_TEXT), max(1, count // 10))
    print(
        f"(b) redact(step line) {clean * 1e6:.2f} µs = {clean / formatting:.1f}x getMessage "
        f"({formatting * 1e6:.2f} µs); redact(provider error with a key) {dirty * 1e6:.1f} µs"
    )


if __name__ == "__main__":
    main()
