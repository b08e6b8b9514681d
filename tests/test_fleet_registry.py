"""What ``--app MODULE`` gives a worker: workflows by id and capabilities per run."""

from __future__ import annotations

import importlib
import textwrap
import uuid
from pathlib import Path

import pytest

from little_dist.compiler import compile_lwir
from little_dist.fleet.app_registry import AppImportError, load_registry, workflow_name_of
from little_dist.runtime import Capabilities
from tests import workflows_for_tests as wf

APP = '''
from little_dist import define_workflow, tool

@tool
def lookup(account: str) -> dict:
    """Look an account up."""
    return {"account": account}

@tool
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()

triage = define_workflow(id="triage", model="scripted/triage", tools=[lookup])
loud = define_workflow(id="loud", model=["scripted/a", "scripted/b"], tools=[shout])
'''


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> str:
    name = f"app_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_every_workflow_of_the_module_is_found_by_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = load_registry(_module(tmp_path, monkeypatch, APP))
    assert sorted(registry.workflows) == ["loud", "triage"]
    triage = registry.capabilities_for_workflow("triage")
    assert [t.name for t in triage.tools] == ["lookup"]
    assert {m.litellm_model for m in triage.models.values()} == {"scripted/triage"}  # type: ignore[union-attr]
    loud = registry.capabilities_for_workflow("loud")
    assert [t.name for t in loud.tools] == ["shout"]
    # Built once per workflow (its harness registry is cached on it).
    assert registry.capabilities_for_workflow("loud") is loud


def test_an_explicit_workflows_list_is_all_there_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = load_registry(_module(tmp_path, monkeypatch, APP + "\nWORKFLOWS = [loud]\n"))
    assert list(registry.workflows) == ["loud"]
    assert registry.get("triage") is None


def test_module_attribute_names_one_workflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = _module(tmp_path, monkeypatch, APP)
    registry = load_registry([f"{name}:triage"])
    assert list(registry.workflows) == ["triage"]
    assert registry.modules == (f"{name}:triage",)


def test_a_workflow_brings_the_workflows_its_workflow_tools_run_as_sub_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = (
        APP
        + "\nfrom little_dist import as_tool\n"
        + (
            "parent = define_workflow(id='parent', model='scripted/p', tools=[as_tool(triage)])\n"
            "WORKFLOWS = [parent]\n"
        )
    )
    registry = load_registry(_module(tmp_path, monkeypatch, body))
    # The worker that runs the parent's calls also runs the children's steps.
    assert list(registry.workflows) == ["parent", "triage"]
    assert [t.name for t in registry.capabilities_for_workflow("triage").tools] == ["lookup"]


def test_two_workflows_with_one_id_in_a_module_are_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run sent by id must take one path: a fixed plan and a planned definition under one
    id (as the examples define them) is a choice the module has to make."""
    body = APP + "\nplanned = define_workflow(id='triage', model='scripted/other')\n"
    name = _module(tmp_path, monkeypatch, body)
    with pytest.raises(AppImportError) as refused:
        load_registry(name)
    assert str(refused.value) == (
        f"app module {name!r} defines workflow 'triage' twice (triage and planned): a run "
        "sent by that id could take either; serve one: list it in WORKFLOWS = [...] or name "
        f"it, --app {name}:ATTRIBUTE"
    )
    # Chosen either way, the module serves the one named.
    planned = importlib.import_module(name).planned
    assert load_registry(f"{name}:planned").get("triage") is planned
    listed = _module(tmp_path, monkeypatch, body + "WORKFLOWS = [planned]\n")
    assert load_registry(listed).get("triage") is importlib.import_module(listed).planned
    # The same definition reached twice (top level and a workflow tool's child) is one.
    shared = (
        APP
        + "\nfrom little_dist import as_tool\n"
        + "parent = define_workflow(id='parent', model='scripted/p', tools=[as_tool(triage)])\n"
    )
    assert sorted(load_registry(_module(tmp_path, monkeypatch, shared)).workflows) == [
        "loud",
        "parent",
        "triage",
    ]


def test_the_examples_serve_the_workflow_little_submit_runs_by_attribute() -> None:
    """``--app examples.support_triage`` maps ``support.triage`` to the fixed plan, the one
    ``little submit examples.support_triage:workflow`` runs (not the planned one, 4x the
    cost)."""
    from examples import support_triage

    registry = load_registry("examples.support_triage")
    assert registry.get("support.triage") is support_triage.workflow


def test_runs_find_their_workflow_by_the_lwir_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = load_registry(_module(tmp_path, monkeypatch, APP))
    doc = wf.single_tool_lwir()
    doc["metadata"]["name"] = "loud"
    version = compile_lwir(doc)
    assert workflow_name_of(version) == "loud"
    assert registry.capabilities_for(version) is registry.capabilities_for_workflow("loud")


def test_plain_lwir_runs_get_the_app_wide_tools_and_models() -> None:
    registry = load_registry("tests.workflows_for_tests")
    assert registry.workflows == {}
    version = compile_lwir(wf.single_tool_lwir())
    capabilities = registry.capabilities_for(version)
    assert sorted(t.name for t in capabilities.tools) == sorted(wf.tools.names())
    assert capabilities.models == {"model.fast": "scripted/fast"}


def test_without_an_app_lwir_runs_get_no_tools() -> None:
    registry = load_registry(None)
    capabilities = registry.capabilities_for(compile_lwir(wf.single_tool_lwir()))
    assert list(capabilities.tools) == []
    assert capabilities.resolve_model("openai/gpt-4o-mini").litellm_model == "openai/gpt-4o-mini"


def test_several_modules_merge_their_tools_first_one_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = _module(
        tmp_path,
        monkeypatch,
        '''
        from little_dist import tool

        @tool
        def add(a: int, b: int) -> dict:
            """Shadowed by the first module's add."""
            return {}

        @tool
        def extra() -> dict:
            """Only here."""
            return {}
        ''',
    )
    registry = load_registry(["tests.workflows_for_tests", other])
    tools = registry.default.tools
    assert "extra" in tools and "noop" in tools
    assert tools["add"] is wf.add


def test_a_capabilities_attribute_is_used_as_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = _module(
        tmp_path,
        monkeypatch,
        """
        from little_dist.runtime import Capabilities
        capabilities = Capabilities(models={"model.x": "scripted/x"}, max_turns=3)
        """,
    )
    default = load_registry(name).default
    assert isinstance(default, Capabilities)
    assert default.max_turns == 3 and default.models == {"model.x": "scripted/x"}


@pytest.mark.parametrize(
    ("body", "spec_suffix", "message"),
    [
        (None, "", "no such module"),
        ("raise RuntimeError('broken app')", "", "RuntimeError: broken app"),
        ("x = 1", ":missing", "has no attribute 'missing'"),
        ("WORKFLOWS = ['triage']", "", r"WORKFLOWS\[0\] is a str"),
        ("x = 1", ":x", "is a int, not a workflow"),
        ("capabilities = 3", "", "capabilities is a int, not Capabilities"),
    ],
)
def test_unusable_app_modules_are_refused_with_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    body: str | None,
    spec_suffix: str,
    message: str,
) -> None:
    name = f"app_missing_{uuid.uuid4().hex[:8]}" if body is None else None
    if name is None:
        name = _module(tmp_path, monkeypatch, body or "")
    with pytest.raises(AppImportError, match=message) as caught:
        load_registry(name + spec_suffix)
    assert "\n" not in str(caught.value)
