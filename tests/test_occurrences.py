"""The occurrence ids every writer of a fact uses (``little_dist.occurrences``): pinned, since
a log written by one version of the engine is appended to by the next, and a renamed id
would record a fact twice."""

from __future__ import annotations

from little_dist import occurrences


def test_the_occurrence_ids_are_spelled_as_logs_already_hold_them() -> None:
    assert occurrences.VERSION_REGISTERED == "version-registered"
    assert occurrences.RUN_START == "run-start"
    assert occurrences.RUN_END == "run-end"
    assert occurrences.SUBMITTED == "submit"
    assert occurrences.CANCEL == "cancel"
    assert occurrences.scheduled("fan[a].work") == "sched:fan[a].work:1"
    assert occurrences.scheduled("s", 3) == "sched:s:3"
    assert occurrences.attempt_started("s", 2) == "start:s:2"
    assert occurrences.attempt_ended("fan[a].work", 1) == "end:fan[a].work:1"
    assert occurrences.output_artifact("s", 1) == "artifact:s:1"
    assert occurrences.output_validated("s", 1) == "validated:s:1"
    assert occurrences.branch_scheduled("fan[a]") == "pbranch:fan[a]"
    assert occurrences.branch_ended("fan[a]") == "pbranch-end:fan[a]"
    assert occurrences.plan_failed(2) == "plan-failed:2"
    assert occurrences.harness_event("tool", "s", 1, 3) == "tool:s:1:3"
    assert occurrences.harness_event("model-end", "s", 2, 1, prefix="p/") == "p/model-end:s:2:1"
    assert occurrences.planner("requested") == "planner:requested"
    assert occurrences.planner("draft", 2) == "planner:draft:2"
