"""Visit counting for loop steps (``maxVisits > 1``), per upstream's ``visitIndexFor``.

A step that may run more than once gets one step path per visit, ``<base>.visit[<n>]``
(see :func:`little_dist.ids.step_path_for`). The next visit index is the number of visits
already *completed*: a visit that was scheduled or started but did not complete is resumed
at its own index rather than skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from little_dist.run_state import RunState

__all__ = ["visit_index_for"]


def visit_index_for(step: Mapping[str, Any], parent_path: str, state: RunState) -> int:
    """The visit index the next execution of ``step`` (an LWIR step object) should use.

    ``0`` for single-visit steps (``maxVisits`` absent or 1); otherwise the number of
    steps in ``state`` whose path starts with ``<base>.visit[`` and whose status is
    ``completed``, where ``<base>`` is ``parent_path.step_id`` (or ``step_id`` at the top).
    """
    max_visits = step.get("maxVisits")
    if not isinstance(max_visits, int | float) or isinstance(max_visits, bool):
        max_visits = 1
    if max_visits <= 1:
        return 0
    step_id = step["id"]
    base = step_id if parent_path == "" else f"{parent_path}.{step_id}"
    prefix = f"{base}.visit["
    return sum(
        1
        for path, entry in state.steps.items()
        if path.startswith(prefix) and entry.status == "completed"
    )
