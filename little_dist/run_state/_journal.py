"""What changed between two states of one lineage: the steps whose status the fold changed.

Why: ``decide`` must not re-read every step of a run to find what is ready now (a chain of
N steps would cost O(N²) to schedule). The fold appends the path of every step whose status
it sets (an attempt started, completed, failed) to a :class:`StepJournal` shared by a
lineage of states (a builder and the snapshots it makes, and builders continued from them);
a :class:`~little_dist.run_state.RunState` knows how long the journal was when it was made.
So whoever keeps an index over an earlier state of the lineage brings it up to date by
reading only the paths noted since.

The journal also holds one such index (``memo``, with the journal position it stands at):
it is a cache, derived only from the states of the lineage, so a state's decision does not
depend on it. Two builders continued from one state (a fork) must not write into one
journal: the second to write starts a journal of its own.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["StepJournal"]


class StepJournal:
    """Step paths whose status the fold set, in order; ``memo``: one index kept over them."""

    __slots__ = ("lock", "memo", "paths")

    def __init__(self, paths: list[str] | None = None) -> None:
        self.paths: list[str] = paths if paths is not None else []
        #: Guards ``paths`` against a forked writer and ``memo`` against concurrent readers.
        self.lock = threading.Lock()
        #: An index a reader keeps over this journal (see the module docs); any value.
        self.memo: Any = None

    def append(self, known: int, path: str) -> tuple[StepJournal, int]:
        """Append ``path`` after the first ``known`` paths (the ones the writer has seen);
        returns the journal that now holds it and its length there. When another writer went
        on, a new journal starts with ``path`` alone (an index over it starts from scratch,
        once; copying the prefix would cost the length of the run per fork)."""
        with self.lock:
            if len(self.paths) == known:
                self.paths.append(path)
                return self, known + 1
        return StepJournal([path]), 1
