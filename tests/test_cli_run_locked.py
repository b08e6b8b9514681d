"""``little run`` of a locked WorkflowVersion document runs it as it is and honours its input
binding, as upstream's ``cli-core.ts`` does (``isLockedWorkflowVersion``,
``assertLockedWorkflowVersionInputMatches``; issue 35, item 8)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from little_dist.canonical import sha256_digest
from little_dist.cli.locked_versions import is_locked_version
from little_dist.cli.run_problems import InvalidWorkflowOrInput
from little_dist.cli.run_target import check_input_binding
from little_dist.compiler import CompileRequest, compile_lwir
from tests import zygote
from tests.workflows_for_tests import chain_lwir

REPO = Path(__file__).resolve().parent.parent
INPUT = {"ticket": "T-1"}


def little_run(*args: str) -> subprocess.CompletedProcess[str]:
    return zygote.run(
        ["run", *args, "--app", "tests.workflows_for_tests", "--quiet", "--json"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )


def write(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def planner_style_version() -> Any:
    """A version locked to a request (as the planner locks one), without ``inputBinding``: its
    id is not the one the direct-LWIR recipe would give, so a recompile would show."""
    request = CompileRequest(
        request_id="orq_locked_test",
        request_hash="sha256:" + "1" * 64,
        input_hash="sha256:" + "2" * 64,
        planned_input_structure={"kind": "object", "fields": []},
        planned_input_structure_hash="sha256:" + "3" * 64,
        workflow_definition_hash="sha256:" + "4" * 64,
        input_schema_hash="sha256:" + "5" * 64,
        requested_output={"mode": "json"},
        requested_output_hash="sha256:" + "6" * 64,
        capability_manifest={"stepTypes": ["tool.call"]},
        capability_manifest_hash="sha256:" + "7" * 64,
        input_binding=None,
    )
    return compile_lwir(chain_lwir(2), request=request)


def test_locked_version_runs_on_its_input_as_it_is(tmp_path: Path) -> None:
    version = compile_lwir(chain_lwir(2), input=INPUT)
    assert version.lock["inputBinding"] == "required"
    path = write(tmp_path / "version.json", version.to_json())

    result = little_run(str(path), "--input", json.dumps(INPUT), "--data-dir", str(tmp_path / "w"))

    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "completed"
    assert summary["workflowVersionId"] == version.id


def test_locked_version_refuses_another_input(tmp_path: Path) -> None:
    version = compile_lwir(chain_lwir(2), input=INPUT)
    path = write(tmp_path / "version.json", version.to_json())
    other = {"ticket": "T-2"}

    result = little_run(str(path), "--input", json.dumps(other), "--data-dir", str(tmp_path / "w"))

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"{path}: WorkflowVersion inputHash does not match --input." in result.stderr
    assert f"lock.inputHash {version.input_hash}" in result.stderr
    assert f"--input digest {sha256_digest(other)}" in result.stderr
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").rglob("*.jsonl"))


def test_version_without_input_binding_keeps_its_id_on_any_input(tmp_path: Path) -> None:
    version = planner_style_version()
    assert "inputBinding" not in version.lock
    assert version.id != compile_lwir(chain_lwir(2), input=INPUT).id
    path = write(tmp_path / "version.json", version.to_json())

    result = little_run(str(path), "--input", json.dumps(INPUT), "--data-dir", str(tmp_path / "w"))

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["workflowVersionId"] == version.id


def test_altered_lock_is_refused_not_recompiled(tmp_path: Path) -> None:
    document = compile_lwir(chain_lwir(2), input=INPUT).to_json()
    other = {"ticket": "T-2"}
    document["lock"]["inputHash"] = sha256_digest(other)  # rebinding by hand breaks the hashes
    path = write(tmp_path / "version.json", document)

    result = little_run(str(path), "--input", json.dumps(other), "--data-dir", str(tmp_path / "w"))

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "does not match" in result.stderr
    assert str(path) in result.stderr


def test_a_bare_lwir_wrapper_is_still_compiled(tmp_path: Path) -> None:
    # {"lwir": ...} without the version's ids and lock is not a locked version: it is compiled
    # for the run's input with the direct-LWIR recipe, as before.
    path = write(tmp_path / "wrapped.json", {"lwir": chain_lwir(2)})

    result = little_run(str(path), "--input", json.dumps(INPUT), "--data-dir", str(tmp_path / "w"))

    assert result.returncode == 0, result.stderr
    expected = compile_lwir(chain_lwir(2), input=INPUT).id
    assert json.loads(result.stdout)["workflowVersionId"] == expected


def test_is_locked_version_is_upstreams_predicate() -> None:
    document = compile_lwir(chain_lwir(1), input=INPUT).to_json()
    assert is_locked_version(document)
    for key in ("id", "hash", "canonicalizer", "canonicalJson", "lwirVersionId", "lwirHash"):
        assert not is_locked_version({**document, key: 1})
    assert not is_locked_version({**document, "lock": []})
    assert not is_locked_version({**document, "lwir": "x"})
    assert not is_locked_version(chain_lwir(1))


def test_input_binding_errors() -> None:
    with pytest.raises(InvalidWorkflowOrInput, match=r"^v\.json: WorkflowVersion lock is missing"):
        check_input_binding({"inputBinding": "required"}, INPUT, "v.json")
    with pytest.raises(InvalidWorkflowOrInput, match="inputHash does not match --input"):
        check_input_binding({"inputBinding": "required", "inputHash": "sha256:0"}, INPUT, "v")
    check_input_binding({"inputBinding": "required", "inputHash": sha256_digest(INPUT)}, INPUT, "v")
    check_input_binding({"inputHash": "sha256:0"}, INPUT, "v")  # not bound: any input


def little_submit(*args: str) -> subprocess.CompletedProcess[str]:
    # Nothing here reaches a fleet: each case is refused before a client is made.
    return zygote.run(
        ["submit", *args, "--world", "redis://127.0.0.1:1/0"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )


def test_submit_of_a_locked_version_refuses_another_input(tmp_path: Path) -> None:
    version = compile_lwir(chain_lwir(2), input=INPUT)
    path = write(tmp_path / "version.json", version.to_json())

    result = little_submit(str(path), "--input", json.dumps({"ticket": "T-2"}))

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"{path}: WorkflowVersion inputHash does not match --input." in result.stderr


def test_submit_of_an_altered_version_is_refused(tmp_path: Path) -> None:
    document = compile_lwir(chain_lwir(2), input=INPUT).to_json()
    document["lock"]["requestId"] = "orq_other"
    path = write(tmp_path / "version.json", document)

    result = little_submit(str(path), "--input", json.dumps(INPUT))

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"{path}: WorkflowVersion" in result.stderr and "does not match" in result.stderr


def test_submit_reads_a_locked_version_as_it_is(tmp_path: Path) -> None:
    from little_dist.cli.submit_cmd import check_lock, resolve_workflow
    from little_dist.compiler import WorkflowVersion

    version = planner_style_version()
    path = write(tmp_path / "version.json", version.to_json())

    read = resolve_workflow(str(path))

    assert isinstance(read, WorkflowVersion) and read.id == version.id
    check_lock(read, {"any": "input"}, str(path))  # not bound to an input
