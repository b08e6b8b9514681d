"""What ``--app MODULE`` gives a worker: workflows by id and capabilities per run."""

from __future__ import annotations

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
