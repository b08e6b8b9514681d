"""Every id check refuses an id with a trailing newline.

``re.match`` with a pattern ending in ``$`` accepts ``"run_a\\n"``: ``$`` also matches just
before a final newline. An id with a newline would then name Redis keys, files and log lines
that differ from the id's own, so each check uses ``fullmatch``.
"""

from __future__ import annotations

import pytest

from little_dist.authoring import define_workflow, model
from little_dist.canonical import canonical_json
from little_dist.errors import InvalidInputError
from little_dist.ids import InvalidIdError, artifact_id_from_ref, validate_run_id
from little_dist.step_context import StepPathError, expression_context
from little_dist.tools import tool
from little_dist.world.defaults import validate_definition_hash, validate_version_id
from tests.test_scheduling_sim import Sim, lwir_doc
from tests.test_scheduling_sim import tool as tool_step


def test_run_id() -> None:
    assert validate_run_id("run_a") == "run_a"
    with pytest.raises(InvalidIdError, match="Invalid run id"):
        validate_run_id("run_a\n")


def test_artifact_ref() -> None:
    assert artifact_id_from_ref("artifact://art_0123") == "art_0123"
    with pytest.raises(InvalidIdError, match="Invalid artifact ref"):
        artifact_id_from_ref("artifact://art_0123\n")


def test_workflow_version_id() -> None:
    assert validate_version_id("wfver_0123") == "wfver_0123"
    with pytest.raises(InvalidIdError, match="Invalid workflow version id"):
        validate_version_id("wfver_0123\n")


def test_definition_hash() -> None:
    digest = "sha256:" + "a" * 64
    assert validate_definition_hash(digest) == digest
    with pytest.raises(InvalidInputError, match="Invalid workflow definition hash"):
        validate_definition_hash(digest + "\n")


def test_tool_name() -> None:
    def lookup() -> str:
        return "x"

    assert tool(lookup, name="lookup").name == "lookup"
    with pytest.raises(InvalidInputError):
        tool(lookup, name="lookup\n")


def test_workflow_id() -> None:
    slot = model("scripted/x", id="fast")
    assert define_workflow(id="wf", description="d", model=slot).id == "wf"
    with pytest.raises(InvalidInputError, match="workflow id"):
        define_workflow(id="wf\n", description="d", model=slot)


def test_step_path() -> None:
    sim = Sim(lwir_doc([tool_step("a")]))
    expression_context(sim.ctx, sim.state, "a")
    with pytest.raises(StepPathError):
        expression_context(sim.ctx, sim.state, "a\n")


def test_error_paths_quote_a_key_with_a_trailing_newline() -> None:
    # A key is written .key in an error's path only when it is a whole identifier.
    with pytest.raises(InvalidInputError, match=r"at \$\[\"k\\n\"\]"):
        canonical_json({"k\n": float("nan")})
