"""Run options are one value, checked once where the public call builds it
(:class:`little_dist.authoring.options.RunOptions`): a bad option is refused before anything
runs or is written, whichever engine (a run in process, an outer loop) would have taken it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from little_dist import run_outer_loop, run_workflow
from little_dist.authoring.options import RunOptions
from little_dist.errors import InvalidInputError
from little_dist.world.local import LocalWorld
from tests.outer_loop_helpers import simple_workflow

INPUT = {"value": "hello"}


def _nothing_recorded(world: LocalWorld) -> bool:
    # No run, and no outer loop's manifest (kept in the world's folder).
    return world.list_run_ids() == [] and not (world.data_dir / "outer-loops").exists()


@pytest.mark.parametrize("cycles", [None, 1, 2])
def test_a_bogus_reuse_strategy_is_refused_with_or_without_an_outer_loop(
    tmp_path: Path, cycles: int | None
) -> None:
    world = LocalWorld(tmp_path / "world")
    with pytest.raises(
        InvalidInputError,
        match=r"workflow_version_reuse_strategy must be one of planner_reviewed, always_fresh"
        r", got 'bogus'",
    ):
        run_workflow(
            simple_workflow(),
            INPUT,
            world=world,
            max_outer_cycles=cycles,
            workflow_version_reuse_strategy="bogus",  # type: ignore[arg-type]
        )
    assert _nothing_recorded(world)


def test_run_outer_loop_refuses_a_bogus_reuse_strategy(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "world")
    with pytest.raises(InvalidInputError, match=r"^run_outer_loop: workflow_version_reuse"):
        run_outer_loop(
            simple_workflow(),
            INPUT,
            max_outer_cycles=2,
            world=world,
            workflow_version_reuse_strategy="bogus",  # type: ignore[arg-type]
        )
    assert _nothing_recorded(world)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_workers": 0}, r"max_workers must be a positive integer, got 0"),
        ({"max_workers": True}, r"max_workers must be a positive integer, got True"),
        ({"progress": "loud"}, r"progress must be callable, got 'loud'"),
        ({"on_ask": 1}, r"on_ask must be callable, got 1"),
        ({"pricing_fallback": "x"}, r"pricing_fallback must be callable"),
        ({"limits": {"max_input_bytes": 1}}, r"limits must be InputLimits"),
        ({"permissions": [{"tool": "x", "action": "nope"}]}, r"permissions\[0\]\.action"),
    ],
)
def test_every_run_option_is_checked_before_anything_runs(
    tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    world = LocalWorld(tmp_path / "world")
    for cycles in (None, 3):
        with pytest.raises(InvalidInputError, match=message):
            run_workflow(simple_workflow(), INPUT, world=world, max_outer_cycles=cycles, **options)
    assert _nothing_recorded(world)


def test_the_options_value_is_frozen_and_reads_permissions_once() -> None:
    options = RunOptions.of("here", permissions=[{"tool": "lookup", "action": "deny"}])
    assert options.permissions is not None
    assert [rule.action for rule in options.permissions.ruleset] == ["deny"]
    assert RunOptions.of("here", permissions=options.permissions) == options
    with pytest.raises(AttributeError):
        options.max_workers = 2  # type: ignore[misc]
    assert RunOptions().limits == RunOptions().limits  # the settings', read when built
