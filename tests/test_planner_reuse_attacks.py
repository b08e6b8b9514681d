"""The planner's shell over its reuse candidate, attacked (see :mod:`tests.attack_runs`): a
planner model that tries to write the read-only ``/planner/reuse`` mount, read what is outside
it, plant and follow links, and a candidate whose content is huge and hostile. Tried by a root
worker and by an unprivileged one, in a real run of a real workflow: the first run completes
with the hostile candidate, the second run's planner is the attacker.

What must hold: every write into the mount fails and its files are as written; nothing of the
worker (its secret, its files, the host folder the mount comes from) is seen; a link made in
the shell leads nowhere the sandbox did not already show; the huge file is bounded; the
candidate's text is never run; the run still completes (the planner drafts afresh); and the
worker's own files are untouched.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from little_dist.planner.reuse_files import DETAIL_FILES, MAX_FILE_BYTES
from little_dist.testing import ScriptedModel, ToolCall
from tests.attack_runs import (
    AttackRun,
    attacker,
    attacker_folder,
    host_files,
    run_attack,
)
from tests.planner_reuse_app import summary_lwir

__all__ = ["attacker", "attacker_folder"]  # fixtures, re-exported for pytest

pytestmark = [pytest.mark.timeout(600)]

APP = "tests.planner_reuse_app:summarizer"
FIRST = {"ticketId": "T-1", "body": "Cannot export invoices."}
SECOND = {"ticketId": "T-2", "body": "Cannot import receipts."}


def hostile_candidate(marker: Path) -> dict[str, Any]:
    """A valid plan whose description is shell to run if anything ran it, and over the
    size bound of a reuse file."""
    shell = f"$(touch {marker}) `touch {marker}`; touch {marker} ../../../etc/passwd \\u0000"
    return summary_lwir(description=shell + " " + "x" * (MAX_FILE_BYTES + 10))


def attacks(secret: Path, folder: Path) -> list[dict[str, Any]]:
    writes = (
        "echo x > /planner/reuse/*/lwir.json; echo x > /planner/reuse/new; "
        "rm -f /planner/reuse/*/lock.json; mkdir /planner/reuse/d; chmod -R u+w /planner/reuse; "
        "mv /planner/reuse/*/feedback-summary.md /mnt/scratch/own/; "
        "mount -o remount,rw /planner/reuse; touch /planner/reuse/*/x; "
        "echo; ls /planner/reuse/*/; cat /planner/reuse/*/feedback-summary.md"
    )
    reads = (
        f"cat {secret}; ls -a {folder}; ls -a / /tmp /mnt /mnt/scratch /planner; "
        "find / -xdev -maxdepth 4 -name 'little-planner-reuse-*' 2>/dev/null; "
        "tr '\\0' '\\n' < /proc/1/environ; ls -d /tmp/little-planner-reuse-* /tmp/*/"
    )
    links = (
        f"ln -s {secret} /mnt/scratch/own/s; cat /mnt/scratch/own/s; "
        f"ln -s {secret} /planner/reuse/evil; ln -s / /planner/reuse/root; "
        f"cat /planner/reuse/*/../../..{secret}; cd /planner/reuse/*/ && cat ../../../..{secret}; "
        "ln /planner/reuse/*/lwir.json /mnt/scratch/own/hard && echo x >> /mnt/scratch/own/hard"
    )
    huge = "wc -c /planner/reuse/*/lwir.json; head -c 300 /planner/reuse/*/lwir.json"
    return [{"cmd": writes}, {"cmd": reads}, {"cmd": links}, {"cmd": huge}]


def attacker_script(commands: list[dict[str, Any]]) -> ScriptedModel:
    script = ScriptedModel()
    script.on(step="planner").call_tools([ToolCall("bash", c) for c in commands]).then_reply_json(
        {"kind": "draft_fresh", "rationale": "Start over.", "lwir": summary_lwir()}
    )
    return script


def planner_results(run: AttackRun) -> list[dict[str, Any]]:
    return [
        e.payload["result"]
        for e in run.events
        if e.type == "harness.tool_call.succeeded" and e.payload.get("stepPath") == "planner"
    ]


def test_the_planners_shell_cannot_write_escape_or_be_flooded(
    attacker: str, attacker_folder: Path
) -> None:
    files = host_files(attacker_folder, attacker)
    marker = Path("/tmp") / f"little-reuse-pwned-{os.urandom(4).hex()}"
    first_script = ScriptedModel()
    first_script.on(step="planner").reply_json(hostile_candidate(marker))
    first = run_attack(
        APP, first_script, attacker=attacker, folder=attacker_folder, run_input=FIRST
    )
    assert first.status == "completed", first.stderr[-3000:]

    second = run_attack(
        APP,
        attacker_script(attacks(files.secret, files.folder)),
        attacker=attacker,
        folder=attacker_folder,
        run_input=SECOND,
    )

    assert second.status == "completed", (second.output, second.stderr[-3000:])
    assert second.output == {"summary": "T-2: Cannot import receipts."}
    writes, reads, links, huge = planner_results(second)
    everything = json.dumps(planner_results(second)) + json.dumps(
        [e.payload for e in second.events]
    )
    # Writes: each refused, the folder as it was written.
    listed = writes["stdout"].split()
    assert set(DETAIL_FILES) <= set(listed), writes
    assert "No structured feedback is attached to this candidate." in writes["stdout"]
    assert "Read-only file system" in writes["stderr"] or "Permission denied" in writes["stderr"]
    assert not {"new", "d", "x"} & set(listed), writes
    # Reads: nothing of the worker, nor the host folder the mount comes from (its name shows
    # in /proc/self/mountinfo, as every mount's does, but nothing leads there).
    assert files.secret_text not in everything
    assert "little-planner-reuse-" not in reads["stdout"]
    assert files.folder.name not in reads["stdout"]
    # Links: none made in the mount, none leading to the secret.
    assert files.secret_text not in links["stdout"], links
    # The huge file: bounded, a note of what it was.
    size = int(huge["stdout"].split()[0])
    assert size < MAX_FILE_BYTES
    assert "over the 1048576-byte limit of a planner reuse file" in huge["stdout"]
    # The candidate's text was never run, here or in the sandbox; the worker is unharmed.
    assert not marker.exists()
    assert files.untouched()
