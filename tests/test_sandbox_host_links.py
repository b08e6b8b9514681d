"""The host never follows a link, or trusts a file, that a sandboxed command planted.

Each attack is a model with the bash tool in a real workflow run, by a worker that is root and
by one that is an ordinary user (:mod:`tests.attack_runs`): it plants links (to the worker's
secret, to a host folder, to ``/dev/zero``, to ``/proc/self/environ``), FIFOs, names that are
not UTF-8 and deep trees wherever the host reads and writes after (or before) a command. The
worker must not read or write anything outside the mounts, must not hang or crash, must
leave no temporary folder behind, and its own files must be as they were.

The places attacked are :data:`little_dist.sandbox.HOST_TOUCHES`, the sandbox package's own
list of every host-touched path in a writable mount: a path added there without an attack
here fails :func:`test_the_link_trick_fails_on_every_path_the_host_touches`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from little_dist.sandbox import HOST_TOUCHES, WRITABLE_MOUNTS
from little_dist.sandbox.bash import STATE_BYTES
from little_dist.testing import ScriptedModel, ToolCall
from tests.attack_runs import (
    AttackRun,
    HostFiles,
    attacker,
    attacker_folder,
    bash_steps,
    host_files,
    run_attack,
)

__all__ = ["attacker", "attacker_folder"]  # the fixtures, for pytest

ATTACKS = "tests.bash_fleet_app:attacks"
STORES = "tests.host_touch_app:stores"
ORCHESTRATION = "tests.host_touch_app:orchestration"
ENV_SECRET = "LITTLE_TEST_WORKER_SECRET"


def _plant(target: str, host: HostFiles) -> str:
    """Links out, a FIFO, a name that is not UTF-8, and one real file, planted in ``target``."""
    return (
        f"cd {target} && ln -s {host.secret} env && ln -s {host.folder} up "
        "&& ln -s /dev/zero zero && ln -s /proc/self/environ environ && mkfifo fifo "
        f"&& mkdir -p real/sub && echo kept > real/sub/f.txt && ln -s {host.folder} real/sub/up "
        "&& printf x > \"$(printf 'odd-\\377')\" && echo planted"
    )


@dataclass(frozen=True)
class Scenario:
    """A run that plants things where the host touches ``target``/``path`` and then makes
    the host touch them; ``published`` is the file of the planted ones that must be kept."""

    workflow: str
    script: ScriptedModel
    output: Any
    published: str | None
    must_not_exist: Path | None = None


def _tree(target: str, host: HostFiles) -> Scenario:
    """The whole tree of a writable mount: planted by one command; the next command makes a
    root worker chown it, both are recorded (snapshot), the commit publishes it, the end
    removes it."""
    commands = [{"cmd": _plant(target, host)}, {"cmd": f"ls -A {target} | wc -l"}]
    if target == "/mnt/memory/pipeline":
        script = ScriptedModel()
        script.on(model="boss").call_tools([ToolCall("bash", c) for c in commands]).then_reply_text(
            "planned"
        )
        return Scenario(ORCHESTRATION, script, "planned", f"{target}/real/sub/f.txt")
    return Scenario(STORES, bash_steps(commands), "alive", f"{target}/real/sub/f.txt")


def _results(host: HostFiles) -> Scenario:
    """Where a sub-run's output is written for the model: planted as a link to a host
    folder, and as a FIFO, before the orchestrator's start_workflow writes it."""
    script = ScriptedModel()
    script.on(model="kid").reply_json({"value": 6})
    script.on(model="boss").call_tool(
        "bash",
        {"cmd": f"cd /mnt/scratch/own && ln -s {host.folder} workflow-results && echo planted"},
    ).then_call_tool(
        "start_workflow", {"workflowId": "math.double", "input": {"n": 3}}
    ).then_call_tool(
        "bash", {"cmd": "cat /mnt/scratch/own/workflow-results/*/output.json"}
    ).then_reply_text("doubled")
    return Scenario(ORCHESTRATION, script, "doubled", None)


def _cwd(host: HostFiles) -> Scenario:
    """A resumed session's working folder, made again on the host: the first attempt stands
    in ``w/<name>`` with ``w`` a link to ``/tmp`` (the sandbox's own there, the host's on
    the host) when it dies; the retry must make folders in its scratch, not in the host's
    ``/tmp``."""
    name = f"little-attack-{os.urandom(6).hex()}"
    script = ScriptedModel()
    script.on(step="attack").call_tool(
        "bash",
        {"cmd": f"cd /mnt/scratch/own && ln -s /tmp w && mkdir w/{name} && cd w/{name} && pwd"},
    ).then_raise_error("server").then_call_tool(
        "bash", {"cmd": "pwd && echo made-here > made-here.txt"}
    ).then_reply_text("tried")
    script.on(step="after").call_tool("bash", {"cmd": "echo alive"}).then_reply_text("alive")
    return Scenario(
        STORES, script, "alive", f"/mnt/scratch/own/w/{name}/made-here.txt", Path("/tmp", name)
    )


def _scenario(target: str, path: str, host: HostFiles) -> Scenario:
    if path == "":
        return _tree(target, host)
    if (target, path) == ("/mnt/scratch/own", "workflow-results/<run id>/output.json"):
        return _results(host)
    if (target, path) == ("/mnt/scratch/own", "<cwd>"):
        return _cwd(host)
    raise AssertionError(
        f"no attack is written for the host touching {target}/{path}: add one here"
    )


TOUCHED = sorted({(touch.target, touch.path) for touch in HOST_TOUCHES})


def _private_tmp(folder: Path, attacker: str) -> Path:
    """The worker's TMPDIR (its attempts' folders): checked empty after the run."""
    tmp = folder / "tmp"
    tmp.mkdir(mode=0o755)
    if attacker == "unprivileged" and os.geteuid() == 0:
        os.chown(tmp, 65534, 65534)
    return tmp


def _published(run: AttackRun) -> set[str]:
    return {
        e.payload["path"]
        for e in run.events
        if e.type in ("harness.file.created", "harness.file.updated")
    }


def _check_unharmed(run: AttackRun, host: HostFiles, tmp: Path) -> None:
    assert host.untouched(), sorted(os.listdir(host.folder))
    recorded = run.everything()
    assert host.secret_text not in recorded
    assert ENV_SECRET not in recorded  # the worker's own environment
    assert "Traceback" not in run.stderr
    assert [name for name in os.listdir(tmp) if name.startswith("little-")] == []


def test_every_writable_mount_has_its_host_touches_listed() -> None:
    assert {target for target, _ in TOUCHED} == set(WRITABLE_MOUNTS)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("target", "path"), TOUCHED, ids=[f"{t}:{p}" for t, p in TOUCHED])
def test_the_link_trick_fails_on_every_path_the_host_touches(
    target: str, path: str, attacker: str, attacker_folder: Path
) -> None:
    host = host_files(attacker_folder, attacker)
    tmp = _private_tmp(attacker_folder, attacker)
    scenario = _scenario(target, path, host)
    run = run_attack(
        scenario.workflow,
        scenario.script,
        attacker=attacker,
        folder=attacker_folder,
        env={ENV_SECRET: host.secret_text, "TMPDIR": str(tmp)},
    )
    assert run.status == "completed" and run.output == scenario.output, run.stdout[-2000:]
    _check_unharmed(run, host, tmp)
    published = _published(run)
    if scenario.published is not None:
        assert scenario.published in published, sorted(published)
    if scenario.must_not_exist is not None:
        assert not scenario.must_not_exist.exists()
    planted = {"env", "up", "zero", "environ", "fifo", "real/sub/up", "workflow-results"}
    assert not {p for p in published if p.removeprefix(target + "/") in planted}


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("target", ["/mnt/scratch/own", "/mnt/memory/workflow"])
def test_a_tree_too_deep_fails_the_attempt_with_a_clear_error_and_is_removed(
    target: str, attacker: str, attacker_folder: Path
) -> None:
    host = host_files(attacker_folder, attacker)
    tmp = _private_tmp(attacker_folder, attacker)
    deep = f"cd {target} && for i in $(seq 3000); do mkdir d && cd d || break; done; echo deep"
    run = run_attack(
        STORES,
        bash_steps([{"cmd": deep}]),
        attacker=attacker,
        folder=attacker_folder,
        env={ENV_SECRET: host.secret_text, "TMPDIR": str(tmp)},
    )
    assert run.status == "failed"
    failed = [e for e in run.events if e.type == "StepFailed"]
    assert failed and "deeper than" in str(failed[-1].payload["error"]), failed
    _check_unharmed(run, host, tmp)


@pytest.mark.timeout(300)
def test_the_shell_state_comes_back_on_its_own_channel_never_through_a_folder(
    attacker: str, attacker_folder: Path
) -> None:
    host = host_files(attacker_folder, attacker)
    tmp = _private_tmp(attacker_folder, attacker)
    commands: list[dict[str, Any]] = [
        # the old state folder is gone: nothing of the session is in a writable folder
        {"cmd": "export KEEP=1; cd /mnt/scratch/own; mkdir -p w; ls -A /mnt; echo ok"},
        # junk on the state channel: a path outside the mounts, then the shell's own state
        {"cmd": "cd w; printf '/etc\\0declare -x EVIL=1\\n' >&$__little_state; echo sent"},
        {"cmd": "pwd; echo ${KEEP:-gone}"},
        # a flood on the state channel: over the bound, dropped, the next command goes on
        {"cmd": "export FLOOD=1; head -c 3000000 /dev/zero >&$__little_state; echo flooded"},
        {"cmd": "pwd; echo ${FLOOD:-not-kept}"},
        # the channel held open by a process that outlives the command
        {"cmd": "(sleep 30 >&$__little_state &) ; echo detached"},
        {"cmd": "echo still-here"},
    ]
    run = run_attack(
        ATTACKS,
        bash_steps(commands),
        attacker=attacker,
        folder=attacker_folder,
        env={ENV_SECRET: host.secret_text, "TMPDIR": str(tmp)},
    )
    assert run.status == "completed" and run.output == "alive", run.stdout[-2000:]
    _check_unharmed(run, host, tmp)
    seen = run.results("attack")
    assert seen[0]["stdout"].endswith("ok\n") and ".bash-session" not in seen[0]["stdout"]
    assert seen[2]["stdout"] == "/mnt/scratch/own/w\n1\n"  # junk before the state: ignored
    assert f"over {STATE_BYTES} bytes" in seen[3]["stderr"]
    assert seen[4]["stdout"] == "/mnt/scratch/own/w\nnot-kept\n"
    assert seen[6]["stdout"] == "still-here\n"
