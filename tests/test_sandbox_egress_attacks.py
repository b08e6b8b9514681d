"""A model tries to get past the bash tool's network allowlist, in real workflow runs, by a worker
that is root and by one that is an ordinary user (:mod:`tests.attack_runs`).

The allowlist is compared as parsed values (scheme, host on a label boundary, port, path on a
``/`` boundary), never as string prefixes; ``network: true`` is HTTPS to port 443 of public
hosts; the proxy is bounded (connections per command, the size and time of a request head);
nothing the proxy needs runs inside the sandbox (a bare ``wait`` returns, ``python: false``
leaves no interpreter). No test needs DNS for a public name: each refusal below happens before
any name is resolved, and each allowed request goes to a server this test runs on the host's
loopback. No assertion is about time: where a bound is a time (the head's), the test sets it
low and checks what the proxy did and said, not how long it took.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.attack_runs import AttackRun, attacker, attacker_folder, bash_steps, run_attack
from tests.egress_sites import Site, serving

__all__ = ["attacker", "attacker_folder"]  # the fixtures, for pytest

PROXY = "127.0.0.1/3128"  # where the sandbox's proxy listens, as bash's /dev/tcp spells it


@pytest.fixture
def site() -> Iterator[Site]:
    """The IPv4 site, on a port whose digits start with 1 (``http://localhost:1`` must not
    allow it)."""
    with serving(socket.AF_INET, "127.0.0.1", range(10000, 20000, 7)) as found:
        yield found


@pytest.fixture
def site6() -> Iterator[Site]:
    with serving(socket.AF_INET6, "::1") as found:
        yield found


def _attack(
    workflow: str,
    commands: list[dict[str, Any]],
    attacker: str,
    folder: Path,
    env: dict[str, str] | None = None,
) -> tuple[AttackRun, list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """Run the commands in the ``attack`` step of ``tests.egress_app:workflow``: the run,
    what each command returned to the model, and each command's egress decisions."""
    run = run_attack(
        f"tests.egress_app:{workflow}",
        bash_steps(commands),
        attacker=attacker,
        folder=folder,
        env=env,
    )
    assert run.status == "completed" and run.output == "alive", run.stderr[-3000:]
    seen = run.results("attack")
    assert len(seen) == len(commands)
    decisions = [end["egress"] for end in run.ends("attack")]
    return run, seen, decisions


def _raw(request: str, port: int | None = None, *, until: str | None = None) -> str:
    """A shell command that sends ``request`` (``\\r\\n`` spelled as in printf) to the proxy
    as it is, bypassing any client's URL parsing, and prints the answer: to its end, or to
    the line holding ``until`` (a tunnel stays open: no waiting out the 10 s for it)."""
    text = request if port is None else request.replace("PORT", str(port))
    read = "cat" if until is None else f"sed '/{until}/q'"
    return f"exec 3<>/dev/tcp/{PROXY}; printf '{text}' >&3; timeout 10 {read} <&3; echo; echo end"


def _refused_by_policy(decision: dict[str, Any], *words: str) -> None:
    """Refused by the allowlist, before any connection was tried: not a connection failure."""
    assert decision["allowed"] is False, decision
    reason = decision["reason"]
    assert "cannot connect" not in reason, decision
    for word in words:
        assert word in reason, decision


@pytest.mark.timeout(240)
def test_string_prefix_bypasses_are_refused(
    attacker: str, attacker_folder: Path, site: Site
) -> None:
    """``https://api.example.org`` is that host on port 443, not every host or port whose
    spelling starts with it; ``http://localhost`` is not ``http://localhost@127.0.0.1:P``;
    ``http://localhost:1`` is port 1, not 1xxxx. (The two first are refused before any name is
    resolved: no DNS is needed.)"""
    port = site.port
    commands = [
        {"cmd": "curl -sS --max-time 10 https://api.example.org.attacker.net/; echo exit=$?"},
        {"cmd": "curl -sS --max-time 10 https://api.example.org:8443/; echo exit=$?"},
        {
            "cmd": _raw(
                "GET http://localhost@127.0.0.1:PORT/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n", port
            )
        },
        {"cmd": f"curl -sS --max-time 10 http://localhost:{port}/; echo exit=$?"},
        {"cmd": _raw("CONNECT api.example.org.attacker.net:443 HTTP/1.1\\r\\n\\r\\n")},
    ]
    _, seen, decisions = _attack("prefixes", commands, attacker, attacker_folder)
    (suffix,), (other_port,), (userinfo,), (local_port,), (raw_suffix,) = decisions
    _refused_by_policy(suffix, "matches no allowed", "api.example.org.attacker.net")
    _refused_by_policy(other_port, "matches no allowed", "port 8443")
    _refused_by_policy(userinfo, "userinfo")
    _refused_by_policy(local_port, "matches no allowed", f"port {port}")
    _refused_by_policy(raw_suffix, "matches no allowed")
    assert suffix["method"] == other_port["method"] == "CONNECT"
    assert "exit=0" not in seen[0]["stdout"] and "exit=0" not in seen[1]["stdout"]
    assert " 403 " in seen[2]["stdout"] and "hello" not in seen[2]["stdout"]
    assert "hello" not in seen[3]["stdout"]
    # The host's server never saw a request.
    assert site.requests == []


@pytest.mark.timeout(240)
def test_network_true_is_https_to_port_443_of_public_hosts_only(
    attacker: str, attacker_folder: Path
) -> None:
    """``network: true`` is upstream's HTTPS GET/HEAD: a tunnel to port 443 of a public host.
    Another port of a public address (arbitrary TCP) is refused before connecting; so is plain
    HTTP, and an IPv6 literal in a private (documentation) range, parsed as an address."""
    commands = [
        {"cmd": "curl -sS --max-time 10 https://1.1.1.1:8443/; echo exit=$?"},
        {"cmd": _raw("CONNECT 1.1.1.1:22 HTTP/1.1\\r\\n\\r\\n")},
        {"cmd": "curl -sS --max-time 10 http://1.1.1.1/; echo exit=$?"},
        {"cmd": "curl -sS --max-time 10 'https://[2001:db8::1]/'; echo exit=$?"},
        {"cmd": _raw("CONNECT [2001:db8::1]:443 HTTP/1.1\\r\\n\\r\\n")},
    ]
    _, seen, decisions = _attack("open_network", commands, attacker, attacker_folder)
    (tls_port,), (ssh,), (plain,), (ipv6,), (raw_ipv6,) = decisions
    _refused_by_policy(tls_port, "matches no allowed", "port 8443")
    _refused_by_policy(ssh, "matches no allowed", "port 22")
    _refused_by_policy(plain, "matches no allowed")
    for decision in (ipv6, raw_ipv6):
        assert decision["target"] == "[2001:db8::1]:443", decision
        _refused_by_policy(decision, "2001:db8::1", "private")
    assert " 403 " in seen[1]["stdout"]


@pytest.mark.timeout(240)
def test_an_ipv6_literal_tunnel_goes_to_the_checked_address(
    attacker: str, attacker_folder: Path, site6: Site
) -> None:
    commands = [
        {
            "cmd": _raw(
                f"CONNECT [::1]:{site6.port} HTTP/1.1\\r\\nHost: [::1]:{site6.port}\\r\\n\\r\\n"
                "PING\\n",
                until="PONG",
            )
        },
        {"cmd": _raw("CONNECT [::1]:1 HTTP/1.1\\r\\n\\r\\n")},
    ]
    env = {"LITTLE_TEST_EGRESS_PORT6": str(site6.port)}
    _, seen, decisions = _attack("local", commands, attacker, attacker_folder, env)
    (tunnel,), (other,) = decisions
    assert tunnel == {"method": "CONNECT", "target": f"[::1]:{site6.port}", "allowed": True}
    assert "200 Connection established" in seen[0]["stdout"] and "PONG" in seen[0]["stdout"]
    _refused_by_policy(other, "matches no allowed", "port 1")


@pytest.mark.timeout(240)
def test_connections_per_command_are_capped(
    attacker: str, attacker_folder: Path, site: Site
) -> None:
    """40 tunnels held open at once by one command: 32 (the cap) go through, the rest are
    refused with a 503 and recorded; the proxy holds no thread per connection (the
    in-process test below counts threads)."""
    program = f"""
import socket
held, answers = [], []
for _ in range(40):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(b"CONNECT 127.0.0.1:{site.port} HTTP/1.1\\r\\n\\r\\n")
    answers.append(s.recv(200).split(b" ")[1].decode())
    held.append(s)
print(answers.count("200"), answers.count("503"))
"""
    commands = [{"cmd": f"python3 - <<'EOF'\n{program}\nEOF"}]
    env = {"LITTLE_TEST_EGRESS_PORT": str(site.port)}
    _, seen, decisions = _attack("local", commands, attacker, attacker_folder, env)
    assert seen[0]["stdout"] == "32 8\n", seen[0]
    (made,) = decisions
    assert sum(d["allowed"] for d in made) == 32
    busy = [d for d in made if not d["allowed"]]
    assert len(busy) == 8
    assert all("too many connections" in d["reason"] for d in busy), busy


@pytest.mark.timeout(240)
def test_a_slow_or_huge_request_head_is_cut_off(
    attacker: str, attacker_folder: Path, site: Site
) -> None:
    """A head that never ends (slowloris) is answered 408 once its time is up (set to 1 s for
    the test), and one past the size cap 431; the command goes on (no 124)."""
    huge = "X-Pad: " + "a" * 40000
    commands = [
        {
            "cmd": _raw(
                "GET http://127.0.0.1:PORT/ok HTTP/1.1\\r\\nHost: x\\r\\n", site.port
            ).replace("timeout 10 cat", "timeout 20 cat"),
            "timeoutMs": 25000,
        },
        {"cmd": _raw(f"GET http://127.0.0.1:PORT/ok HTTP/1.1\\r\\n{huge}\\r\\n\\r\\n", site.port)},
    ]
    env = {"LITTLE_TEST_EGRESS_PORT": str(site.port), "LITTLE_SANDBOX_EGRESS_HEAD_SECONDS": "1"}
    _, seen, decisions = _attack("local", commands, attacker, attacker_folder, env)
    slow, huge_seen = seen
    assert slow["exitCode"] == 0 and " 408 " in slow["stdout"], slow
    assert " 431 " in huge_seen["stdout"], huge_seen
    (slow_decision,), (huge_decision,) = decisions
    assert not slow_decision["allowed"] and "request head" in slow_decision["reason"]
    assert not huge_decision["allowed"] and "request head" in huge_decision["reason"]
    assert site.requests == []


@pytest.mark.timeout(240)
def test_plain_http_paths_match_on_a_segment_boundary(
    attacker: str, attacker_folder: Path, site: Site
) -> None:
    """``http://127.0.0.1:P/ok`` (GET) allows ``/ok`` and ``/ok/...`` only: not ``/okay``,
    not a dot segment out of it, spelled plainly or percent-encoded."""
    port = site.port
    commands = [
        {"cmd": f"curl -sS --max-time 10 http://127.0.0.1:{port}/ok/page"},
        {"cmd": f"curl -sS --max-time 10 http://127.0.0.1:{port}/okay; echo"},
        {"cmd": f"curl -sS --max-time 10 --path-as-is http://127.0.0.1:{port}/ok/../admin; echo"},
        {"cmd": f"curl -sS --max-time 10 http://127.0.0.1:{port}/ok/%2e%2e/admin; echo"},
        {"cmd": f"curl -sS --max-time 10 http://127.0.0.1:{port}/ok/..%2fadmin; echo"},
    ]
    env = {"LITTLE_TEST_EGRESS_PORT": str(site.port)}
    _, seen, decisions = _attack("local", commands, attacker, attacker_folder, env)
    assert seen[0]["stdout"] == "hello from /ok/page\n"
    (page,), (okay,), (dots,), (encoded,), (slash,) = decisions
    assert page["allowed"] is True
    _refused_by_policy(okay, "matches no allowed", "path /okay")
    for decision in (dots, encoded, slash):
        _refused_by_policy(decision, "dot segment")
    assert [(r.method, r.path) for r in site.requests] == [("GET", "/ok/page")]


@pytest.mark.timeout(240)
def test_plain_http_is_one_request_to_the_host_checked(
    attacker: str, attacker_folder: Path, site: Site
) -> None:
    """A request smuggled behind an allowed one on the same connection (a POST the allowlist
    refuses) never reaches the server, and the server sees the allowed URL's host, not the
    ``Host`` the client wrote."""
    smuggled = (
        "GET http://127.0.0.1:PORT/ok/a HTTP/1.1\\r\\nHost: evil.example\\r\\n"
        "Content-Length: 0\\r\\n\\r\\nPOST /admin HTTP/1.1\\r\\nHost: x\\r\\n"
        "Content-Length: 0\\r\\n\\r\\n"
    )
    commands = [{"cmd": _raw(smuggled, site.port).replace("timeout 10 cat", "timeout 3 cat")}]
    env = {"LITTLE_TEST_EGRESS_PORT": str(site.port)}
    _, seen, decisions = _attack("local", commands, attacker, attacker_folder, env)
    assert "hello from /ok/a" in seen[0]["stdout"]
    assert [d["allowed"] for d in decisions[0]] == [True]
    assert [(r.method, r.path) for r in site.requests] == [("GET", "/ok/a")]
    assert site.requests[0].headers["host"] == f"127.0.0.1:{site.port}"


@pytest.mark.timeout(240)
def test_a_bare_wait_returns_with_network_on(attacker: str, attacker_folder: Path) -> None:
    """Nothing of the proxy's is a job of the command's shell: ``wait`` returns at once (the
    old forwarder made it wait for the wall limit, exit 124)."""
    commands = [{"cmd": "sleep 0.1 & wait; echo done", "timeoutMs": 20000}]
    _, seen, _ = _attack("open_network", commands, attacker, attacker_folder)
    assert seen[0] == {"stdout": "done\n", "stderr": "", "exitCode": 0}, seen[0]


@pytest.mark.timeout(240)
def test_python_false_leaves_no_interpreter_with_network_on(
    attacker: str, attacker_folder: Path
) -> None:
    """With ``python: false`` no Python is in the sandbox to run, the old forwarder's
    ``/mnt/.egress-bin/python`` included, and none runs there; requests still reach the proxy
    (a refusal is recorded)."""
    commands = [
        {
            "cmd": "/mnt/.egress-bin/python -c 'print(6*7)'; python3 -c 'print(6*7)'; "
            "echo running=$(for p in /proc/[0-9]*; do readlink $p/exe; done | grep -c python)"
        },
        {"cmd": "curl -sS --max-time 10 'https://[2001:db8::1]/'; echo exit=$?"},
    ]
    _, seen, decisions = _attack("open_network", commands, attacker, attacker_folder)
    assert seen[0]["stdout"] == "running=0\n", seen[0]
    (refused,) = decisions[1]
    assert refused["allowed"] is False and refused["method"] == "CONNECT"
