"""Where tasks go: the :class:`TaskQueue` seam, its Celery adapter and an in-memory queue.

The engine sends a task by name, with ids for arguments, to the queue of a role
(``little.execute_step(run_id, step_path, attempt)`` to the workers' queue, ...), and asks
how many tasks wait in a role's queue. That is all it needs of a message broker, so that is
all :class:`TaskQueue` is:

* :class:`CeleryQueue` sends with a Celery app (``send_task`` to the role's queue from the
  settings) and sizes a queue through the broker (a passive declare);
* :class:`MemoryQueue` keeps what was sent in a list: tests read it, and deliver the tasks
  themselves (as :class:`~little_dist.world.in_process.MemoryWorld` stands in for storage).

Nothing in the fleet reaches into Celery or kombu but :class:`CeleryQueue` (and the worker
process itself, which Celery runs).

A task may also carry a ``note``: a few ``name: value`` strings for people, not for the task
(which never sees them). :class:`CeleryQueue` puts a note in the message's ``kwargsrepr``
header, which Celery's task events, and so Flower's task list and task page, show as the
task's keyword arguments: the steps of a sub-run are sent with ``{'parentRunId': ...}`` (see
:func:`~little_dist.fleet.sending.send_dispatch`), so Flower links them to the run that
started them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from little_dist.settings import Role, Settings

if TYPE_CHECKING:
    from celery import Celery

    from little_dist.fleet.task_messages import TaskMessages, TaskPush

__all__ = ["CeleryQueue", "MemoryQueue", "SentTask", "TaskQueue"]

_log = logging.getLogger("little.fleet")


class TaskQueue(Protocol):
    """Sends the fleet's tasks; see the module docstring."""

    def send(
        self,
        task: str,
        args: Sequence[Any],
        role: Role,
        *,
        note: Mapping[str, str] | None = None,
        countdown: float | None = None,
    ) -> None:
        """Send task ``task`` with ``args`` to ``role``'s queue (results are never read);
        ``note``: what to show with the task (see the module docstring); ``countdown``: not
        to run for that many seconds (Celery's ETA: a worker holds the message, not a slot,
        meanwhile). Senders pass ``note`` and ``countdown`` only when they have one."""
        ...

    def depth(self, role: Role) -> int | None:
        """How many tasks wait in ``role``'s queue; ``None`` when it cannot be told."""
        ...


class CeleryQueue:
    """:class:`TaskQueue` over a Celery app; ``settings`` name the queue of each role."""

    def __init__(self, app: Celery, settings: Settings) -> None:
        self.app = app
        self._settings = settings
        self._messages: TaskMessages | None = None
        self._printable: bool | None = None

    @property
    def broker_db(self) -> int | None:
        """The Redis database of the broker when :meth:`commands` can print its messages
        (see :func:`~little_dist.fleet.task_messages.broker_fits`), else ``None``."""
        from little_dist.fleet.task_messages import broker_fits

        return broker_fits(self.app)

    def commands(
        self, task: str, args: Sequence[Any], role: Role, *, note: Mapping[str, str] | None = None
    ) -> TaskPush | None:
        """What a Redis script on the broker's Redis runs to send this task itself (the
        LPUSH of the message :meth:`send` would send, and the PUBLISH of its ``task-sent``
        event; :mod:`~little_dist.fleet.task_messages`); ``None`` when the broker is not
        one whose messages can be printed (then :meth:`send` it)."""
        if self._messages is None:
            if self._printable is False:
                return None
            db = self.broker_db
            self._printable = db is not None
            if db is None:
                return None
            from little_dist.fleet.task_messages import TaskMessages

            self._messages = TaskMessages(self.app, self._settings, db)
        return self._messages.push(task, args, role, note=note)

    def send(
        self,
        task: str,
        args: Sequence[Any],
        role: Role,
        *,
        note: Mapping[str, str] | None = None,
        countdown: float | None = None,
    ) -> None:
        options: dict[str, Any] = {} if note is None else {"kwargsrepr": repr(dict(note))}
        if countdown is not None and countdown > 0:
            options["countdown"] = countdown
        self.app.send_task(task, args=tuple(args), queue=self._settings.queue_for(role), **options)

    def depth(self, role: Role) -> int | None:
        try:
            with self.app.connection_or_acquire() as connection:
                channel = connection.default_channel
                try:
                    declared = channel.queue_declare(
                        queue=self._settings.queue_for(role), passive=True
                    )
                except Exception as error:
                    # Redis: an empty queue is no key at all, which kombu reports as a
                    # missing queue (amqp's ChannelError, reply code 404).
                    if str(getattr(error, "reply_code", "")) == "404":
                        return 0
                    raise
                return int(declared.message_count)
        except Exception:
            _log.debug("could not size the %s queue", role, exc_info=True)
            return None


class SentTask(NamedTuple):
    """One task a :class:`MemoryQueue` was given."""

    name: str
    args: tuple[Any, ...]
    role: Role

    @property
    def run_id(self) -> Any:
        return self.args[0]

    @property
    def step_path(self) -> Any:
        return self.args[1] if len(self.args) > 1 else None

    @property
    def attempt(self) -> Any:
        return self.args[2] if len(self.args) > 2 else None


class MemoryQueue:
    """:class:`TaskQueue` in memory: what was sent waits in :attr:`sent` until
    :meth:`take`; ``depth`` counts what waits (``None`` when ``sized`` is false);
    :meth:`note_of` tells a task's note, :meth:`countdown_of` its delay."""

    def __init__(self, *, sized: bool = True) -> None:
        self.sent: list[SentTask] = []
        self._notes: dict[SentTask, Mapping[str, str]] = {}
        self._countdowns: dict[SentTask, float] = {}
        self._sized = sized
        self._lock = threading.Lock()

    def send(
        self,
        task: str,
        args: Sequence[Any],
        role: Role,
        *,
        note: Mapping[str, str] | None = None,
        countdown: float | None = None,
    ) -> None:
        sent = SentTask(task, tuple(args), role)
        with self._lock:
            self.sent.append(sent)
            if note is not None:
                self._notes[sent] = dict(note)
            if countdown is not None:
                self._countdowns[sent] = countdown

    def note_of(self, task: SentTask) -> Mapping[str, str] | None:
        """The note ``task`` was sent with, if any (kept after :meth:`take`)."""
        with self._lock:
            return self._notes.get(task)

    def countdown_of(self, task: SentTask) -> float | None:
        """The delay ``task`` was sent with, if any (kept after :meth:`take`)."""
        with self._lock:
            return self._countdowns.get(task)

    def depth(self, role: Role) -> int | None:
        if not self._sized:
            return None
        with self._lock:
            return sum(1 for task in self.sent if task.role == role)

    def take(self) -> list[SentTask]:
        """Everything sent since the last take, in order (the queue is then empty)."""
        with self._lock:
            taken, self.sent = self.sent, []
        return taken
