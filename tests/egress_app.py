"""Workflows whose bash tool has network allowlists, for the egress attack tests
(``tests/test_sandbox_egress_attacks.py``). Imports nothing from pytest: the attack tests'
worker (``python -m tests.attack_runner tests.egress_app:NAME``) imports it.

Each workflow has one ``attack`` step (a model with the bash tool) and an ``after`` step that
must still run. The allowlists:

* :data:`prefixes`: the entries the string-prefix proxy let through too much —
  ``https://api.example.org``, ``http://localhost``, ``http://localhost:1`` — with private
  ranges allowed (so only the allowlist decides);
* :data:`open_network`: ``network: true`` (upstream's HTTPS GET/HEAD), ``python: false``;
* :data:`local`: the test's own servers, whose ports the test passes in the worker's
  environment (``LITTLE_TEST_EGRESS_PORT``, ``LITTLE_TEST_EGRESS_PORT6``, read at import):
  ``http://127.0.0.1:PORT/ok`` for GET, and HTTPS tunnels to ``127.0.0.1:PORT`` and
  ``[::1]:PORT6``, private ranges allowed.
"""

from __future__ import annotations

import os
from typing import Any

from little_dist import define_workflow, model

__all__ = ["PORT", "PORT6", "local", "open_network", "prefixes"]

#: The test servers' ports (a placeholder when not given: the module must import anyway).
PORT = int(os.environ.get("LITTLE_TEST_EGRESS_PORT", "9"))
PORT6 = int(os.environ.get("LITTLE_TEST_EGRESS_PORT6", "9"))


def _step(step_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": step_id,
        "uses": "ai.generate",
        "with": {"model": "default", "prompt": "Use bash.", "tools": ["bash"]},
        "output": {"mode": "text"},
        **extra,
    }


def _plan(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": name, "version": "1.0.0"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": {"type": "string"}, "from": "${{ steps.after.output }}"},
        "permissions": {"models": ["default"], "tools": [], "secrets": [], "network": []},
        "steps": [_step("attack"), _step("after", needs=["attack"])],
    }


def _workflow(name: str, bash: dict[str, Any]) -> Any:
    return define_workflow(
        id=name,
        description="A model tries to get past the bash tool's network allowlist.",
        input={"type": "object"},
        output={"type": "string"},
        model=model("scripted/egress", id="default", description="Scripted model."),
        plan=_plan(name),
        bash=bash,
    )


prefixes = _workflow(
    "egress.prefixes",
    {
        "network": {
            "allow": ["https://api.example.org", "http://localhost", "http://localhost:1"],
            "denyPrivateRanges": False,
        }
    },
)

open_network = _workflow("egress.open", {"network": True, "python": False})

local = _workflow(
    "egress.local",
    {
        "network": {
            "allow": [
                f"http://127.0.0.1:{PORT}/ok",
                f"https://127.0.0.1:{PORT}",
                f"https://[::1]:{PORT6}",
            ],
            "methods": ["GET"],
            "denyPrivateRanges": False,
        }
    },
)
