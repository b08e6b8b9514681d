"""Which memory stores a step sees, where and how: upstream's mount paths, modes and keys."""

from __future__ import annotations

import pytest

from little_dist import define_workflow, model
from little_dist.errors import InvalidInputError
from little_dist.memory import (
    MemoryConfig,
    MemoryMountSpec,
    available_workflow_memory_mounts,
    memory_config,
    memory_store_key,
    pipeline_memory_mounts,
    workflow_memory_mounts,
)
from little_dist.memory.layout import pipeline_key


def test_a_workflow_sees_its_own_store_rw_and_the_org_store_ro_by_default() -> None:
    assert workflow_memory_mounts("Support.Triage_v2", MemoryConfig()) == [
        MemoryMountSpec("workflow:support-triage-v2", "/mnt/memory/workflow/", "rw"),
        MemoryMountSpec("org", "/mnt/memory/org/", "ro"),
    ]


def test_modes_none_and_attached_peers_sorted_by_key() -> None:
    config = memory_config(
        {
            "workflow": "ro",
            "org": "none",
            "attach": [{"id": "zeta"}, {"id": "Alpha", "mode": "ro"}],
        },
        "memory",
    )
    assert workflow_memory_mounts("w", config) == [
        MemoryMountSpec("workflow:w", "/mnt/memory/workflow/", "ro"),
        MemoryMountSpec("workflow:alpha", "/mnt/memory/peer-workflows/alpha/", "ro"),
        MemoryMountSpec("workflow:zeta", "/mnt/memory/peer-workflows/zeta/", "ro"),
    ]
    assert workflow_memory_mounts("w", MemoryConfig(workflow="none", org="rw")) == [
        MemoryMountSpec("org", "/mnt/memory/org/", "rw")
    ]


def test_pipeline_and_available_workflow_mounts() -> None:
    key = pipeline_key(["sha256:b", "sha256:a"])
    assert key == pipeline_key(["sha256:a", "sha256:b"]) and key.startswith("sha256:")
    assert pipeline_memory_mounts(["sha256:b", "sha256:a"]) == [
        MemoryMountSpec(f"pipeline:{key}", "/mnt/memory/pipeline/", "rw"),
        MemoryMountSpec("org", "/mnt/memory/org/", "ro"),
    ]
    assert available_workflow_memory_mounts(["b.flow", "A"]) == [
        MemoryMountSpec("workflow:a", "/mnt/memory/available-workflows/a/", "ro"),
        MemoryMountSpec("workflow:b-flow", "/mnt/memory/available-workflows/b-flow/", "ro"),
    ]


@pytest.mark.parametrize(
    ("given", "key"),
    [("Plain", "plain"), ("a/b.c:d_e f", "a-b-c-d-e-f"), ("--x--", "x"), ("é-ok", "ok")],
)
def test_store_keys_are_upstreams(given: str, key: str) -> None:
    assert memory_store_key(given) == key


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"workflow": "write"}, "memory.workflow: expected 'rw', 'ro' or 'none'"),
        ({"org": True}, "memory.org"),
        ({"attach": [{"id": "x", "mode": "rw"}]}, "only mode 'ro'"),
        ({"attach": [{"id": "A"}, {"id": "a"}]}, "duplicate attached workflow memory key: a"),
        ({"attach": [{"id": "..."}]}, "at least one ASCII letter"),
        ({"extra": 1}, "unknown key(s) extra"),
        ("rw", "expected a mapping"),
    ],
)
def test_a_bad_memory_option_is_refused_by_define_workflow(value: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        define_workflow(id="w", model=model("scripted/x"), memory=value)  # type: ignore[arg-type]


def test_a_workflows_capabilities_carry_its_memory_mounts() -> None:
    flow = define_workflow(id="w", model=model("scripted/x"), memory={"org": "none"})
    assert flow.capabilities().memory_mounts == (
        MemoryMountSpec("workflow:w", "/mnt/memory/workflow/", "rw"),
    )
