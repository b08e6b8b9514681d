"""Which callback URLs a submission may name: :func:`check_callback_url`.

A run's callback is a POST the scheduler sends when the run ends (see
:mod:`little_dist.fleet.callbacks`). The URL is checked where it enters (the HTTP API, the
``Client``, ``little submit``) so that a bad one is refused with the submission, not found
out by the scheduler after the run: parsed (never matched by prefix), ``http`` or ``https``
only, a host, no user info (a password in a URL would land in the run's log; the receiver
checks the signature instead), no fragment, at most :data:`MAX_CALLBACK_URL` characters.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

from little_dist.errors import InvalidInputError

__all__ = ["CALLBACK_SCHEMES", "MAX_CALLBACK_URL", "check_callback_url"]

CALLBACK_SCHEMES: Final = ("http", "https")
MAX_CALLBACK_URL: Final = 2048


def check_callback_url(url: object, where: str = "callback_url") -> str:
    """``url`` if a callback may be sent to it, else :class:`InvalidInputError` saying why
    (``where``: what the message names, e.g. ``callbackUrl``)."""
    if not isinstance(url, str) or not url:
        raise InvalidInputError(f"{where}: expected an http(s) URL, got {type(url).__name__}")
    if len(url) > MAX_CALLBACK_URL:
        raise InvalidInputError(f"{where}: longer than {MAX_CALLBACK_URL} characters")
    if any(ch.isspace() or ord(ch) < 0x20 for ch in url):
        raise InvalidInputError(f"{where}: a URL holds no spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port  # (raises on a port that is not a number in range)
    except ValueError as error:
        raise InvalidInputError(f"{where}: not a URL ({error})") from error
    scheme = parts.scheme.lower()
    if scheme not in CALLBACK_SCHEMES:
        shown = scheme or "none"
        raise InvalidInputError(
            f"{where}: the scheme must be http or https, got {shown!r} (a callback is an HTTP POST)"
        )
    if not parts.hostname:
        raise InvalidInputError(f"{where}: the URL names no host")
    if parts.username is not None or parts.password is not None:
        raise InvalidInputError(
            f"{where}: the URL may not carry user info (user:password@); the receiver "
            "checks the webhook signature instead"
        )
    if parts.fragment:
        raise InvalidInputError(f"{where}: the URL may not have a fragment (#...)")
    del port
    return url
