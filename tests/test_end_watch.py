"""A worker's end watch: attempts of an ended run are flagged; storage away is a warning,
except when the worker closes the watch (its world closes under the read)."""

from __future__ import annotations

import logging
import threading

import pytest

from little_dist.errors import StorageUnavailableError
from little_dist.fleet.end_watch import EndWatch


class Announcements:
    """read_ends over a list of ended runs; raises once ``failing`` is set."""

    def __init__(self) -> None:
        self.ended: list[str] = []
        self.failing = threading.Event()
        self.reads = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, after: str | None, block_ms: int) -> tuple[str, list[str]]:
        self.reads.set()
        if self.failing.is_set():
            raise StorageUnavailableError("Redis unreachable during read of the runs' ends")
        with self.lock:
            ended, self.ended = self.ended, []
        if not ended:
            threading.Event().wait(0.01)
        return "1-0", ended


def test_an_attempt_of_a_run_that_ends_is_flagged_and_others_are_not() -> None:
    reads = Announcements()
    watch = EndWatch(reads)
    try:
        with watch.watching("r-1") as one, watch.watching("r-2") as two:
            assert one is not None and two is not None
            with reads.lock:
                reads.ended.append("r-1")
            assert one.wait(5)
            assert not two.is_set()
    finally:
        watch.close()


def test_without_announcements_there_is_no_flag() -> None:
    with EndWatch(None).watching("r-1") as flag:
        assert flag is None


def test_storage_away_is_a_warning_while_the_watch_is_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reads = Announcements()
    reads.failing.set()
    watch = EndWatch(reads)
    with caplog.at_level(logging.WARNING, "little_dist.fleet.end_watch"):
        with watch.watching("r-1"):
            assert reads.reads.wait(5)
        watch.close()
        assert watch._thread is not None
        watch._thread.join(5)  # (its last warning may come just after the close)
    assert "cannot read the runs' ends" in caplog.text


def test_a_read_failing_because_the_watch_closed_is_not_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reads = Announcements()
    watch = EndWatch(reads)
    with caplog.at_level(logging.WARNING, "little_dist.fleet.end_watch"), watch.watching("r-1"):
        assert reads.reads.wait(5)
        watch.close()  # the worker goes: its world closes, the read in flight fails
        reads.failing.set()
        thread = watch._thread
        assert thread is not None
        thread.join(5)
        assert not thread.is_alive()
    assert caplog.text == ""
