"""The scheduler's public values: :class:`RunContext`, :class:`StepDispatch`, :class:`Decision`.

These are plain immutable data: the in-process runner and the fleet scheduler build a
:class:`RunContext` once per run, hand it with a folded
:class:`~little_dist.run_state.RunState` to :func:`~little_dist.scheduling.decide`, append
``Decision.events`` and send one task per ``Decision.dispatch`` entry. A caller that shares
the run's fan-outs with other processes (a fleet worker's look) also says which refills are
others' (:class:`Claims`), and reads back what the decision left to them and which attempt it
may ride with (:attr:`Decision.left`, :attr:`Decision.rider`).
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from little_dist.compiler import WorkflowVersion
from little_dist.events import EventInput

__all__ = [
    "DEFAULT_MAX_CRASH_RETRIES",
    "Claims",
    "Decision",
    "DispatchKind",
    "DispatchRole",
    "RunContext",
    "StepDispatch",
]

DispatchRole: TypeAlias = Literal["worker", "fixer", "orchestrator", "planner"]
DispatchKind: TypeAlias = Literal["execute_step", "fix_step"]

#: Attempts that ended with causeCode ``lease_expired`` (the worker died) are retried without
#: consuming the step's retry budget, at most this many times per step path.
DEFAULT_MAX_CRASH_RETRIES = 5


@dataclass(frozen=True, eq=False)
class RunContext:
    """What :func:`decide` needs besides the folded state.

    Build one per run and keep it for the run's life: per-run work (a parallel step's
    resolved branch list) is cached on the context's identity, so it is compared and hashed
    by identity (``eq=False``), never by value.

    - ``version``: the compiled WorkflowVersion (its LWIR is planned once per version id).
    - ``run_input``: ``RunStarted.payload.input``.
    - ``default_max_attempts``: attempts per step when the step has no ``retry.maxAttempts``
      (upstream's ``maxAttempts`` option; default 1).
    - ``max_crash_retries``: attempts ended with causeCode ``lease_expired`` (the worker died)
      are retried without using the step's budget, at most this many times per step path.
    - ``max_branches_cap``: the engine's ceiling for parallel steps that declare the LWIR's
      own ceiling (``maxBranches: 100``, the most a valid LWIR may declare). ``None`` keeps
      upstream's limit; ``1000`` lets such a step fan out over up to 1000 items. Steps that
      declare a smaller ``maxBranches`` keep their own limit.
    - ``max_in_flight``: the engine's ceiling on a parallel step's branches in flight, below
      its ``maxConcurrency`` (the fleet sets it to its worker slots, so a fan-out wider than
      the fleet does not queue what no slot can start yet). ``None``: ``maxConcurrency``
      alone. A run may be decided with different values over its life; each decision keeps
      at most ``min(maxConcurrency, max_in_flight)`` branches in flight.
    - ``cancel_requested``: a ``little.run.cancel_requested`` event was recorded (the fold
      skips engine events, so the caller reads it from the log and sets this);
      ``decide`` then fails the run with causeCode ``cancelled``, or with
      ``cancel_error`` when set (a deadline's: causeCode ``timeout`` or
      ``deadline_exceeded``, see :mod:`little_dist.run_limits`).
    - ``memoize``: let ``decide`` remember, on this context, the branches of a parallel step
      that did not change between calls (see :mod:`little_dist.scheduling.branch_cache`); the
      decisions are the same either way. ``False`` re-drives every branch on every call (the
      reference the differential tests and ``bench/decide.py`` compare against).
    - ``parent_run_id``: the run that started this one as a sub-run (its ``RunStarted``'s
      ``parentRunId``), or ``None``. ``decide`` only copies it onto the attempts it
      dispatches, so that their tasks name the parent where operators look (Flower).
    - ``inherited``: what a sub-run inherits from its parent (its ``RunStarted``'s
      ``inherited``, as recorded: the parent's denies, the pipeline memory store; see
      :mod:`little_dist.runtime.inherited`), or ``None``. ``decide`` does not look at it;
      the attempts apply it to their capabilities.
    """

    version: WorkflowVersion
    run_input: Any
    run_id: str
    default_max_attempts: int = 1
    max_crash_retries: int = DEFAULT_MAX_CRASH_RETRIES
    max_branches_cap: int | None = None
    max_in_flight: int | None = None
    cancel_requested: bool = False
    cancel_error: Any = None
    memoize: bool = True
    parent_run_id: str | None = None
    inherited: Any = None


@dataclass(frozen=True)
class StepDispatch:
    """ "Execute this attempt", carried as ids only (the fleet sends these as task args).

    ``parent_run_id`` (a sub-run's parent, from :attr:`RunContext.parent_run_id`) is shown
    with the task, never one of its arguments; ``not_before_ms`` is when the task may run
    (the fleet sends it with that delay). Neither takes part in comparisons: the same
    attempt is the same dispatch whoever built it."""

    run_id: str
    step_path: str
    step_id: str
    attempt: int
    role: DispatchRole
    kind: DispatchKind
    parent_run_id: str | None = field(default=None, compare=False)
    #: Not to run before this time (milliseconds since the epoch): an attempt after one that
    #: gave its slot back for quota (:func:`~little_dist.scheduling.policy.not_before_ms`).
    not_before_ms: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Claims:
    """Which branch ends and refills belong to another owner: ``decide`` leaves them to it.

    A parallel step refills the slot each branch end frees. When several processes decide on
    the same run, each end and its refill are the business of the process whose commit ended
    the branch (it runs the refill in the slot that freed it). So that processes refilling
    their own ends at once choose different branches whatever else their views of the log
    hold, the refill is the next branch of the end's *lane*: branch ``i`` is in lane ``i``
    modulo the window (``maxConcurrency``, or ``RunContext.max_in_flight`` when lower), and
    each lane holds one branch in flight at a time. In item order, two looks would both
    choose the lowest unscheduled branch.

    - ``own_ends``: the branches (``fan[a]``, nested ones too) whose end the caller records
      and refills. A branch that another owner completed is not recorded while its lane has
      a branch to refill it with: it counts in flight until its owner records it. Any look
      records the rest: a branch that failed (it decides whether the fan-out stops; if not
      the caller's, its refill is left), a branch whose lane is done (nothing to choose: the
      look after the last commit, which sees every commit, ends the group), and a branch the
      call's own events completed.
    - ``left``: branches an earlier round of the same look left, left again while they are
      unscheduled.

    Room that no end in the call frees (the window grew, a lane ran out of branches, a refill
    was left and its owner's end is recorded) is anyone's: filled in item order in the lanes
    with nothing in flight. An end that nobody claims (its process died, or its look failed)
    is adopted by another worker's looks after a while (the fleet's run tracker says which
    in ``own_ends``), or recorded by a look without claims: the scheduler's sweep.

    ``decide`` without claims leaves nothing and schedules in item order (every refill is
    the caller's).
    """

    own_ends: Set[str] = frozenset()
    left: Set[str] = frozenset()


@dataclass(frozen=True)
class Decision:
    """What to do next for one run.

    ``events`` are to be appended in order; each has a deterministic occurrence id, so
    appending the same decision twice records each fact once. ``dispatch`` lists every
    attempt that is scheduled and not yet started (also those scheduled by earlier
    decisions): callers skip the ones they already sent. ``done`` is true when the run is
    terminal (its RunCompleted/RunFailed is recorded or among ``events``). ``held_back``
    counts the branches parallel steps would schedule now under their ``maxConcurrency`` but
    did not, because of :attr:`RunContext.max_in_flight` (the backlog the fleet reports for
    autoscaling).

    What a caller deciding with :class:`Claims` (or keeping attempts for itself) reads:
    ``scheduled`` lists the attempts of ``dispatch`` whose ``StepScheduled`` is among
    ``events`` (new this decision, in the same order); ``left`` the branches the claims made
    it leave to their owners, in branch order per group; ``rider`` is the attempt these
    events may be recorded with, in that attempt's first append, instead of on their own:
    set when the decision records nothing but branch ends and that one attempt's schedule
    (its ``StepScheduled`` and the ``ParallelBranchScheduled`` of branches that hold it).

    What a caller deciding in rounds (decide, append, decide again) reads to stop:
    ``in_flight_only``: the events only put work in flight (schedules, a parallel step's
    start and its group); they settle nothing, so another call finds nothing new in them.
    ``last_round``: the events only schedule and end branches; ``decide`` refills the slots
    of the branches it ends, and ends their group, in the same call, so another call on
    exactly these events folded decides nothing new.
    """

    events: tuple[EventInput, ...]
    dispatch: tuple[StepDispatch, ...]
    done: bool
    held_back: int = 0
    scheduled: tuple[StepDispatch, ...] = ()
    left: tuple[str, ...] = ()
    rider: StepDispatch | None = None
    in_flight_only: bool = False
    last_round: bool = False
