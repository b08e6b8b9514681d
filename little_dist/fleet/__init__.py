"""The fleet: the Celery app, its tasks, the scheduler, and the client that submits runs.

Modules (import them directly; this package imports nothing, so ``little --help`` and the
pure core never load Celery):

* :mod:`.app` — ``make_celery_app(settings)``: queues per role, routes, reliability options.
* :mod:`.tasks` — the task bodies (``little.execute_step``, ``little.fix_step``,
  ``little.plan``, ``little.orchestrate``, ``little.submit_run``); arguments are ids only.
* :mod:`.app_registry` — what ``--app MODULE`` provides: workflows and their capabilities.
* :mod:`.dispatch` — fold, decide, append and send tasks under dispatch leases (shared by
  the scheduler and the worker fast path).
* :mod:`.client` — :class:`~little_dist.fleet.client.Client`: submit, status, wait, cancel.
* :mod:`.scheduler` — the ``little scheduler`` process.
"""

from __future__ import annotations

__all__: list[str] = []
