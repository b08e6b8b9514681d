"""Run one workflow in process, as whatever user this process is: the worker side of an attack
test (:mod:`tests.attack_runs` starts it, as root or as an unprivileged user).

    python -m tests.attack_runner MODULE:ATTRIBUTE DATA_DIR [INPUT_JSON]

The scripted model comes from ``LITTLE_SCRIPTED_MODEL`` (a saved script). Prints one JSON line,
``{"runId", "status", "output", "error"}``, and exits 0 whatever the run's status; a crash of the
host side (a traceback) exits non-zero, which is what an attack test must never see.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    reference, data = argv[0], Path(argv[1])
    run_input = json.loads(argv[2]) if len(argv) > 2 else {}
    module_name, _, attribute = reference.partition(":")
    workflow = getattr(importlib.import_module(module_name), attribute)

    from little_dist.authoring.errors import RunFailedError
    from little_dist.testing.scripted import install_from_env
    from little_dist.world.local import LocalWorld

    install_from_env()
    try:
        result = workflow.run(run_input, world=LocalWorld(data))
    except RunFailedError as failed:
        said = {"runId": failed.run_id, "status": "failed", "output": None, "error": str(failed)}
    else:
        said = {"runId": result.run_id, "status": result.status, "output": result.output}
    print(json.dumps(said, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
