"""Hostile commands a model runs with the bash tool, in real workflow runs: each is stopped,
the step's events say what happened to it (``harness.runtime.command.*`` and the call's
``sandbox`` record), and the worker is unharmed: its files and secrets are untouched and it
runs the next step. In process (the worker is this test process) and on the fleet (a real
``little worker`` process, which must still be alive and serving after them).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from little_dist.events import Event
from little_dist.testing import ScriptedModel, ToolCall
from little_dist.world.base import World
from little_dist.world.local import LocalWorld
from tests.bash_fleet_app import allowlisted, attacks
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

SECRET = "s3cr3t-4f9a1c"


@dataclass(frozen=True)
class Host:
    """What the worker has that a command must not reach."""

    secret_file: Path
    bystander: Path


def host_of(tmp_path: Path) -> Host:
    folder = tmp_path / "worker-files"
    folder.mkdir()
    secret = folder / "credentials"
    secret.write_text(SECRET)
    bystander = folder / "bystander.txt"
    bystander.write_text("untouched")
    bystander.chmod(0o666)  # writable by anyone: only the sandbox keeps the command out
    folder.chmod(0o777)
    return Host(secret, bystander)


def sleeps(host: Host) -> tuple[str, str]:
    """The two sleeps the hostile commands leave behind if the sandbox let them, with
    durations no other process on a shared machine runs (the fleet variant of this test may
    run at the same time): a leftover check matches exactly these."""
    salt = f"{abs(hash(str(host.secret_file))) % 10**6:06d}"
    return f"sleep 45.{salt}", f"sleep 1000.{salt}"


def hostile(host: Host) -> list[dict[str, Any]]:
    """The commands, in order (upstream's bash input; ``timeoutMs`` where it would run on)."""
    bomb_sleep, long_sleep = sleeps(host)
    return [
        {"cmd": f"env; tr '\\0' '\\n' < /proc/1/environ; cat {host.secret_file}; ls /root /work"},
        {
            "cmd": f"echo x > /usr/evil; echo x > /evil; echo x > {host.bystander}; "
            "echo x > /mnt/scratch/from-planner/x; echo x > /dev/sda; echo done"
        },
        {"cmd": f"ln -s {host.bystander} out && cat out && echo changed > out"},
        {"cmd": f"bomb() {{ bomb | bomb & }}; bomb; {bomb_sleep}", "timeoutMs": 3000},
        {"cmd": "python3 -c 'x = bytearray(2 * 1024**3)'"},
        {"cmd": long_sleep, "timeoutMs": 1000},
        {"cmd": "head -c 1G /dev/zero"},
        {
            "cmd": "exec 3<>/dev/tcp/1.1.1.1/80 && echo connected; "
            "exec 4<>/dev/tcp/127.0.0.1/6379 && echo connected-to-redis; true"
        },
    ]


def script_for(commands: list[dict[str, Any]], after: str = "echo alive") -> ScriptedModel:
    """The attack step's model asks for the commands, four calls a turn (run one after the
    other), then answers; the next step's model runs ``after``."""
    script = ScriptedModel()
    turns = [commands[i : i + 4] for i in range(0, len(commands), 4)]
    chain = script.on(step="attack").call_tools([ToolCall("bash", c) for c in turns[0]])
    for turn in turns[1:]:
        chain = chain.then_call_tools([ToolCall("bash", c) for c in turn])
    chain.then_reply_text("tried")
    script.on(step="after").call_tool("bash", {"cmd": after}).then_reply_text("alive")
    return script


def ends(events: list[Event], step: str) -> list[dict[str, Any]]:
    """Each command's end event payload (``harness.runtime.command.succeeded|failed``)."""
    return [
        e.payload
        for e in events
        if e.type.startswith("harness.runtime.command.")
        and e.type != "harness.runtime.command.started"
        and e.payload["stepPath"] == step
    ]


def results(world: World, events: list[Event], step: str) -> list[dict[str, Any]]:
    """Each call's recorded result (what the model saw; read back when stored aside)."""
    return [
        e.payload["result"]
        if e.payload.get("resultRef") is None
        else world.get_artifact(e.payload["resultRef"]).payload
        for e in events
        if e.type == "harness.tool_call.succeeded" and e.payload["stepPath"] == step
    ]


def check_stopped(world: World, events: list[Event], host: Host) -> None:
    """What the events say of each hostile command (see :func:`hostile`)."""
    env, write, link, bomb, memory, forever, flood, socket = ends(events, "attack")
    seen = results(world, events, "attack")
    assert len(seen) == 8
    everything = repr(seen) + repr(ends(events, "attack"))
    # 1. environment and secrets: not there (nor the S3 or Redis settings of a fleet worker)
    assert SECRET not in everything and "AWS_SECRET" not in everything
    assert "LITTLE_" not in seen[0]["stdout"]
    assert f"{host.secret_file}: No such file or directory" in seen[0]["stderr"]
    # 2. writes outside its mount: refused, one by one, and the script went on
    assert seen[1]["stdout"] == "done\n"
    assert seen[1]["stderr"].count("Read-only file system") == 2  # /usr, from-planner
    assert "/evil: Permission denied" in seen[1]["stderr"]
    assert f"{host.bystander}: No such file or directory" in seen[1]["stderr"]
    assert "/dev/sda: Permission denied" in seen[1]["stderr"]
    # 3. a symlink out leads nowhere
    assert link["exitCode"] == 1 and "cat: out: No such file or directory" in seen[2]["stderr"]
    # 4. fork bomb: the process limit holds it, the wall clock ends it
    assert bomb["stopped"] == "timeout" and bomb["exitCode"] == 124
    assert "Resource temporarily unavailable" in seen[3]["stderr"]
    # 5. memory past the limit: the allocation fails
    assert memory["exitCode"] == 1 and "MemoryError" in seen[4]["stderr"]
    # 6. forever: killed at its time
    assert forever["stopped"] == "timeout" and forever["exitCode"] == 124
    assert "command timed out after 1000 ms" in seen[5]["stderr"]
    # 7. 1 GB of output: killed as a runaway printer, the kept part capped with a marker
    assert flood["stopped"] == "output" and flood["exitCode"] == 128 + 9
    assert flood["stdout"]["bytes"] < 70 * 1024
    assert "more bytes dropped]" in seen[6]["stdout"]
    # 8. no network: no socket connects, to the internet or the host's loopback
    assert "connected" not in seen[7]["stdout"]
    assert "Network is unreachable" in seen[7]["stderr"]
    assert "Connection refused" in seen[7]["stderr"]
    for end in (env, write, link, bomb, memory, forever, flood, socket):
        assert end["isolation"] == "namespaces"
    # The worker's files are as they were.
    assert host.bystander.read_text() == "untouched"
    assert sorted(os.listdir(host.bystander.parent)) == ["bystander.txt", "credentials"]
    assert not Path("/usr/evil").exists() and not Path("/evil").exists()


def check_next_step_ran(world: World, events: list[Event]) -> None:
    assert results(world, events, "after") == [{"stdout": "alive\n", "stderr": "", "exitCode": 0}]
    completed = [e.payload["stepPath"] for e in events if e.type == "StepCompleted"]
    assert completed == ["attack", "after"]


def test_hostile_commands_are_stopped_and_recorded_and_the_next_step_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LITTLE_TEST_SECRET", SECRET)
    host = host_of(tmp_path)
    world = LocalWorld(tmp_path / "data")
    with script_for(hostile(host)).installed():
        result = attacks.run({}, world=world)
    assert result.status == "completed" and result.output == "alive", result
    events = world.list_events(result.run_id)
    check_stopped(world, events, host)
    check_next_step_ran(world, events)
    # Nothing the sandbox ran outlived it.
    leftover = subprocess.run(["pgrep", "-fx", "|".join(sleeps(host))], capture_output=True)
    assert leftover.stdout == b""


def test_a_host_off_the_allowlist_is_refused_and_nothing_bypasses_the_proxy(
    tmp_path: Path,
) -> None:
    off_list = [
        {"cmd": "curl -sS --max-time 10 https://example.com/ ; echo exit=$?"},
        {
            "cmd": "unset HTTPS_PROXY https_proxy; exec 3<>/dev/tcp/93.184.216.34/443 && "
            "echo bypassed; curl -sS --noproxy '*' --max-time 5 https://example.com/; true"
        },
    ]
    world = LocalWorld(tmp_path / "data")
    with script_for(off_list).installed():
        result = allowlisted.run({}, world=world)
    assert result.status == "completed" and result.output == "alive", result
    events = world.list_events(result.run_id)
    tunnel, bypass = ends(events, "attack")
    # The proxy saw each attempt through it and refused it; the events say so.
    (decision,) = tunnel["egress"]
    assert decision["allowed"] is False and "example.com" in decision["target"]
    seen = results(world, events, "attack")
    assert "exit=0" not in seen[0]["stdout"]
    # A socket around the proxy has no route at all (the proxy is the only way out).
    assert bypass["egress"] == [] and "bypassed" not in seen[1]["stdout"]
    assert "Network is unreachable" in seen[1]["stderr"]
    check_next_step_ran(world, events)


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_a_fleet_worker_survives_the_hostile_commands_and_serves_the_next_step(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    host = host_of(tmp_path)
    script = script_for(hostile(host)).save(tmp_path / "script.json")
    fleet_env.env.update(
        {"LITTLE_APP": "tests.bash_fleet_app", "LITTLE_SCRIPTED_MODEL": str(script)}
    )
    start_scheduler(fleet_env)
    worker = start_worker(
        fleet_env,
        app="tests.bash_fleet_app",
        concurrency=1,
        env={"LITTLE_TEST_SECRET": SECRET},
        timeout=90,
    )
    client = fleet_env.client()
    run_id = client.submit(attacks, {})
    state = client.wait(run_id, timeout=180)
    assert state.status == "completed" and state.output == "alive", state
    world = fleet_env.world()
    events = world.list_events(run_id)
    check_stopped(world, events, host)
    check_next_step_ran(world, events)
    # One worker process ran both steps and is still alive, serving.
    started = [e.payload["workerId"] for e in events if e.type == "StepAttemptStarted"]
    assert len(set(started)) <= 2 and all(f":{worker.pid}:" in w for w in started)
    assert worker.alive()
