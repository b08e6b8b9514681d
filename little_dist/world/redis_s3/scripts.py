"""The Lua scripts behind :class:`RedisS3World`: each one is a single atomic step in Redis.

Scripts read the clock with ``redis.call('TIME')`` so lease expiry is judged by one clock, the
Redis server's, whatever the clocks of the machines calling it; a world built with an explicit
``clock`` (tests) passes its time instead. Times are epoch milliseconds.
Results are plain arrays or integers (never ``error_reply``): the Python side decodes them
without catching script errors.
"""

from __future__ import annotations

import json

from little_dist.events import AFTER_END_EVENT_TYPES

__all__ = [
    "ACQUIRE_LEASE",
    "APPEND",
    "END_WITH_LOG",
    "INDEX_VERSION",
    "RELEASE_LEASE",
    "RENEW_LEASE",
    "SEAL_RUN",
    "START_AND_SEND",
    "append_script",
    "start_and_send_script",
]


def _now_ms(arg: int) -> str:
    """Lua setting ``now``: ARGV[arg] when the caller passed a time (tests), else Redis TIME."""
    return f"""
local now = tonumber(ARGV[{arg}])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""


# The event types an ended run's log still takes, as a Lua set.
_AFTER_END_TABLE = (
    "{" + ", ".join(f"[{json.dumps(name)}] = true" for name in AFTER_END_EVENT_TYPES) + "}"
)


# Long on purpose: one Lua script's text, read top to bottom as Redis runs it.
def append_script(*, signal_maxlen: int | None = None, claim: bool = False) -> str:
    """The append script; with ``signal_maxlen``, the variant that also signals each append.

    A world builds its variant once. Whatever is fixed for the world (whether it signals,
    the signal stream's length) is written into the script rather than sent with every
    append: on the hot path each argument costs the client time to encode.

    ``claim``: the variant a submission's start is appended with. It takes no fence; KEYS[4]
    is the run's ``submitted`` key and the head argument before the start flag the submitted
    input's hash,
    claimed (``SET NX GET``) before anything else: when another hash is recorded, nothing is
    appended and the answer is ``{'mismatch', recorded}``. Claim and start in one step.
    """
    signalling = signal_maxlen is not None
    # The head arguments: 4, the run id to signal, the claimed hash, then the start flag.
    head = (5 if signalling else 4) + (1 if claim else 0) + 1
    claiming = ""
    if claim:
        claiming = f"""
local claimed = redis.call('SET', KEYS[4], ARGV[{head - 1}], 'NX', 'GET')
if claimed and claimed ~= ARGV[{head - 1}] then
  return {{'mismatch', claimed}}
end
"""
    signal_key = ", then the signal stream" if signalling else ""
    signal_arg = " 5 the run id to signal ('': a quiet append)," if signalling else ""
    signal = ""
    if signal_maxlen is not None:
        signal = f"""
if ARGV[5] ~= '' then
  redis.call('XADD', KEYS[#KEYS], 'MAXLEN', '~', {int(signal_maxlen)}, '*',
    'run', ARGV[5], 'seq', seq)
end
"""
    return (
        f"""
-- KEYS: 1 events stream, 2 occurrence hash, 3 archived (seal) marker, then the fence's
--       lease hash (or the submitted key) when ARGV[2] is set{signal_key}
-- ARGV: 1 expected last sequence or '', 2 fence: '' or its token, or token@now-in-ms when
--       the world has its own clock (tests; otherwise Redis TIME judges the lease), then
--       '!' to release the lease at the end, then '|' and the holder the lease must have
--       (a token alone is not enough once Redis lost writes and handed it out again),
--       3 guessed first sequence, 4 recordedAt,{signal_arg}
--       (the claimed input hash,) then the start flag: '1' when the run may start here,
--       its id known to have no archive (a new id, or S3 was asked), else '';
--       then per event: type, payload JSON, occurrence id or '', guessed event id
-- Result: last_before (an integer) when every input was appended (input i got
--         last_before + i); {{'ok', last_before, per-event {{kind, sequence, fields}}}}
--         otherwise, with kind 'n' (new), 'e' (already recorded; fields are the stored
--         entry) or 'd' (same occurrence id as an earlier input of this batch; sequence is
--         that input's index); or {{'archived'}}, {{'absent'}} (no log in Redis and no
--         start flag: ask S3 whether the run was archived), {{'ended', {{i, ...}}}} (the run
--         has ended: the indexes of the inputs it refused), {{'fenced'}}, {{'conflict', last}}.
local head = {head}
-- A run without a stream is new, or archived and gone from Redis (Redis keeps nothing of
-- it then): its seal marker says so for a while; after that only S3 knows. So a log is
-- started only by an append whose caller knows the run has no archive; any other is
-- answered 'absent', nothing claimed or appended, and the caller asks S3.
if redis.call('EXISTS', KEYS[1]) == 0 then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    return {{'archived'}}
  end
  if ARGV[head] ~= '1' then
    return {{'absent'}}
  end
end
"""
        + claiming
        + """-- A fence ending in '!' also releases its lease when the script is done (whatever it
-- wrote): an attempt's commit and release in one round trip.
local token, fence_now, release, holder = nil, nil, false, ''
if ARGV[2] ~= '' then
  local bang
  token, fence_now, bang, holder = string.match(ARGV[2], '^(%d+)@?(%d*)(!?)|?(.*)$')
  release = bang == '!'
end
local function done(result)
  if release then
    local held = redis.call('HMGET', KEYS[4], 'token', 'holder')
    if held[1] == token and (holder == '' or held[2] == holder) then
      redis.call('DEL', KEYS[4])
    end
  end
  return result
end
local per = 4
local n = (#ARGV - head) / per
local events = KEYS[1]
local last = redis.call('XLEN', events)
-- Inputs whose occurrence id is already recorded (or repeats an earlier input of this
-- batch) are answered, not appended; results[i] stays nil for the inputs to append.
local results = {}
local fresh = n
local batch = nil
for i = 1, n do
  local occ = ARGV[head + (i - 1) * per + 3]
  if occ ~= '' then
    batch = batch or {}
    if batch[occ] then
      results[i] = {'d', batch[occ], {}}
      fresh = fresh - 1
    else
      batch[occ] = i
      local recorded = redis.call('HGET', KEYS[2], occ)
      if recorded then
        local entry = redis.call('XRANGE', events, recorded .. '-0', recorded .. '-0')
        results[i] = {'e', tonumber(recorded), entry[1][2]}
        fresh = fresh - 1
      end
    end
  end
end
if fresh == 0 then
  return done({'ok', last, results})
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  return done({'archived'})
end
-- The run's end seals its log: no new event of its own after RunCompleted or RunFailed
-- (facts written onto the run after it, AFTER_END_EVENT_TYPES, still come). An end is in
-- the occurrence index under run-end: the engine records it so, and this script indexes an
-- end another writer recorded under another id (or none) there too, below. One HEXISTS.
if redis.call('HEXISTS', KEYS[2], 'run-end') == 1 then
  local refused, own = {}, false
  local after_end = """
        + _AFTER_END_TABLE
        + """
  for i = 1, n do
    if results[i] == nil then
      refused[#refused + 1] = i
      own = own or not after_end[ARGV[head + (i - 1) * per + 1]]
    end
  end
  if own then
    return done({'ended', refused})
  end
end
if token then
  local now = tonumber(fence_now)
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local lease = redis.call('HMGET', KEYS[4], 'token', 'exp', 'holder')
  if lease[1] ~= token or tonumber(lease[2]) <= now or (holder ~= '' and lease[3] ~= holder) then
    return done({'fenced'})
  end
end
if ARGV[1] ~= '' and tonumber(ARGV[1]) ~= last then
  return done({'conflict', last})
end
local guess = tonumber(ARGV[3])
local stamp = ARGV[4]
local seq = last
for i = 1, n do
  if results[i] == nil then
    seq = seq + 1
    local at = head + (i - 1) * per
    local id = seq .. '-0'
    local occ = ARGV[at + 3]
    local kind = ARGV[at + 1]
    if (kind == 'RunCompleted' or kind == 'RunFailed') and occ ~= 'run-end' then
      redis.call('HSETNX', KEYS[2], 'run-end', seq)  -- (a run has one end: see above)
    end
    -- The client hashed the event id for the sequence it guessed; keep it only if right.
    local keep = seq == guess + i - 1
    if occ == '' then
      if keep then
        redis.call('XADD', events, id, 't', ARGV[at + 1], 'p', ARGV[at + 2], 'r', stamp,
          'i', ARGV[at + 4])
      else
        redis.call('XADD', events, id, 't', ARGV[at + 1], 'p', ARGV[at + 2], 'r', stamp)
      end
    else
      redis.call('HSET', KEYS[2], occ, seq)
      if keep then
        redis.call('XADD', events, id, 't', ARGV[at + 1], 'p', ARGV[at + 2], 'r', stamp,
          'o', occ, 'i', ARGV[at + 4])
      else
        redis.call('XADD', events, id, 't', ARGV[at + 1], 'p', ARGV[at + 2], 'r', stamp,
          'o', occ)
      end
    end
    results[i] = {'n', seq, {}}
  end
end
"""
        + signal
        + """if fresh == n then
  return done(last)
end
return done({'ok', last, results})
"""
    )


#: The append script of a world without a signal stream (see :func:`append_script`).
APPEND = append_script()

SEAL_RUN = """
-- KEYS: 1 events stream, 2 archived marker, 3 occurrence hash. Result: the run's last
-- sequence, or -1 if Redis has no events of the run and no seal (a run never written, or
-- archived and gone from Redis: the caller asks S3), or -2 if its log holds no
-- end (no 'run-end' occurrence, and its last event is no RunCompleted or RunFailed): a run
-- whose end a Redis crash lost must stay open to finish again, not be sealed unfinished.
-- Sealing blocks every later append of a new event.
local sealed = redis.call('GET', KEYS[2])
if sealed then
  return tonumber(sealed)
end
local last = redis.call('XLEN', KEYS[1])
if last == 0 then
  return -1
end
if not redis.call('HGET', KEYS[3], 'run-end') then
  local tail = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1][2]
  local kind = nil
  for i = 1, #tail, 2 do
    if tail[i] == 't' then
      kind = tail[i + 1]
    end
  end
  if kind ~= 'RunCompleted' and kind ~= 'RunFailed' then
    return -2
  end
end
redis.call('SET', KEYS[2], last)
return last
"""

ACQUIRE_LEASE = (
    """
-- KEYS: 1 lease hash, 2 token counter (a string; or, with ARGV[5], the hash of the run's
-- counters), 3 with ARGV[5]: the lease's counter of old (a string, taken over once), 4 with
-- ARGV[5]: the run's events stream.
-- ARGV: 1 holder, 2 ttl ms, 3 counter ttl ms, 4 now in ms or '' (Redis TIME), 5 the field
-- of this lease's counter in KEYS[2] or ''. Result: {token, expires ms}, or false if another
-- holds it.
"""
    + _now_ms(4)
    + """
local ttl = tonumber(ARGV[2])
local exp = now + ttl
local cur = redis.call('HMGET', KEYS[1], 'holder', 'token', 'exp')
if cur[1] and tonumber(cur[3]) > now then
  if cur[1] ~= ARGV[1] then
    return false
  end
  redis.call('HSET', KEYS[1], 'exp', string.format('%d', exp))
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {tonumber(cur[2]), exp}
end
local token
if ARGV[5] ~= '' then
  token = redis.call('HINCRBY', KEYS[2], ARGV[5], 1)
  if token == 1 then
    local old = redis.call('GET', KEYS[3])
    if old then
      token = tonumber(old) + 1
      redis.call('HSET', KEYS[2], ARGV[5], token)
      redis.call('DEL', KEYS[3])
    end
  end
else
  token = redis.call('INCR', KEYS[2])
end
local keep = tonumber(ARGV[3])
if ARGV[5] ~= '' then
  -- A run's counters go with its log: once its archive gave the log a TTL, a lease taken
  -- late (a delayed task) does not keep them for ARGV[3] again.
  local left = redis.call('PTTL', KEYS[4])
  if left > 0 then
    keep = math.max(left, ttl)
  end
end
redis.call('PEXPIRE', KEYS[2], keep)
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'token', token, 'exp', string.format('%d', exp))
redis.call('PEXPIRE', KEYS[1], ttl)
return {token, exp}
"""
)

RENEW_LEASE = (
    """
-- KEYS: 1 lease hash. ARGV: 1 holder, 2 token, 3 ttl ms, 4 now in ms or '' (Redis TIME).
-- Result: expires ms, or false if lost.
"""
    + _now_ms(4)
    + """
local cur = redis.call('HMGET', KEYS[1], 'holder', 'token', 'exp')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] or tonumber(cur[3]) <= now then
  return false
end
local ttl = tonumber(ARGV[3])
local exp = now + ttl
redis.call('HSET', KEYS[1], 'exp', string.format('%d', exp))
redis.call('PEXPIRE', KEYS[1], ttl)
return exp
"""
)

RELEASE_LEASE = """
-- KEYS: 1 lease hash. ARGV: 1 holder, 2 token. Deletes the lease only if still ours.
local cur = redis.call('HMGET', KEYS[1], 'holder', 'token')
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""

# The version index of one definition: a list, appended once per version id (LPOS, Redis 6.0.6+).
INDEX_VERSION = """
-- KEYS: 1 the definition's index list. ARGV: 1 version id. Appends it unless present.
if not redis.call('LPOS', KEYS[1], ARGV[1]) then
  redis.call('RPUSH', KEYS[1], ARGV[1])
end
return 1
"""

#: A refused end's marker expires with the run's log (now, when the log is gone from Redis).
END_WITH_LOG = """
-- KEYS: 1 the run's end marker, 2 its stream.
local ttl = redis.call('PTTL', KEYS[2])
if ttl == -2 then
  return redis.call('DEL', KEYS[1])
elseif ttl > 0 then
  return redis.call('PEXPIRE', KEYS[1], ttl)
end
return 0
"""


# Long on purpose: one Lua script's text, read top to bottom as Redis runs it.
def start_and_send_script() -> str:
    """A submission's whole start in one atomic step (one round trip): the claim of its
    input hash, the run's entry among the scheduler's active runs, its first events (the
    start and the first decision) onto an empty log, the run index, and per task of that
    decision its dispatch lease and the task's message pushed on the broker's queue (with
    its ``task-sent`` event published): what ``ActiveRuns.add``, the claiming append, the
    decision's append, :data:`ACQUIRE_LEASE` and Celery's ``send_task`` do one by one, for
    a world, a fleet and a broker on one Redis server.

    Only onto an empty log: a run whose stream exists was submitted before and is answered
    ``{'exists'}`` (after the same claim as the append's: ``{'mismatch', recorded}`` for
    another input), nothing else written; the caller goes the step-by-step way. A run
    without a stream answers ``{'archived'}`` (sealed) or ``{'absent'}`` (no start flag:
    S3 not asked) as the append does, nothing written. Sent again after a lost reply it
    answers ``{'exists'}``: nothing is written twice.
    """
    return (
        """
-- KEYS: 1 events stream, 2 occurrence hash, 3 archived (seal) marker, 4 submitted key,
--       5 run index, 6 active runs set, 7 the run's token counters, then per task:
--       its dispatch lease hash, that lease's counter of old, the queue's list
-- ARGV: 1 run id, 2 input hash, 3 start flag ('1': the run is known to have no archive),
--       4 recordedAt, 5 now in ms or '' (Redis TIME), 6 run index score, 7 event count,
--       8 lease holder, 9 lease ttl ms, 10 counter ttl ms, then per event: type, payload
--       JSON, occurrence id or '', event id; then per task: its counter field, message,
--       the channel of its task-sent event, that event
-- Result: the number of tasks pushed (their leases won), or {'exists'}, {'archived'},
--       {'absent'}, {'mismatch', recorded hash}.
local function claim()
  local claimed = redis.call('SET', KEYS[4], ARGV[2], 'NX', 'GET')
  if claimed and claimed ~= ARGV[2] then
    return claimed
  end
  return nil
end
local events = KEYS[1]
if redis.call('EXISTS', events) == 1 then
  local other = claim()
  if other then
    return {'mismatch', other}
  end
  return {'exists'}
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {'archived'}
end
if ARGV[3] ~= '1' then
  return {'absent'}
end
local other = claim()
if other then
  return {'mismatch', other}
end
redis.call('SADD', KEYS[6], ARGV[1])
local n = tonumber(ARGV[7])
local stamp = ARGV[4]
for i = 1, n do
  local at = 10 + (i - 1) * 4
  local occ = ARGV[at + 3]
  local id = i .. '-0'
  if occ == '' then
    redis.call('XADD', events, id, 't', ARGV[at + 1], 'p', ARGV[at + 2], 'r', stamp,
      'i', ARGV[at + 4])
  else
    redis.call('HSET', KEYS[2], occ, i)
    redis.call('XADD', events, id, 't', ARGV[at + 1], 'p', ARGV[at + 2], 'r', stamp,
      'o', occ, 'i', ARGV[at + 4])
  end
end
redis.call('ZADD', KEYS[5], 'NX', ARGV[6], ARGV[1])
"""
        + _now_ms(5)
        + """
local ttl = tonumber(ARGV[9])
local exp = now + ttl
local base = 10 + n * 4
local sent = 0
for j = 1, (#ARGV - base) / 4 do
  local lease = KEYS[7 + (j - 1) * 3 + 1]
  local at = base + (j - 1) * 4
  local held = redis.call('HMGET', lease, 'holder', 'exp')
  if not (held[1] and tonumber(held[2]) > now) then
    -- The lease, as ACQUIRE_LEASE takes a run's lease (its token from the run's counters).
    local token = redis.call('HINCRBY', KEYS[7], ARGV[at + 1], 1)
    if token == 1 then
      local old = redis.call('GET', KEYS[7 + (j - 1) * 3 + 2])
      if old then
        token = tonumber(old) + 1
        redis.call('HSET', KEYS[7], ARGV[at + 1], token)
        redis.call('DEL', KEYS[7 + (j - 1) * 3 + 2])
      end
    end
    redis.call('PEXPIRE', KEYS[7], tonumber(ARGV[10]))
    redis.call('HSET', lease, 'holder', ARGV[8], 'token', token, 'exp',
      string.format('%d', exp))
    redis.call('PEXPIRE', lease, ttl)
    -- Celery's send_task to a queue on Redis: kombu's LPUSH, then the task-sent event.
    redis.call('LPUSH', KEYS[7 + (j - 1) * 3 + 3], ARGV[at + 2])
    redis.call('PUBLISH', ARGV[at + 3], ARGV[at + 4])
    sent = sent + 1
  end
end
return sent
"""
    )


#: See :func:`start_and_send_script`.
START_AND_SEND = start_and_send_script()
