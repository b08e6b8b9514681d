"""Folder workflows (little_dist.workspace): a project's little-workflow.json, a workflow
folder's workflow.py, tools/, skills/ and instructions.md, and the scaffold that makes them,
as upstream's workspace/ and workflow-scaffold tests ask."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from little_dist import WorkflowDefinition, load_workflow
from little_dist.errors import InvalidInputError
from little_dist.workspace import resolve_workflow_reference
from little_dist.workspace.scaffold import add_workflow, init_project
from little_dist.world.local import LocalWorld

SAMPLE = {"name": "Ada", "notes": "curious"}


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    init_project(root)
    return root


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# -- resolving a reference --------------------------------------------------------------------


def test_a_folder_resolves_to_itself_and_a_name_through_the_nearest_manifest(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path)
    folder = root / "workflows" / "candidate-review"
    assert resolve_workflow_reference("workflows/candidate-review", root) == folder
    nested = root / "deep" / "er"
    nested.mkdir(parents=True)
    assert resolve_workflow_reference("candidate-review", nested) == folder


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("/etc", "must be a relative path"),
        ("../outside", "escapes the project folder"),
        ("./missing", "is not a folder"),
        ("./linked", "escapes the project folder"),  # a link inside that points out
    ],
)
def test_a_manifest_entry_that_leaves_the_project_or_names_nothing_is_refused(
    tmp_path: Path, target: str, message: str
) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    (root / "linked").symlink_to(tmp_path / "outside")
    (root / "little-workflow.json").write_text(json.dumps({"workflows": {"w": target}}))
    with pytest.raises(InvalidInputError, match=message):
        resolve_workflow_reference("w", root)


def test_an_unknown_name_or_no_manifest_says_so(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"no little-workflow\.json found"):
        resolve_workflow_reference("w", tmp_path)
    root = _project(tmp_path)
    with pytest.raises(InvalidInputError, match=r"unknown workflow 'w' in .*little-workflow\.json"):
        resolve_workflow_reference("w", root)


@pytest.mark.parametrize("text", ["not json", "[]", '{"workflows": []}', '{"workflows": {"w": 3}}'])
def test_a_malformed_manifest_is_refused_with_its_path(tmp_path: Path, text: str) -> None:
    (tmp_path / "little-workflow.json").write_text(text)
    with pytest.raises(InvalidInputError, match=r"little-workflow\.json"):
        resolve_workflow_reference("w", tmp_path)


# -- loading a folder --------------------------------------------------------------------------


def test_the_starter_workflow_loads_with_its_folder_tool_and_instructions_and_runs(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path)
    loaded = load_workflow(root / "workflows" / "candidate-review")
    assert isinstance(loaded, WorkflowDefinition)
    assert loaded.id == "candidate.review"
    assert loaded.tools.names() == ["echo"]
    assert loaded.system is not None and loaded.system.startswith("Review candidates fairly")
    result = loaded.run(SAMPLE, world=LocalWorld(tmp_path / "data"))  # type: ignore[attr-defined]
    assert result.status == "completed"
    assert result.output.startswith("A strong candidate")


def test_skills_and_relative_imports_of_the_folder_are_taken(tmp_path: Path) -> None:
    root = _project(tmp_path)
    folder = root / "workflows" / "candidate-review"
    _write(
        folder / "skills" / "tone" / "SKILL.md",
        "---\nname: tone\ndescription: How to phrase a review.\n---\nBe kind and precise.\n",
    )
    _write(folder / "helpers.py", "GREETING = 'hello from a neighbour'\n")
    source = (folder / "workflow.py").read_text()
    _write(folder / "workflow.py", source + "\nfrom .helpers import GREETING as GREETING\n")
    loaded = load_workflow(folder)
    assert [s.name for s in loaded.skills] == ["tone"]
    assert (
        loaded.definition_hash()
        != load_workflow(
            _project(tmp_path / "b") / "workflows" / "candidate-review"
        ).definition_hash()
    )


def test_the_definitions_own_instructions_win_over_instructions_md(tmp_path: Path) -> None:
    root = _project(tmp_path)
    folder = root / "workflows" / "candidate-review"
    source = (folder / "workflow.py").read_text()
    _write(
        folder / "workflow.py",
        source.replace("    model=SLOT,\n", '    model=SLOT,\n    system="Its own words.",\n'),
    )
    assert load_workflow(folder).system == "Its own words."


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({}, "no workflow.py"),
        ({"workflow.py": "x = 1\n"}, "defines no workflow"),
        ({"workflow.py": "def broken(:\n"}, r"workflow.py:1: "),
        ({"workflow.py": "raise RuntimeError('boom')\n"}, "RuntimeError: boom"),
    ],
)
def test_a_folder_without_a_usable_workflow_py_names_the_file(
    tmp_path: Path, files: dict[str, str], message: str
) -> None:
    folder = tmp_path / "w"
    folder.mkdir()
    for name, text in files.items():
        _write(folder / name, text)
    with pytest.raises(InvalidInputError, match=message):
        load_workflow(folder)


def test_two_definitions_without_one_named_workflow_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "w"
    _write(
        folder / "workflow.py",
        "from little_dist import define_workflow\n"
        "a = define_workflow(id='a', model='openai/gpt-4o-mini')\n"
        "b = define_workflow(id='b', model='openai/gpt-4o-mini')\n",
    )
    with pytest.raises(InvalidInputError, match="defines 2 workflows; name the one to run"):
        load_workflow(folder)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "lookup.py",
            "from little_dist import tool\n@tool\ndef other(x: int) -> int:\n    return x\n",
            "defines the tool 'other'; a tool file is named after its tool",
        ),
        ("lookup.py", "VALUE = 1\n", "defines no tool named 'lookup'"),
        ("lookup.py", "lookup = 3\n", "'lookup' is not a tool or a function"),
        ("bad-name.py", "x = 1\n", "letters, digits and _ only"),
    ],
)
def test_a_tool_file_must_define_the_tool_it_is_named_after(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    root = _project(tmp_path)
    folder = root / "workflows" / "candidate-review"
    _write(folder / "tools" / name, text)
    with pytest.raises(InvalidInputError, match=message):
        load_workflow(folder)


def test_a_plain_typed_function_in_a_tool_file_is_the_tool(tmp_path: Path) -> None:
    root = _project(tmp_path)
    folder = root / "workflows" / "candidate-review"
    _write(folder / "tools" / "double.py", "def double(x: int) -> int:\n    return 2 * x\n")
    loaded = load_workflow(folder)
    assert loaded.tools.names() == ["double", "echo"]
    assert loaded.tools["double"].fn(x=4) == 8  # type: ignore[misc]


# -- the scaffold -------------------------------------------------------------------------------


def test_init_writes_a_project_that_names_its_workflow(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    written = init_project(root, workflow_name="ticket-triage")
    assert {p.relative_to(root).as_posix() for p in written} == {
        "little-workflow.json",
        "input.example.json",
        ".gitignore",
        "workflows/ticket-triage/workflow.py",
        "workflows/ticket-triage/instructions.md",
        "workflows/ticket-triage/tools/echo.py",
        "workflows/ticket-triage/evals/ticket-triage.evalset.json",
        "workflows/ticket-triage/evals/ticket-triage.items.json",
    }
    manifest = json.loads((root / "little-workflow.json").read_text())
    assert manifest == {"workflows": {"ticket-triage": "./workflows/ticket-triage"}}
    assert load_workflow(root / "workflows" / "ticket-triage").id == "ticket.triage"


def test_init_writes_a_starter_eval_set_pinned_to_the_starter_workflow(tmp_path: Path) -> None:
    from little_dist.compiler import compile_lwir
    from little_dist.evals import (
        WORKFLOW_TARGET,
        cone_for,
        register_eval_set,
        verify_eval_set_bodies,
    )
    from little_dist.workspace.templates import REVIEW_TEXT, starter_lwir

    root = tmp_path / "proj"
    init_project(root, workflow_name="ticket-triage")
    folder = root / "workflows" / "ticket-triage"
    plan = load_workflow(folder).plan
    assert plan == starter_lwir("ticket-triage")  # (what the set is pinned to is what runs)
    evals = folder / "evals"
    bundle = json.loads((evals / "ticket-triage.evalset.json").read_text())
    bodies = json.loads((evals / "ticket-triage.items.json").read_text())
    version, warnings = register_eval_set(bundle, known_lineages=["ticket.triage"])
    assert warnings == []
    assert verify_eval_set_bodies(version.bundle, bodies).valid
    manifest = bundle["manifest"]
    assert manifest["workflowName"] == "ticket.triage"
    assert manifest["workflowLwirSha"] == compile_lwir(plan).hash
    assert manifest["judge"]["modelPin"]["providerId"] == "scripted"
    assert {e["inputConeHash"] for e in bundle["index"]} == {cone_for(plan, WORKFLOW_TARGET)}
    assert sorted(e["role"] for e in bundle["index"]) == ["gate", "regression"]
    assert {b["label"]["value"] for b in bodies} == {REVIEW_TEXT}
    assert all(b["rubric"] == [{"criterionId": "next-step", "expected": True}] for b in bodies)


def test_init_refuses_a_taken_folder_and_here_keeps_the_projects_own_files(
    tmp_path: Path,
) -> None:
    root = tmp_path / "proj"
    _write(root / "notes.txt", "mine")
    with pytest.raises(InvalidInputError, match="already exists and is not empty"):
        init_project(root)
    _write(root / ".gitignore", "# mine\n")
    _write(root / "input.example.json", '{"mine": true}\n')
    init_project(root, here=True)
    assert (root / ".gitignore").read_text() == "# mine\n"
    assert (root / "input.example.json").read_text() == '{"mine": true}\n'
    workflow_py = root / "workflows" / "candidate-review" / "workflow.py"
    workflow_py.write_text("# edited\n")
    with pytest.raises(InvalidInputError, match="already exists"):
        init_project(root, here=True)
    assert workflow_py.read_text() == "# edited\n"  # nothing written


def test_add_workflow_refuses_clobbering_a_folder_or_a_name_registered_elsewhere(
    tmp_path: Path,
) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    add_workflow(root, "foo", directory="custom")
    before = (root / "little-workflow.json").read_text()
    assert json.loads(before)["workflows"]["foo"] == "./custom/foo"
    with pytest.raises(InvalidInputError, match="already registered"):
        add_workflow(root, "foo")
    with pytest.raises(InvalidInputError, match="already exists"):
        add_workflow(root, "foo", directory="custom")
    assert (root / "little-workflow.json").read_text() == before
    assert not (root / "workflows").exists()


@pytest.mark.parametrize("directory", ["../outside", "/abs", "a/../../b"])
def test_add_workflow_refuses_a_folder_outside_the_project(tmp_path: Path, directory: str) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    with pytest.raises(InvalidInputError, match=r"inside the project|escapes the project"):
        add_workflow(root, "w", directory=directory)
    assert os.listdir(root) == []


@pytest.mark.parametrize("name", ["Bad", "under_score", "-lead", "", "a" * 64, "a/b", "ü"])
def test_a_workflow_name_is_lowercase_letters_digits_and_dashes(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidInputError, match="workflow name"):
        add_workflow(tmp_path, name)
    assert os.listdir(tmp_path) == []


def test_a_project_folder_stands_for_its_only_workflow(tmp_path: Path) -> None:
    root = _project(tmp_path)
    assert resolve_workflow_reference(".", root) == root / "workflows" / "candidate-review"
    add_workflow(root, "second")
    with pytest.raises(InvalidInputError, match=r"2 workflows \(candidate-review, second\)"):
        resolve_workflow_reference(".", root)
