"""The memory of one step attempt as the runtime drives it: made on the first command,
recorded after each command and taken up by a replay, published with the commit (see
:mod:`little_dist.memory.attempt`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from little_dist.memory.attempt import AttemptMemory, Published
from little_dist.memory.layout import MemoryMountSpec

if TYPE_CHECKING:
    from little_dist.sandbox.mounts import Mount
    from little_dist.world.base import Fence, World

__all__ = ["LazyMemory", "writer_label"]


def writer_label(run_id: str, step_path: str, attempt: int) -> str:
    """Who wrote a change: the attempt, as a conflict copy's name shows it."""
    return f"{run_id}-{step_path}-a{attempt}"


class LazyMemory:
    """An attempt's memory mounts, made when :meth:`mounts` is first called (an attempt that
    runs no command reads no store); :meth:`publish` is empty when they were never made.
    A replayed command's :meth:`resume` is taken up when they are made, or by :meth:`publish`
    (which makes them then)."""

    def __init__(
        self,
        world: World,
        specs: Sequence[MemoryMountSpec],
        *,
        run_id: str,
        step_path: str,
        attempt: int,
    ) -> None:
        self._world, self._specs = world, tuple(specs)
        self._run_id, self._step_path, self._attempt = run_id, step_path, attempt
        self._made: AttemptMemory | None = None
        self._resumed: Mapping[str, Any] | None = None

    def mounts(self) -> list[Mount]:
        if not self._specs:
            return []
        return self._make().mounts

    def snapshot(self) -> dict[str, Any]:
        """The ``rw`` stores' folders now (see :meth:`AttemptMemory.snapshot`); empty when
        the workflow mounts no store."""
        return self._make().snapshot() if self._specs else {}

    def resume(self, recorded: Mapping[str, Any]) -> None:
        """Take up a replayed command's recorded :meth:`snapshot` (now, if made)."""
        self._resumed = recorded
        if self._made is not None:
            self._take_up(self._made)

    def _make(self) -> AttemptMemory:
        if self._made is None:
            from little_dist.memory.worlds import memory_store_for

            self._made = AttemptMemory(
                memory_store_for(self._world),
                self._specs,
                step_path=self._step_path,
                attempt=self._attempt,
                writer=writer_label(self._run_id, self._step_path, self._attempt),
                world=self._world,
                run_id=self._run_id,
            )
            self._take_up(self._made)
        return self._made

    def _take_up(self, made: AttemptMemory) -> None:
        if self._resumed is not None:
            made.restore(self._resumed)
            self._resumed = None

    def publish(self, *, still_held: Callable[[], bool], fence: Fence | None = None) -> Published:
        if self._made is None and (self._resumed is None or not self._specs):
            return Published()
        self._make()
        assert self._made is not None
        return self._made.publish(still_held=still_held, fence=fence)

    def __enter__(self) -> LazyMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._made is not None:
            self._made.close()
            self._made = None
