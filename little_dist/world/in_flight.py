"""What a writer does while its append is on its way to the store: the in-flight hook.

An append to :class:`~little_dist.world.redis_s3.RedisS3World` is a network round trip: the
writer sends it, then waits for the reply (about 150 us a step on loopback, a third of
which Redis spends running the append). A thread that set a hook (:func:`while_in_flight`)
gets that wait: after the append is sent and before its reply is read, the world hands the
hook the events it expects the append to record (the sequences it guessed when it hashed
their ids, which are right unless another writer appended in between) with
:meth:`InFlightHook.sent`; once the reply is in, :meth:`InFlightHook.settled` says whether
it recorded exactly those. A fleet worker folds its commit and decides the run's next step
meanwhile (:meth:`~little_dist.fleet.run_tracker.RunTracker.fold_ahead`).

Worlds without a round trip (``LocalWorld``, ``MemoryWorld``) never call a hook; a
RedisS3World call that does not go over the calling thread's own connection (its first
call, a retry after a failure) does not either. ``settled`` follows every ``sent``, also
when the append raises.

A hook must not rely on the world while it runs: the thread's connection is waiting for the
reply, so a call the hook makes anyway goes over another connection of the pool, and the
state it reads does not include the append in flight.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

from little_dist.events import Event

__all__ = ["InFlightHook", "in_flight_hook", "while_in_flight"]


class InFlightHook(Protocol):
    """What the thread does while its append is on its way (see the module docstring)."""

    def sent(self, expected: Sequence[Event]) -> None:
        """The append was sent; ``expected``: the events it records if all goes as guessed."""

    def settled(self, confirmed: bool) -> None:
        """The reply is in (or the append failed): ``confirmed`` when it recorded exactly
        the events ``sent`` was given."""


_local = threading.local()


@contextmanager
def while_in_flight(hook: InFlightHook) -> Iterator[None]:
    """Hand this thread's appends, while in the block, to ``hook`` as they are sent."""
    previous = getattr(_local, "hook", None)
    _local.hook = hook
    try:
        yield
    finally:
        _local.hook = previous


def in_flight_hook() -> InFlightHook | None:
    """The hook the calling thread set, if any."""
    hook: InFlightHook | None = getattr(_local, "hook", None)
    return hook
