"""The fleet's lease names and Redis keys are wire format: running fleets spell them so.

Each string is pinned here as processes of a fleet already running spell it; a change to
one must be a deliberate migration, not a refactor's side effect.
"""

from __future__ import annotations

from little_dist.fleet.sending import dispatch_lease_key as dispatch_key_of
from little_dist.scheduling import StepDispatch
from little_dist.world import fleet_keys
from little_dist.world.base import run_lease_key as base_run_lease_key
from little_dist.world.redis_s3.keys import lease_key_for


def test_run_leases_carry_the_run_id_as_a_hash_tag() -> None:
    assert fleet_keys.run_lease_key("run_1", "step:a") == "{run_1}:step:a"
    assert fleet_keys.step_lease_key("run_1", "a/b[x]") == "{run_1}:step:a/b[x]"
    assert fleet_keys.dispatch_lease_key("run_1", "a", 3) == "{run_1}:dispatch:a:3"
    assert fleet_keys.plan_dispatch_lease_key("run_1") == "{run_1}:dispatch:plan"
    assert fleet_keys.plan_lease_key("run_1") == "{run_1}:plan"
    assert fleet_keys.runner_lease_key("run_1") == "{run_1}:runner"


def test_the_fleets_keys_sit_beside_the_signal_stream() -> None:
    stream = "little:signals"
    assert fleet_keys.active_runs_key(stream) == "little:signals:active-runs"
    assert fleet_keys.rebuilt_marker_key("little:signals:active-runs") == (
        "little:signals:active-runs:built"
    )
    assert fleet_keys.sweep_lease_key(stream) == "scheduler-sweep:little:signals"
    assert fleet_keys.slots_key(stream) == "little:signals:slots"
    assert fleet_keys.backlog_key(stream, "little.steps") == "little:signals:backlog:little.steps"
    assert fleet_keys.backlog_list("little.steps") == "little.steps.backlog"
    assert fleet_keys.api_tokens_key(stream) == "little:signals:api-tokens"
    assert fleet_keys.api_rate_prefix(stream) == "little:signals:api-rate"
    assert fleet_keys.idempotency_key(stream, "ab12") == "little:signals:idempotency:ab12"


def test_every_module_names_leases_through_the_one_module() -> None:
    # The names other modules used to define are the key module's own functions now.
    assert base_run_lease_key is fleet_keys.run_lease_key
    assert lease_key_for is fleet_keys.run_lease_key
    dispatch = StepDispatch(
        run_id="run_1", step_path="a", step_id="a", attempt=2, role="worker", kind="ai.generate"
    )
    assert dispatch_key_of(dispatch) == "{run_1}:dispatch:a:2"
