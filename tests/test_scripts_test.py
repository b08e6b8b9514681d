"""``scripts/test``, the README's test command, sets up what the tests need or says in one line
what is missing: Redis (started, or installed as root), Chromium and bubblewrap (installed
as root; without root, a line naming the tests that will fail). Run here as a real process, as it is
and as a user that is not root (in a user namespace of its own, ``unshare --user``, where
``id -u`` is 65534), with a ``PATH`` that lacks ``redis-server`` where that matters."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "test"
PYTHON = Path(sys.executable)
# A quick test file for the script to hand to pytest.
QUICK = ["-q", "tests/test_ids.py"]

pytestmark = pytest.mark.slow


def _free_port() -> int:
    from tests.ports import reserve_port

    return reserve_port()


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LITTLE_TEST_")}
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    scratch.chmod(0o777)
    env.update(
        LITTLE_TEST_PYTHON=str(PYTHON),
        PYTHONDONTWRITEBYTECODE="1",
        TMPDIR=str(scratch),
        LITTLE_TEST_REDIS_URL=os.environ.get("LITTLE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"),
    )
    env.update(extra)
    return env


def _run(
    args: list[str], env: dict[str, str], *, as_nobody: bool = False
) -> subprocess.CompletedProcess[str]:
    prefix = ["/usr/bin/unshare", "--user"] if as_nobody else []
    return subprocess.run(
        [*prefix, "/bin/bash", str(SCRIPT), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_without_redis_and_without_root_it_says_what_to_install(tmp_path: Path) -> None:
    # A PATH with the few tools the script uses, and no redis-server (nor apt-get).
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("dirname", "id", "mkdir", "seq", "sleep"):
        found = subprocess.run(["which", name], capture_output=True, text=True).stdout.strip()
        (tools / name).symlink_to(found)
    port = _free_port()
    env = _env(tmp_path, PATH=str(tools), LITTLE_TEST_REDIS_URL=f"redis://127.0.0.1:{port}/0")
    result = _run(QUICK, env, as_nobody=True)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"scripts/test: Redis does not answer on 127.0.0.1:{port} and redis-server is not "
        "installed: install it (Debian: sudo apt-get install redis-server) or start a Redis "
        "there (LITTLE_TEST_REDIS_URL for another)"
    ]


def test_it_starts_redis_where_nothing_answers_then_runs_pytest(tmp_path: Path) -> None:
    port = _free_port()
    env = _env(tmp_path, LITTLE_TEST_REDIS_URL=f"redis://127.0.0.1:{port}/0")
    try:
        result = _run(QUICK, env)
        assert result.returncode == 0, result.stderr + result.stdout
        assert f"scripts/test: starting redis-server on 127.0.0.1:{port}" in result.stderr
        assert " passed" in result.stdout
        assert redis.Redis(port=port).ping()
    finally:
        with contextlib.suppress(redis.ConnectionError):  # (the reply to SHUTDOWN)
            redis.Redis(port=port).shutdown(nosave=True)


def test_without_chromium_or_bubblewrap_and_without_root_it_names_the_tests(
    tmp_path: Path,
) -> None:
    env = _env(
        tmp_path,
        LITTLE_TEST_CHROMIUM=str(tmp_path / "no-chromium"),
        LITTLE_SANDBOX_BWRAP=str(tmp_path / "no-bwrap"),
    )
    result = _run(QUICK, env, as_nobody=True)
    # The tests still run (those would fail, not be skipped): here, the quick ones.
    assert result.returncode == 0, result.stderr + result.stdout
    assert result.stderr.splitlines() == [
        f"scripts/test: {tmp_path / 'no-chromium'} is missing, so "
        "tests/test_report_html_browser.py and tests/test_http_viewer_browser.py (the HTML "
        "report and the live viewer in a browser) will fail: install the Debian package "
        "'chromium' as root",
        f"scripts/test: bubblewrap ({tmp_path / 'no-bwrap'}) is missing, so the sandbox's "
        "tests (tests/test_sandbox*.py, test_bash_tool.py, test_code_run.py) will fail: "
        "install the Debian package 'bubblewrap' as root",
    ]
    assert " passed" in result.stdout


def test_without_the_virtual_environment_it_says_to_make_it(tmp_path: Path) -> None:
    result = _run(QUICK, _env(tmp_path, LITTLE_TEST_PYTHON=str(tmp_path / "python")))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"scripts/test: {tmp_path / 'python'} not found: create the virtual environment first "
        "(the README's first command)"
    ]
