"""How to run a workflow: :class:`RunOptions`, one frozen value checked once where it is built.

``run_workflow``, ``run_outer_loop`` and the in-process engine under them take the same run
options (the harness, the worker threads, progress, input limits, pricing, tool permissions
and their approver, the version reuse strategy). They are read and checked here, once, by
whoever takes them from a caller; every layer below passes the value on as is. A new option
is one field here, not a keyword in every signature (a keyword threaded through five of them
was once dropped by one: the reuse strategy of an outer loop's cycles).

The reuse strategies (upstream's ``WorkflowVersionReuseStrategy``) are named here too: the
definition and the run both choose one, and the planner reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from little_dist.errors import InvalidInputError
from little_dist.litellm_prices import litellm_price_fallback
from little_dist.pricing import PriceFallback

if TYPE_CHECKING:
    from little_dist.harness.types import Harness, HarnessRole
    from little_dist.limits import InputLimits
    from little_dist.permissions import Approver, ToolPermissions

__all__ = [
    "DEFAULT_REUSE_STRATEGY",
    "REUSE_STRATEGIES",
    "ReuseStrategy",
    "RunOptions",
    "reuse_strategy",
]

ReuseStrategy = Literal["planner_reviewed", "always_fresh"]
REUSE_STRATEGIES: Final = ("planner_reviewed", "always_fresh")
DEFAULT_REUSE_STRATEGY: Final[ReuseStrategy] = "planner_reviewed"


def reuse_strategy(value: Any, where: str) -> ReuseStrategy | None:
    """``value`` checked as a reuse strategy (``None`` stays ``None``: not chosen here)."""
    if value is None or value in REUSE_STRATEGIES:
        return value  # type: ignore[no-any-return]
    raise InvalidInputError(
        f"{where}: workflow_version_reuse_strategy must be one of "
        f"{', '.join(REUSE_STRATEGIES)}, got {value!r}"
    )


def _unset_limits() -> InputLimits:
    from little_dist.settings import load_limits

    return load_limits()


@dataclass(frozen=True)
class RunOptions:
    """The options of one run (and of every cycle of an outer loop), checked when built.

    ``harness``: one harness for every role, or one per role (default: the workflow's).
    ``max_workers``: threads running the run's steps. ``progress``: called with each event
    the run records. ``limits``: the input limits (default: the ``LITTLE_MAX_*`` settings,
    read when the value is built). ``pricing_fallback``: prices for the model calls the
    bundled registry has no rates for (``None``: registry rates only). ``permissions``:
    upstream's runtime tool-call rules, after the workflow's own (read into a
    :class:`~little_dist.permissions.ToolPermissions`, or ``None``); ``on_ask``: the
    approver of ``ask`` decisions. ``workflow_version_reuse_strategy``: over the workflow's.
    ``budget_usd``: the run's dollar ceiling, over the workflow's (see
    :mod:`little_dist.budgets`; ``None``: the workflow's, if any). ``timeout``,
    ``max_attempts`` (upstream's, over the workflow's), ``deadline`` and the ``cancel``
    handle: see :mod:`little_dist.run_limits` (the timeout and a deadline given as a
    duration count from the run's start: :meth:`run_limits`).

    ``where`` names the caller in the one-line errors (``run_workflow``, ...).
    """

    harness: Harness | Mapping[HarnessRole, Harness] | None = None
    max_workers: int = 8
    progress: Callable[[Any], None] | None = None
    limits: InputLimits = field(default_factory=_unset_limits)
    pricing_fallback: PriceFallback | None = litellm_price_fallback
    permissions: ToolPermissions | None = None
    on_ask: Approver | None = None
    workflow_version_reuse_strategy: ReuseStrategy | None = None
    budget_usd: float | None = None
    timeout: Any = None
    deadline: Any = None
    max_attempts: int | None = None
    cancel: Any = field(default=None, compare=False)
    where: str = field(default="run_workflow", compare=False)

    def __post_init__(self) -> None:
        where = self.where
        workers = self.max_workers
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise InvalidInputError(
                f"{where}: max_workers must be a positive integer, got {workers!r}"
            )
        for name in ("progress", "pricing_fallback", "on_ask"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise InvalidInputError(f"{where}: {name} must be callable, got {value!r}")
        from little_dist.limits import InputLimits

        if self.limits is None:
            object.__setattr__(self, "limits", _unset_limits())
        elif not isinstance(self.limits, InputLimits):
            raise InvalidInputError(f"{where}: limits must be InputLimits, got {self.limits!r}")
        if self.permissions is not None:
            from little_dist.permissions import tool_permissions

            given = tool_permissions(self.permissions, f"{where}: permissions")
            object.__setattr__(self, "permissions", given)
        reuse_strategy(self.workflow_version_reuse_strategy, where)
        from little_dist.budgets import budget_usd

        object.__setattr__(self, "budget_usd", budget_usd(self.budget_usd, where))
        from little_dist import run_limits

        run_limits.run_limits(
            where, now=0.0, timeout=self.timeout, deadline=self.deadline, attempts=self.max_attempts
        )  # (checked here; computed when the run starts)
        run_limits.cancel_handle(self.cancel, where)

    def run_limits(self, workflow_timeout_ms: int | None, workflow_max_attempts: int | None) -> Any:
        """The run's :class:`~little_dist.run_limits.RunLimits` from now: its own timeout,
        deadline and max attempts over the workflow's."""
        import time

        from little_dist import run_limits

        return run_limits.run_limits(
            self.where,
            now=time.time(),
            timeout=self.timeout if self.timeout is not None else workflow_timeout_ms,
            deadline=self.deadline,
            attempts=self.max_attempts if self.max_attempts is not None else workflow_max_attempts,
        )

    @classmethod
    def of(
        cls,
        where: str,
        *,
        harness: Harness | Mapping[HarnessRole, Harness] | None = None,
        max_workers: int = 8,
        progress: Callable[[Any], None] | None = None,
        limits: InputLimits | None = None,
        pricing_fallback: PriceFallback | None = litellm_price_fallback,
        permissions: ToolPermissions | Mapping[str, Any] | Sequence[Any] | None = None,
        on_ask: Approver | None = None,
        workflow_version_reuse_strategy: ReuseStrategy | None = None,
        budget_usd: float | None = None,
        timeout: Any = None,
        deadline: Any = None,
        max_attempts: int | None = None,
        cancel: Any = None,
    ) -> RunOptions:
        """The options from the public keywords (``permissions`` in any of upstream's
        shapes, ``limits`` ``None`` for the settings'), checked; ``where`` names the caller."""
        return cls(
            harness=harness,
            max_workers=max_workers,
            progress=progress,
            limits=limits,  # type: ignore[arg-type]  # None: read in __post_init__
            pricing_fallback=pricing_fallback,
            permissions=permissions,  # type: ignore[arg-type]  # read in __post_init__
            on_ask=on_ask,
            workflow_version_reuse_strategy=workflow_version_reuse_strategy,
            budget_usd=budget_usd,
            timeout=timeout,
            deadline=deadline,
            max_attempts=max_attempts,
            cancel=cancel,
            where=where,
        )

    def not_on_fleet(self) -> list[str]:
        """The options given here that a run on a fleet cannot honour: a fleet's workers run
        with their app's capabilities."""
        given = {
            "harness": self.harness,
            "progress": self.progress,
            "permissions": self.permissions,
            "on_ask": self.on_ask,
            "cancel": self.cancel,
        }
        return [name for name, value in given.items() if value is not None]
