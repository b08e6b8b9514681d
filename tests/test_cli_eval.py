"""``little eval`` through the real command, offline: the example eval set validated, stored
and run against its workflow (scripted model); a failing and an erroring case; bad files as
one line per finding naming the file and the path; the JSON result's shape; the comparison
with the last run; and the checked-in example files rebuilt from their builder."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from examples.evals import make_set
from little_dist.evals import eval_item_body_sha, eval_item_sha, sort_index
from tests import zygote

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "evals"
SET = str(EXAMPLE / "ticket-severity.evalset.json")
ITEMS = str(EXAMPLE / "ticket-severity.items.json")
WORKFLOW = str(EXAMPLE / "ticket-severity")


def little(*args: str, cwd: Path) -> Any:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("LITTLE_MODEL", None)
    done = zygote.run(list(args), cwd=cwd, env=env, timeout=180)
    assert "Traceback" not in done.stderr + done.stdout
    return done


def write(path: Path, value: Any) -> str:
    path.write_text(json.dumps(value), encoding="utf-8")
    return str(path)


def variant(tmp_path: Path, change: Any) -> tuple[str, str]:
    """The example set with its bodies changed by ``change(bodies)``, re-indexed."""
    bundle, bodies = make_set.build()
    bodies = copy.deepcopy(bodies)
    change(bodies)
    by_item = {entry["itemSha"]: entry for entry in bundle["index"]}
    entries = []
    for old, new in zip(make_set.build()[1], bodies, strict=True):
        entry = dict(by_item[eval_item_sha(old)])
        entry.update(itemSha=eval_item_sha(new), bodySha=eval_item_body_sha(new))
        entries.append(entry)
    bundle["index"] = sort_index(entries)
    return write(tmp_path / "set.json", bundle), write(tmp_path / "items.json", bodies)


def test_the_checked_in_example_files_are_what_the_builder_makes() -> None:
    bundle, bodies = make_set.build()
    assert json.loads(Path(SET).read_text()) == bundle
    assert json.loads(Path(ITEMS).read_text()) == bodies


def test_the_example_set_validates_runs_passes_and_compares_with_its_last_run(
    tmp_path: Path,
) -> None:
    data = ["--data-dir", str(tmp_path / "world")]
    checked = little("eval", "validate", SET, "--items", ITEMS, *data, cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.splitlines()[-1].endswith("(4 item bodies)")
    assert not (tmp_path / "world").exists()  # (validate makes no world to read an empty one)
    ran = little("eval", "run", SET, "--items", ITEMS, "--workflow", WORKFLOW, *data, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0].split() == [
        "ITEM",
        "TARGET",
        "ROLE",
        "RUNS",
        "STATUS",
        "COST",
        "(USD)",
        "DETAIL",
    ]
    assert [line.split()[4] for line in lines[1:5]] == ["passed"] * 4
    set_id = lines[-1].split(":")[0]
    assert set_id.startswith("evset_") and "4/4 passed, 0 failed, 0 errored" in lines[-1]
    # Again, by its id in the world (stored by the first run), as JSON.
    again = little(
        "eval",
        "run",
        set_id,
        "--workflow",
        WORKFLOW,
        "--json",
        "--concurrency",
        "1",
        *data,
        cwd=tmp_path,
    )
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert set(result) == {
        "evalRunId",
        "evalSetId",
        "evalSetSha",
        "workflow",
        "ranAt",
        "cases",
        "summary",
        "previous",
        "events",
    }
    assert result["events"] == []  # (no rubric: no judge call)
    assert result["evalSetId"] == set_id
    assert result["summary"]["passed"] == 4 and result["summary"]["costUsd"] > 0
    assert result["previous"]["changed"] == [] and result["previous"]["summary"]["passed"] == 4
    expected = {c["itemSha"]: c["expected"] for c in result["cases"]}
    for case in result["cases"]:
        (sample,) = case["samples"]
        assert sample["status"] == "passed" and sample["output"] == expected[case["itemSha"]]
        events = little("events", sample["runId"], *data, cwd=tmp_path)
        assert events.returncode == 0 and "RunCompleted" in events.stdout
    gate = little(
        "eval",
        "run",
        set_id,
        "--workflow",
        WORKFLOW,
        "--role",
        "gate",
        "--json",
        *data,
        cwd=tmp_path,
    )
    assert [c["role"] for c in json.loads(gate.stdout)["cases"]] == ["gate"]


def test_a_wrong_label_fails_its_case_and_the_command(tmp_path: Path) -> None:
    def relabel(bodies: list[Any]) -> None:
        bodies[0]["label"]["value"] = "low"  # the fire is not low

    bundle, items = variant(tmp_path, relabel)
    ran = little(
        "eval",
        "run",
        bundle,
        "--items",
        items,
        "--workflow",
        WORKFLOW,
        "--json",
        "--data-dir",
        str(tmp_path / "w"),
        cwd=tmp_path,
    )
    assert ran.returncode == 1
    result = json.loads(ran.stdout)
    failed = [c for c in result["cases"] if c["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["expected"] == "low"
    assert failed[0]["samples"][0]["output"] == "high"
    assert result["summary"]["failed"] == 1 and result["summary"]["passed"] == 3
    table = little(
        "eval",
        "run",
        bundle,
        "--items",
        items,
        "--workflow",
        WORKFLOW,
        "--data-dir",
        str(tmp_path / "w"),
        cwd=tmp_path,
    )
    assert table.returncode == 1 and "output differs from the label" in table.stdout
    assert "no case changed" in table.stdout


def test_an_input_the_workflow_refuses_is_its_cases_error(tmp_path: Path) -> None:
    def bad_input(bodies: list[Any]) -> None:
        bodies[2]["input"]["value"] = {"ticket": 3}

    bundle, items = variant(tmp_path, bad_input)
    ran = little(
        "eval",
        "run",
        bundle,
        "--items",
        items,
        "--workflow",
        WORKFLOW,
        "--json",
        "--data-dir",
        str(tmp_path / "w"),
        cwd=tmp_path,
    )
    assert ran.returncode == 1
    result = json.loads(ran.stdout)
    assert result["summary"] == {**result["summary"], "errored": 1, "passed": 3}
    (errored,) = [c for c in result["cases"] if c["status"] == "error"]
    assert errored["samples"][0]["runId"] is None
    assert "ticket" in errored["samples"][0]["error"]


def test_a_bad_bundle_is_one_line_per_finding_naming_file_and_path(tmp_path: Path) -> None:
    bundle = json.loads(Path(SET).read_text())
    bundle["manifest"]["judge"]["tpr"] = 0.93
    del bundle["manifest"]["canaryGuid"]
    path = write(tmp_path / "bad.json", bundle)
    done = little(
        "eval", "validate", path, "--items", ITEMS, "--data-dir", str(tmp_path), cwd=tmp_path
    )
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert f"{path}: $.manifest.judge.tpr: " in lines[0] or any(
        line.startswith(f"{path}: $.manifest.judge.tpr: ") for line in lines
    )
    assert any(
        line.startswith(f"{path}: $.manifest.canaryGuid: ") and "(evalset.schema.missing)" in line
        for line in lines
    )
    assert lines[-1] == f"little eval: {path}: invalid, {len(lines) - 1} findings"


def test_bad_items_files_and_missing_things_are_one_line_each(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path / "w")]
    not_json = tmp_path / "broken.json"
    not_json.write_text("{ nope")
    done = little("eval", "validate", str(not_json), *data, cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith(f"little eval: {not_json}: invalid JSON at line 1")
    items = json.loads(Path(ITEMS).read_text())
    items[1]["label"]["value"] = "medium"  # no longer the body the index pins
    path = write(tmp_path / "items.json", items)
    done = little("eval", "validate", SET, "--items", path, *data, cwd=tmp_path)
    assert done.returncode == 1
    assert f"{path}: $[1]: Body has item sha" in done.stderr
    assert "(evalset.body_not_indexed)" in done.stderr and "(evalset.body_missing)" in done.stderr
    one = write(tmp_path / "one.json", {**items[0], "kind": "Item"})
    done = little("eval", "validate", SET, "--items", one, *data, cwd=tmp_path)
    assert f'{one}: $.kind: $.kind must be "EvalItem". (evalset.schema.invalid)' in done.stderr
    no_bodies = little("eval", "validate", SET, *data, cwd=tmp_path)
    assert no_bodies.returncode == 1 and "(give --items FILE)" in no_bodies.stderr
    unknown = little(
        "eval", "run", "evset_0123456789abcdef", "--workflow", WORKFLOW, *data, cwd=tmp_path
    )
    assert unknown.returncode == 1 and "no eval set evset_0123456789abcdef" in unknown.stderr
    no_workflow = little(
        "eval", "run", SET, "--items", ITEMS, "--workflow", "nowhere", *data, cwd=tmp_path
    )
    assert no_workflow.returncode == 2 and no_workflow.stderr.startswith("little eval: --workflow")
    fleet = little("eval", "validate", SET, "--world", "redis://127.0.0.1:6379/0", cwd=tmp_path)
    # (the eval sets are in the world the options name: this one lacks its S3 settings)
    assert fleet.returncode == 2 and "LITTLE_S3_BUCKET" in fleet.stderr


@pytest.mark.parametrize("given", ["0", "two"])
def test_concurrency_must_be_a_positive_whole_number(tmp_path: Path, given: str) -> None:
    done = little("eval", "run", SET, "--workflow", WORKFLOW, "--concurrency", given, cwd=tmp_path)
    assert done.returncode == 2 and "--concurrency" in done.stderr


def test_register_stores_the_set_and_bodies_once(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path / "w")]
    first = little("eval", "register", SET, "--items", ITEMS, "--json", *data, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    said = json.loads(first.stdout)
    assert said["items"] == 4 and said["hash"].startswith("sha256:")
    stored = json.loads((tmp_path / "w" / "eval-sets" / f"{said['id']}.json").read_text())
    assert stored["bundle"] == json.loads(Path(SET).read_text())
    assert len(list((tmp_path / "w" / "eval-items").rglob("*.json"))) == 4
    again = little("eval", "register", SET, "--items", ITEMS, "--json", *data, cwd=tmp_path)
    assert json.loads(again.stdout) == said
    by_id = little("eval", "validate", said["id"], *data, cwd=tmp_path)
    assert by_id.returncode == 0 and "warning" not in by_id.stdout  # (its lineage is known now)


def test_affected_only_runs_again_just_the_cases_a_change_can_reach(tmp_path: Path) -> None:
    from little_dist.evals import (
        EVAL_ITEM_API_VERSION,
        WORKFLOW_TARGET,
        cone_for,
        index_entry,
    )
    from little_dist.workspace import load_workflow
    from little_dist.workspace.templates import INPUT_EXAMPLE

    assert little("init", "p", cwd=tmp_path).returncode == 0
    project = tmp_path / "p"
    folder = project / "workflows" / "candidate-review"
    plan = load_workflow(folder).plan
    review = "A strong candidate: the notes show rigour and curiosity. Next: a technical interview."
    labels = {
        "profile": {"text": f"{INPUT_EXAMPLE['name']}: {INPUT_EXAMPLE['notes']}"},
        "review": review,
        WORKFLOW_TARGET: review,
    }
    bodies = [
        {
            "apiVersion": EVAL_ITEM_API_VERSION,
            "kind": "EvalItem",
            "target": target,
            "input": {"kind": "inline", "value": INPUT_EXAMPLE},
            "label": {"provenance": "human_labeled", "value": label},
            "rubric": [],
            "provenance": [],
        }
        for target, label in labels.items()
    ]
    bundle, _ = make_set.build()
    bundle["manifest"]["workflowName"] = "candidate.review"
    construct = bundle["manifest"]["constructs"][0]
    bundle["manifest"]["constructs"] = [{**construct, "target": t} for t in labels]
    entries = [
        index_entry(
            b,
            role="regression",
            cluster_id="c",
            created_at=make_set.WHEN,
            input_cone_hash=str(cone_for(plan, b["target"])),
        )
        for b in bodies
    ]
    bundle["index"] = sort_index(entries)
    args = [
        "eval",
        "run",
        write(tmp_path / "set.json", bundle),
        "--workflow",
        "candidate-review",
        "--json",
        "--items",
        write(tmp_path / "items.json", bodies),
    ]
    first = little(*args, cwd=project)
    assert first.returncode == 0, first.stderr
    ran = {c["target"]: c for c in json.loads(first.stdout)["cases"]}
    assert {t: (c["status"], c["coneAsIndexed"]) for t, c in ran.items()} == {
        t: ("passed", True) for t in labels
    }
    # A new version that rewrites the review step's prompt: the profile step's cone is as it
    # was, the review's and the workflow's are not.
    workflow_py = folder / "workflow.py"
    workflow_py.write_text(
        workflow_py.read_text().replace("in two sentences", "in two short sentences")
    )
    again = little(*args, "--affected-only", cwd=project)
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    now = {c["target"]: c for c in result["cases"]}
    assert now["profile"] == {**ran["profile"], "reused": True}
    for target in ("review", WORKFLOW_TARGET):
        assert "reused" not in now[target] and now[target]["coneAsIndexed"] is False
        assert now[target]["samples"][0]["runId"] != ran[target]["samples"][0]["runId"]
    assert result["summary"]["reused"] == 1 and result["summary"]["passed"] == 3


def test_the_gate_split_is_computed_with_the_seal_key(tmp_path: Path) -> None:
    from little_dist.evals import is_sealed

    bundle, _ = make_set.build()
    for entry in bundle["index"]:
        entry["role"] = "gate"
    path = write(tmp_path / "set.json", bundle)
    key = tmp_path / "seal.key"
    key.write_bytes(b"example seal key: not a secret\n")
    policy = bundle["manifest"]["sealPolicy"]
    sealed = {
        e["itemSha"]
        for e in bundle["index"]
        if is_sealed(
            b"example seal key: not a secret", policy["domain"], e["itemSha"], policy["cutoff"]
        )
    }
    parts = {}
    for split in ("dev", "sealed"):
        done = little(
            "eval",
            "run",
            path,
            "--items",
            ITEMS,
            "--workflow",
            WORKFLOW,
            "--json",
            "--gate-split",
            split,
            "--seal-key",
            str(key),
            "--data-dir",
            str(tmp_path / "w"),
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        parts[split] = {c["itemSha"] for c in json.loads(done.stdout)["cases"]}
    assert parts["sealed"] == sealed
    assert parts["dev"] == {e["itemSha"] for e in bundle["index"]} - sealed
    wrong = tmp_path / "wrong.key"
    wrong.write_bytes(b"another key")
    refused = little(
        "eval",
        "run",
        path,
        "--items",
        ITEMS,
        "--workflow",
        WORKFLOW,
        "--gate-split",
        "dev",
        "--seal-key",
        str(wrong),
        cwd=tmp_path,
    )
    assert refused.returncode == 1 and "is not the key" in refused.stderr
    alone = little(
        "eval",
        "run",
        path,
        "--items",
        ITEMS,
        "--workflow",
        WORKFLOW,
        "--gate-split",
        "dev",
        cwd=tmp_path,
    )
    assert alone.returncode == 2 and "go together" in alone.stderr


def test_rubric_criteria_are_judged_by_the_judge_model(tmp_path: Path) -> None:
    def with_rubric(bodies: list[Any]) -> None:
        for body in bodies:
            body["rubric"] = [{"criterionId": "severity", "expected": True}]

    bundle, items = variant(tmp_path, with_rubric)
    # One script for every scripted model in the process (LITTLE_SCRIPTED_MODEL): the
    # workflow's model answers as its own script does, the judge says no about the fire.
    script = {
        "version": 1,
        "rules": [
            {"model": "judge", "contains": "on fire", "replies": [{"text": "No.", "times": None}]},
            {"model": "judge", "replies": [{"text": "Yes.", "times": None}]},
            *[
                {
                    "model": "ticket-severity",
                    "contains": word,
                    "replies": [{"text": "high", "times": None}],
                }
                for word in ("fire", "crash", "outage")
            ],
            {"model": "ticket-severity", "replies": [{"text": "low", "times": None}]},
        ],
    }
    path = write(tmp_path / "script.json", script)
    env = {**os.environ, "PYTHONPATH": str(REPO), "LITTLE_SCRIPTED_MODEL": path}
    env.pop("LITTLE_MODEL", None)
    args = [
        "eval",
        "run",
        bundle,
        "--items",
        items,
        "--workflow",
        WORKFLOW,
        "--judge-model",
        "scripted/judge",
        "--data-dir",
        str(tmp_path / "w"),
    ]
    done = zygote.run([*args, "--json"], cwd=tmp_path, env=env, timeout=180)
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    assert result["summary"]["passed"] == 3 and result["summary"]["failed"] == 1
    (failed,) = [c for c in result["cases"] if c["status"] == "failed"]
    assert failed["rubric"] == "judged" and failed["expected"] == "high"
    assert failed["samples"][0]["output"] == "high"
    assert failed["samples"][0]["rubric"] == [
        {"criterionId": "severity", "expected": True, "verdict": False}
    ]
    table = zygote.run(args, cwd=tmp_path, env=env, timeout=180)
    assert "the judge disagrees on severity" in table.stdout
    skipped = zygote.run([*args, "--no-judge", "--json"], cwd=tmp_path, env=env, timeout=180)
    assert skipped.returncode == 0
    assert {c["rubric"] for c in json.loads(skipped.stdout)["cases"]} == {"unscored"}


def test_run_without_a_set_needs_a_project_and_a_set_needs_a_workflow(tmp_path: Path) -> None:
    outside = little("eval", "run", "--data-dir", str(tmp_path / "w"), cwd=tmp_path)
    assert outside.returncode == 2
    assert outside.stderr.startswith("little eval run: no SET given and no little-workflow.json")
    alone = little("eval", "run", SET, "--items", ITEMS, cwd=tmp_path)
    assert alone.returncode == 2 and "--workflow is needed with SET" in alone.stderr
    (tmp_path / "little-workflow.json").write_text('{"workflows": {}}')
    empty = little("eval", "run", "--data-dir", str(tmp_path / "w"), cwd=tmp_path)
    assert empty.returncode == 1 and "have no evals/*.evalset.json" in empty.stderr
