"""``python -m tests.examples_together NAME...``: import the named examples into this one
process (as a worker with several ``--app`` modules does), run each one's fixed and planned
workflow on a memory world, and print ``examples.NAME STATUS`` per run. No tests here
(``tests/test_examples.py`` runs it)."""

from __future__ import annotations

import importlib
import sys

from little_dist import run_workflow
from little_dist.world.in_process import MemoryWorld


def main(names: list[str]) -> int:
    modules = [importlib.import_module(f"examples.{name}") for name in names]
    for module in modules:
        for workflow in (module.workflow, module.planned_workflow):
            result = run_workflow(workflow, module.SAMPLE_INPUT, world=MemoryWorld())
            print(module.__name__, result.status)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
