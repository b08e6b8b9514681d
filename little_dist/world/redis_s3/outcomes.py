"""What became of a run, readable from Redis alone: its outcome, and the answer to a
``little.submit_run`` task.

A run's stream leaves Redis ``archive_ttl`` (minutes) after its archive; a service that
watches runs with a Redis client and holds no S3 credentials still needs to learn how a run
it started ended (a retry of a finished run included), and whether its submission was taken
at all. So every run's end also writes a small record that outlives the archive, and every
submission sent by name is answered by its task id::

    <prefix>{run_x}:outcome      string, JSON, written with the run's end (a copy of its
                                 RunCompleted or RunFailed, by one script reading the log:
                                 the end the log holds, whoever recorded it), written again
                                 by its archive, and kept ``ttl`` (a day) after each; or a
                                 refused submission under the run id (see below)
    <prefix>task:<task id>       string, JSON, the answer to one ``little.submit_run``
                                 task: accepted (its run id) or refused (why), kept ``ttl``

A record is one JSON object whose first member is always ``status`` (what a script tells a
refusal by)::

    {"status": "completed" | "failed", "runId": ..., "endedAt": ..., "sequence": N,
     "payload": <the end event's payload, as in the log>}
    {"status": "refused", "runId": ... | null, "taskId": ..., "endedAt": ...,
     "payload": {"error": {"name": "SubmissionRefused", "causeCode": ..., "message": ...}}}
    {"status": "accepted", "runId": ..., "taskId": ..., "acceptedAt": ...}

Bounded: an end payload over :data:`PAYLOAD_LIMIT` bytes (an output is inlined in the log up
to 64 KiB; a larger one is an ``outputRef`` already) keeps only its ``outputRef`` and its
error's name, cause and the start of its message, with ``"truncated": true``.

A refusal is written under the run id only while that id is nobody's run: no log, no
claim, no seal, no outcome of a run (a refusal's may be replaced); the run id of a run
already archived and gone from Redis is the caller's to check (S3). An accepted submission
removes a refusal left under its run id before it answers (so once a sender reads
``accepted``, the run's outcome key holds nothing but the run's end), and the run's end
replaces one in any case. Every answer is announced on the stream of ends (``run=<run id or
''>``, ``task=<task id>``), which waiters block on.
"""

from __future__ import annotations

import json
from typing import Any, Final

import redis

from little_dist.world.redis_s3.keys import ENDS_KEPT, ENDS_TTL_MS, KeyLayout
from little_dist.world.redis_s3.redis_calls import LuaScript, execute_pipeline, ms, redis_errors

__all__ = [
    "OUTCOME_TTL_SECONDS",
    "PAYLOAD_LIMIT",
    "REFUSED_PREFIX",
    "RunOutcomes",
]

#: How long a run's outcome stays after its end, and again after its archive (a day).
OUTCOME_TTL_SECONDS: Final = 24 * 3600
#: The largest end payload an outcome keeps whole (bytes): an inline output (64 KiB) and
#: the rest of its payload.
PAYLOAD_LIMIT: Final = 64 * 1024 + 4096
#: What a refusal's record starts with (the status first, always).
REFUSED_PREFIX: Final = '{"status":"refused",'
#: The start of an error message a truncated outcome keeps (bytes, at a character boundary).
_MESSAGE_KEPT: Final = 4096
#: The longest task id answered under ``task:`` (Celery's are 36 characters).
_TASK_ID_MAX: Final = 255

RECORD_END: Final = """
-- KEYS: 1 the run's occurrence hash, 2 its events stream, 3 its outcome key.
-- ARGV: 1 run id, 2 ttl ms, 3 payload limit (bytes), 4 message kept when truncated (bytes).
-- Result: 1 when the outcome was written, 0 when the log holds no end (nothing written).
local seq = redis.call('HGET', KEYS[1], 'run-end')
if not seq then
  return 0
end
local entry = redis.call('XRANGE', KEYS[2], seq .. '-0', seq .. '-0')[1]
if not entry then
  return 0
end
local kind, payload, stamp = nil, '{}', ''
local fields = entry[2]
for i = 1, #fields, 2 do
  if fields[i] == 't' then
    kind = fields[i + 1]
  elseif fields[i] == 'p' then
    payload = fields[i + 1]
  elseif fields[i] == 'r' then
    stamp = fields[i + 1]
  end
end
local status
if kind == 'RunCompleted' then
  status = 'completed'
elseif kind == 'RunFailed' then
  status = 'failed'
else
  return 0
end
if #payload > tonumber(ARGV[3]) then
  -- Too large to keep whole: its reference and the error's gist (strings only, so cjson
  -- prints them as they were).
  local whole = cjson.decode(payload)
  local kept = {truncated = true}
  if type(whole.outputRef) == 'string' then
    kept.outputRef = whole.outputRef
  end
  if type(whole.error) == 'table' then
    local err = {}
    for _, name in ipairs({'name', 'causeCode', 'stepPath'}) do
      if type(whole.error[name]) == 'string' then
        err[name] = whole.error[name]
      end
    end
    local message = whole.error.message
    if type(message) == 'string' then
      local cut = tonumber(ARGV[4])
      if #message > cut then
        -- At a UTF-8 character boundary: drop continuation bytes, then their lead byte.
        while cut > 0 and string.byte(message, cut + 1) and
            string.byte(message, cut + 1) >= 128 and string.byte(message, cut + 1) < 192 do
          cut = cut - 1
        end
        message = string.sub(message, 1, cut)
      end
      err.message = message
    end
    kept.error = err
  end
  payload = cjson.encode(kept)
end
redis.call('SET', KEYS[3], '{"status":"' .. status .. '","runId":"' .. ARGV[1] ..
  '","endedAt":"' .. stamp .. '","sequence":' .. seq .. ',"payload":' .. payload .. '}',
  'PX', ARGV[2])
return 1
"""

RECORD_REFUSAL: Final = (
    """
-- KEYS: 1 the run's outcome key, 2 its events stream, 3 its submitted key, 4 its seal marker.
-- ARGV: 1 the refusal's record (JSON, starting '"""
    + REFUSED_PREFIX
    + """'), 2 ttl ms.
-- Result: 1 when recorded under the run id, 0 when the id is a run's (nothing written).
if redis.call('EXISTS', KEYS[2], KEYS[3], KEYS[4]) > 0 then
  return 0
end
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, """
    + str(len(REFUSED_PREFIX))
    + """) ~= '"""
    + REFUSED_PREFIX
    + """' then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
)

CLEAR_REFUSAL: Final = (
    """
-- KEYS: 1 the run's outcome key. Deletes it when it holds a refusal; 1 if it did.
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, """
    + str(len(REFUSED_PREFIX))
    + """) == '"""
    + REFUSED_PREFIX
    + """' then
  return redis.call('DEL', KEYS[1])
end
return 0
"""
)


class RunOutcomes:
    """The outcome records of runs and the refusals of submissions (see the module
    docstring), ``ttl_seconds`` each."""

    def __init__(
        self, client: redis.Redis, keys: KeyLayout, ttl_seconds: float = OUTCOME_TTL_SECONDS
    ) -> None:
        self._redis = client
        self._keys = keys
        self._ttl_ms = ms(ttl_seconds)
        # Each reads what is there and writes from it: sent twice, it writes the same.
        self._record_end = LuaScript(client, RECORD_END, idempotent=True)
        self._record_refusal = LuaScript(client, RECORD_REFUSAL, idempotent=True)
        self._clear_refusal = LuaScript(client, CLEAR_REFUSAL, idempotent=True)

    def _end_call(self, run_id: str) -> tuple[list[str], list[str | int]]:
        keys = self._keys.run(run_id)
        return (
            [keys.occurrences, keys.events, keys.outcome],
            [run_id, self._ttl_ms, PAYLOAD_LIMIT, _MESSAGE_KEPT],
        )

    def queue_end(self, pipe: Any, run_id: str) -> None:
        """Queue the outcome's write on ``pipe`` (run by ``execute_pipeline``), after the
        append of the run's end: it copies whatever end the log holds then."""
        self._record_end.queue(pipe, *self._end_call(run_id))

    def record_end(self, run_id: str) -> bool:
        """Write the run's outcome from its log now (its archive does, so the record stays
        ``ttl`` after it); whether the log holds an end."""
        with redis_errors(f"outcome of {run_id}"):
            return bool(self._record_end(*self._end_call(run_id)))

    def record_refusal(
        self,
        task_id: str | None,
        run_id: str | None,
        cause: str,
        message: str,
        *,
        recorded_at: str,
    ) -> bool:
        """Answer a refused submission: under ``task:<task_id>`` and, when ``run_id`` is
        given and is nobody's run, under the run id (whether it was), then announce it on
        the stream of ends. One round trip."""
        record: dict[str, Any] = {
            "status": "refused",
            "runId": run_id,
            "taskId": task_id,
            "endedAt": recorded_at,
            "payload": {
                "error": {"name": "SubmissionRefused", "causeCode": cause, "message": message}
            },
        }
        text = _printed(record)
        pipe = self._redis.pipeline(transaction=False)
        if run_id is not None:
            keys = self._keys.run(run_id)
            self._record_refusal.queue(
                pipe,
                [keys.outcome, keys.events, keys.submitted, keys.archived],
                [text, self._ttl_ms],
            )
        self._answer(pipe, task_id, run_id, text)
        with redis_errors(f"refusal of task {task_id}"):
            replies = execute_pipeline(pipe, idempotent=True)
        return run_id is not None and bool(replies[0])

    def record_acceptance(self, task_id: str | None, run_id: str, *, recorded_at: str) -> None:
        """Answer an accepted submission (its run started, or was the same run already):
        a refusal an earlier submission left under ``run_id`` goes first, then the answer
        under ``task:<task_id>``, announced. One round trip."""
        record = {
            "status": "accepted",
            "runId": run_id,
            "taskId": task_id,
            "acceptedAt": recorded_at,
        }
        pipe = self._redis.pipeline(transaction=False)
        self._clear_refusal.queue(pipe, [self._keys.run(run_id).outcome], [])
        self._answer(pipe, task_id, run_id, _printed(record))
        with redis_errors(f"answer to task {task_id}"):
            execute_pipeline(pipe, idempotent=True)

    def _answer(self, pipe: Any, task_id: str | None, run_id: str | None, text: str) -> None:
        if task_id is None or not 0 < len(task_id) <= _TASK_ID_MAX:
            return  # (a direct call, or an id too long to keep: the log line says it)
        pipe.set(self._keys.task(task_id), text, px=self._ttl_ms)
        pipe.xadd(
            self._keys.ends,
            {"run": run_id or "", "task": task_id},
            maxlen=ENDS_KEPT,
            approximate=True,
        )
        pipe.pexpire(self._keys.ends, ENDS_TTL_MS)

    def outcome(self, run_id: str) -> dict[str, Any] | None:
        """The record under ``run_id`` (its end, or a refusal), if any."""
        with redis_errors(f"outcome of {run_id}"):
            found = self._redis.get(self._keys.run(run_id).outcome)
        return _parsed(found)

    def task(self, task_id: str) -> dict[str, Any] | None:
        """The answer to the ``little.submit_run`` task ``task_id`` (accepted or refused)."""
        with redis_errors(f"answer to task {task_id}"):
            found = self._redis.get(self._keys.task(task_id))
        return _parsed(found)


def _printed(record: dict[str, Any]) -> str:
    # Compact, and in the order given: ``status`` first.
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def _parsed(found: Any) -> dict[str, Any] | None:
    if found is None:
        return None
    value = json.loads(found)
    return value if isinstance(value, dict) else None
