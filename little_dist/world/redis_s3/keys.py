"""Where :class:`RedisS3World` keeps things: Redis key names and S3 object keys.

Every Redis key that belongs to a run carries the run id as a hash tag (``{run_...}``), so
the events stream, the occurrence index, the archive marker, the hot-artifact set and the
run's leases all live in one cluster slot and one Lua script may touch them together::

    <prefix>{run_x}:events        stream, entry id "<sequence>-0" (the id IS the sequence)
    <prefix>{run_x}:occ           hash occurrenceId -> sequence
    <prefix>{run_x}:archived      string, the last sequence; set once the log is sealed,
                                  expires with the run's stream (a little after it)
    <prefix>{run_x}:artifacts     set of the run's artifact ids held in the hot tier
    <prefix>{run_x}:submitted     string, the input hash the run was first submitted with
                                  (SET NX: concurrent submitters agree on one); expires
                                  with the run's stream
    <prefix>{run_x}:ended         string "1", set with the run's RunCompleted or RunFailed
                                  (a hint; the log is the truth); expires with the log
    <prefix>{run_x}:outcome       string, JSON: how the run ended (a copy of its end, kept
                                  a day after its archive), or a refused submission under
                                  its id (see .outcomes)
    <prefix>ended                 stream, one entry ``run=<run id>`` per run end (and
                                  ``run=, task=`` per answered submission): what waiters
                                  for an end block on (one stream for every run, so no
                                  run keeps a stream of its own for it); capped at about a
                                  thousand entries and gone a minute after the last end
    <prefix>task:<task id>        string, JSON: the answer to a ``little.submit_run``
                                  task (accepted, its run id; or refused, why), kept a
                                  day (see .outcomes)
    <prefix>art:<artifactId>      hash, a small artifact of a live run (hot tier): field
                                  ``manifest`` (its manifest JSON, as in S3) and ``data``
                                  (the stored bytes); copied to S3 by the run's archive,
                                  then expired with the run's stream. Named by the id alone
                                  (a reader has only the ref), so not in the run's slot
    <prefix>lease:<name>          hash holder / token / exp (ms, Redis server clock)
    <prefix>lease-token:<name>    counter behind the fencing tokens (INCR, only grows) of a
                                  lease that belongs to no run
    <prefix>{run_x}:tokens        hash lease name -> the counter behind its fencing tokens,
                                  for the run's leases (named ``{run_x}:...``): one key per
                                  run, which expires with the run's log after its archive
    <prefix>version:<id>          sha256 of the registered version document (the CAS)
    <prefix>runs                  sorted set of run ids not archived yet, by first append
                                  (the index behind list_unarchived_run_ids; with the
                                  archives in S3, behind list_run_ids)

Once a run's keys expired after its archive, Redis holds nothing of it but its outcome
(a day longer): the archive in S3 is the only record of its log (see .events for how an
append learns that).

S3 (under an optional object-key prefix)::

    blobs/sha256/<hex>            artifact bytes, content-addressed, put-if-absent
    manifests/<artifactId>.json   artifact manifests, immutable, put-if-absent
    versions/<id>.json            workflow version documents, immutable, put-if-absent
    version-parts/<hex>.json      what the fleet's versions of one workflow share (the LWIR,
                                  the input-independent lock), by the sha256 of its
                                  canonical JSON, put-if-absent (see little_dist.fleet.versions)
    archives/<run_id>.ndjson      a sealed run's whole log, one ``Event.to_json()`` a line
    late/<run_id>/<sha256>.ndjson the run's late record: model-usage events an append
                                  refused because the run had ended, one
                                  ``LateEvent.to_json()`` a line (named by the hash of what
                                  they record, so a retried refusal writes nothing new)
"""

from __future__ import annotations

from dataclasses import dataclass

from little_dist.errors import InvalidInputError
from little_dist.world.fleet_keys import run_lease_key

__all__ = ["ENDS_KEPT", "ENDS_TTL_MS", "KeyLayout", "RunKeys", "lease_key_for"]

#: The stream of ends: entries kept (about), and how long it stays after the last entry.
ENDS_KEPT = 1000
ENDS_TTL_MS = 60_000


# Lease names of a run: built by the world-neutral helper, kept here under its old name.
lease_key_for = run_lease_key


@dataclass(frozen=True)
class RunKeys:
    events: str
    occurrences: str
    archived: str
    artifacts: str
    ended: str
    submitted: str
    tokens: str
    outcome: str


@dataclass(frozen=True)
class KeyLayout:
    """Key names under one Redis key prefix and one S3 object-key prefix."""

    redis_prefix: str = "little:"
    s3_prefix: str = ""

    def __post_init__(self) -> None:
        # A brace in the prefix would become the hash tag and put every run in one slot.
        if "{" in self.redis_prefix or "}" in self.redis_prefix:
            raise InvalidInputError(
                f"Invalid Redis key prefix {self.redis_prefix!r}: it must not contain braces"
            )

    # -- Redis ----------------------------------------------------------------------------
    def run(self, run_id: str) -> RunKeys:
        tagged = f"{self.redis_prefix}{{{run_id}}}"
        return RunKeys(
            events=f"{tagged}:events",
            occurrences=f"{tagged}:occ",
            archived=f"{tagged}:archived",
            artifacts=f"{tagged}:artifacts",
            ended=f"{tagged}:ended",
            submitted=f"{tagged}:submitted",
            tokens=f"{tagged}:tokens",
            outcome=f"{tagged}:outcome",
        )

    def lease(self, name: str) -> tuple[str, str]:
        """The lease hash and its token counter, always in the same cluster slot."""
        # A name without a hash tag of its own gets one, so the pair shares a slot.
        tagged = name if "{" in name else f"{{{name}}}"
        return f"{self.redis_prefix}lease:{tagged}", f"{self.redis_prefix}lease-token:{tagged}"

    def lease_counter(self, name: str) -> tuple[str, str]:
        """Where a lease's fencing tokens are counted: ``(hash, field)`` for a lease of a run
        (named ``{run_x}:...``: the run's ``tokens`` hash, which goes with the run), else
        ``(counter, "")``, its own counter (see :meth:`lease`)."""
        if name.startswith("{run_") and "}" in name:
            tag = name[1 : name.index("}")]
            return self.run(tag).tokens, name
        return self.lease(name)[1], ""

    def hot_artifact(self, artifact_id: str) -> str:
        """The Redis hash of a small artifact of a live run (``manifest``, ``data``)."""
        return f"{self.redis_prefix}art:{artifact_id}"

    def version(self, version_id: str) -> str:
        return f"{self.redis_prefix}version:{version_id}"

    def task(self, task_id: str) -> str:
        """Where the answer to the ``little.submit_run`` task ``task_id`` is kept."""
        return f"{self.redis_prefix}task:{task_id}"

    @property
    def ends(self) -> str:
        """The stream every run's end is announced on (see the module docstring)."""
        return f"{self.redis_prefix}ended"

    @property
    def run_index(self) -> str:
        return f"{self.redis_prefix}runs"

    # -- S3 -------------------------------------------------------------------------------
    def blob(self, sha256_hex: str) -> str:
        return f"{self.s3_prefix}blobs/sha256/{sha256_hex}"

    def manifest(self, artifact_id: str) -> str:
        return f"{self.s3_prefix}manifests/{artifact_id}.json"

    def version_document(self, version_id: str) -> str:
        return f"{self.s3_prefix}versions/{version_id}.json"

    def version_part(self, sha256_hex: str) -> str:
        return f"{self.s3_prefix}version-parts/{sha256_hex}.json"

    def archive(self, run_id: str) -> str:
        return f"{self.s3_prefix}archives/{run_id}.ndjson"

    def late_prefix(self, run_id: str) -> str:
        return f"{self.s3_prefix}late/{run_id}/"

    def late(self, run_id: str, sha256_hex: str) -> str:
        return f"{self.late_prefix(run_id)}{sha256_hex}.ndjson"
