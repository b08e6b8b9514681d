"""One loop moves a run on: each of decide, append (of a decision) and send happens in one
place of the fleet, and its three processes do not import one another.

Read from the source (the modules' syntax trees), so a new copy of the loop -- a module
that calls ``decide`` itself, appends a decision's events, or puts a task on a queue --
fails here before it can drift from the others.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import little_dist.fleet

FLEET = Path(little_dist.fleet.__file__).parent


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(FLEET.glob("*.py")):
        yield path.stem, ast.parse(path.read_text(), filename=str(path))


def _calls(tree: ast.Module) -> Iterator[tuple[str, ast.Call]]:
    """Each call with the qualified name of the function (``Class.method``) it is in."""

    def walk(node: ast.AST, where: str) -> Iterator[tuple[str, ast.Call]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                inner = f"{where}.{child.name}" if where else child.name
                yield from walk(child, inner)
                continue
            if isinstance(child, ast.Call):
                yield where, child
            yield from walk(child, where)

    yield from walk(tree, "")


def _where(called: str, *, mentioning: str | None = None) -> set[str]:
    """Where ``called`` is called: a function by its name (``decide``), a method by the
    end of its dotted call (``.append_batch``, ``queue.send``)."""
    found = set()
    for module, tree in _modules():
        for where, call in _calls(tree):
            func = ast.unparse(call.func)
            if not (func.endswith(called) if "." in called else func == called):
                continue
            if mentioning is not None and mentioning not in ast.unparse(call):
                continue
            found.add(f"{module}.{where}")
    return found


def test_the_fleet_decides_in_one_place() -> None:
    assert _where("decide") == {"dispatch.decision_of"}


def test_a_decision_is_appended_in_one_place() -> None:
    appended = _where(".append_batch", mentioning="decision.events")
    assert appended == {"dispatch._Look.record"}


def test_tasks_go_to_a_queue_from_one_module() -> None:
    senders = {where.split(".")[0] for where in _where("queue.send")}
    assert senders == {"sending"}, senders


def test_every_look_at_a_run_is_the_one_loop() -> None:
    looks = _where("advance_run")
    assert "scheduler.Scheduler.advance" in looks
    assert any(where.startswith("fastpath.") for where in looks)
    assert any(where.startswith("submission.") for where in looks)
    # ... and its first decision, sent with the run's start in one trip, decides the same way
    assert "one_trip_starts.first_decision" in _where("decision_of")


def test_worker_scheduler_and_client_do_not_import_one_another() -> None:
    processes = {"worker", "scheduler", "client"}
    for module, tree in _modules():
        if module not in processes:
            continue
        imported = {
            node.module.rsplit(".", 1)[-1]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module is not None
        } | {
            alias.name.rsplit(".", 1)[-1]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        assert not imported & (processes - {module}), (module, imported & processes)
