"""Attack tests' worker side, as root and as an unprivileged user: no tests here.

A sandbox boundary is tried through the real bash tool in a real workflow run, by a worker
that is root (each command then runs as a sandbox uid of its own) and by one that is an
ordinary user (bubblewrap in a user namespace). :func:`run_attack` runs the workflow in a
separate process (``python -m tests.attack_runner``, forked from the test zygote,
:mod:`tests.zygote`) as the user the ``attacker`` fixture names, against a
:class:`~little_dist.world.local.LocalWorld` in a folder that user owns, and reads the events
back. :func:`host_files` makes what that worker holds and must not leak or lose: a secret
only it may read, and a bystander file it may write.

The unprivileged worker is uid/gid :data:`WORKER_UID` (``nobody``), switched to as
``setpriv`` would when the tests run as root. When they do not, both variants run as the
current user (who is then the unprivileged one). The repository and its virtual environment
must be readable by that user: a clone in a 0700 folder is refused with a clear message, not
skipped.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from little_dist.events import Event
from little_dist.sandbox.writable import remove_tree
from little_dist.testing import ScriptedModel, ToolCall
from little_dist.world.local import LocalWorld
from tests import zygote

__all__ = [
    "ATTACKERS",
    "WORKER_UID",
    "AttackRun",
    "HostFiles",
    "attacker",
    "attacker_folder",
    "bash_steps",
    "host_files",
    "run_attack",
]

#: The two workers an attack is tried against.
ATTACKERS = ("root", "unprivileged")
#: The unprivileged worker's uid and gid (``nobody``).
WORKER_UID = 65534
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(params=ATTACKERS)
def attacker(request: pytest.FixtureRequest) -> str:
    """Which worker runs the attacked workflow: ``"root"`` or ``"unprivileged"``."""
    return str(request.param)


def _as_other_user(user: str) -> bool:
    return user == "unprivileged" and os.geteuid() == 0


@pytest.fixture
def attacker_folder(attacker: str) -> Iterator[Path]:
    """A fresh folder the attacker's worker owns (its data, its files), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="little-attack-"))
    folder.chmod(0o755)
    if _as_other_user(attacker):
        os.chown(folder, WORKER_UID, WORKER_UID)
    try:
        yield folder
    finally:
        # however deep, never through a link, whatever the attack left (shutil.rmtree recurses)
        remove_tree(folder)


@dataclass(frozen=True)
class HostFiles:
    """What the worker holds outside every mount: ``secret`` (mode 0600, the worker's only)
    and ``bystander`` (the worker's, writable), both in ``folder``."""

    folder: Path
    secret: Path
    bystander: Path
    secret_text: str
    bystander_text: str = "untouched"

    def untouched(self) -> bool:
        return (
            self.secret.read_text() == self.secret_text
            and self.bystander.read_text() == self.bystander_text
            and sorted(os.listdir(self.folder)) == sorted([self.secret.name, self.bystander.name])
        )


def host_files(base: Path, attacker: str, name: str = "worker-files") -> HostFiles:
    """The worker's own files, owned by the attacker's worker user, outside every mount."""
    folder = base / name
    folder.mkdir()
    secret_text = f"s3cr3t-{os.urandom(6).hex()}"
    secret = folder / "credentials"
    secret.write_text(secret_text)
    secret.chmod(0o600)
    bystander = folder / "bystander.txt"
    bystander.write_text("untouched")
    bystander.chmod(0o644)
    if _as_other_user(attacker):
        for path in (folder, secret, bystander):
            os.chown(path, WORKER_UID, WORKER_UID)
    return HostFiles(folder, secret, bystander, secret_text)


@dataclass
class AttackRun:
    """How the attacked run went, read back from its world."""

    world: LocalWorld
    run_id: str
    status: str
    output: Any
    stdout: str
    stderr: str
    events: list[Event] = field(default_factory=list)

    def results(self, step: str) -> list[dict[str, Any]]:
        """What each bash call of ``step`` returned to the model, in order."""
        found: list[dict[str, Any]] = []
        for event in self.events:
            if event.type != "harness.tool_call.succeeded":
                continue
            if event.payload.get("stepPath") != step:
                continue
            ref = event.payload.get("resultRef")
            found.append(
                event.payload["result"] if ref is None else self.world.get_artifact(ref).payload
            )
        return found

    def ends(self, step: str) -> list[dict[str, Any]]:
        """Each command's end event payload (``harness.runtime.command.succeeded|failed``)."""
        return [
            e.payload
            for e in self.events
            if e.type in ("harness.runtime.command.succeeded", "harness.runtime.command.failed")
            and e.payload.get("stepPath") == step
        ]

    def everything(self) -> str:
        """Every event's payload and every byte the world stored (events, artifacts), as one
        text: where to look for a leaked secret."""
        parts = [json.dumps(e.payload, default=str) for e in self.events]
        for path in sorted(self.world.data_dir.rglob("*")):
            if path.is_file() and not path.is_symlink():
                parts.append(path.read_bytes().decode("utf-8", "replace"))
        return "\n".join(parts)


def bash_steps(commands: list[dict[str, Any]], after: str = "echo alive") -> ScriptedModel:
    """The script of a two-step bash workflow (steps ``attack`` and ``after``, as
    ``tests.bash_fleet_app:attacks``): ``attack`` runs ``commands`` (four calls a turn, one
    after the other) and answers "tried"; ``after`` runs ``after`` and answers "alive"."""
    script = ScriptedModel()
    turns = [commands[i : i + 4] for i in range(0, len(commands), 4)]
    chain = script.on(step="attack").call_tools([ToolCall("bash", c) for c in turns[0]])
    for turn in turns[1:]:
        chain = chain.then_call_tools([ToolCall("bash", c) for c in turn])
    chain.then_reply_text("tried")
    script.on(step="after").call_tool("bash", {"cmd": after}).then_reply_text("alive")
    return script


def run_attack(
    workflow: str,
    script: ScriptedModel,
    *,
    attacker: str,
    folder: Path,
    run_input: Any = None,
    env: dict[str, str] | None = None,
    timeout: float = 180,
) -> AttackRun:
    """Run ``workflow`` (``"module:attribute"``) with ``script`` as its model, in a worker
    process of ``attacker``'s user, with its world in ``folder``/data. A crash of the worker
    (anything but a JSON line on stdout and exit 0) fails the test with what it printed."""
    data = folder / "data"
    script_path = script.save(folder / "script.json")
    environment = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(folder),
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITTLE_SCRIPTED_MODEL": str(script_path),
        **{
            k: v
            for k, v in os.environ.items()
            if k.startswith("LITTLE_SANDBOX_") or k == "PYTHONPATH"
        },
        **(env or {}),
    }
    user = None
    if _as_other_user(attacker):
        os.chown(script_path, WORKER_UID, WORKER_UID)
        _check_reachable(REPO)
        _check_reachable(Path(sys.executable).parent)
        user = WORKER_UID
    args = [workflow, str(data)]
    if run_input is not None:
        args.append(json.dumps(run_input))
    # Forked from the test zygote (litellm and the package imported already): a new
    # interpreter spent 4 CPU-seconds on imports per attack.
    done = zygote.run(
        args,
        module="tests.attack_runner",
        cwd=REPO,
        env=environment,
        user=user,
        timeout=timeout,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise AssertionError(
            f"the {attacker} worker crashed (exit {done.returncode}):\n"
            f"stdout: {done.stdout[-4000:]}\nstderr: {done.stderr[-6000:]}"
        )
    said = json.loads(lines[-1])
    world = LocalWorld(data)
    return AttackRun(
        world=world,
        run_id=said["runId"],
        status=said["status"],
        output=said["output"],
        stdout=done.stdout,
        stderr=done.stderr,
        events=world.list_events(said["runId"]),
    )


def _check_reachable(path: Path) -> None:
    """Every folder above ``path`` must let others through, or the unprivileged worker
    cannot start: say so (a 0700 clone folder is the usual cause)."""
    for folder in [path, *path.parents]:
        if folder.stat().st_mode & 0o005 != 0o005:
            raise AssertionError(
                f"{folder} is not readable by others (mode {folder.stat().st_mode & 0o777:04o}): "
                "the unprivileged worker of the attack tests cannot import the package from "
                f"{path}; make the checkout world-readable (chmod o+rx)"
            )
