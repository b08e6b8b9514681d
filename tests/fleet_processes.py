"""Real fleet processes for integration tests: ``little worker`` and ``little scheduler``.

Shared by the fleet tests (client/CLI, scheduler, fault tests). Everything a test starts is
isolated from other tests and sessions on the same Redis server:

* :class:`FleetEnv` (fixture ``fleet_env``): a unique Redis key prefix on the test Redis
  (db 15 by default), the signal stream, consumer group and the four role queues under that
  prefix, a unique S3 object prefix in the session's ``weed mini`` bucket, and the full
  environment fleet subprocesses get (``LITTLE_*``, the S3 credentials, ``PYTHONPATH`` with
  the repository root so ``--app tests.workflows_for_tests`` and ``examples.*`` import, the
  network guard on, litellm's local price map). ``fleet_env.settings()``,
  ``fleet_env.world()`` and ``fleet_env.client()`` give the same view in the test process.
* :func:`start_worker` / :func:`start_scheduler`: a process in its own process group
  (``start_new_session``), output to a log file, forked from the test process's zygote
  (:mod:`tests.zygote`: without the seconds of imports each would cost from scratch);
  :meth:`FleetProcess.kill` sends SIGKILL to the group, :meth:`FleetProcess.stop` SIGTERM
  to the process then SIGKILL to the group.
  Every process a ``FleetEnv`` started is killed (SIGKILL) at the fixture's teardown, then
  the test's Redis keys are deleted. It is also killed by the kernel if its pytest process
  dies (``PR_SET_PDEATHSIG``, towards the zygote, which has it towards the pytest process),
  and by the session's reaper with the session.

Typical use::

    def test_something(fleet_env: FleetEnv) -> None:
        start_worker(fleet_env, app="tests.workflows_for_tests")
        with fleet_env.client() as client:
            run_id = client.submit(lwir, {"n": 1})
            state = client.wait(run_id, timeout=30)
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.session_lifetime import interrupted
from tests.zygote import ZygoteProcess, little_argv, spawn

if TYPE_CHECKING:
    from little_dist.fleet.client import Client
    from little_dist.settings import Settings
    from little_dist.world.base import World
    from tests.conftest_services import S3Service

__all__ = [
    "ROOT",
    "FleetEnv",
    "FleetProcess",
    "fleet_env",
    "little_argv",
    "start_scheduler",
    "start_worker",
]

ROOT = Path(__file__).resolve().parents[1]
ALL_ROLES = ("planner", "orchestrator", "worker", "fixer")
# Celery prints "<node> ready." once the worker consumes.
_WORKER_READY = re.compile(r"\bready\.")


@dataclass
class FleetProcess:
    """A started ``little`` process (its own process group) and its log file."""

    name: str
    argv: list[str]
    popen: ZygoteProcess | subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        """Everything the process wrote so far (stdout and stderr)."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for_output(self, pattern: str | re.Pattern[str], timeout: float = 30.0) -> None:
        """Wait until the log matches ``pattern``; fail the test (with the log) if not."""
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if regex.search(self.output()):
                return
            if not self.alive():
                pytest.fail(
                    f"{self.name} exited ({self.popen.returncode}) before printing "
                    f"{regex.pattern!r}:\n{self.output()[-4000:]}"
                )
            time.sleep(0.1)
        pytest.fail(
            f"{self.name} did not print {regex.pattern!r} in {timeout:g}s:\n{self.output()[-4000:]}"
        )

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)

    def kill(self) -> None:
        """SIGKILL the whole process group (the worker and its pool children) and reap it."""
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; the exit code (None if unknown). In an
        interrupted session, SIGKILL at once.

        SIGTERM goes to the process only, as a supervisor sends it (Kubernetes, compose: the
        container's first process): sent to the whole group it also reached a sandboxed
        command the stopping worker was still to finish (bubblewrap is in the worker's group),
        and the step failed when the signal came after the command had started."""
        if interrupted():
            self.kill()
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        # Pool children may outlive the main process: make sure the group is gone.
        self._signal_group(signal.SIGKILL)
        return self.popen.returncode


@dataclass
class FleetEnv:
    """One test's isolated fleet configuration (see the module docstring)."""

    redis_url: str
    key_prefix: str
    s3: S3Service
    tmp: Path
    env: dict[str, str]
    processes: list[FleetProcess] = field(default_factory=list)
    _opened: list[Any] = field(default_factory=list)

    @property
    def queues(self) -> dict[str, str]:
        return {role: self.env[f"LITTLE_QUEUE_{role.upper()}"] for role in ALL_ROLES}

    @property
    def signal_stream(self) -> str:
        return self.env["LITTLE_SIGNAL_STREAM"]

    def settings(self, **overrides: str) -> Settings:
        from little_dist.settings import load_settings

        return load_settings({**self.env, **overrides})

    def world(self) -> World:
        """A world on the test's prefix (closed at teardown)."""
        from little_dist.world.factory import world_from_settings

        world = world_from_settings(self.settings())
        self._opened.append(world)
        return world

    def client(self, **kwargs: Any) -> Client:
        """A :class:`~little_dist.fleet.client.Client` for this fleet (closed at teardown)."""
        from little_dist.fleet.client import Client

        client = Client(self.settings(), **kwargs)
        self._opened.append(client)
        return client

    def start(
        self,
        name: str,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
    ) -> FleetProcess:
        """Start ``little ARGS`` with this fleet's environment (plus ``env``)."""
        argv = little_argv(*args)
        log_path = self.tmp / f"{name}-{uuid.uuid4().hex[:6]}.log"
        with log_path.open("wb") as log:
            popen = spawn(
                args,
                env={**self.env, **(env or {})},
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                new_session=True,
            )
        process = FleetProcess(name, argv, popen, log_path)
        self.processes.append(process)
        return process

    def close(self) -> None:
        # SIGKILL, every group at once: the test is over, nothing checks how its processes
        # end, and a graceful stop is seconds per process (Celery's warm and soft shutdown),
        # one after the other. A test that checks a graceful stop calls stop() itself.
        for process in self.processes:
            process._signal_group(signal.SIGKILL)
        for process in self.processes:
            process.kill()
        for opened in self._opened:
            with contextlib.suppress(Exception):  # teardown must go on
                opened.close()
        self._delete_keys()

    def _delete_keys(self) -> None:
        import redis

        client = redis.Redis.from_url(self.redis_url, socket_timeout=5)
        try:
            for key in client.scan_iter(match=f"{self.key_prefix}*", count=1000):
                client.delete(key)
            for queue in self.queues.values():
                client.delete(f"_kombu.binding.{queue}")
        finally:
            client.close()


def make_fleet_env(redis_url: str, s3: S3Service, tmp: Path) -> FleetEnv:
    """A :class:`FleetEnv` with fresh names (the ``fleet_env`` fixture calls this)."""
    from tests.fleet_app import FX_REDIS_ENV

    tag = uuid.uuid4().hex[:10]
    prefix = f"little-test:fleet-{tag}:"
    world = f"{redis_url}?key_prefix={prefix}&s3_prefix={s3.prefix}fleet-{tag}/"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("LITTLE_", "AWS_", "CELERY_"))
    }
    env.update(
        {
            "LITTLE_REDIS_URL": redis_url,
            "LITTLE_BROKER_URL": redis_url,
            "LITTLE_WORLD": world,
            "LITTLE_S3_ENDPOINT": s3.endpoint,
            "LITTLE_S3_BUCKET": s3.bucket,
            "LITTLE_S3_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": s3.access_key_id,
            "AWS_SECRET_ACCESS_KEY": s3.secret_access_key,
            "LITTLE_SIGNAL_STREAM": f"{prefix}signals",
            "LITTLE_SIGNAL_GROUP": f"schedulers-{tag}",
            # Short leases and resend times keep crash and lost-message tests quick.
            "LITTLE_LEASE_TTL": "6",
            "LITTLE_HEARTBEAT_INTERVAL": "2",
            "LITTLE_DISPATCH_RESEND_AFTER": "10",
            "LITTLE_SIGNAL_CLAIM_IDLE": "5",
            "LITTLE_SOFT_SHUTDOWN_TIMEOUT": "2",
            "LITTLE_WORKER_CONCURRENCY": "4",
            "LITTLE_NETWORK_GUARD": "1",
            # The Redis tests.fleet_app's tools and delivery probe count in: the test's own
            # (its default, db 15, is another test session's when several run at once).
            FX_REDIS_ENV: redis_url,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            # tests.fleet_app's probes (side effects, deliveries) count on the test's Redis,
            # not on their default db 15 (a test on another db would find no count).
            "LITTLE_FLEET_FX_REDIS": redis_url,
            "PYTHONPATH": os.pathsep.join(
                [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
            "PYTHONUNBUFFERED": "1",
        }
    )
    for role in ALL_ROLES:
        env[f"LITTLE_QUEUE_{role.upper()}"] = f"{prefix}q.{role}"
    return FleetEnv(redis_url=redis_url, key_prefix=prefix, s3=s3, tmp=tmp, env=env)


@pytest.fixture
def fleet_env(redis_url: str, s3_service: S3Service, tmp_path: Path) -> Iterator[FleetEnv]:
    """An isolated fleet configuration; its processes are killed and keys deleted after."""
    fleet = make_fleet_env(redis_url, s3_service, tmp_path)
    try:
        yield fleet
    finally:
        fleet.close()


def start_worker(
    fleet: FleetEnv,
    *,
    roles: Sequence[str] = ALL_ROLES,
    app: str | Sequence[str] | None = "tests.workflows_for_tests",
    pool: str = "threads",
    concurrency: int | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    name: str | None = None,
    wait: bool = True,
    timeout: float = 120.0,
) -> FleetProcess:
    """Start ``little worker`` for ``roles`` (a unique node name) and wait until it is ready.

    ``timeout`` bounds a hang, not a start-up time: a worker imports Celery and the app in
    a few seconds on a quiet machine, but on a loaded one (CI beside other work) 40 s was
    seen too short."""
    node = name or f"worker-{uuid.uuid4().hex[:8]}"
    args = ["worker", "--roles", ",".join(roles), "--pool", pool, "--hostname", f"{node}@test"]
    for module in [app] if isinstance(app, str) else (app or ()):
        args += ["--app", module]
    if concurrency is not None:
        args += ["--concurrency", str(concurrency)]
    args += list(extra_args)
    process = fleet.start(node, args, env=env)
    if wait:
        process.wait_for_output(_WORKER_READY, timeout=timeout)
    return process


def start_scheduler(
    fleet: FleetEnv,
    *,
    name: str | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    ready_pattern: str | None = None,
    timeout: float = 120.0,
) -> FleetProcess:
    """Start ``little scheduler`` (named ``name``); waits for ``ready_pattern`` if given."""
    node = name or f"scheduler-{uuid.uuid4().hex[:8]}"
    process = fleet.start(node, ["scheduler", "--name", node, *extra_args], env=env)
    if ready_pattern is not None:
        process.wait_for_output(ready_pattern, timeout=timeout)
    return process
