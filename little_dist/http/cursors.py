"""``GET /v1/runs`` pages: a cursor names the last run of a page (its start and id, the
listing's order), so the next page starts after it whatever was started meanwhile.

The cursor is opaque to callers (URL-safe base64 of JSON); one that does not decode is a
400 problem naming the ``cursor`` query parameter.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Final, Literal

from little_dist.http.problems import Problem
from little_dist.report.runs import RunSummary

__all__ = ["MAX_PAGE", "PAGE", "RunStatusWord", "decode_cursor", "encode_cursor"]

PAGE: Final = 50
MAX_PAGE: Final = 200
RunStatusWord = Literal["running", "completed", "failed", "cancelled"]


def encode_cursor(last: RunSummary) -> str:
    raw = json.dumps([last.started_at, last.run_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        started_at, run_id = json.loads(raw)
        if isinstance(started_at, str) and isinstance(run_id, str):
            return started_at, run_id
    except (binascii.Error, ValueError, TypeError):
        pass
    detail = "the cursor is not one a page of GET /v1/runs gave (its nextCursor)"
    raise Problem(400, detail, errors=[{"query": "cursor", "detail": detail}])
