"""docs/permissions-and-mcp.md as a reader uses it: its Python snippet runs as pasted in an
empty directory, offline, and prints what the document says it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "permissions-and-mcp.md"


@pytest.mark.slow
def test_the_snippet_runs_as_pasted_and_prints_what_the_doc_shows(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    (snippet,) = re.findall(r"^```python\n(.*?)^```$", text, re.S | re.M)
    (shown,) = re.findall(r"^It prints:\n\n```text\n(.*?)^```$", text, re.S | re.M)
    env = {k: v for k, v in os.environ.items() if k not in ("LITTLE_MODEL", "PYTHONPATH")}
    result = subprocess.run(
        [sys.executable, "-c", snippet],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == shown
    assert (tmp_path / ".little-workflow").is_dir()
