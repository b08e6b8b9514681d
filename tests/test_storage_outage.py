"""S3 goes away for a few seconds while runs are in flight, then comes back.

Real scheduler and worker processes (:mod:`tests.test_fleet_e2e`'s fleet) reach S3 through
an :class:`~tests.outage_proxy.OutageProxy`, which the test cuts and restores; the S3 server
itself keeps running. Before the fixes these tests pin:

* a run whose version read failed during the outage kept a broken cached view (no run
  context) in the scheduler and the workers, which then answered every task of it with
  "the run has not started" and never failed its dead attempts: it never moved again until
  a scheduler restart;
* a step whose commit could not write its output artifact lost the tool result that rode
  with that commit, so its retry called the tool again; and a recorded result whose artifact
  could not be read was taken for a miss, with the same effect.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator

import pytest

from tests.conftest_services import S3Service
from tests.fleet_app import screening
from tests.outage_proxy import OutageProxy
from tests.test_fleet_e2e import (
    Fleet,
    assert_completed_once,
    assert_side_effects_exact,
    fleet_env,
    make_fleet,
    run_ids,
    screening_input,
    script_file,
    start_fleet,
    tool_paths,
    wait_until,
)

__all__ = ["fleet_env", "make_fleet", "script_file"]

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ITEMS = ["a", "b", "c", "d", "e"]
OUTAGE_SECONDS = 4.0


@pytest.fixture
def proxy(s3_service: S3Service) -> Iterator[OutageProxy]:
    cut = OutageProxy.for_url(s3_service.endpoint)
    try:
        yield cut
    finally:
        cut.close()


def _succeeded_calls(fleet: Fleet, ids: list[str]) -> int:
    return sum(1 for r in ids for e in fleet.events(r) if e.type == "harness.tool_call.succeeded")


def _outage_mid_runs(
    fleet: Fleet, proxy: OutageProxy, ids: list[str], during: Callable[[], None]
) -> None:
    for run_id in ids:
        fleet.submit(screening, screening_input(run_id, ITEMS, 0.3), run_id)
    wait_until(
        lambda: _succeeded_calls(fleet, ids) >= len(ids),
        timeout=90,
        what="tool calls done before the outage",
        alive=fleet.check_alive,
    )
    proxy.down()
    try:
        during()
        time.sleep(OUTAGE_SECONDS)
    finally:
        proxy.up()


def test_an_s3_outage_mid_run_repeats_no_side_effect(
    make_fleet: Callable[..., Fleet], proxy: OutageProxy
) -> None:
    fleet = make_fleet(LITTLE_S3_ENDPOINT=proxy.url)
    start_fleet(fleet)
    ids = run_ids("s3out", 8)
    _outage_mid_runs(fleet, proxy, ids, lambda: None)
    assert fleet.wait_runs(ids, timeout=180) == dict.fromkeys(ids, "completed")
    for run_id in ids:
        assert_completed_once(fleet, run_id, ITEMS)
        counts = {path: fleet.effect_count(run_id, path) for path in tool_paths(ITEMS)}
        assert set(counts.values()) == {1}, (run_id, counts)


def test_every_run_completes_after_an_s3_outage_with_a_worker_killed_in_it(
    make_fleet: Callable[..., Fleet], proxy: OutageProxy
) -> None:
    fleet = make_fleet(LITTLE_S3_ENDPOINT=proxy.url)
    start_fleet(fleet)
    ids = run_ids("s3kill", 24)
    victim = next(p for p in fleet.processes if p.name.startswith("w0-"))

    def kill_a_worker() -> None:
        victim.kill()
        assert victim.popen.returncode == -signal.SIGKILL
        fleet.processes.remove(victim)

    _outage_mid_runs(fleet, proxy, ids, kill_a_worker)
    # No process is restarted: the scheduler and the surviving worker carry every run.
    assert fleet.wait_runs(ids, timeout=300) == dict.fromkeys(ids, "completed")
    for run_id in ids:
        events = assert_completed_once(fleet, run_id, ITEMS)
        assert_side_effects_exact(fleet, run_id, ITEMS, events)
