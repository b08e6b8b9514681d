"""Celery task messages printed from templates, for a script that pushes them itself.

A submit that starts a run and sends its first tasks in one Redis round trip
(:func:`~little_dist.fleet.submission.submit_run` on a fleet whose world and broker share one
Redis) cannot call ``send_task``: the message must be written by the same Lua script that
records the run's start. So the message is printed here, and it must be what ``send_task``
would have sent, byte for byte, apart from its ids (task id, delivery tag) and times.

Nothing of Celery's or kombu's format is written down here: the templates are captured once
per process from their own message building, by one ``send_task`` over an in-memory kombu
connection (kombu's ``memory`` transport shares the virtual channel of its Redis transport:
the same ``prepare_message``, body encoding and delivery info; only the last step, Redis's
``_put``, is not run). That send has placeholder ids and arguments; the message it built,
dumped as the Redis transport dumps it (``kombu.utils.json.dumps``), becomes a template
whose placeholders are filled per task. The ``task-sent`` event Celery publishes with every
task (``task_send_sent_event``: Flower's "sent" state) is captured the same way.

Where the Redis transport puts them (kombu 5.7, ``kombu/transport/redis.py``): a task sent
to a queue by name goes through the anonymous exchange (Celery's ``send_task_message``
turns a direct exchange into it), so ``_put`` LPUSHes it on the list named after the
queue (``_q_for_pri``: the bare name at priority 0, which every message of ours has); the
event goes to the fanout exchange ``celeryev``, which ``_put_fanout`` PUBLISHes on
``/{db}.celeryev/task.sent`` (``keyprefix_fanout`` with ``fanout_patterns``).
:func:`broker_fits` says when a broker's options leave those names as they are.
"""

from __future__ import annotations

import base64
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from little_dist.settings import Role, Settings

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["TaskMessages", "TaskPush", "broker_fits"]

#: Placeholders the captured send carries (printed as JSON strings, so found quoted).
_ID: Final = "LDSLOTid"
_ARGS: Final = "LDSLOTargs"
_KWARGSREPR: Final = "LDSLOTkwargsrepr"
_ROOT: Final = "LDSLOTroot"
_PARENT: Final = "LDSLOTparent"
_REPLY_TO: Final = "LDSLOTreplyto"
#: The event of the task sent, and the exchange Celery publishes task events on.
_SENT_EVENT: Final = "task-sent"
_EVENT_EXCHANGE: Final = "celeryev"
#: Broker transport options that would move a queue's list or the events' channel.
_MOVING_OPTIONS: Final = frozenset(
    {"global_keyprefix", "fanout_prefix", "fanout_patterns", "priority_steps", "sep"}
)


@dataclass(frozen=True)
class TaskPush:
    """What a script does to send one task: LPUSH ``message`` on the list ``queue``, then
    PUBLISH ``event`` (the ``task-sent`` event) on ``topic``."""

    queue: str
    message: str
    topic: str
    event: str


def broker_fits(app: Celery) -> int | None:
    """The Redis database number of ``app``'s broker when its messages can be printed here
    (a plain ``redis://`` or ``rediss://`` broker whose transport options do not rename
    queues or channels); ``None`` otherwise."""
    url = app.conf.broker_url
    if not isinstance(url, str):
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        return None
    options = app.conf.broker_transport_options or {}
    if _MOVING_OPTIONS & set(options):
        return None
    path = parts.path.strip("/")
    try:
        return int(path) if path else 0
    except ValueError:
        return None


class _Template:
    """Text with named holes: ``print(values)`` fills them (each value printed already)."""

    def __init__(self, text: str, holes: Mapping[str, str]) -> None:
        # holes: the placeholder as it appears in ``text`` -> its name
        pattern = re.compile("|".join(re.escape(found) for found in holes))
        self._parts: list[str] = []
        self._names: list[str] = []
        end = 0
        for match in pattern.finditer(text):
            self._parts.append(text[end : match.start()])
            self._names.append(holes[match.group(0)])
            end = match.end()
        self._parts.append(text[end:])

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._names)

    def print(self, values: Mapping[str, str]) -> str:
        out = [self._parts[0]]
        for name, part in zip(self._names, self._parts[1:], strict=True):
            out.append(values[name])
            out.append(part)
        return "".join(out)


@dataclass(frozen=True)
class _Templates:
    """One task's templates, for one queue, in one process."""

    message: _Template
    body: _Template
    event: _Template
    event_body: _Template
    queue: str
    topic: str


class TaskMessages:
    """Prints the messages ``app.send_task(task, args, queue=...)`` would send (see the
    module docstring); one per process (its templates name the process)."""

    def __init__(self, app: Celery, settings: Settings, db: int) -> None:
        self._app = app
        self._settings = settings
        from kombu.transport.redis import Channel

        # What Redis's channel publishes a fanout message on (``_get_publish_topic``).
        prefix = str(Channel.keyprefix_fanout).format(db=db)
        self._topic = f"{prefix}{_EVENT_EXCHANGE}/{_SENT_EVENT.replace('-', '.')}"
        self._templates: dict[tuple[str, str, bool, bool], _Templates] = {}
        self._pid = os.getpid()
        self._lock = threading.Lock()
        from celery.utils.saferepr import saferepr
        from kombu.utils.json import dumps

        # (the JSON printer of kombu's Redis transport, for every value printed into a hole)
        self._dumps: Callable[[Any], str] = dumps

        self._saferepr = saferepr
        self._repr_size = (app.amqp.argsrepr_maxsize, app.amqp.kwargsrepr_maxsize)
        self._repr_levels = app.conf.task_repr_maxlevels

    def push(
        self,
        task: str,
        args: Sequence[Any],
        role: Role,
        *,
        note: Mapping[str, str] | None = None,
        task_id: str | None = None,
        delivery_tags: tuple[str, str] | None = None,
        timestamp: float | None = None,
        clock: int | None = None,
    ) -> TaskPush:
        """The push of ``task(*args)`` to ``role``'s queue, as ``CeleryQueue.send`` sends it
        (``note``: its ``kwargsrepr``). ``task_id``, ``delivery_tags`` (the message's and
        the event's), ``timestamp`` and ``clock`` (the event's): new ones unless given
        (tests)."""
        queue = self._settings.queue_for(role)
        # (Once the app is finalized, send_task adds the registered task's options, e.g. its
        # time limits: a template is captured for each state.)
        templates = self._for(task, queue, note is not None, bool(self._app.finalized))
        args = tuple(args)
        dumps = self._dumps
        task_id = task_id if task_id is not None else str(uuid.uuid4())
        tags = (
            delivery_tags if delivery_tags is not None else (str(uuid.uuid4()), str(uuid.uuid4()))
        )
        argsrepr = self._saferepr(args, self._repr_size[0], maxlevels=self._repr_levels)
        values = {
            "id": dumps(task_id),
            "argsrepr": dumps(argsrepr),
            "args": dumps(list(args)),
        }
        if note is not None:  # (as CeleryQueue.send passes it: see the queue module)
            values["kwargsrepr"] = dumps(repr(dict(note)))
        # As send_task names them: a task sent from inside a task is its child.
        app: Any = self._app
        parent = app.current_worker_task
        if parent:
            values["root"] = dumps(parent.request.root_id or parent.request.id)
            values["parent"] = dumps(parent.request.id)
        else:
            values["root"], values["parent"] = values["id"], "null"
        values["reply_to"] = dumps(app.thread_oid)
        body = templates.body.print(values)
        message = templates.message.print(
            {**values, "body": dumps(_base64(body)), "tag": dumps(tags[0])}
        )
        event_values = {
            **values,
            "clock": dumps(self._app.clock.forward() if clock is None else clock),
            "timestamp": dumps(time.time() if timestamp is None else timestamp),
        }
        event_body = templates.event_body.print(event_values)
        event = templates.event.print(
            {**event_values, "body": dumps(_base64(event_body)), "tag": dumps(tags[1])}
        )
        return TaskPush(templates.queue, message, templates.topic, event)

    def _for(self, task: str, queue: str, noted: bool, finalized: bool) -> _Templates:
        key = (task, queue, noted, finalized)
        found = self._templates.get(key)
        if found is not None and self._pid == os.getpid():
            return found
        with self._lock:
            if self._pid != os.getpid():  # (forked: the templates name the parent)
                self._templates, self._pid = {}, os.getpid()
            found = self._templates.get(key)
            if found is None:
                found = self._templates[key] = self._capture(task, queue, noted)
        return found

    # Long on purpose: one capture, from the in-memory connection's setup to its teardown, in
    # the order kombu builds a message; split up, each part would need every other's locals.
    def _capture(self, task: str, queue: str, noted: bool) -> _Templates:
        """Send ``task`` once with placeholders over kombu's in-memory transport and make
        templates of what it built (see the module docstring); ``noted``: sent with a note,
        as :meth:`~little_dist.fleet.queue.CeleryQueue.send` sends it (its ``kwargsrepr``
        option, which Celery also copies into the message's properties)."""
        import kombu

        kombu_api: Any = kombu  # (untyped)
        dumps = self._dumps

        catcher = f"little-capture-{uuid.uuid4().hex}"
        with kombu_api.Connection("memory://") as connection:
            channel = connection.default_channel
            events = kombu_api.Queue(
                catcher, kombu_api.Exchange(_EVENT_EXCHANGE, type="fanout"), routing_key="#"
            )
            events(channel).declare()
            try:
                self._app.send_task(
                    task,
                    args=(_ARGS,),
                    queue=queue,
                    task_id=_ID,
                    root_id=_ROOT,
                    parent_id=_PARENT,
                    reply_to=_REPLY_TO,
                    connection=connection,
                    **({"kwargsrepr": _KWARGSREPR} if noted else {}),
                )
                message = _take(channel, queue, lambda m: m["headers"].get("id") == _ID)
                event = _take(channel, catcher, lambda m: True)
            finally:
                channel.queue_delete(catcher)
        if message["properties"].get("priority", 0) not in (0, None):
            raise RuntimeError(f"task {task!r} is sent with a priority: not printed here")
        body = _unbase64(message["body"])
        event_body = _unbase64(event["body"])
        if f'["{_ARGS}"]' not in body:
            raise RuntimeError(f"the body of {task!r} does not hold its arguments as expected")
        # The argsrepr Celery printed of the placeholder arguments, as the JSON holds it.
        argsrepr = dumps(self._saferepr((_ARGS,), self._repr_size[0], maxlevels=self._repr_levels))
        holes = {
            f'"{_ID}"': "id",
            argsrepr: "argsrepr",
            f'"{_ROOT}"': "root",
            f'"{_PARENT}"': "parent",
            f'"{_REPLY_TO}"': "reply_to",
        }
        if noted:
            holes[f'"{_KWARGSREPR}"'] = "kwargsrepr"
        message_text = dumps(
            {
                **message,
                "body": "LDSLOTbody",
                "properties": {**message["properties"], "delivery_tag": "LDSLOTtag"},
            }
        )
        event_text = dumps(
            {
                **event,
                "body": "LDSLOTbody",
                "properties": {**event["properties"], "delivery_tag": "LDSLOTtag"},
            }
        )
        stamped = event_body
        # The event's clock and time are numbers: their printed values become holes.
        event_body = re.sub(r'"clock": \d+', '"clock": "LDSLOTclock"', event_body, count=1)
        event_body = re.sub(
            r'"timestamp": [0-9.eE+-]+', '"timestamp": "LDSLOTtimestamp"', event_body, count=1
        )
        if "LDSLOTclock" not in event_body or "LDSLOTtimestamp" not in event_body:
            raise RuntimeError(f"the task-sent event {stamped} is not as expected")
        envelope = {**holes, '"LDSLOTbody"': "body", '"LDSLOTtag"': "tag"}
        templates = _Templates(
            message=_Template(message_text, envelope),
            body=_Template(body, {f'["{_ARGS}"]': "args", **holes}),
            event=_Template(event_text, envelope),
            event_body=_Template(
                event_body,
                {**holes, '"LDSLOTclock"': "clock", '"LDSLOTtimestamp"': "timestamp"},
            ),
            queue=queue,
            topic=self._topic,
        )
        return templates


def _take(channel: Any, queue: str, wanted: Any) -> dict[str, Any]:
    """The message ``wanted`` picks from ``queue`` of an in-memory channel (others are put
    back)."""
    waiting = channel._queue_for(queue)  # (kombu's memory channel: a queue.Queue)
    others = []
    found: dict[str, Any] | None = None
    while not waiting.empty():
        message = waiting.get_nowait()
        if found is None and wanted(message):
            found = message
        else:
            others.append(message)
    for message in others:
        waiting.put(message)
    if found is None:
        raise RuntimeError(f"the captured send left no message on {queue!r}")
    return found


def _base64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def _unbase64(text: str) -> str:
    return base64.b64decode(text).decode("utf-8")
