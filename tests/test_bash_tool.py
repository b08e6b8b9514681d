"""The bash tool's engine (little_dist.sandbox.bash): upstream's contract, one shell's state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest

from little_dist.sandbox import Mount
from little_dist.sandbox.bash import (
    BASH_INPUT_SCHEMA,
    BASH_OUTPUT_SCHEMA,
    BashCapabilities,
    BashInputError,
    BashSession,
    BashState,
    parse_bash_input,
)


@pytest.fixture
def own(tmp_path: Path) -> Path:
    folder = tmp_path / "own"
    folder.mkdir()
    return folder


def session(own: Path, **kwargs: Any) -> BashSession:
    return BashSession(
        [Mount(own, "/mnt/scratch/own", writable=True)], "/mnt/scratch/own", **kwargs
    )


def test_the_working_directory_and_exports_carry_from_one_command_to_the_next(own: Path) -> None:
    bash = session(own)
    first = bash.run({"cmd": "mkdir -p notes && cd notes && export TOPIC=cats && echo hi > a.txt"})
    assert first == {"stdout": "", "stderr": "", "exitCode": 0}
    second = bash.run({"cmd": "pwd; echo $TOPIC; cat a.txt; plain=1"})
    assert second["stdout"].splitlines() == ["/mnt/scratch/own/notes", "cats", "hi"]
    assert bash.run({"cmd": 'echo "[$plain]"'})["stdout"] == "[]\n"  # not exported: gone
    assert (own / "notes" / "a.txt").read_text() == "hi\n"
    for output in (first, second):
        jsonschema.validate(output, BASH_OUTPUT_SCHEMA)


def test_a_state_restored_from_json_continues_the_session_elsewhere(own: Path) -> None:
    bash = session(own)
    bash.run({"cmd": "mkdir -p w && cd w && export COLOR=blue"})
    recorded = bash.state.to_json()
    other = session(own)  # a resumed session, e.g. on another worker
    other.restore(BashState.from_json(recorded))
    assert other.run({"cmd": "pwd; echo $COLOR"})["stdout"] == "/mnt/scratch/own/w\nblue\n"


def test_cwd_must_be_inside_a_writable_mount(own: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    bash = BashSession(
        [Mount(own, "/mnt/scratch/own", writable=True), Mount(shared, "/mnt/shared")],
        "/mnt/scratch/own",
    )
    for cwd in ("/mnt/shared", "/usr", "../..", "/mnt/scratch/own/../../etc"):
        with pytest.raises(BashInputError, match="cwd must be inside a writable mount"):
            bash.run({"cmd": "pwd", "cwd": cwd})
    with pytest.raises(BashInputError, match="cwd must be inside a writable mount"):
        BashSession([Mount(shared, "/mnt/shared")], "/mnt/shared")
    # a command that wanders off leaves the next one where it started
    assert bash.run({"cmd": "cd /usr && pwd"})["stdout"] == "/usr\n"
    assert bash.run({"cmd": "pwd"})["stdout"] == "/mnt/scratch/own\n"
    bash.run({"cmd": "mkdir -p d"})
    assert bash.run({"cmd": "pwd", "cwd": "d"})["stdout"] == "/mnt/scratch/own/d\n"
    assert bash.run({"cmd": "pwd", "cwd": "missing"})["exitCode"] == 1


def test_a_command_past_its_time_ends_with_124(own: Path) -> None:
    # (2 s, not 0.2: the clock runs from the sandbox's start, and on a loaded CI machine the
    # sandbox took longer than 0.2 s to get as far as the echo)
    result = session(own).run({"cmd": "echo started; sleep 30", "timeoutMs": 2000})
    assert result["exitCode"] == 124
    assert result["stdout"] == "started\n"
    assert "timed out after 2000 ms" in result["stderr"]


def test_exit_codes_and_stderr_are_the_commands(own: Path) -> None:
    bash = session(own)
    assert bash.run({"cmd": "echo oops >&2; exit 3"}) == {
        "stdout": "",
        "stderr": "oops\n",
        "exitCode": 3,
    }
    missing = bash.run({"cmd": "no-such-command"})
    assert missing["exitCode"] == 127 and "command not found" in missing["stderr"]


def test_python_off_hides_the_interpreter(own: Path) -> None:
    on = session(own).run({"cmd": "python3 -c 'print(6 * 7)'"})
    assert on["stdout"] == "42\n"
    off = session(own, capabilities=BashCapabilities(python=False))
    result = off.run({"cmd": "python3 -c 'print(6 * 7)'"})
    assert result["exitCode"] != 0 and result["stdout"] == ""


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("ls", "bash input must be an object."),
        ({}, "bash input must include a non-empty cmd string."),
        ({"cmd": ""}, "bash input must include a non-empty cmd string."),
        ({"cmd": 3}, "bash input must include a non-empty cmd string."),
        ({"cmd": "ls", "cwd": 1}, "bash input cwd must be a string when provided."),
        ({"cmd": "ls", "timeoutMs": -1}, "timeoutMs must be a non-negative finite number"),
        ({"cmd": "ls", "timeoutMs": float("inf")}, "timeoutMs must be a non-negative finite"),
        ({"cmd": "ls", "timeoutMs": True}, "timeoutMs must be a non-negative finite number"),
        ({"cmd": "a\0b"}, "must not contain NUL bytes"),
    ],
)
def test_bad_input_gets_upstreams_messages(value: object, message: str) -> None:
    with pytest.raises(BashInputError, match=message.replace(".", r"\.")):
        parse_bash_input(value)


def test_the_input_schema_is_upstreams() -> None:
    jsonschema.validate({"cmd": "ls", "cwd": "/mnt/scratch/own", "timeoutMs": 5}, BASH_INPUT_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"cmd": "ls", "shell": "zsh"}, BASH_INPUT_SCHEMA)
