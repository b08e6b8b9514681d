"""The bash tool's network allowlist as parsed values (``little_dist.sandbox.allowlist``):
entries, requests and addresses case by case, odd spellings included. Nothing here resolves a
name or opens a socket: these are the checks made before any DNS."""

from __future__ import annotations

import ipaddress

import pytest

from little_dist import InvalidInputError
from little_dist.sandbox.allowlist import (
    AllowlistError,
    Refusal,
    is_public,
    parse_connect_target,
    parse_entry,
    parse_request_url,
    refusal_reason,
)
from little_dist.sandbox.bash_capabilities import bash_capabilities


@pytest.mark.parametrize(
    ("entry", "scheme", "host", "wildcard", "port", "path"),
    [
        ("https://api.example.org", "https", "api.example.org", False, 443, "/"),
        ("HTTPS://API.Example.ORG./v1/", "https", "api.example.org", False, 443, "/v1/"),
        ("https://*.example.org", "https", "example.org", True, 443, "/"),
        ("http://localhost:1", "http", "localhost", False, 1, "/"),
        ("http://[::1]:8080/x", "http", "::1", False, 8080, "/x"),
        ("http://[::FFFF:127.0.0.1]", "http", "::ffff:7f00:1", False, 80, "/"),
        ("https://bücher.example", "https", "xn--bcher-kva.example", False, 443, "/"),
        ("https://", "https", None, False, 443, "/"),
        ("http://127.0.0.1:65535", "http", "127.0.0.1", False, 65535, "/"),
        (
            "https://api.example.org/%7euser/%2f",
            "https",
            "api.example.org",
            False,
            443,
            "/~user/%2F",
        ),
    ],
)
def test_an_entry_is_parsed_into_its_parts(
    entry: str, scheme: str, host: str | None, wildcard: bool, port: int, path: str
) -> None:
    parsed = parse_entry(entry)
    assert (parsed.scheme, parsed.wildcard, parsed.port, parsed.path) == (
        scheme,
        wildcard,
        port,
        path,
    )
    assert (parsed.host.name if parsed.host else None) == host


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("api.example.org", "http:// or https://"),
        ("ftp://api.example.org", "http:// or https://"),
        ("https://user@api.example.org", "userinfo"),
        ("https://user:pw@api.example.org/", "userinfo"),
        ("https://api.*.org", "wildcard"),
        ("https://*api.example.org", "wildcard"),
        ("https://*", "wildcard"),
        ("https://*.*.example.org", "wildcard"),
        ("https://*.127.0.0.1", "wildcard"),
        ("https://api.example.org:0", "port"),
        ("https://api.example.org:65536", "port"),
        ("https://api.example.org:", "port"),
        ("https://api.example.org:+443", "port"),
        ("https://[fe80::1%25eth0]", "zone"),
        ("https://[::1", "closing"),
        ("http://0177.0.0.1", "four decimal numbers"),
        ("http://2130706433", "four decimal numbers"),
        ("http://127.1", "four decimal numbers"),
        ("http://0x7f.0.0.1", "four decimal numbers"),
        ("http://example.0x7f", "four decimal numbers"),
        ("https://api.example.org/v1/?q=1", "query or fragment"),
        ("https://api.example.org#top", "query or fragment"),
        ("https://api.example.org/a/../b", "dot segment"),
        ("https://api.example.org/a/%2e%2E/b", "dot segment"),
        ("https://exa mple.org", "spaces"),
        ("https://api.example.org\\@evil.net", "backslash"),
        ("https:///v1", "needs a host"),
        ("https://a..b", "not a valid host name"),
        ("https://-a.example", "not a valid host name"),
        ("https://api%2eexample.org", "percent-encoding"),
        ("", "expected a URL"),
    ],
)
def test_a_bad_entry_is_an_error_naming_it(entry: str, says: str) -> None:
    with pytest.raises(AllowlistError) as caught:
        parse_entry(entry)
    assert says in str(caught.value) and repr(entry) in str(caught.value)


def _tunnel(entries: list[str], authority: str) -> str | None:
    try:
        target = parse_connect_target(authority)
    except Refusal as refusal:
        return refusal.reason
    return refusal_reason([parse_entry(entry) for entry in entries], target)


def _request(entries: list[str], url: str) -> str | None:
    try:
        target = parse_request_url(url)
    except Refusal as refusal:
        return refusal.reason
    return refusal_reason([parse_entry(entry) for entry in entries], target)


@pytest.mark.parametrize(
    ("entries", "authority", "says"),
    [
        (["https://api.example.org"], "api.example.org:443", None),
        (["https://api.example.org"], "API.EXAMPLE.ORG.:443", None),
        (["https://api.example.org/v1/"], "api.example.org:443", None),
        (["https://api.example.org"], "api.example.org.attacker.net:443", "host"),
        (["https://api.example.org"], "evilapi.example.org:443", "host"),
        (["https://api.example.org"], "api.example.org:8443", "port 8443"),
        (["https://api.example.org"], "api.example.org:4430", "port 4430"),
        (["https://api.example.org:8443"], "api.example.org:443", "port 443"),
        (["http://api.example.org"], "api.example.org:443", "no https:// entry"),
        (["https://*.example.org"], "a.example.org:443", None),
        (["https://*.example.org"], "a.b.example.org:443", None),
        (["https://*.example.org"], "example.org:443", "host"),
        (["https://*.example.org"], "badexample.org:443", "host"),
        (["https://*.example.org"], "a.example.org.evil:443", "host"),
        (["https://"], "anything.example:443", None),
        (["https://"], "anything.example:22", "port 22"),
        (["https://[::1]:8443"], "[::1]:8443", None),
        (["https://[::1]:8443"], "[0:0::1]:8443", None),
        (["https://127.0.0.1"], "[::ffff:127.0.0.1]:443", "host"),
        (["https://"], "[::1%eth0]:443", "zone"),
        (["https://"], "2130706433:443", "four decimal numbers"),
        (["https://"], "0177.0.0.1:443", "four decimal numbers"),
        (["https://"], "127.1:443", "four decimal numbers"),
        (["https://"], "api.example.org", "host:port"),
        (["https://"], "api.example.org:0", "port"),
        (["https://"], "api.example.org:65536", "port"),
        (["https://"], "user@api.example.org:443", "userinfo"),
        (["https://"], "bücher.example:443", "not a host:port"),
        (["https://bücher.example"], "xn--bcher-kva.example:443", None),
        (["https://"], "a/b:443", "not a valid host name"),
    ],
)
def test_which_tunnels_an_allowlist_allows(
    entries: list[str], authority: str, says: str | None
) -> None:
    """(No name is resolved here: these are the checks made before any DNS.)"""
    reason = _tunnel(entries, authority)
    if says is None:
        assert reason is None
    else:
        assert reason is not None and says in reason, reason


@pytest.mark.parametrize(
    ("entries", "url", "says"),
    [
        (["http://localhost"], "http://localhost/", None),
        (["http://localhost"], "http://LOCALHOST./x", None),
        (["http://localhost"], "http://localhost@127.0.0.1:18777/", "userinfo"),
        (["http://localhost"], "http://localhost:18777/", "port 18777"),
        (["http://localhost:1"], "http://localhost:18777/", "port 18777"),
        (["http://localhost:1"], "http://localhost:1/", None),
        (["http://h.example/v1"], "http://h.example/v1", None),
        (["http://h.example/v1"], "http://h.example/v1/", None),
        (["http://h.example/v1"], "http://h.example/v1/x?q=../..", None),
        (["http://h.example/v1"], "http://h.example/%76%31/x", None),
        (["http://h.example/v1"], "http://h.example/v1x", "path /v1x"),
        (["http://h.example/v1/"], "http://h.example/v1", "path /v1"),
        (["http://h.example/v1"], "http://h.example/v1/../admin", "dot segment"),
        (["http://h.example/v1"], "http://h.example/v1/%2E%2e/admin", "dot segment"),
        (["http://h.example/v1"], "http://h.example/v1/..%2Fadmin", "dot segment"),
        (["http://h.example/v1"], "http://h.example/v1/..%5cadmin", "dot segment"),
        (["http://h.example/v1"], "http://h.example/v1/..;/admin", "dot segment"),
        (["http://h.example/v1"], "http://h.example/v1/%zz", "percent-escape"),
        (["http://h.example"], "http://h.example\\@evil/", "not a plain ASCII URL"),
        (["http://h.example"], "http://h.example/#frag", "fragment"),
        (["http://h.example"], "https://h.example/", "CONNECT"),
        (["http://h.example"], "/relative", "absolute"),
        (["http://[::1]:8080"], "http://[::1]:8080/", None),
        (["https://h.example"], "http://h.example/", "no http:// entry"),
    ],
)
def test_which_plain_requests_an_allowlist_allows(
    entries: list[str], url: str, says: str | None
) -> None:
    reason = _request(entries, url)
    if says is None:
        assert reason is None
    else:
        assert reason is not None and says in reason, reason


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("1.1.1.1", True),
        ("2606:4700:4700::1111", True),
        ("::ffff:1.1.1.1", True),
        ("2002:101:101::1", True),
        ("64:ff9b::101:101", True),
        ("10.0.0.1", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("127.0.0.1", False),
        ("169.254.169.254", False),
        ("100.64.0.1", False),
        ("224.0.0.1", False),
        ("240.0.0.1", False),
        ("0.0.0.0", False),
        ("255.255.255.255", False),
        ("192.0.2.1", False),
        ("::1", False),
        ("::", False),
        ("fe80::1", False),
        ("fc00::1", False),
        ("fec0::1", False),
        ("ff02::1", False),
        ("ff0e::1", False),
        ("2001:db8::1", False),
        ("::ffff:127.0.0.1", False),
        ("::ffff:169.254.169.254", False),
        ("2002:7f00:1::1", False),
        ("2002:a00:1::1", False),
        ("64:ff9b::7f00:1", False),
        ("::7f00:1", False),
    ],
)
def test_which_addresses_are_public(address: str, public: bool) -> None:
    assert is_public(ipaddress.ip_address(address)) is public


def test_a_bad_entry_is_refused_when_the_workflow_is_defined() -> None:
    with pytest.raises(InvalidInputError) as caught:
        bash_capabilities({"network": {"allow": ["https://ok.example", "https://u@x.example"]}})
    assert "bash.network.allow[1]" in str(caught.value)
    assert "'https://u@x.example'" in str(caught.value) and "userinfo" in str(caught.value)
    with pytest.raises(InvalidInputError, match=r"methods\[0\]: 'GET /' is not an HTTP method"):
        bash_capabilities({"network": {"allow": ["https://ok.example"], "methods": ["GET /"]}})
