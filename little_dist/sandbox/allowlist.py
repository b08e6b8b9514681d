"""The bash tool's network allowlist as parsed values, never string prefixes. Pure: no IO.

An entry of upstream's ``allowedUrlPrefixes`` (``network.allow``) is a URL, and it allows what
a reader of it expects, compared part by part:

* **scheme**: ``http`` or ``https``, exactly;
* **host**: exactly (case-insensitive, one trailing dot ignored, Unicode names as IDNA
  A-labels), or ``*.example.org``: any name under ``example.org`` on a label boundary
  (``a.example.org``, ``a.b.example.org``; not ``example.org`` itself, not
  ``badexample.org``). An IP address (``127.0.0.1``, ``[::1]``) is compared as an address.
  ``https://`` alone (what ``network: true`` means) is any host;
* **port**: the one the entry names, else the scheme's (80, 443), exactly;
* **path**: a prefix on a ``/`` boundary (``/v1`` allows ``/v1`` and ``/v1/...``, not
  ``/v1x``), for plain ``http`` only: an ``https`` tunnel is end-to-end encrypted, so its
  path is not seen and the entry's host and port decide.

A bad entry is an error naming it, when the workflow is defined (:func:`parse_entry`): not a
URL, a scheme other than http(s), userinfo (``user@``), a query or fragment, a ``*`` other than
one leading ``*.`` label, a port outside 1-65535, an IPv6 zone, an IPv4 address spelled other
than as four decimal numbers (``0177.0.0.1``, ``2130706433``, ``127.1``: resolvers read them as
addresses, so they are refused rather than guessed), or a dot segment in the path.

A request is parsed the same way (:func:`parse_request_url`, :func:`parse_connect_target`) and
refused (:class:`Refusal`) before anything is resolved when it carries userinfo, a host that
is not a plain name or address, a dot segment in its path (``..``, ``%2e%2e``, ``..;``), or
bytes a server could read differently. Which addresses are public is :func:`is_public`:
private, loopback, link-local, multicast, reserved, shared (CGNAT) and unspecified ranges are
not, and neither is an IPv6 address that embeds such an IPv4 one (mapped, 6to4, NAT64).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from little_dist.errors import InvalidInputError

__all__ = [
    "DEFAULT_PORTS",
    "Address",
    "AllowEntry",
    "AllowlistError",
    "Host",
    "Refusal",
    "Target",
    "is_public",
    "parse_connect_target",
    "parse_entry",
    "parse_request_url",
    "refusal_reason",
]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_LABEL: Final = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_NUMERIC_LABEL: Final = re.compile(r"(?:[0-9]+|0x[0-9a-f]*)")
_UNRESERVED: Final = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
)
# What a request target or an entry may hold: printable ASCII but space, quote, <, >, \, ^, `,
# {, |, } (RFC 3986's characters and `%`).
_URL_CHARS: Final = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*")
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_COMPATIBLE: Final = ipaddress.IPv6Network("::/96")


class AllowlistError(InvalidInputError):
    """An allowlist entry that cannot be read as the URL it must be (the message names it)."""


class Refusal(Exception):
    """Why the proxy refuses a request, and the HTTP status it answers with."""

    def __init__(self, reason: str, status: int = 403) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass(frozen=True, slots=True)
class Host:
    """A host as compared: ``name`` lower-case ASCII without a trailing dot (an IPv6 address
    without brackets), ``address`` set when it is an IP literal."""

    name: str
    address: Address | None = None

    def shown(self) -> str:
        return f"[{self.name}]" if isinstance(self.address, ipaddress.IPv6Address) else self.name


@dataclass(frozen=True, slots=True)
class Target:
    """What a request asks for. ``path`` (normalised, see :func:`parse_request_url`) and
    ``query`` are a plain ``http`` request's; a tunnel has none."""

    scheme: str
    host: Host
    port: int
    path: str | None = None
    query: str | None = None

    def authority(self) -> str:
        return f"{self.host.shown()}:{self.port}"

    def shown(self) -> str:
        """The target as a URL, for messages."""
        port = "" if self.port == DEFAULT_PORTS[self.scheme] else f":{self.port}"
        return f"{self.scheme}://{self.host.shown()}{port}{self.path or ''}"


@dataclass(frozen=True, slots=True)
class AllowEntry:
    """One parsed allowlist entry (see the module docstring). ``host`` None: any host;
    ``wildcard``: ``host`` is a suffix (``*.example.org`` keeps ``example.org``)."""

    text: str
    scheme: str
    host: Host | None
    wildcard: bool
    port: int
    path: str

    def allows_host(self, host: Host) -> bool:
        if self.host is None:
            return True
        if self.wildcard:
            return host.address is None and host.name.endswith("." + self.host.name)
        if self.host.address is not None or host.address is not None:
            return self.host.address == host.address
        return self.host.name == host.name

    def allows_path(self, path: str | None) -> bool:
        if path is None or self.path == "/":
            return True
        prefix = self.path if self.path.endswith("/") else self.path + "/"
        return path == self.path or path.startswith(prefix)

    def allows(self, target: Target) -> bool:
        return (
            self.scheme == target.scheme
            and self.port == target.port
            and self.allows_host(target.host)
            and self.allows_path(target.path)
        )


def parse_entry(text: str) -> AllowEntry:
    """An allowlist entry, or :class:`AllowlistError` saying what is wrong with it."""
    try:
        return _entry(text)
    except ValueError as exc:
        raise AllowlistError(f"allowlist entry {text!r}: {exc}") from None


def _entry(text: str) -> AllowEntry:
    if not isinstance(text, str) or not text:
        raise ValueError("expected a URL such as 'https://api.example.org/v1/'")
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in DEFAULT_PORTS:
        raise ValueError("expected an http:// or https:// URL")
    authority, path = _split_authority(rest)
    if "?" in path or "#" in path:
        raise ValueError("a query or fragment cannot be allowed (remove it)")
    if not authority:
        if path:
            raise ValueError("a URL with a path needs a host")
        return AllowEntry(text, scheme, None, False, DEFAULT_PORTS[scheme], "/")
    if "@" in authority:
        raise ValueError("userinfo (user@) is not allowed in an allowlist entry")
    host_text, port = _split_port(authority, scheme)
    wildcard = host_text.startswith("*.")
    if wildcard:
        host_text = host_text[2:]
    if "*" in host_text:
        raise ValueError("a wildcard must be one leading label: '*.example.org'")
    host = _host(host_text, unicode=True)
    if wildcard and host.address is not None:
        raise ValueError("a wildcard cannot precede an IP address")
    return AllowEntry(text, scheme, host, wildcard, port, _path(path or "/"))


def parse_request_url(url: str) -> Target:
    """The absolute-form target of a plain HTTP request (``http://host[:port]/path?query``),
    or :class:`Refusal`. The path is normalised for comparing and forwarding: escapes of
    unreserved characters decoded, the others upper-cased; a dot segment is refused."""
    if not _URL_CHARS.fullmatch(url):
        raise Refusal(f"{url!r}: not a plain ASCII URL", 400)
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in DEFAULT_PORTS:
        raise Refusal(f"{url}: only absolute http:// URLs go through the proxy", 400)
    if scheme != "http":
        raise Refusal(f"{url}: https:// goes through a CONNECT tunnel, not a plain request", 400)
    authority, path = _split_authority(rest)
    if "#" in path:
        raise Refusal(f"{url}: a fragment does not belong in a request", 400)
    path, _, query = path.partition("?")
    host, port = _request_authority(authority, url, scheme)
    try:
        normal = _path(path or "/")
    except ValueError as exc:
        raise Refusal(f"{url}: {exc}") from None
    return Target(scheme, host, port, normal, query or None)


def parse_connect_target(authority: str) -> Target:
    """The ``host:port`` of a CONNECT request (an HTTPS tunnel), or :class:`Refusal`."""
    if not _URL_CHARS.fullmatch(authority) or not authority:
        raise Refusal(f"CONNECT {authority!r}: not a host:port", 400)
    if ":" not in authority.rpartition("]")[2]:
        raise Refusal(f"CONNECT {authority}: a tunnel needs host:port", 400)
    host, port = _request_authority(authority, authority, "https")
    return Target("https", host, port)


def _request_authority(authority: str, url: str, scheme: str) -> tuple[Host, int]:
    if not authority:
        raise Refusal(f"{url}: no host", 400)
    if "@" in authority:
        raise Refusal(f"{url}: userinfo (user@) in a URL is refused")
    try:
        host_text, port = _split_port(authority, scheme)
        if "*" in host_text:
            raise ValueError("'*' is not a host")
        return _host(host_text, unicode=False), port
    except ValueError as exc:
        raise Refusal(f"{url}: {exc}") from None


def refusal_reason(entries: Iterable[AllowEntry], target: Target) -> str | None:
    """None when an entry allows ``target``, else why not, naming the closest miss."""
    entries = list(entries)
    if any(entry.allows(target) for entry in entries):
        return None
    shown = target.shown()
    what = "URL prefix" if target.path is not None else "https:// URL prefix"
    same_scheme = [e for e in entries if e.scheme == target.scheme]
    same_host = [e for e in same_scheme if e.allows_host(target.host)]
    same_port = [e for e in same_host if e.port == target.port]
    if not same_scheme:
        detail = f"no {target.scheme}:// entry"
    elif not same_host:
        detail = f"host {target.host.shown()} is not allowed"
    elif not same_port:
        ports = ", ".join(str(p) for p in sorted({e.port for e in same_host}))
        detail = f"port {target.port} is not allowed for {target.host.shown()} (allowed: {ports})"
    else:
        paths = ", ".join(sorted({e.path for e in same_port}))
        detail = f"path {target.path} is outside the allowed paths ({paths})"
    return f"{shown} matches no allowed {what}: {detail}"


def is_public(address: Address) -> bool:
    """Whether ``address`` is a public unicast address (see the module docstring)."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return is_public(embedded)
        if address in _IPV4_COMPATIBLE or address.is_site_local:
            return False
    return (
        address.is_global
        and not address.is_multicast
        and not address.is_reserved
        and not address.is_unspecified
    )


def _split_authority(rest: str) -> tuple[str, str]:
    """``host:port`` and what follows it (path, query, fragment) of the part after ``://``."""
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    if any(ch in authority for ch in "\\ \t\r\n") or any(ord(ch) < 0x20 for ch in rest):
        raise ValueError("a URL must not hold spaces, control characters or backslashes")
    return authority, tail


def _split_port(authority: str, scheme: str) -> tuple[str, int]:
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise ValueError("an IPv6 address needs its closing ']'")
        host, rest = authority[: end + 1], authority[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"unexpected {rest!r} after the IPv6 address")
        port_text = rest[1:] if rest else None
    else:
        host, sep, port_text_or = authority.partition(":")
        port_text = port_text_or if sep else None
    if port_text is None:
        return host, DEFAULT_PORTS[scheme]
    if not port_text.isascii() or not port_text.isdigit() or len(port_text) > 5:
        raise ValueError(f"port {port_text!r} is not a number from 1 to 65535")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} is not a number from 1 to 65535")
    return host, port


def _host(text: str, *, unicode: bool) -> Host:
    """A host name or IP literal as compared (see :class:`Host`); ValueError says why not."""
    if text.startswith("["):
        inner = text[1:-1]
        if "%" in inner:
            raise ValueError(f"IPv6 zone in {text!r} is not allowed")
        try:
            v6 = ipaddress.IPv6Address(inner)
        except ValueError:
            raise ValueError(f"{text!r} is not an IPv6 address") from None
        return Host(str(v6), v6)
    if not text:
        raise ValueError("no host")
    if "%" in text:
        raise ValueError(f"host {text!r}: percent-encoding in a host is refused")
    name = text[:-1] if text.endswith(".") else text
    if not name.isascii():
        if not unicode:
            raise ValueError(f"host {text!r}: send an IDNA name (xn--...)")
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise ValueError(
                f"host {text!r} is not a valid internationalised name: {exc}"
            ) from None
    name = name.lower()
    labels = name.split(".")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        try:
            v4 = ipaddress.IPv4Address(name)
        except ValueError:
            raise ValueError(
                f"host {text!r} is not an IPv4 address written as four decimal numbers "
                "(0-255, no leading zeros), and not a name"
            ) from None
        return Host(str(v4), v4)
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"host {text!r} is not a valid host name")
    return Host(name)


def _path(path: str) -> str:
    """A path normalised for comparing (RFC 3986 6.2.2: unreserved escapes decoded, the rest
    upper-cased); ValueError on a dot segment, however spelled, or a bad escape."""
    out: list[str] = []
    i = 0
    while i < len(path):
        ch = path[i]
        if ch == "%":
            code = path[i + 1 : i + 3]
            if len(code) != 2 or not all(c in "0123456789abcdefABCDEF" for c in code):
                raise ValueError("a bad percent-escape in the path")
            byte = int(code, 16)
            out.append(chr(byte) if byte in _UNRESERVED else f"%{code.upper()}")
            i += 3
        else:
            out.append(ch)
            i += 1
    normal = "".join(out)
    if not normal.startswith("/"):
        raise ValueError("the path must start with '/'")
    decoded = re.sub(r"%([0-9A-F]{2})", lambda m: chr(int(m.group(1), 16)), normal).replace(
        "\\", "/"
    )
    if any(segment.split(";")[0] in (".", "..") for segment in decoded.split("/")):
        raise ValueError("a dot segment ('.' or '..', however spelled) in the path is refused")
    return normal
