"""Redis stream entries of a run's log, decoded into events: the hot read path.

The append (:mod:`~little_dist.world.redis_s3.events`) writes each event as one stream entry
with the fields ``t`` (type), ``p`` (payload, canonical JSON), ``r`` (recorded at), and ``o``
(occurrence id) and ``i`` (event id) when it stored them, in that order. Every reader of a run
decodes each of its entries through :func:`decode_entry`; :func:`decode_partly` hands the
fold undecoded entries with only the payloads it reads parsed.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection
from typing import Any, Final

from little_dist.events import Event, recorded_event
from little_dist.ids import event_id_for_payload_json
from little_dist.world.base import UndecodedEvent

__all__ = [
    "MAX_GAPS",
    "decode_entries",
    "decode_entry",
    "decode_partly",
    "entry_type",
    "gaps_around",
]

_parse_payload = json.JSONDecoder().raw_decode


def entry_type(flat: list[bytes]) -> str:
    """The type field of a raw stream entry (``[field, value, ...]``)."""
    if flat and flat[0] == b"t":  # (the append writes it first)
        return flat[1].decode()
    return dict(zip(flat[::2], flat[1::2], strict=True))[b"t"].decode()


def _type_names(types: frozenset[str]) -> frozenset[bytes]:
    """``types`` as the UTF-8 bytes a stream entry holds."""
    return frozenset(t.encode("utf-8") for t in types)


def decode_entry(run_id: str, sequence: int, flat: list[bytes]) -> Event:
    # Every reader of a run decodes each of its entries: the hot read path. ``flat`` is
    # the entry's field-value list as Redis sends it (UTF-8 bytes, not parsed into a
    # dict by redis-py); the payload is the canonical JSON the append wrote, so it
    # parses without a check for trailing text, and the fields are the append's own.
    # The append's own layout is t, p, r, then o and i when it stored them; any other
    # (an entry written by another version) is read by field name.
    size = len(flat)
    occurrence: bytes | None = None
    stored_id: bytes | None = None
    if size >= 6 and flat[0] == b"t" and flat[2] == b"p" and flat[4] == b"r":
        if size == 8 and flat[6] == b"o":
            occurrence = flat[7]
        elif size == 8 and flat[6] == b"i":
            stored_id = flat[7]
        elif size == 10 and flat[6] == b"o" and flat[8] == b"i":
            occurrence, stored_id = flat[7], flat[9]
        elif size != 6:
            return _decode_fields(run_id, sequence, flat)
        return _event(run_id, sequence, flat[1], flat[3], flat[5], occurrence, stored_id)
    return _decode_fields(run_id, sequence, flat)


def _decode_fields(run_id: str, sequence: int, flat: list[bytes]) -> Event:
    """:func:`decode_entry` for an entry in any field order."""
    fields = dict(zip(flat[::2], flat[1::2], strict=True))
    return _event(
        run_id,
        sequence,
        fields[b"t"],
        fields[b"p"],
        fields[b"r"],
        fields.get(b"o"),
        fields.get(b"i"),
    )


def _event(
    run_id: str,
    sequence: int,
    event_type: bytes,
    payload: bytes,
    recorded_at: bytes,
    occurrence: bytes | None,
    stored_id: bytes | None,
) -> Event:
    """The event of one stored entry's field values."""
    kind = event_type.decode()
    payload_json = payload.decode()
    occurrence_id = occurrence.decode() if occurrence is not None else None
    # The id hashes the stored payload as is.
    event_id = (
        stored_id.decode()
        if stored_id is not None
        else event_id_for_payload_json(run_id, sequence, kind, payload_json, occurrence_id)
    )
    return recorded_event(
        event_id,
        run_id,
        sequence,
        kind,
        occurrence_id,
        recorded_at.decode(),
        _parse_payload(payload_json)[0],
    )


def decode_entries(run_id: str, entries: list[Any]) -> list[Event]:
    """Decode raw ``XRANGE`` entries (``[id, [field, value, ...]]``, from ``_raw``)."""
    decode = decode_entry
    return [decode(run_id, int(entry_id.split(b"-", 1)[0]), flat) for entry_id, flat in entries]


def decode_partly(
    run_id: str,
    entries: list[Any],
    decode: frozenset[str],
    skip: Collection[int] = (),
) -> list[Event | UndecodedEvent]:
    """:func:`decode_entries`, except that an entry in the append's own layout is handed
    back as an :class:`UndecodedEvent`, with its payload parsed if its type is in
    ``decode``; and the sequences in ``skip`` are left out."""
    wanted = _type_names(decode)
    out: list[Event | UndecodedEvent] = []
    for entry_id, flat in entries:
        sequence = int(entry_id.split(b"-", 1)[0])
        if skip and sequence in skip:
            continue
        # (the append's own layout starts t, p, r; any other is decoded whole)
        own_layout = len(flat) >= 6 and flat[0] == b"t" and flat[4] == b"r"
        if not own_layout:
            out.append(decode_entry(run_id, sequence, flat))
            continue
        # A folded type's payload is parsed; no event id is derived (hashing the entry
        # when its append guessed the sequence wrong) nor model built: the fold reads
        # neither, and decode() makes the event if anyone asks.
        out.append(
            UndecodedEvent(
                run_id,
                sequence,
                flat[1].decode(),
                flat[5].decode(),
                functools.partial(decode_entry, run_id, sequence, flat),
                _parse_payload(flat[3].decode())[0] if flat[1] in wanted else None,
            )
        )
    return out


#: At most this many ranges are read around the sequences a reader skips; past that, one
#: range from the start (the skipped entries are then read, and dropped undecoded).
MAX_GAPS: Final = 16


def gaps_around(after: int, skip: Collection[int]) -> list[tuple[int, int | None]] | None:
    """The ranges of sequences after ``after`` outside ``skip``, (first, last) with last
    ``None`` for the open end; ``None`` when that takes more than :data:`MAX_GAPS`."""
    gaps: list[tuple[int, int | None]] = []
    start = after + 1
    for sequence in sorted(s for s in skip if s > after):
        if sequence > start:
            if len(gaps) >= MAX_GAPS:
                return None
            gaps.append((start, sequence - 1))
        start = sequence + 1
    gaps.append((start, None))
    return gaps
