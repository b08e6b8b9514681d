"""Behaviour of the ``little`` entry point itself, whatever the subcommand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from little_dist.events import EventInput
from little_dist.world.local import LocalWorld


def test_a_reader_that_goes_away_is_not_a_traceback(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path)
    # Far more than a pipe buffer holds, so the writer meets the closed pipe.
    world.append_batch(
        "run_pipe",
        [
            EventInput(type="little.test.filler", payload={"n": i, "pad": "x" * 200})
            for i in range(3000)
        ],
    )
    world.close()
    command = (
        f"{sys.executable} -m little_dist.cli events run_pipe --json --data-dir {tmp_path} "
        "| head -1"
    )
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.startswith('{"eventId": "evt_')
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr
    assert result.returncode == 141


def test_no_command_prints_help_and_exits_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "little_dist.cli"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "validate" in result.stdout and "Traceback" not in result.stderr


def test_version() -> None:
    from little_dist import __version__

    result = subprocess.run(
        [sys.executable, "-m", "little_dist.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and result.stdout.strip() == f"little {__version__}"


def test_worker_and_scheduler_log_levels_are_case_insensitive() -> None:
    from little_dist.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["worker", "--loglevel", "WARNING"]).loglevel == "warning"
    assert parser.parse_args(["worker", "-l", "info"]).loglevel == "info"
    assert parser.parse_args(["scheduler", "--loglevel", "warning"]).loglevel == "WARNING"
    with pytest.raises(SystemExit) as refused:
        parser.parse_args(["worker", "--loglevel", "loud"])
    assert refused.value.code == 2
