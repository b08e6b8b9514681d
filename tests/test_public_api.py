"""The names ``little_dist`` exports are pinned (as httpx's tests/test_exported_members.py).

Adding or removing a public name is a deliberate change: update ``EXPECTED`` with it.
"""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

import little_dist

EXPECTED = [
    "CancelToken",
    "Client",
    "InputValidationError",
    "InvalidInputError",
    "LittleError",
    "ModelSlot",
    "RunFailedError",
    "RunResult",
    "Tool",
    "WorkflowDefinition",
    "__version__",
    "as_tool",
    "define_workflow",
    "load_workflow",
    "model",
    "run_outer_loop",
    "run_workflow",
    "skill",
    "tool",
]


def test_all_is_pinned_and_sorted() -> None:
    assert little_dist.__all__ == EXPECTED
    assert sorted(little_dist.__all__) == little_dist.__all__


@pytest.mark.parametrize("name", EXPECTED)
def test_every_exported_name_resolves(name: str) -> None:
    value = getattr(little_dist, name)
    assert not isinstance(value, types.ModuleType)
    if name != "__version__":
        assert value.__module__.startswith("little_dist.")


def test_nothing_public_beyond_all_except_submodules() -> None:
    for name in EXPECTED:
        getattr(little_dist, name)
    public = {
        name
        for name in dir(little_dist)
        if not name.startswith("_") and not isinstance(getattr(little_dist, name), types.ModuleType)
    }
    assert public == {name for name in EXPECTED if not name.startswith("_")}


def test_unknown_attribute_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = little_dist.nope  # type: ignore[attr-defined]


def test_version_matches_the_package_metadata() -> None:
    from importlib.metadata import version

    assert little_dist.__version__ == version("little-dist")


def test_importing_the_pure_core_does_not_load_the_authoring_layer() -> None:
    code = (
        "import sys, little_dist.canonical, little_dist.compiler;"
        "bad = [m for m in ('little_dist.authoring', 'little_dist.planner', 'litellm')"
        " if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_importing_the_front_door_does_not_load_litellm() -> None:
    code = (
        "import sys; from little_dist import define_workflow, run_workflow, model;"
        "sys.exit(1 if 'litellm' in sys.modules else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_client_is_exported_without_loading_celery() -> None:
    # The Client builds its Celery app only when it sends a task.
    code = (
        "import sys; from little_dist import Client;"
        "from little_dist.fleet.client import Client as C; assert Client is C;"
        "bad = [m for m in ('celery', 'kombu', 'litellm') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_sandbox_api_is_pinned() -> None:
    import little_dist.sandbox as sandbox

    assert sandbox.__all__ == [
        "DEFAULT_LIMITS",
        "HOST_TOUCHES",
        "WRITABLE_MOUNTS",
        "HostTouch",
        "Isolation",
        "Mount",
        "MountError",
        "SandboxLimits",
        "SandboxResult",
        "SandboxUnavailableError",
        "run_sandboxed",
    ]


def test_the_public_define_workflow_makes_a_definition_that_runs_itself(tmp_path: Path) -> None:
    # The authoring layer runs nothing (it lies below every engine); the public
    # define_workflow (little_dist.api) adds run(), the same call as run_workflow.
    import little_dist
    from little_dist.authoring import WorkflowDefinition
    from little_dist.authoring import define_workflow as plain_define
    from little_dist.world.local import LocalWorld
    from tests.lwir_builder import tool_step, workflow_doc

    @little_dist.tool
    def double(n: int) -> dict[str, int]:
        """Twice n."""
        return {"n": n * 2}

    plan = workflow_doc("echo.flow", [tool_step("out", "double", {"n": "{{ input.n }}"})])
    schemas = {"input": {"type": "object"}, "output": {"type": "object"}}
    workflow = little_dist.define_workflow(
        id="echo.flow", model="scripted/m", tools=[double], plan=plan, **schemas
    )
    assert isinstance(workflow, WorkflowDefinition)
    result = workflow.run({"n": 21}, world=LocalWorld(tmp_path / "data"))
    assert result.status == "completed"
    assert result.state.steps["out"].output == {"n": 42}
    assert not hasattr(
        plain_define(id="echo.flow", model="scripted/m", plan=plan, **schemas), "run"
    )
    with pytest.raises(AttributeError, match="import run_workflow from little_dist"):
        import little_dist.authoring as authoring

        authoring.run_workflow  # noqa: B018
