"""A model slot nothing registers fails before the run starts, as an unregistered tool does,
instead of going to litellm as written and failing seconds later with a misleading error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from little_dist.runtime import Capabilities, CapabilityError, check_grants

LITTLE = Path(sys.executable).with_name("little")


def _doc(model: str) -> dict[str, Any]:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "slots.demo", "version": "1.0.0"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": {"type": "string"}},
        "permissions": {"models": [model], "tools": [], "secrets": [], "network": []},
        "steps": [
            {
                "id": "answer",
                "uses": "ai.generate",
                "with": {"model": model, "prompt": "Say hi."},
                "output": {"mode": "text"},
            }
        ],
    }


def test_a_slot_name_with_no_slot_registered_is_refused_in_process() -> None:
    with pytest.raises(CapabilityError) as caught:
        check_grants(_doc("model.fast"), Capabilities(), "the app")
    assert str(caught.value) == (
        "step 'answer' uses model slot 'model.fast', which the app does not register "
        "(registered: none)"
    )
    with pytest.raises(CapabilityError, match=r"model slot 'model.fast' is not registered"):
        Capabilities().resolve_model("model.fast")


def test_a_litellm_model_string_still_goes_through_when_no_slot_is_registered() -> None:
    check_grants(_doc("scripted/demo"), Capabilities(), "the app")
    assert Capabilities().resolve_model("openai/gpt-4o-mini").litellm_model == "openai/gpt-4o-mini"
    for odd in ("/gpt", "openai/", " / "):
        with pytest.raises(CapabilityError):
            Capabilities().resolve_model(odd)


def test_a_slot_the_app_does_not_bind_names_the_ones_it_does() -> None:
    app = Capabilities(models={"model.text": "scripted/demo", "model.structured": "scripted/x"})
    with pytest.raises(CapabilityError, match=r"\(registered: model.structured, model.text\)"):
        check_grants(_doc("model.fast"), app, "the app")
    # Once slots are bound, a raw model string is not a way around them.
    with pytest.raises(CapabilityError, match="'openai/gpt-4o'"):
        check_grants(_doc("openai/gpt-4o"), app, "the app")


def test_little_run_refuses_it_in_one_line_before_anything_is_stored(tmp_path: Path) -> None:
    workflow = tmp_path / "wf.json"
    workflow.write_text(json.dumps(_doc("model.fast")), encoding="utf-8")
    world = tmp_path / "world"
    started = time.monotonic()
    result = subprocess.run(
        [str(LITTLE), "run", str(workflow), "--data-dir", str(world)],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "LITTLE_SCRIPTED_MODEL"},
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "little run: step 'answer' uses model slot 'model.fast', which the app does not "
        "register (registered: none)"
    ]
    assert time.monotonic() - started < 30
    assert not world.exists(), "nothing may be written before the run starts"
