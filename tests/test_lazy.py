"""``little_dist.lazy.cached``: computed once per instance, kept where later reads find it,
on frozen dataclasses too, with no lock shared between instances or threads."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from little_dist.lazy import cached


@dataclass(frozen=True)
class _Box:
    text: str
    calls: list[str]

    @cached
    def upper(self) -> str:
        """The text in capitals."""
        self.calls.append(self.text)
        return self.text.upper()


def test_a_value_is_computed_once_per_instance_and_then_read_from_the_instance() -> None:
    calls: list[str] = []
    first, second = _Box("a", calls), _Box("b", calls)
    assert (first.upper, first.upper, second.upper) == ("A", "A", "B")
    assert calls == ["a", "b"]
    assert first.__dict__["upper"] == "A"  # later reads never reach the descriptor
    assert _Box.upper.__doc__ == "The text in capitals."
    assert first == _Box("a", calls)  # the cached value is not a field: equality holds


def test_no_lock_is_shared_between_instances() -> None:
    """A computation that waits for another instance's computation to start finishes: with
    one lock per property (functools' on 3.11) the second would wait for the first."""
    started = threading.Event()

    class _Slow:
        def __init__(self, wait: bool) -> None:
            self.wait = wait

        @cached
        def value(self) -> int:
            if self.wait:
                started.set()
                assert releasing.wait(5)
            return 1

    releasing = threading.Event()
    slow = threading.Thread(target=lambda: _Slow(True).value)
    slow.start()
    assert started.wait(5)
    assert _Slow(False).value == 1  # not blocked behind the other instance's computation
    releasing.set()
    slow.join(5)
    assert not slow.is_alive()
