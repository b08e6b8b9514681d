"""The ``--app`` module of the outer-loop fleet test (``tests/test_outer_loop_fleet.py``) and
the loop's driver process. Fleet workers import it, so it imports nothing from pytest.

The workflow is the outer-loop test workflow (:func:`tests.outer_loop_helpers.simple_workflow`)
whose ``process`` tool says which process ran it: its result ends ``@<pid>``.

As a program, ``python -m tests.outer_loop_fleet_app SCRIPT_FILE OUTER_LOOP_ID [--die]``
drives one outer loop of that workflow against the fleet its ``LITTLE_*`` environment names
(a :class:`~little_dist.fleet.client.Client`), the supervisor answered by the scripted model
of ``SCRIPT_FILE``; it prints ``{"output", "runId", "pid"}`` as JSON. With ``--die`` it
SIGKILLs itself at the first manifest write that records a finished cycle: after the
supervisor's decision for that cycle was appended to its run, before the manifest says so.
With ``--die-before-decision`` it SIGKILLs itself when the first cycle's run has ended,
before the supervisor is asked about it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Mapping
from typing import Any

from little_dist.tools import tool
from tests.outer_loop_helpers import simple_workflow


@tool
def process(value: str) -> dict[str, str]:
    """Process a value (the result names this process)."""
    return {"result": f"processed:{value}@{os.getpid()}"}


def _die(state: Mapping[str, Any]) -> Any:
    os.kill(os.getpid(), signal.SIGKILL)


loop_workflow = simple_workflow(tools=[process])


def main(argv: list[str]) -> int:
    from little_dist import run_outer_loop
    from little_dist.fleet.client import Client
    from little_dist.outer_loop import manifest_store_for
    from little_dist.testing import install_from_file
    from tests.outer_loop_crash_app import DieAfterDecision

    script_file, loop_id = argv[:2]
    install_from_file(script_file)
    with Client() as client:
        store = manifest_store_for(client.world)
        if "--die" in argv:
            store = DieAfterDecision(store)
        result = run_outer_loop(
            loop_workflow,
            {"value": "fleet"},
            max_outer_cycles=3,
            client=client,
            outer_loop_id=loop_id,
            manifests=store,
            supervise=_die if "--die-before-decision" in argv else None,
            cycle_timeout=120,
        )
    print(json.dumps({"output": result.output, "runId": result.run_id, "pid": os.getpid()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
