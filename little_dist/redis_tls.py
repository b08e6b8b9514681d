"""TLS to Redis: a ``rediss://`` URL and its ``ssl_*`` options, checked and handed on.

A fleet URL (``LITTLE_REDIS_URL``, ``LITTLE_BROKER_URL``, ``LITTLE_WORLD``) states its TLS in
its query, with the names redis-py and kombu both read::

    rediss://little:PASSWORD@redis:6380/0?ssl_cert_reqs=required&ssl_ca_certs=/etc/little/ca.pem

=====================  ====================================================================
``ssl_cert_reqs``      ``required``, ``optional`` or ``none``: whether the server's
                       certificate is verified. Every ``rediss://`` URL must say it.
``ssl_ca_certs``       a CA bundle file that signs the server's certificate (default: the
                       system's CAs); ``ssl_ca_path``: a directory of them
``ssl_certfile``,      a client certificate and its key (Redis ``tls-auth-clients yes``),
``ssl_keyfile``        both or neither
``ssl_check_hostname`` ``true`` or ``false``: whether the certificate must name the host
=====================  ====================================================================

Why ``ssl_cert_reqs`` is required: redis-py verifies by default, but kombu (the broker,
Flower) given a ``rediss://`` URL without it connects *without* verifying the server
(``CERT_NONE``, with a warning). Naming it makes every client agree. redis-py reads the
options from the URL wherever the fleet opens Redis; :func:`broker_use_ssl` gives the same
options to Celery's ``broker_use_ssl``. There is no result backend, so no
``redis_backend_use_ssl``.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit

__all__ = ["CERT_REQS", "TLS_OPTIONS", "broker_use_ssl", "tls_problems"]

CERT_REQS: Final = {
    "required": ssl.CERT_REQUIRED,
    "optional": ssl.CERT_OPTIONAL,
    "none": ssl.CERT_NONE,
}
_FILES: Final = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
TLS_OPTIONS: Final = frozenset({"ssl_cert_reqs", "ssl_ca_path", "ssl_check_hostname", *_FILES})
_BOOLEANS: Final = {"true": True, "false": False}


def _ssl_query(url: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    options = {
        k: v for k, v in parse_qsl(parts.query, keep_blank_values=True) if k.startswith("ssl_")
    }
    return parts.scheme.lower(), options


def tls_problems(url: str) -> list[str]:
    """What is wrong with ``url``'s TLS options, one phrase each (nothing: all is well)."""
    scheme, options = _ssl_query(url)
    if scheme != "rediss":
        if options and scheme in ("redis", "unix"):
            return [
                f"{', '.join(sorted(options))} given, but TLS needs a rediss:// URL "
                "(redis:// connects in the clear)"
            ]
        return []
    problems = [
        f"unknown TLS option {name} (expected {', '.join(sorted(TLS_OPTIONS))})"
        for name in sorted(set(options) - TLS_OPTIONS)
    ]
    reqs = options.get("ssl_cert_reqs")
    if reqs is None:
        problems.append(
            "a rediss:// URL needs ssl_cert_reqs=required (or optional, none) in its query: "
            "without it the broker and Flower do not check the server's certificate"
        )
    elif reqs not in CERT_REQS:
        problems.append(f"ssl_cert_reqs={reqs!r}: expected required, optional or none")
    for name in _FILES:
        path = options.get(name)
        if path is not None and not Path(path).is_file():
            problems.append(f"{name}={path!r}: no such file")
    ca_path = options.get("ssl_ca_path")
    if ca_path is not None and not Path(ca_path).is_dir():
        problems.append(f"ssl_ca_path={ca_path!r}: no such directory")
    if ("ssl_certfile" in options) != ("ssl_keyfile" in options):
        problems.append("ssl_certfile and ssl_keyfile go together (a client certificate)")
    check = options.get("ssl_check_hostname")
    if check is not None and check.lower() not in _BOOLEANS:
        problems.append(f"ssl_check_hostname={check!r}: expected true or false")
    return problems


def broker_use_ssl(url: str) -> dict[str, Any] | None:
    """Celery's ``broker_use_ssl`` for a checked ``rediss://`` broker URL (``None`` for
    any other URL)."""
    scheme, options = _ssl_query(url)
    if scheme != "rediss":
        return None
    found: dict[str, Any] = {"ssl_cert_reqs": CERT_REQS[options.get("ssl_cert_reqs", "required")]}
    for name in (*_FILES, "ssl_ca_path"):
        if name in options:
            found[name] = options[name]
    if "ssl_check_hostname" in options:
        found["ssl_check_hostname"] = _BOOLEANS[options["ssl_check_hostname"].lower()]
    return found
