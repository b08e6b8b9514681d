"""What a newcomer runs, run in a fresh clone: ``scripts/fresh_clone_check [options]``.

Clones the committed repository (``HEAD``; uncommitted changes are not in it) into a
temporary directory and runs there, in order, every command block marked
``<!-- checked -->`` of ``README.md`` (the two commands of "Start here": install and run an
example, then ``scripts/test``), ``examples/README.md`` and ``docs/operations.md``, each as
written under ``bash -e`` from the clone's root. The clone's virtual environment is on
``PATH`` (as the operations recipe asks: "its virtual environment active"); no ``LITTLE_*``,
``AWS_*`` or ``FLOWER_*`` variable of the caller's reaches the blocks, except
``LITTLE_TEST_REDIS_URL`` (which Redis database the tests use). Stops at the first block
that fails, naming it. ``.ci/run`` is this with ``--lint --perf``: CI runs the test suite
once, in the clone.

``--fast`` (local use only; CI runs every test) sets ``LITTLE_TEST_FAST=1``, with which
``scripts/test`` runs the fast loop (``-m "not integration and not slow"``). ``--lint`` runs
``.ci/lint`` in the clone at the end; ``--perf`` then ``scripts/perf_guard`` (instructions per
step against ``bench/instruction_budget.json``, under valgrind). ``--keep`` keeps the clone.
Options: ``--fast``, ``--lint``, ``--perf``, ``--keep``. Standard library only: it runs
before anything is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DOCUMENTS", "Block", "checked_blocks", "clone", "main", "plan"]

ROOT = Path(__file__).resolve().parent.parent
#: The documents whose checked blocks run, in this order.
DOCUMENTS = ("README.md", "examples/README.md", "docs/operations.md")
_CHECKED = re.compile(r"^<!-- checked -->\n```bash\n(.*?)^```$", flags=re.S | re.M)
_KEEP_ENV = ("LITTLE_TEST_REDIS_URL",)


@dataclass(frozen=True)
class Block:
    """One command block to run: where it is written, and its text."""

    document: str
    line: int
    heading: str
    script: str

    @property
    def label(self) -> str:
        return f"{self.document}:{self.line} ({self.heading})"


def checked_blocks(markdown: str, section: str | None = None) -> list[str]:
    """The ```` ```bash ```` blocks right after a ``<!-- checked -->`` line, in ``section``
    (from that heading line to the next ``## `` heading) or in the whole document."""
    return [match.group(1) for match in _matches(markdown, section)]


def _matches(markdown: str, section: str | None) -> list[re.Match[str]]:
    start, end = 0, len(markdown)
    if section is not None:
        start = markdown.index(section)
        found = markdown.find("\n## ", start + len(section))
        end = found if found != -1 else len(markdown)
    return list(_CHECKED.finditer(markdown, start, end))


def plan(root: Path) -> list[Block]:
    """Every checked block of :data:`DOCUMENTS` under ``root``, in order."""
    blocks: list[Block] = []
    for document in DOCUMENTS:
        text = (root / document).read_text(encoding="utf-8")
        for match in _matches(text, None):
            before = text[: match.start()]
            headings = re.findall(r"^#+ (.+)$", before, flags=re.M)
            blocks.append(
                Block(
                    document=document,
                    line=before.count("\n") + 3,  # the first command's line
                    heading=headings[-1] if headings else "",
                    script=match.group(1),
                )
            )
    return blocks


def clone(source: Path, destination: Path) -> str:
    """Clone ``source``'s committed ``HEAD`` (a branch or not) into ``destination``."""

    def git(*args: str, cwd: Path | None = None) -> str:
        done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
        return done.stdout.strip()

    head = git("rev-parse", "HEAD", cwd=source)
    git("clone", "--quiet", "--no-checkout", str(source), str(destination))
    git("fetch", "--quiet", str(source), head, cwd=destination)
    git("checkout", "--quiet", "--detach", head, cwd=destination)
    return head


def _environment(checkout: Path, fast: bool) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key in _KEEP_ENV
        or not (key.startswith(("LITTLE_", "AWS_", "FLOWER_")) or key in ("PYTHONPATH",))
    }
    env.pop("VIRTUAL_ENV", None)
    venv = checkout / ".venv"
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    if fast:
        env["LITTLE_TEST_FAST"] = "1"
    return env


def _run(script: str, checkout: Path, env: dict[str, str]) -> int:
    # Its own session: whatever a block leaves running is stopped with it.
    process = subprocess.Popen(
        ["bash", "-e", "-c", script],
        cwd=checkout,
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        return process.wait()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/fresh_clone_check", description=__doc__.split("\n\n")[1]
    )
    parser.add_argument("--fast", action="store_true", help="the fast test loop (local use)")
    parser.add_argument("--lint", action="store_true", help="run .ci/lint in the clone too")
    parser.add_argument(
        "--perf", action="store_true", help="run scripts/perf_guard in the clone too"
    )
    parser.add_argument("--keep", action="store_true", help="keep the clone")
    args = parser.parse_args(argv)
    if subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT).returncode != 0:
        print("fresh clone: note: uncommitted changes are not in the clone", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="little-fresh-clone-"))
    workdir.chmod(0o755)  # the attack tests run a worker as an unprivileged user from it
    checkout = workdir / "little-dist"
    failed = None
    try:
        head = clone(ROOT, checkout)
        print(f"== fresh clone of {head[:12]} in {checkout}", flush=True)
        env = _environment(checkout, args.fast)
        steps = [(block.label, block.script) for block in plan(checkout)]
        if args.lint:
            steps.append((".ci/lint", "LITTLE_CI_BIN=.venv/bin .ci/lint"))
        if args.perf:
            steps.append(("scripts/perf_guard", ".venv/bin/python scripts/perf_guard"))
        for label, script in steps:
            print(f"== {label}", flush=True)
            code = _run(script, checkout, env)
            if code != 0:
                failed = f"{label} failed (exit {code})"
                break
    finally:
        if args.keep or failed:
            print(f"fresh clone: kept {checkout}", flush=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if failed:
        print(f"fresh clone: {failed}", file=sys.stderr)
        return 1
    print(f"fresh clone: every block passed ({len(steps)})", flush=True)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # (the clone is removed, the running block stopped)
        print("fresh clone: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
