"""The fleet: Celery workers per role, the scheduler, and the client that submits runs.

This package imports nothing, so ``little --help`` and the pure core never load Celery:
import its modules directly.

The walk of one step
====================

A run's log is the truth; processes only cache it. Follow ``little.execute_step(run, "s1",
1)`` through a worker (the scheduler-driven path, what ``little worker --no-fast-path`` runs):

1. **Task** (:mod:`.tasks`, :meth:`~.worker.WorkerRuntime.attempt`). Celery delivers the
   task, ids only. The worker takes the run's :class:`~.run_tracker.RunTracker` from its
   :class:`~.run_cache.RunCache` and checks the message against the run's version before it
   writes anything: the step path must exist and the attempt must be due
   (:func:`~little_dist.scheduling.policy.admits`); anything else is dropped.
2. **Lease.** It takes the step lease ``{run}:step:s1`` (a unique holder, ``lease_ttl``).
   Held by someone else: ``busy``, done. The lease's fencing token guards every write that
   follows, and the process's :class:`~little_dist.runtime.LeaseKeeper` renews it (and ends
   the attempt at its step timeout).
3. **Catch up.** The tracker reads the events appended since it last looked and folds them
   (:meth:`~.run_tracker.RunTracker.catch_up_step`): the run's state, its
   :class:`~little_dist.scheduling.RunContext`, and the step's earlier events (the memo of a
   retried attempt).
4. **Run.** :func:`~little_dist.runtime.execute_step_attempt` records
   ``StepAttemptStarted``, runs the harness for the step's role (model calls, tool calls:
   each recorded before and after, replayed from the memo on a retry), validates the output.
5. **Commit.** One fenced append ends the attempt (``StepCompleted`` or ``StepFailed``,
   occurrence ``end:s1:1``) and releases the lease; the append signals the scheduler.
6. **Next.** The scheduler (:mod:`.scheduler`), woken by the signal, looks at the run
   (:func:`~.dispatch.advance_run`: fold, ``decide``, append what it decided, send what became
   ready under each attempt's dispatch lease, :mod:`.sending`) and the next task goes to its
   role's queue (:mod:`.queue`).

The fast path changes step 6, and what a kept attempt skips of 1 to 3: the worker that
committed looks at the run itself, right after its commit (the same
:func:`~.dispatch.advance_run`, with its process's claims and a ``keep``), and may run the
next attempt in the same slot instead of sending it (:mod:`.fastpath`, joined to the spine at
one seam: ``FastPath.arrange``). An attempt so kept was leased by the look before its
``StepScheduled`` was appended, so it skips the admit check and the lease of steps 1 and 2;
when it is ours alone (its step lease's token 1) it also skips the catch-up of step 3 (the
look folded everything up to it). Nothing else differs, and nothing depends on it: a worker
that dies between its commit and its look is covered by the scheduler's sweep.

Every look at a run -- the scheduler's, a submitting client's, a worker's after its commit
-- is that one :func:`~.dispatch.advance_run`: one round cap, one stopping rule, one rule for
signalling (a look's appends signal the scheduler only when they end the run: the looker
acts on its own decision). The pure ``decide`` is called in one place
(:func:`~.dispatch.decision_of`), a decision is appended in one place (``_Look.record``)
and tasks are sent in one module (:mod:`.sending`); ``tests/test_fleet_one_loop.py`` pins
it. The worker, the scheduler and the submitting client stand side by side over that core:
none imports another.

Modules
=======

* :mod:`.app` — ``make_celery_app(settings)``: queues per role, routes, reliability options;
  :mod:`.consumer` — the worker's broker consumer that survives a Redis restart.
* :mod:`.tasks` — the task bodies; :mod:`.worker` — :class:`~.worker.WorkerRuntime`, what
  they run on, the spine; :mod:`.fastpath` — what a worker does beyond one attempt per task;
  :mod:`.planning` — ``little.plan``; :mod:`.run_cache` — the runs a worker keeps.
* :mod:`.app_registry` — what ``--app MODULE`` provides: workflows and their capabilities.
* :mod:`.run_tracker` — :class:`~.run_tracker.RunTracker`, what a process keeps of a run;
  its parts :mod:`.advancing`, :mod:`.spares`, :mod:`.offers`; :mod:`.versions`.
* :mod:`.dispatch` — :func:`~.dispatch.advance_run`, one look at a run (decide with the
  process's claims, keep, record, send); :mod:`.keeping` — the leases of what a worker's look
  keeps for its process.
* :mod:`.sending` — task names, dispatch leases, sending a task once; :mod:`.queue` — where
  tasks go (:class:`~.queue.TaskQueue`: Celery, or in memory).
* :mod:`.scheduler`, :mod:`.signals`, :mod:`.sweeper`, :mod:`.archiving` — the ``little
  scheduler`` process, the signal stream it reads, the active runs it sweeps, the finished
  runs it archives; :mod:`.followed_runs` — what it keeps of the runs it looks at;
  :mod:`.poison` — runs it cannot advance; :mod:`.scheduler_log` — its JSON log lines.
* :mod:`.worker_slots` — the fleet's task slots, a fan-out's window and its backlog.
* :mod:`.client` — :class:`~.client.Client`: submit, status (:mod:`.run_status`), report
  (:mod:`.run_report`, also ``little report``'s), wait, cancel; :mod:`.run_listing` — the
  runs of a world, as ``little runs`` lists them; :mod:`.submission` —
  :func:`~.submission.submit_run`, what submitting writes and sends; :mod:`.run_starts` —
  what a run's start records, step by step; :mod:`.one_trip_starts` — a start (and its first
  tasks) in one round trip where the world can.
* :mod:`.interpreter_tuning` — garbage collection and thread switches of fleet processes.

Glossary
========

active set
    The Redis set of runs the scheduler's sweeps visit: added at a run's first look (or by
    the client that starts it), removed once the run is archived.
advance
    One :func:`~.dispatch.advance_run`: a look that appends and sends what it decided.
    Threads of one process that commit steps of one run advance it once
    (:class:`~.advancing.Advancing`): the others wait for a hand-out.
alone
    A kept attempt nobody else can have run: its step lease came with token 1 (never held
    before) and this look scheduled it. It runs without reading the log again first.
archive
    A finished run's log copied to S3 (``archives/RUN.ndjson``); the stream then expires.
backlog
    Branches a fan-out holds back because the window is full, reported per run in Redis for
    KEDA to scale workers on (:mod:`.worker_slots`).
claims
    What a worker's look tells ``decide`` (:class:`~little_dist.scheduling.Claims`): the
    branches whose ends its process committed (it records those ends and schedules their
    refills) and the branches it left earlier. ``decide`` leaves other processes' completed
    branches to them and every other refill out (:attr:`left
    <little_dist.scheduling.Decision.left>`); the scheduler's and a client's looks decide
    without claims and record and schedule everything.
commit
    The append that ends an attempt: fenced, releases the step lease in the same round trip,
    may take the next step's lease with it (a chain's next link) or write the output
    artifact with it.
deferred
    Events a look decided but did not append because the attempt it kept is the decision's
    *rider* (:attr:`~little_dist.scheduling.Decision.rider`: the decision only ends branches
    and schedules that attempt): they ride with that attempt's first append (its
    *preamble*), one round trip less.
dispatch lease
    ``{run}:dispatch:{path}:{n}``, taken for ``dispatch_resend_after`` before an attempt's
    task is sent and never released: while it lives, nobody sends that attempt again.
fast path
    A worker advancing the run right after its own commit (see the walk above).
fence
    The token of a lease, checked by every append made under it; a holder whose lease was
    taken over (or timed out) cannot write.
hand-out
    An attempt the advancing thread kept and gives to a thread of its process that waits for
    one (:meth:`~.advancing.Advancing.hand_out`).
held
    The lease a commit took for the step it expects next (``next_lease``): the look uses it
    instead of an acquire when it keeps that step.
inline
    An attempt a task runs after its own, in the same slot; bounded by
    ``LITTLE_WORKER_INLINE_STEPS``/``_SECONDS`` (then the slot yields if other work waits)
    and ``LITTLE_WORKER_INLINE_MAX_SECONDS``.
lane
    Under claims, branch ``i`` of a fan-out is in lane ``i`` modulo its window; a branch's
    end is refilled with the next unscheduled branch of its lane, so two processes refilling
    their own ends at once never choose the same branch (:class:`~little_dist.scheduling.Claims`).
keep, kept
    A worker's look keeps an attempt of its roles instead of sending it: it leases the step
    before the attempt's ``StepScheduled`` is appended, so nobody else can run it.
left
    A refill ``decide`` leaves out under a worker's claims: another process's commit freed
    its slot, so that process schedules and runs it; counted in flight meanwhile.
look
    Fold what is new, decide, append, send (:func:`~.dispatch.advance_run`); the scheduler's,
    a client's at submit, or a worker's on the fast path.
offer
    Trying an attempt's dispatch lease (one Redis call); :class:`~.offers.Offers` remembers
    what this process offered lately so a look does not offer every waiting attempt again.
refill
    The branch a fan-out schedules in the slot a finished branch freed: the next of its
    *lane*. The process whose commit ended that branch records the end and runs its refill;
    other processes' looks leave both to it (see *claims*, *left*).
signal
    ``run=<id>`` added to the signal stream by an append (``XADD`` in the append script),
    read by the schedulers through a consumer group (:mod:`.signals`).
slot
    One task a worker process can run at a time (``--concurrency``); registered in Redis so
    a fan-out's window follows the fleet's size.
spare
    An attempt a look kept for a thread of its process that has not asked yet; taken by the
    next thread that does, or sent to the queue after :data:`~.spares.SPARE_SECONDS`.
step lease
    ``{run}:step:{path}``, held by the attempt running the step; renewed by the lease keeper.
sweep
    The scheduler's periodic look at every active run (under the sweep lease): it re-sends
    what was never started and fails attempts whose worker died (``lease_expired``).
tracker
    :class:`~.run_tracker.RunTracker`: what a process keeps of one run.
window
    How many branches of a fan-out are in flight at once: the fleet's registered slots
    (``LITTLE_BRANCH_WINDOW=fleet``) or the step's ``maxConcurrency``.
"""

from __future__ import annotations

__all__: list[str] = []
