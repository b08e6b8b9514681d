"""Every standalone LWIR document in ``examples/lwir/`` runs offline to completion through
``little run`` (the CLI's main, forked from the test zygote: ``tests/zygote.py``), with the
app module that provides its tool and model slots (``--app examples.lwir_app``) and its
sample input (``examples/lwir/inputs/``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import jsonschema
import pytest

from tests import zygote

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = sorted((ROOT / "examples" / "lwir").glob("*.json"))


def _little(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LITTLE_MODEL", "PYTHONPATH")}
    return zygote.run(list(args), cwd=cwd, env=env, timeout=180)


def test_every_document_has_a_sample_input_and_a_documented_command() -> None:
    assert [p.name for p in DOCUMENTS] == [
        "candidate-review.json",
        "summarize-ticket.json",
        "support-triage.json",
    ]
    readme = (ROOT / "examples" / "README.md").read_text(encoding="utf-8")
    for document in DOCUMENTS:
        sample = ROOT / "examples" / "lwir" / "inputs" / document.name
        assert sample.exists(), f"no sample input for {document.name}"
        command = (
            f"little run examples/lwir/{document.name} --app examples.lwir_app "
            f"--input examples/lwir/inputs/{document.name}"
        )
        assert command in readme, f"examples/README.md does not show: {command}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.stem)
def test_the_document_runs_offline_with_the_lwir_app(document: Path, tmp_path: Path) -> None:
    result = _little(
        "run",
        f"examples/lwir/{document.name}",
        "--app",
        "examples.lwir_app",
        "--input",
        f"examples/lwir/inputs/{document.name}",
        "--data-dir",
        str(tmp_path / "world"),
        "--json",
        "--quiet",
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "completed"
    schema = json.loads(document.read_text(encoding="utf-8"))["output"]["schema"]
    jsonschema.Draft7Validator(schema).validate(summary["output"])
    # The scripted replies are priced as a real model, so the report shows dollars.
    assert summary["usage"]["costUsd"] > 0
    report = _little("report", summary["runId"], "--data-dir", str(tmp_path / "world"))
    assert report.returncode == 0, report.stderr


def test_without_the_app_the_run_is_refused_in_one_line(tmp_path: Path) -> None:
    result = _little(
        "run",
        "examples/lwir/summarize-ticket.json",
        "--input",
        "examples/lwir/inputs/summarize-ticket.json",
        "--data-dir",
        str(tmp_path / "world"),
    )
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        "little run: step 'lookup-customer' calls tool 'lookupCustomer', which the app does "
        "not register (registered: none)"
    )
    assert not (tmp_path / "world").exists()
