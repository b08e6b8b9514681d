"""The bash tool's network allowlist: an egress proxy that is the sandbox's only route out.

The attacks through real workflow runs, as root and as an unprivileged worker, are in
``tests/test_sandbox_egress_attacks.py``; here the parsed allowlist case by case, and the
proxy's bounds measured in this process."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from little_dist.sandbox import Mount
from little_dist.sandbox.bash import BashSession
from little_dist.sandbox.bash_capabilities import BashCapabilities
from little_dist.sandbox.egress import EgressDecision, EgressPolicy, EgressProxy
from tests.egress_sites import SITE_THREAD, serving


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


# The policy: upstream's network capability read as the proxy applies it.


def test_network_true_is_a_tunnel_to_port_443_of_a_public_host() -> None:
    policy = EgressPolicy.from_network(BashCapabilities(network=True).normalized()["network"])
    assert policy.methods == ("GET", "HEAD")
    assert policy.refuses_tunnel("1.1.1.1", 443) is None
    assert "port 8443" in (policy.refuses_tunnel("1.1.1.1", 8443) or "")
    assert "a private address" in (policy.refuses_tunnel("10.0.0.1", 443) or "")
    assert "a private address" in (policy.refuses_tunnel("2001:db8::1", 443) or "")
    assert "no http:// entry" in (policy.refuses_url("GET", "http://1.1.1.1/") or "")


def test_upstream_defaults_methods_to_get_and_head_and_full_access_allows_any() -> None:
    listed = EgressPolicy.from_network({"allowedUrlPrefixes": ["http://h.example"]})
    assert listed.refuses_url("GET", "http://h.example/") is None
    assert "method POST" in (listed.refuses_url("POST", "http://h.example/") or "")
    assert "method get" in (listed.refuses_url("get", "http://h.example/") or "")
    full = EgressPolicy.from_network(
        {"dangerouslyAllowFullInternetAccess": True, "denyPrivateRanges": True}
    )
    assert full.refuses_url("DELETE", "http://1.1.1.1:8080/x") is None
    assert full.refuses_tunnel("1.1.1.1", 22) is None  # arbitrary TCP: dangerous, as named
    assert "a private address" in (full.refuses_tunnel("127.0.0.1", 443) or "")


# The proxy's bounds, measured in this process (the worker): threads and open relays.


def test_the_proxy_holds_no_thread_per_connection_and_closing_it_ends_every_relay(
    tmp_path: Path,
) -> None:
    with serving(socket.AF_INET, "127.0.0.1") as far:
        network = {"allow": [f"https://127.0.0.1:{far.port}"], "denyPrivateRanges": False}
        session = bash(tmp_path, network)
        own = tmp_path / "own"
        program = f"""
import os, socket, time
held, answers = [], []
for _ in range(40):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(b"CONNECT 127.0.0.1:{far.port} HTTP/1.1\\r\\n\\r\\n")
    answers.append(s.recv(200).split(b" ")[1].decode())
    held.append(s)
print(answers.count("200"), answers.count("503"), flush=True)
open("held", "w").close()
while not os.path.exists("release"):
    time.sleep(0.01)
"""
        results: list[dict[str, Any]] = []
        before = _threads()
        runner = threading.Thread(
            target=lambda: results.append(
                session.run({"cmd": f"python3 - <<'EOF'\n{program}\nEOF", "timeoutMs": 120000})
            )
        )
        runner.start()
        try:
            assert _eventually(lambda: (own / "held").exists() or not runner.is_alive())
            during = _threads()
            proxy = session._proxy
            assert proxy is not None
            assert proxy.open_connections() == 32
            assert _eventually(lambda: far.open_connections == 32)  # its accepting thread
            # the runner, run_sandboxed's pipe readers and stdin feeder: no thread a connection
            assert during - before <= 6, (before, during)
            proxy.close()
            assert proxy.open_connections() == 0
            assert _eventually(lambda: far.open_connections == 0)
        finally:
            (own / "release").touch()
            runner.join()
            session.close()
        assert results[0]["stdout"] == "32 8\n", results


def _threads() -> int:
    """Threads of this process but the test site's."""
    return sum(thread.name != SITE_THREAD for thread in threading.enumerate())


def _eventually(condition: Callable[[], bool]) -> bool:
    """Wait for ``condition`` (a bound on the wait, not a claim about speed)."""
    deadline = time.monotonic() + 120
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_flood_of_decisions_is_kept_up_to_a_bound_and_counted() -> None:
    with EgressProxy(EgressPolicy()) as proxy:
        for n in range(1005):
            proxy.note(EgressDecision("GET", f"http://h.example/{n}", n % 2 == 0, "r"))
        kept = proxy.take_decisions()
    assert len(kept) == 1002
    assert kept[999].target == "http://h.example/999"
    assert kept[1000].reason.startswith("3 more requests allowed, not kept")
    assert kept[1001].reason.startswith("2 more requests refused, not kept")
