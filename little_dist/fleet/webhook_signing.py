"""The signature of a run's callback, as Standard Webhooks (and Stripe, Svix) sign theirs.

Three headers go with every POST:

* ``webhook-id``: the delivery's id (the same on every retry of one run end: a receiver
  that saw it already answers 2xx and does nothing);
* ``webhook-timestamp``: seconds since the epoch when this attempt was signed (a receiver
  refuses one too far from its clock: a replay);
* ``webhook-signature``: ``v1,`` + base64 of HMAC-SHA256 over ``{id}.{timestamp}.{body}``
  with the secret.

The secret is ``LITTLE_CALLBACK_SECRET``: a ``whsec_`` + base64 secret is the bytes it
encodes (as Standard Webhooks hands them out); any other text is its UTF-8 bytes.
:func:`verify` is what a receiver written in Python runs (the tests use it); the check is
constant-time.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Final

from little_dist.errors import InvalidInputError

__all__ = ["SIGNATURE_VERSION", "TOLERANCE_S", "secret_bytes", "sign", "verify"]

SIGNATURE_VERSION: Final = "v1"
#: How far a timestamp may be from the receiver's clock (seconds).
TOLERANCE_S: Final = 300
_PREFIX: Final = "whsec_"


def secret_bytes(secret: str) -> bytes:
    """The key of ``secret`` (see the module docstring)."""
    if not secret:
        raise InvalidInputError("the callback secret is empty")
    if secret.startswith(_PREFIX):
        try:
            return base64.b64decode(secret[len(_PREFIX) :], validate=True)
        except binascii.Error as error:
            raise InvalidInputError(
                "a whsec_ callback secret must be base64 after the prefix"
            ) from error
    return secret.encode("utf-8")


def _digest(key: bytes, webhook_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode("ascii")


def sign(secret: str, webhook_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers of one attempt (see the module docstring)."""
    signature = _digest(secret_bytes(secret), webhook_id, timestamp, body)
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": f"{SIGNATURE_VERSION},{signature}",
    }


def verify(
    secret: str, headers: dict[str, str], body: bytes, *, now: float, tolerance: int = TOLERANCE_S
) -> bool:
    """Whether ``headers`` (lower-case names) sign ``body`` with ``secret`` within
    ``tolerance`` seconds of ``now``. The signature header may list several
    space-separated signatures (a secret being rotated): one match is enough."""
    webhook_id = headers.get("webhook-id")
    stamp = headers.get("webhook-timestamp", "")
    if not webhook_id or not stamp.isdigit() or abs(now - int(stamp)) > tolerance:
        return False
    expected = _digest(secret_bytes(secret), webhook_id, int(stamp), body)
    for item in headers.get("webhook-signature", "").split():
        version, _, signature = item.partition(",")
        if version == SIGNATURE_VERSION and hmac.compare_digest(signature, expected):
            return True
    return False
