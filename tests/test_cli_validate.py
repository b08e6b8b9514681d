"""``little validate``, run as a user runs it: a real subprocess of the installed CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from little_dist import __version__
from little_dist.canonical import sha256_digest
from little_dist.cli import main
from little_dist.compiler import compile_lwir
from little_dist.ids import workflow_version_id_for
from little_dist.lwir import validate_lwir
from tests.conftest import load_vectors

ROOT = Path(__file__).parent.parent
EXAMPLES = sorted((ROOT / "examples" / "lwir").glob("*.json"))
LWIR_VECTORS = load_vectors("lwir_validation")
VALID = next(v for v in LWIR_VECTORS if v["name"] == "valid_base_workflow")["lwir"]
INVALID = [v for v in LWIR_VECTORS if not v["valid"]][:8]
FINDING_LINE = re.compile(r"^[a-z_.]+ \$\S*: \S.*$")
CONSOLE_SCRIPT = Path(sys.executable).parent / "little"


def little(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m little_dist.cli ARGS`` the way a shell would."""
    completed = subprocess.run(
        [sys.executable, "-m", "little_dist.cli", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        cwd=ROOT,
    )
    return subprocess.CompletedProcess(
        completed.args,
        completed.returncode,
        completed.stdout.decode("utf-8"),
        completed.stderr.decode("utf-8"),
    )


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


# --- valid documents ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_are_valid(path: Path) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    result = little("validate", str(path))
    assert result.returncode == 0, result.stderr
    steps = len(doc["steps"])
    assert result.stdout == (
        f"valid: {doc['metadata']['name']} — {steps} step{'s' if steps != 1 else ''}, "
        f"{workflow_version_id_for(sha256_digest(doc))}\n"
    )
    assert result.stderr == ""


def test_examples_exist() -> None:
    names = {path.name for path in EXAMPLES}
    assert "support-triage.json" in names
    triage = json.loads((ROOT / "examples/lwir/support-triage.json").read_text("utf-8"))
    assert {step["uses"] for step in triage["steps"]} >= {"tool.call", "ai.generate", "decision"}


def test_console_script_runs(tmp_path: Path) -> None:
    assert CONSOLE_SCRIPT.exists(), f"{CONSOLE_SCRIPT} missing: is the package installed?"
    path = write(tmp_path, "wf.json", json.dumps(VALID))
    result = subprocess.run(
        [str(CONSOLE_SCRIPT), "validate", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("valid: support.summarize-ticket — 2 steps, wfver_")


def test_json_output_when_valid(tmp_path: Path) -> None:
    path = write(tmp_path, "wf.json", json.dumps(VALID))
    result = little("validate", str(path), "--json")
    assert result.returncode == 0
    report = json.loads(result.stdout)
    assert report["valid"] is True
    assert report["findings"] == []
    assert report["lwirVersionId"] == "wfver_19eeecfd09b0b1f5"
    assert report["lwirHash"] == sha256_digest(VALID)
    assert report["name"] == "support.summarize-ticket"
    assert report["steps"] == 2


def test_stdin(tmp_path: Path) -> None:
    result = little("validate", "-", stdin=json.dumps(VALID).encode())
    assert result.returncode == 0
    assert "wfver_19eeecfd09b0b1f5" in result.stdout
    bad = little("validate", "-", stdin=b"{}")
    assert bad.returncode == 1
    assert "<stdin>" in bad.stderr
    junk = little("validate", "-", stdin=b"{")
    assert junk.returncode == 2
    assert junk.stderr.startswith("little validate: <stdin>: invalid JSON at line 1 column 2")


def test_compiled_workflow_version_document(tmp_path: Path) -> None:
    stored = compile_lwir(VALID, input={"ticketId": "T-1", "transcript": "hi"}).to_json()
    path = write(tmp_path, "version.json", json.dumps(stored))
    result = little("validate", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("wfver_19eeecfd09b0b1f5")


# --- invalid documents ---------------------------------------------------------------------------


@pytest.mark.parametrize("vector", INVALID, ids=lambda v: v["name"])
def test_invalid_documents(vector: dict[str, Any], tmp_path: Path) -> None:
    path = write(tmp_path, "wf.json", json.dumps(vector["lwir"]))
    expected = validate_lwir(vector["lwir"])
    result = little("validate", str(path))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert len(lines) == len(expected)
    assert all(FINDING_LINE.match(line) for line in lines), lines
    for finding in vector["findings"]:
        assert any(line.startswith(f"{finding['code']} {finding['path']}: ") for line in lines)
    assert result.stderr.count("\n") == 1
    assert f"invalid, {len(expected)} finding" in result.stderr
    assert "Traceback" not in result.stderr

    as_json = little("validate", str(path), "--json")
    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    assert report["valid"] is False
    assert report["findings"] == [finding.to_json() for finding in expected]


def test_a_document_that_is_not_an_object(tmp_path: Path) -> None:
    path = write(tmp_path, "wf.json", "[]")
    result = little("validate", str(path))
    assert result.returncode == 1
    assert result.stdout == "schema.invalid $: LWIR document must be an object.\n"


# --- files that cannot be validated -------------------------------------------------------------

BAD_FILES: dict[str, tuple[str | bytes, str]] = {
    "empty": ("", "the file is empty"),
    "whitespace": ("  \n\t\n", "the file is empty"),
    "binary": (bytes(range(256)) * 4, "not UTF-8"),
    "latin-1": ('{"name": "caf\xe9"}'.encode("latin-1"), "not UTF-8"),
    "open brackets 100k": ("[" * 100_000, "nested more than 64 levels deep"),
    "closed brackets 100k": ("[" * 100_000 + "]" * 100_000, "nested more than 64 levels deep"),
    "objects 50k": ('{"a":' * 50_000 + "1" + "}" * 50_000, "nested more than 64 levels deep"),
    "depth 65": ("[" * 65 + "]" * 65, "(LITTLE_MAX_JSON_DEPTH=64)"),
    "trailing comma": ('{"a": 1,}', "line 1 column 9"),
    "second line": ('{\n  "a": tru\n}', "line 2 column 8"),
    "nan": ('{"a": NaN}', "NaN is not valid JSON"),
    "infinity": ("[-Infinity]", "-Infinity is not valid JSON"),
    "huge integer": ("9" * 10_000, "invalid JSON"),
    "two documents": ("{} {}", "Extra data"),
    "single quotes": ("{'a': 1}", "line 1 column 2"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_unparseable_files_exit_2_without_traceback(name: str, tmp_path: Path) -> None:
    content, reason = BAD_FILES[name]
    path = write(tmp_path, "bad file.json", content)
    result = little("validate", str(path))
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"little validate: {path}")
    assert reason in result.stderr


def test_missing_file(tmp_path: Path) -> None:
    result = little("validate", str(tmp_path / "nope.json"))
    assert result.returncode == 2
    assert result.stderr == f"little validate: cannot read {tmp_path / 'nope.json'}: no such file\n"


def test_directory(tmp_path: Path) -> None:
    result = little("validate", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr == f"little validate: cannot read {tmp_path}: is a directory\n"


def test_permission_denied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Tests may run as root, where chmod 000 does not stop a read: fail the open instead.
    import little_dist.bounded_read as bounded_read

    path = write(tmp_path, "locked.json", "{}")
    real_open = os.open

    def refuse(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(bounded_read.os, "open", refuse)
    assert main(["validate", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"little validate: cannot read {path}: permission denied\n"


def test_deeply_nested_but_parseable_document(tmp_path: Path) -> None:
    depth = 900
    doc = (
        '{"apiVersion":"littleworkflow.dev/v0.1","kind":"Workflow",'
        '"metadata":{"name":"x","version":"1"},"input":{"schema":'
        + '{"not":' * depth
        + "true"
        + "}" * depth
        + '},"output":{"schema":true},"steps":[]}'
    )
    path = write(tmp_path, "deep.json", doc)
    result = little("validate", str(path))
    assert result.returncode == 2
    assert result.stderr == (
        f"little validate: {path} is nested more than 64 levels deep (LITTLE_MAX_JSON_DEPTH=64)\n"
    )


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"LITTLE_MAX_STEPS": "3"}, "has 4 steps, more than LITTLE_MAX_STEPS=3"),
        # (Under the file's own bound, 4 times that: a file over it is not even read, see
        # tests/test_cli_bad_input.py.)
        ({"LITTLE_MAX_LWIR_BYTES": "500"}, "bytes of JSON, more than LITTLE_MAX_LWIR_BYTES=500"),
        ({"LITTLE_MAX_JSON_DEPTH": "3"}, "nested more than 3 levels deep"),
    ],
)
def test_a_document_over_a_limit_is_not_validated(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    reason: str,
) -> None:
    from tests.workflows_for_tests import chain_lwir

    path = write(tmp_path, "chain.json", json.dumps(chain_lwir(4)))
    assert main(["validate", str(path)]) == 0
    capsys.readouterr()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["validate", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"little validate: {path}")
    assert captured.err.count("\n") == 1 and reason in captured.err


def test_a_bad_limit_setting_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LITTLE_MAX_STEPS", "many")
    assert main(["validate", str(write(tmp_path, "x.json", "{}"))]) == 2
    assert capsys.readouterr().err == (
        "little validate: LITTLE_MAX_STEPS='many': expected a whole number of steps, 1 or more\n"
    )


# --- the rest of the command line ---------------------------------------------------------------


def test_version() -> None:
    result = little("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"little {__version__}"


def test_usage_errors_exit_2_on_one_line() -> None:
    result = little("validate")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1
    assert "FILE" in result.stderr
    unknown = little("validate", "a.json", "--yaml")
    assert unknown.returncode == 2
    assert "--yaml" in unknown.stderr
