"""The sealed gate split (upstream's ``SealPolicy``): which ``gate`` items only the key
holder may see.

No bundle stores the split: it holds role ``gate`` and the key holder computes the partition
at gate time, ``sealed iff BE_uint64(HMAC-SHA256(key, domain ‖ itemSha)[0:8]) < cutoff``.
The card names the key by ``sealKeyId`` (an HMAC of a fixed label under the key), never by
the key or a plain hash of it, so the id is no oracle for a weak key.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

__all__ = ["SEAL_KEY_ID_LABEL", "is_sealed", "seal_key_id"]

SEAL_KEY_ID_LABEL: Final = b"littleworkflow/evalset/seal-key-id/v1"


def seal_key_id(key: bytes) -> str:
    """The card's ``sealPolicy.sealKeyId`` for ``key``."""
    mac = hmac.new(key, SEAL_KEY_ID_LABEL, hashlib.sha256).hexdigest()
    return f"hmac-sha256-id:{mac}"


def is_sealed(key: bytes, domain: str, item_sha: str, cutoff: str) -> bool:
    """Whether the gate item ``item_sha`` is in the sealed part of the split."""
    mac = hmac.new(key, domain.encode() + item_sha.encode(), hashlib.sha256).digest()
    return int.from_bytes(mac[:8], "big") < int(cutoff)
