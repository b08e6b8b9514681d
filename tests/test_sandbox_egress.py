"""The bash tool's network allowlist: an egress proxy that is the sandbox's only route out."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from little_dist.bash_capabilities import BashCapabilities
from little_dist.sandbox import Mount
from little_dist.sandbox.bash import BashSession
from little_dist.sandbox.egress import EgressPolicy


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello from {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def site() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def bash(tmp_path: Path, network: Any) -> BashSession:
    own = tmp_path / "own"
    own.mkdir(exist_ok=True)
    return BashSession(
        [Mount(own, "/mnt/scratch/own", writable=True)],
        "/mnt/scratch/own",
        capabilities=BashCapabilities(network=network),
    )


def curl(session: BashSession, *args: str) -> dict[str, Any]:
    return session.run({"cmd": "curl -sS --max-time 10 " + " ".join(args)})


def test_an_allowed_prefix_goes_out_and_everything_else_is_refused(
    tmp_path: Path, site: str
) -> None:
    session = bash(tmp_path, {"allow": [f"{site}/ok/"], "denyPrivateRanges": False})
    try:
        allowed = curl(session, f"{site}/ok/page")
        assert allowed["exitCode"] == 0 and allowed["stdout"] == "hello from /ok/page\n"
        assert [d.allowed for d in session.last_egress] == [True]
        refused = curl(session, f"{site}/secret")
        assert "matches no allowed URL prefix" in refused["stdout"]
        (decision,) = session.last_egress
        assert not decision.allowed and decision.target == f"{site}/secret"
    finally:
        session.close()


def test_methods_outside_the_allowlist_are_refused(tmp_path: Path, site: str) -> None:
    session = bash(
        tmp_path, {"allow": [f"{site}/"], "methods": ["GET"], "denyPrivateRanges": False}
    )
    try:
        assert curl(session, f"{site}/x")["stdout"] == "hello from /x\n"
        posted = curl(session, "-X POST -d a=1", f"{site}/x")
        assert "method POST is not allowed" in posted["stdout"]
    finally:
        session.close()


def test_private_addresses_are_refused_unless_allowed(tmp_path: Path, site: str) -> None:
    session = bash(tmp_path, {"allow": [f"{site}/"]})  # denyPrivateRanges defaults to true
    try:
        refused = curl(session, f"{site}/x")
        assert "127.0.0.1 resolves to 127.0.0.1, a private address" in refused["stdout"]
    finally:
        session.close()


def test_https_goes_only_to_allowed_hosts_and_nothing_bypasses_the_proxy(
    tmp_path: Path, site: str
) -> None:
    session = bash(tmp_path, True)  # upstream's true: https:// GET and HEAD, private denied
    try:
        private = curl(session, "https://" + site.removeprefix("http://") + "/")
        assert private["exitCode"] != 0
        (decision,) = session.last_egress
        assert decision.method == "CONNECT" and "a private address" in decision.reason
        plain = curl(session, "http://example.com/")
        assert "matches no allowed URL prefix" in plain["stdout"]
        direct = session.run(
            {"cmd": "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), 2)\""}
        )
        assert "Network is unreachable" in direct["stderr"]
        bypass = curl(session, "--noproxy '*'", "http://1.1.1.1/")
        assert bypass["exitCode"] != 0 and session.last_egress == []
    finally:
        session.close()


def test_a_tunnel_to_a_host_off_the_allowlist_is_refused(tmp_path: Path) -> None:
    session = bash(tmp_path, {"allow": ["https://api.example.com/v1/"]})
    try:
        refused = curl(session, "https://evil.example.net/")
        assert refused["exitCode"] != 0
        (decision,) = session.last_egress
        assert decision.method == "CONNECT" and not decision.allowed
        assert "matches no allowed https:// URL prefix" in decision.reason
    finally:
        session.close()


@pytest.mark.parametrize(
    ("prefix", "host", "port", "allowed"),
    [
        ("https://api.example.com/v1/", "api.example.com", 443, True),
        ("https://api.example.com/v1/", "API.example.com", 443, True),
        ("https://api.example.com/v1/", "api.example.com.evil.net", 443, False),
        ("https://api.example.com/v1/", "api.example.com", 8443, False),
        ("https://api.example.com:8443/", "api.example.com", 8443, True),
        ("https://", "anything.example.org", 443, True),
        ("http://api.example.com/", "api.example.com", 443, False),
    ],
)
def test_which_tunnels_a_prefix_allows(prefix: str, host: str, port: int, allowed: bool) -> None:
    policy = EgressPolicy(prefixes=(prefix,))
    assert (policy.refuses_tunnel(host, port) is None) is allowed
