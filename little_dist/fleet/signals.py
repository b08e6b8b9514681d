"""The scheduler's readiness signals: a Redis stream read through one consumer group.

Every append that writes a new event to a :class:`~little_dist.world.redis_s3.RedisS3World`
opened with ``signal_stream=`` also adds ``run=<run id>, seq=<sequence>`` to that stream, in
the same atomic script. Schedulers read it with ``XREADGROUP`` in one group, so each entry
goes to one scheduler; an entry stays *pending* until the scheduler that got it acknowledges
it (``XACK``) after handling its run. A dead scheduler's pending entries are taken over by a
live one with ``XAUTOCLAIM`` once they have been idle for ``claim_idle`` seconds.

``XAUTOCLAIM`` also takes entries from a consumer that is alive but slow (handling one entry
took longer than ``claim_idle``), so handling an entry must be short and idempotent: folding a
run's new events and appending a decision by occurrence id is both.

:class:`SignalReader` is a small adapter over a redis-py client: redis errors leave it as
:class:`~little_dist.errors.StorageUnavailableError`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis

from little_dist.errors import StorageUnavailableError

__all__ = ["Signal", "SignalReader"]

# KEYS: 1 the stream. ARGV: 1 group, 2 consumer, 3 idle ms. Deletes the consumer only if,
# now, it has nothing pending and has been idle longer than that (deleting a consumer
# drops its pending entries: a signal it just took would be lost). 1 if it was deleted.
_FORGET_IDLE_CONSUMER = """
for _, consumer in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local fields = {}
  for i = 1, #consumer, 2 do
    fields[consumer[i]] = consumer[i + 1]
  end
  if fields['name'] == ARGV[2] then
    if tonumber(fields['pending']) == 0 and tonumber(fields['idle']) > tonumber(ARGV[3]) then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
      return 1
    end
    return 0
  end
end
return 0
"""


@dataclass(frozen=True)
class Signal:
    """One stream entry: ``run_id`` got a new event with sequence ``sequence`` (0: unknown)."""

    entry_id: str
    run_id: str
    sequence: int


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _signals(entries: Sequence[Any] | None) -> list[Signal]:
    out: list[Signal] = []
    for entry_id, fields in entries or ():
        if not fields:  # an entry trimmed away while pending: nothing to do but ack it
            out.append(Signal(_text(entry_id), "", 0))
            continue
        values = {_text(k): _text(v) for k, v in fields.items()}
        seq = values.get("seq", "0")
        out.append(Signal(_text(entry_id), values.get("run", ""), int(seq) if seq.isdigit() else 0))
    return out


class SignalReader:
    """Read, claim and acknowledge signal entries as consumer ``consumer`` of ``group``."""

    def __init__(
        self,
        client: redis.Redis,
        stream: str,
        group: str,
        consumer: str,
        *,
        claim_idle: float,
    ) -> None:
        self._redis = client
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self._claim_idle_ms = max(1, int(claim_idle * 1000))
        self._claim_cursor = "0-0"

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except redis.exceptions.RedisError as exc:
            raise StorageUnavailableError(
                f"Redis failed during {what} on {self.stream!r}: {exc}"
            ) from exc

    def ensure_group(self) -> None:
        """Create the group (and the stream) if missing; the group reads from the start.

        Reading from the start (id 0, not ``$``) keeps the signals written before any
        scheduler ever ran; the stream is capped, so there are never many of them.
        """
        with self._errors("creating the consumer group"):
            try:
                self._redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
            except redis.exceptions.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    def own_pending(self, count: int = 100) -> list[Signal]:
        """Entries delivered to this consumer name and never acknowledged (a restart)."""
        with self._errors("reading own pending entries"):
            reply: Any = self._redis.xreadgroup(
                self.group, self.consumer, {self.stream: "0"}, count=count
            )
        return _signals(reply[0][1]) if reply else []

    def read(self, *, count: int, block_ms: int) -> list[Signal]:
        """New entries for this consumer, waiting up to ``block_ms`` (0: do not wait)."""
        with self._errors("reading signals"):
            reply: Any = self._redis.xreadgroup(
                self.group,
                self.consumer,
                {self.stream: ">"},
                count=count,
                block=block_ms if block_ms > 0 else None,
            )
        return _signals(reply[0][1]) if reply else []

    def claim(self, *, count: int = 100) -> list[Signal]:
        """Take over entries idle longer than ``claim_idle`` from any consumer (dead ones).

        Walks the group's pending list a page per call; the cursor wraps around.
        """
        with self._errors("claiming idle signals"):
            reply: Any = self._redis.xautoclaim(
                self.stream,
                self.group,
                self.consumer,
                min_idle_time=self._claim_idle_ms,
                start_id=self._claim_cursor,
                count=count,
            )
        self._claim_cursor = _text(reply[0]) if reply else "0-0"
        return _signals(reply[1]) if reply else []

    def ack(self, entry_ids: Sequence[str]) -> None:
        """Acknowledge handled entries (they leave the group's pending list)."""
        if not entry_ids:
            return
        with self._errors("acknowledging signals"):
            self._redis.xack(self.stream, self.group, *entry_ids)

    def forget_idle_consumers(self, idle_seconds: float) -> list[str]:
        """Remove consumers with nothing pending, idle longer than ``idle_seconds``.

        Consumer names include the process id, so every restart leaves one behind. The
        listing only picks candidates; each is deleted by a script that checks again, at
        that instant, that it has nothing pending and is still idle.
        """
        removed: list[str] = []
        idle_ms = int(idle_seconds * 1000)
        with self._errors("listing consumers"):
            consumers: Any = self._redis.xinfo_consumers(self.stream, self.group)
            for consumer in consumers:
                name = _text(consumer.get("name", ""))
                if (
                    name
                    and name != self.consumer
                    and int(consumer.get("pending", 0)) == 0
                    and int(consumer.get("idle", 0)) > idle_ms
                ):
                    forgotten: Any = self._redis.eval(
                        _FORGET_IDLE_CONSUMER, 1, self.stream, self.group, name, idle_ms
                    )
                    if int(forgotten):
                        removed.append(name)
        return removed
