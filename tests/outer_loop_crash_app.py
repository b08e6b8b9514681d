"""The process the outer-loop crash test runs (and SIGKILLs): one outer loop of the
outer-loop test workflow, its planner and supervisor answered by a scripted model file. No
tests here.

Usage: ``python -m tests.outer_loop_crash_app WORLD_SPEC SCRIPT_FILE OUTER_LOOP_ID [--die]``;
prints the loop's output as JSON. With ``--die`` the process SIGKILLs itself at the first
manifest write that records a finished cycle: after the supervisor's decision for that
cycle was appended to its run (``OuterLoopCycleCompleted``), before the manifest says so.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from little_dist import run_outer_loop
from little_dist.outer_loop import ManifestStore, OuterLoopManifest, manifest_store_for
from little_dist.testing import install_from_file
from little_dist.world import open_world
from tests.outer_loop_helpers import simple_workflow


class DieAfterDecision:
    """A manifest store that kills its process instead of recording a finished cycle."""

    def __init__(self, inner: ManifestStore) -> None:
        self.inner = inner

    def read(self, outer_loop_id: str) -> Any:
        return self.inner.read(outer_loop_id)

    def write(self, manifest: OuterLoopManifest, *, expected: str | None) -> str:
        if manifest.cycles:
            os.kill(os.getpid(), signal.SIGKILL)
        return self.inner.write(manifest, expected=expected)


def main(argv: list[str]) -> int:
    spec, script_file, loop_id = argv[:3]
    install_from_file(script_file)
    world = open_world(spec)
    store = manifest_store_for(world)
    if "--die" in argv:
        store = DieAfterDecision(store)
    result = run_outer_loop(
        simple_workflow(),
        {"value": "crash"},
        max_outer_cycles=3,
        world=world,
        outer_loop_id=loop_id,
        manifests=store,
    )
    print(json.dumps({"output": result.output, "runId": result.run_id}))
    world.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
