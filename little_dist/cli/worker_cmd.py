"""``little worker --roles ROLES --app MODULE``: a Celery worker consuming the roles' queues.

Runs a real Celery worker (``celery worker`` started in this process) on the fleet's app
(:func:`~little_dist.fleet.app.make_celery_app`): queues of the given roles, tasks from
:mod:`little_dist.fleet.tasks`, tools and models from ``--app`` (default ``LITTLE_APP``).
Pool, concurrency and prefetch default to the settings, which the per-role launch profiles
(``workers/profiles/<role>.env``) set. The node is named ``celery@$HOSTNAME`` (the health
checks ping it by that name) unless ``--hostname`` says otherwise.

At start-up the scripted model provider (``LITTLE_SCRIPTED_MODEL``) and the network guard
(``LITTLE_NETWORK_GUARD``) are installed when their variables are set, for tests and
offline demos. The worker registers its slots for its queues with the fleet
(:mod:`little_dist.fleet.worker_slots`) while it runs. SIGTERM is Celery's warm shutdown; with
``REMAP_SIGTERM=SIGQUIT`` (the image sets it) it is the soft shutdown, which lets running
steps finish for ``LITTLE_SOFT_SHUTDOWN_TIMEOUT`` seconds.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any

__all__ = ["register", "run"]

_POOLS = ("threads", "prefork", "solo")
_LOGLEVELS = ("debug", "info", "warning", "error", "critical")


def _roles(text: str) -> list[str]:
    from little_dist.settings import ROLES

    roles = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [role for role in roles if role not in ROLES]
    if not roles or unknown:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of roles from {', '.join(ROLES)}, got {text!r}"
        )
    return list(dict.fromkeys(roles))


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number, 1 or more, got {text!r}")
    return value


def default_node_name() -> str:
    """``celery@$HOSTNAME`` (the host name when the variable is unset)."""
    return f"celery@{os.environ.get('HOSTNAME') or socket.gethostname()}"


def register(sub: Any, name: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help="run a fleet worker for some roles",
        description="Run a Celery worker that executes the given roles' tasks.",
    )
    parser.add_argument(
        "--roles",
        type=_roles,
        default=["worker"],
        metavar="ROLES",
        help="comma-separated roles whose queues to consume: planner, orchestrator, worker, "
        "fixer (default: worker)",
    )
    parser.add_argument(
        "--app",
        metavar="MODULE",
        action="append",
        default=None,
        help="module with your workflows, tools and models (repeatable; default $LITTLE_APP)",
    )
    parser.add_argument(
        "--pool", choices=_POOLS, default=None, help="default: $LITTLE_WORKER_POOL (threads)"
    )
    parser.add_argument(
        "--concurrency",
        type=_positive_int,
        default=None,
        metavar="N",
        help="task slots (default: $LITTLE_WORKER_CONCURRENCY)",
    )
    parser.add_argument(
        "--prefetch-multiplier",
        type=_positive_int,
        default=None,
        metavar="N",
        help="messages reserved per slot (default: $LITTLE_WORKER_PREFETCH_MULTIPLIER, 1)",
    )
    parser.add_argument(
        "--hostname",
        "-n",
        default=None,
        metavar="NODE",
        help="Celery node name (default: celery@$HOSTNAME)",
    )
    parser.add_argument("--loglevel", "-l", type=str.lower, choices=_LOGLEVELS, default="info")
    parser.add_argument(
        "--fast-path",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="after a commit, advance the run here instead of waiting for the scheduler, "
        "and run a next step of these roles here (LITTLE_WORKER_INLINE_STEPS, "
        "LITTLE_WORKER_INLINE_SECONDS) (default: on)",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    from little_dist.fleet.app import make_celery_app
    from little_dist.fleet.app_registry import load_registry
    from little_dist.fleet.interpreter_tuning import tune_gc_for_service, tune_switch_interval
    from little_dist.fleet.observing import observe_worker
    from little_dist.fleet.tasks import WorkerRuntime
    from little_dist.settings import load_settings
    from little_dist.testing import guard, scripted
    from little_dist.world.factory import fleet_world_spec

    settings = load_settings()
    fleet_world_spec(settings)  # a bad world configuration fails now, not on the first task
    modules = args.app if args.app else ([settings.app] if settings.app else [])
    registry = load_registry(modules)
    scripted.install_from_env()
    guard.install_from_env()

    runtime = WorkerRuntime(settings, registry=registry, fast_path=args.fast_path, roles=args.roles)
    app = make_celery_app(settings, runtime=runtime)
    queues = ",".join(settings.queue_for(role) for role in args.roles)
    pool = args.pool or settings.worker_pool
    observe_worker(settings, lambda: runtime.world, runtime.versions, pool=pool)
    argv = [
        "worker",
        f"--hostname={args.hostname or default_node_name()}",
        f"--queues={queues}",
        f"--pool={pool}",
        f"--concurrency={args.concurrency or settings.worker_concurrency}",
        f"--prefetch-multiplier={args.prefetch_multiplier or settings.worker_prefetch_multiplier}",
        f"--loglevel={args.loglevel.upper()}",
        "--task-events",
        "--without-mingle",
        "--without-gossip",
    ]
    print(
        f"little worker: roles {','.join(args.roles)} on {queues}; app modules: "
        f"{', '.join(registry.modules) or '(none)'}; workflows: "
        f"{', '.join(sorted(registry.workflows)) or '(none)'}",
        file=sys.stderr,
        flush=True,
    )
    if pool == "prefork":
        from celery.signals import worker_process_init

        # Each pool child opens its own world once it is forked (connections do not survive
        # a fork), before its first task.
        worker_process_init.connect(lambda **_: runtime.warm(), weak=False)
    else:
        runtime.warm()  # threads and solo share this process's world: open it before tasks
    tune_gc_for_service()  # (a prefork child inherits it)
    tune_switch_interval(pool)
    slots = _register_slots(
        settings,
        node=args.hostname or default_node_name(),
        queues=[settings.queue_for(role) for role in args.roles],
        slots=args.concurrency or settings.worker_concurrency,
    )
    worker = _started_worker()
    _redact_celery_logs()
    try:
        code = app.start(argv=argv)
    finally:
        if slots is not None:
            slots.stop()
        runtime.close()
    return _exit_code(worker, code)


def _redact_celery_logs() -> None:
    """Put the redacting filter on the handlers Celery sets up for the worker's logs (the
    root logger's, which also carry redirected stdout and stderr, and the task logger's)."""
    from celery.signals import after_setup_logger, after_setup_task_logger

    from little_dist.redaction import install_log_redaction

    def install(logger: Any = None, **_: Any) -> None:
        install_log_redaction([logger] if logger is not None else [])

    after_setup_logger.connect(install, weak=False)
    after_setup_task_logger.connect(install, weak=False)


def _started_worker() -> list[Any]:
    """A list that holds the Celery worker once it is built (Celery's ``worker_init``)."""
    from celery.signals import worker_init

    found: list[Any] = []
    worker_init.connect(lambda sender=None, **_: found.append(sender), weak=False)
    return found


def _exit_code(worker: list[Any], returned: Any) -> int:
    """The worker's own exit code: ``app.start`` returns ``None`` whatever it was, so an
    "Unrecoverable error" (exit code 1) would otherwise end the process with 0, and no
    supervisor would restart it."""
    code = getattr(worker[-1], "exitcode", None) if worker else None
    if code is None:
        code = returned
    if code is None:
        return 0
    return code if isinstance(code, int) and not isinstance(code, bool) else 1


def _register_slots(settings: Any, *, node: str, queues: list[str], slots: int) -> Any:
    """Register this worker's slots with the fleet (see :mod:`little_dist.fleet.worker_slots`):
    the window a fan-out keeps in flight follows them. ``None`` when the world is not on
    Redis."""
    from little_dist.fleet.worker_slots import SlotRegistration, fleet_redis
    from little_dist.world.fleet_keys import slots_key

    client = fleet_redis(settings)
    if client is None:
        return None
    return SlotRegistration(
        client,
        slots_key(settings.signal_stream),
        f"{node}:{os.getpid()}",
        queues,
        slots,
        owns_client=True,
    ).start()
