"""Which runs a token may see: a token made with ``--workflow`` (restricted to workflow ids)
reads, cancels and decides the approvals of only the runs of those workflows.

Any other run is answered as a run that does not exist, a 404 ``Run not found`` (not a 403):
a restricted token learns nothing of the fleet's other runs, not even that their ids are
taken. Lists (``GET /v1/runs``, ``GET /v1/approvals``, the viewer's runs) leave such runs out.
A token without workflows sees every run.
"""

from __future__ import annotations

from collections.abc import Iterable

from little_dist.fleet.run_listing import workflow_of_run
from little_dist.http.problems import Problem
from little_dist.http.tokens import TokenRecord
from little_dist.world.base import World

__all__ = ["check_run_visible", "run_visible", "visible_run_ids"]


def run_visible(world: World, token: TokenRecord, run_id: str) -> bool:
    """Whether ``token`` may see run ``run_id`` (one read of its first and last events for
    a restricted token, none otherwise)."""
    if not token.workflows:
        return True
    return workflow_of_run(world, run_id) in token.workflows


def check_run_visible(world: World, token: TokenRecord, run_id: str) -> None:
    """A 404, as for an unknown run, when ``token`` may not see run ``run_id``."""
    if not run_visible(world, token, run_id):
        raise Problem(404, f"Run not found: {run_id}")


def visible_run_ids(world: World, token: TokenRecord, run_ids: Iterable[str]) -> list[str]:
    """The runs of ``run_ids`` that ``token`` may see, in order."""
    return [run_id for run_id in run_ids if run_visible(world, token, run_id)]
