"""``--upstream`` of ``little validate`` and ``little replay`` print what upstream's CLI prints,
byte for byte (``writeJsonLine``: ``JSON.stringify`` of ``validateLwir``'s result, of the
folded run state): keys in upstream's order, no whitespace, numbers as JavaScript prints
them. The run-state vectors (upstream's own outputs) pin the layout, key order included."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from little_dist.canonical import js_stringify
from little_dist.run_state import materialize_run_state
from little_dist.world.local import LocalWorld
from tests import zygote
from tests.conftest import load_vectors

REPO = Path(__file__).resolve().parent.parent
STATES = [v for v in load_vectors("run_state") if "expected_state" in v]
VALIDATIONS = load_vectors("lwir_validation")


def little(*args: str, cwd: Path) -> Any:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = zygote.run(list(args), cwd=cwd, env=env, timeout=60)
    assert "Traceback" not in done.stderr
    return done


def test_js_stringify_prints_as_javascript_does() -> None:
    value = {"b": 1, "a": [1.0, 0.1, 1e-7, 1e21, -0.0, "é\n\u2028"], "c": None, "d": True}
    assert js_stringify(value) == '{"b":1,"a":[1,0.1,1e-7,1e+21,0,"é\\n\u2028"],"c":null,"d":true}'


@pytest.mark.parametrize("vector", STATES, ids=[v["name"] for v in STATES])
def test_the_folded_state_is_laid_out_as_upstreams(vector: dict[str, Any]) -> None:
    state = materialize_run_state(vector["events"], run_id=vector["runId"], pricing_fallback=None)
    assert js_stringify(state.to_json()) == js_stringify(vector["expected_state"])


def test_little_replay_upstream_prints_the_state_line(tmp_path: Path) -> None:
    vector = next(v for v in STATES if v["name"] == "retry_after_failure")
    world = LocalWorld(tmp_path / "world")
    try:
        from little_dist.events import EventInput

        for event in vector["events"]:
            world.append(vector["runId"], EventInput(type=event["type"], payload=event["payload"]))
        recorded = world.list_events(vector["runId"])
    finally:
        world.close()
    done = little("replay", vector["runId"], "--upstream", "--data-dir", str(tmp_path / "world"),
                  cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    expected = materialize_run_state(recorded, run_id=vector["runId"]).to_json()
    assert done.stdout == js_stringify(expected) + "\n"
    assert done.stdout.count("\n") == 1 and " " not in done.stdout.replace("\n", "")[:200]


@pytest.mark.parametrize("name", ["valid_base_workflow", "invalid_method_call_and_function_arity"])
def test_little_validate_upstream_prints_validate_lwirs_result(tmp_path: Path, name: str) -> None:
    vector = next(v for v in VALIDATIONS if v["name"] == name)
    (tmp_path / "wf.json").write_text(json.dumps(vector["lwir"]))
    done = little("validate", "wf.json", "--upstream", cwd=tmp_path)
    assert done.returncode == (0 if vector["valid"] else 1)
    line = done.stdout
    assert line.endswith("\n") and line.count("\n") == 1
    said = json.loads(line)
    assert line == js_stringify(said) + "\n"  # compact, keys as printed
    assert list(said) == ["valid", "findings"] and said["valid"] is vector["valid"]
    if vector["valid"]:
        assert line == '{"valid":true,"findings":[]}\n'
    for finding in said["findings"]:
        assert list(finding) == ["severity", "code", "path", "message"]
    found = {(f["code"], f["path"]) for f in said["findings"]}
    assert {(f["code"], f["path"]) for f in vector.get("findings", [])} <= found
