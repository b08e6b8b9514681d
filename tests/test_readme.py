"""The README as a newcomer uses it: its Python snippets run as pasted (offline), and the
fresh-clone check (``scripts/fresh_clone_check``, which ``.ci/run`` is) finds exactly the
command blocks the documents mark ``<!-- checked -->``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.fresh_clone import Block, checked_blocks, plan

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PYTHON_SECTION = "## Define and run a workflow in Python"


def _section(markdown: str, heading: str) -> str:
    start = markdown.index(heading)
    end = markdown.find("\n## ", start + len(heading))
    return markdown[start : end if end != -1 else len(markdown)]


def test_checked_blocks_are_the_marked_bash_blocks_of_the_section() -> None:
    markdown = (
        "# Doc\n\n<!-- checked -->\n```bash\necho one\n```\n\n"
        "```bash\necho not marked\n```\n\n"
        "## Two\n\n<!-- checked -->\n```bash\necho two\necho three\n```\n"
        "<!-- checked -->\n```python\nprint('not bash')\n```\n"
        "<!-- checked -->\n\n```bash\necho not right after the marker\n```\n"
        "## Three\n\n<!-- checked -->\n```bash\necho four\n```\n"
    )
    assert checked_blocks(markdown) == ["echo one\n", "echo two\necho three\n", "echo four\n"]
    assert checked_blocks(markdown, "## Two") == ["echo two\necho three\n"]
    assert checked_blocks(markdown, "## Three") == ["echo four\n"]


def test_the_fresh_clone_runs_the_readme_commands_then_the_examples_then_the_recipe() -> None:
    blocks = plan(ROOT)
    documents = [block.document for block in blocks]
    assert documents == sorted(
        documents, key=["README.md", "examples/README.md", "docs/operations.md"].index
    )
    first = blocks[0]
    assert first == Block("README.md", first.line, "Start here", first.script)
    # The README's two commands, as written, and nothing else of the README.
    commands = [line for line in first.script.splitlines() if line and not line.startswith("#")]
    assert commands == [
        "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && "
        ".venv/bin/python -m examples.support_triage",
        "scripts/test",
    ]
    assert documents.count("README.md") == 1
    assert README.splitlines()[first.line - 1].startswith("# install, then run an example")
    # Every example module and LWIR document runs in some checked block.
    examples = "\n".join(b.script for b in blocks if b.document == "examples/README.md")
    for name in ("support_triage", "candidate_screening", "draft_review", "order_totals"):
        assert f"python -m examples.{name}\n" in examples
        assert f"little run examples.{name}:workflow --input examples/inputs/{name}.json" in (
            examples
        )
    for document in sorted((ROOT / "examples" / "lwir").glob("*.json")):
        assert f"little run examples/lwir/{document.name} --app examples.lwir_app" in examples
    recipe = [b for b in blocks if b.document == "docs/operations.md"]
    assert recipe and recipe[0].heading == "A fleet on one machine, without Docker"


def test_ci_is_the_fresh_clone_check_and_the_readme_names_the_fast_loop() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "exec scripts/fresh_clone_check --lint" in ci
    start_here = _section(README, "## Start here")
    assert 'scripts/test -m "not integration and not slow"' in start_here


@pytest.mark.slow
def test_the_python_snippets_run_as_pasted_offline(tmp_path: Path) -> None:
    blocks = re.findall(r"^```python\n(.*?)^```$", _section(README, PYTHON_SECTION), re.S | re.M)
    assert len(blocks) == 2, "the planner snippet and its plan= variant"
    assert "plan=PLAN" in blocks[1] and "plan=" not in blocks[0]
    # Pasted one after the other into one interpreter, in an empty directory.
    env = {k: v for k, v in os.environ.items() if k not in ("LITTLE_MODEL", "PYTHONPATH")}
    result = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    planned, fixed = result.stdout.splitlines()
    for line in (planned, fixed):
        assert line.startswith("severity='high' reply='Sorry about the timeouts")
    assert re.search(r" run_\w+ None$", planned)  # (scripted calls are unpriced)
    assert re.search(r" run_\w+$", fixed)
    assert (tmp_path / ".little-workflow").is_dir()


@pytest.mark.slow
def test_the_skills_snippet_runs_as_pasted_offline(tmp_path: Path) -> None:
    (block,) = re.findall(r"^```python\n(.*?)^```$", _section(README, "## Skills"), re.S | re.M)
    env = {k: v for k, v in os.environ.items() if k not in ("LITTLE_MODEL", "PYTHONPATH")}
    result = subprocess.run(
        [sys.executable, "-c", block],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    answer, shown = result.stdout.splitlines()
    assert answer == "Refunded: 30 EUR."
    assert "Refund orders under 50 EUR without asking" in shown
    assert (tmp_path / "skills" / "refund-policy" / "SKILL.md").is_file()
