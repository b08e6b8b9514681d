"""The tests' zygote (:mod:`tests.zygote`): a forked ``little`` process is what a new one would be.

Each check runs the same command twice, as a new process (``subprocess``) and forked from
the zygote, and compares what the process saw (:mod:`tests.zygote_probe`: its argv,
``sys.path[0]``, working directory, environment, open descriptors, session, standard
streams, signal handlers) and how it ended (exit code, output). Then what a test does with a
fleet process: signal it, kill its process group, and see it die with the zygote.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.zygote import ROOT, Zygote, ZygoteProcess, little_argv, run, spawn, zygote

PROBE = "tests.zygote_probe"


def _env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "ZYGOTE_PROBE": "yes",
        **extra,
    }


def _both(
    args: list[str], *, env: dict[str, str], cwd: Path, input: str = ""
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """``python -m tests.zygote_probe ARGS`` as a new process, then forked."""
    new = subprocess.run(
        [sys.executable, "-m", PROBE, *args],
        env=env,
        cwd=cwd,
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
    )
    forked = run(args, env=env, cwd=cwd, input=input, timeout=60, module=PROBE)
    return new, forked


def _view(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    view: dict[str, Any] = json.loads(done.stdout.splitlines()[0])
    return view


def test_a_forked_process_sees_what_a_new_one_would(tmp_path: Path) -> None:
    assert zygote() is not None, "the zygote is off (LITTLE_TEST_ZYGOTE=0)"
    env = _env(PYTHONIOENCODING="latin-1:replace")
    env.pop("PYTHONUNBUFFERED", None)
    new, forked = _both(["exit", "0"], env=env, cwd=tmp_path, input="from stdin\n")
    assert (new.returncode, forked.returncode) == (0, 0), (new.stderr, forked.stderr)
    seen_new, seen_forked = _view(new), _view(forked)
    assert seen_new["pdeathsig"] == 0
    assert seen_forked.pop("pdeathsig") == signal.SIGKILL  # it dies with the zygote
    seen_new.pop("pdeathsig")
    assert seen_forked == seen_new
    assert seen_new["cwd"] == str(tmp_path)
    assert seen_new["path0"] == str(tmp_path)
    assert seen_new["env"]["ZYGOTE_PROBE"] == "yes"
    assert seen_new["stdin"] == "from stdin\n"
    assert seen_new["stdout"]["encoding"] == "iso8859-1"  # (latin-1, by its codec name)
    assert seen_new["fds"] == [0, 1, 2]
    assert not seen_new["session_leader"]


def test_an_unbuffered_forked_process_in_its_own_session(tmp_path: Path) -> None:
    env = _env(PYTHONUNBUFFERED="1")
    logs = {}
    for how in ("new", "forked"):
        log = tmp_path / f"{how}.log"
        with log.open("wb") as out:
            if how == "new":
                process: Any = subprocess.Popen(
                    [sys.executable, "-m", PROBE, "exit", "0"],
                    env=env,
                    cwd=ROOT,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            else:
                process = spawn(
                    ["exit", "0"],
                    env=env,
                    cwd=ROOT,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    new_session=True,
                    module=PROBE,
                )
                assert isinstance(process, ZygoteProcess)
        assert process.wait(timeout=60) == 0
        logs[how] = json.loads(log.read_text().splitlines()[0])
        logs[how].pop("pdeathsig")
    assert logs["forked"] == logs["new"]
    assert logs["new"]["session_leader"] and logs["new"]["group_leader"]
    assert logs["new"]["stdout"]["write_through"] is True


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["exit", "3"], 3, None),
        (["exit", "300"], 300 & 0xFF, None),
        (["raise"], 1, "RuntimeError: the probe fails"),
        (["thread"], 0, "the thread ended"),
        (["atexit"], 0, "the atexit function ran"),
        (["tail"], 0, "a last line with no newline"),
    ],
)
def test_a_forked_process_ends_as_a_new_one_would(
    args: list[str], code: int, said: str | None, tmp_path: Path
) -> None:
    new, forked = _both(args, env=_env(), cwd=tmp_path)
    assert (new.returncode, forked.returncode) == (code, code), (new.stderr, forked.stderr)
    assert forked.stdout.splitlines()[1:] == new.stdout.splitlines()[1:]
    if said is not None:
        assert said in new.stdout + new.stderr
        assert said in forked.stdout + forked.stderr
    if args == ["raise"]:
        assert forked.stderr.startswith("Traceback (most recent call last):"), forked.stderr


@pytest.mark.parametrize(
    "args", [["--version"], ["nosuch"], ["status", "not a run id"], ["validate", "missing.json"]]
)
def test_little_forked_answers_as_little_started_anew(args: list[str], tmp_path: Path) -> None:
    env = _env()
    new = subprocess.run(
        little_argv(*args), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    forked = run(args, env=env, cwd=tmp_path, timeout=60)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        new.returncode,
        new.stdout,
        new.stderr,
    )


def test_a_forked_process_as_another_user_is_that_user_only(tmp_path: Path) -> None:
    # As root, the unprivileged user of the attack tests (what `setpriv --reuid=U --regid=U
    # --clear-groups` starts); else the current user, as those tests then run.
    user = 65534 if os.getuid() == 0 else None
    env = _env()
    argv = [sys.executable, "-m", PROBE, "exit", "0"]
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    new = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    # That user's zygote: started as that user, it found the interpreter they find.
    server = zygote(user)
    assert server is not None
    with (tmp_path / "out.log").open("w+b") as out:
        forked = server.spawn(
            ["exit", "0"], env=env, cwd=ROOT, stdout=out, stderr=out, module=PROBE, user=user
        )
        assert forked.wait(timeout=60) == 0
        out.seek(0)
        said = out.read().decode()
    assert new.returncode == 0, new.stderr
    seen_new, seen_forked = _view(new), json.loads(said.splitlines()[0])
    expected = os.getuid() if user is None else user
    assert seen_forked["ids"][0] == [expected] * 3
    assert seen_forked["ids"] == seen_new["ids"]
    if user is not None:
        assert seen_forked["ids"][2] == []
        assert seen_forked["pdeathsig"] == signal.SIGKILL
    assert seen_forked["stdlib"] == seen_new["stdlib"]


def _started(tmp_path: Path, server: Zygote | None = None) -> ZygoteProcess:
    env = _env()
    with (tmp_path / "sleep.log").open("wb") as out:
        if server is None:
            process = spawn(
                ["sleep"], env=env, cwd=ROOT, stdout=out, stderr=out, new_session=True, module=PROBE
            )
        else:
            process = server.spawn(
                ["sleep"], env=env, cwd=ROOT, stdout=out, stderr=out, new_session=True, module=PROBE
            )
    assert isinstance(process, ZygoteProcess)
    return process


def test_a_forked_process_is_signalled_and_killed_with_its_group(tmp_path: Path) -> None:
    process = _started(tmp_path)
    assert os.getpgid(process.pid) == process.pid  # its own group already when started
    assert Path(f"/proc/{process.pid}/comm").read_text().strip() == PROBE[:15]
    assert process.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=0.2)
    process.terminate()
    assert process.wait(timeout=30) == -signal.SIGTERM
    process.kill()  # ended: nothing is sent to its pid, which may be another's by now

    process = _started(tmp_path)
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL
    assert process.returncode == -signal.SIGKILL
    assert not Path(f"/proc/{process.pid}").exists() or _is_zombie_or_other(process.pid)


def _is_zombie_or_other(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX" or Path(f"/proc/{pid}/comm").read_text() != PROBE


def test_a_forked_process_dies_with_its_zygote(tmp_path: Path) -> None:
    server = Zygote()
    try:
        process = _started(tmp_path, server)
        server.process.kill()
        assert process.wait(timeout=30) == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while Path(f"/proc/{process.pid}").exists() and not _is_zombie_or_other(process.pid):
            assert time.monotonic() < deadline, "the child outlived its zygote"
            time.sleep(0.05)
    finally:
        server.close()


def test_other_interpreter_settings_start_a_new_process(tmp_path: Path) -> None:
    server = zygote()
    assert server is not None
    assert server.serves(_env())
    assert not server.serves(_env(PYTHONHASHSEED="7"))  # only a new interpreter takes it
    with (tmp_path / "out.log").open("wb") as out:
        process = spawn(
            ["exit", "0"], env=_env(PYTHONHASHSEED="7"), cwd=ROOT, stdout=out, module=PROBE
        )
        assert isinstance(process, subprocess.Popen)
        assert process.wait(timeout=60) == 0
