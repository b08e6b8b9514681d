"""The network guard: real providers and non-local hosts fail loudly, scripted calls pass."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from little_dist.testing import ScriptedModel, guard
from little_dist.testing._provider import import_litellm
from little_dist.testing.guard import NonLocalConnectionError, RealProviderCallError


@pytest.fixture(scope="module")
def litellm() -> Any:
    return import_litellm()


@pytest.fixture
def network_spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Active guard, with every socket connect and name lookup recorded (the guard's checks
    run first, so a refused attempt never reaches the recorder)."""
    attempts: list[Any] = []
    with guard.blocking():
        guarded_connect = socket.socket.connect
        guarded_getaddrinfo = socket.getaddrinfo

        def connect(self: socket.socket, address: Any) -> None:
            attempts.append(("connect", address))
            guarded_connect(self, address)

        def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
            attempts.append(("getaddrinfo", host))
            return guarded_getaddrinfo(host, *args, **kwargs)

        monkeypatch.setattr(socket.socket, "connect", connect)
        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
        yield attempts
        monkeypatch.undo()
    guard.take_violations()


MESSAGES = [{"role": "user", "content": "hi"}]


def test_real_provider_completion_raises_before_any_network(
    litellm: Any, network_spy: list[Any]
) -> None:
    with pytest.raises(RealProviderCallError, match=r"openai/gpt-4o-mini.*'openai'"):
        litellm.completion(model="openai/gpt-4o-mini", messages=MESSAGES, api_key="sk-fake")
    assert network_spy == []
    assert len(guard.take_violations()) == 1


def test_real_provider_acompletion_and_embedding_raise(
    litellm: Any, network_spy: list[Any]
) -> None:
    with pytest.raises(RealProviderCallError):
        asyncio.run(
            litellm.acompletion(model="anthropic/claude-3-5-haiku", messages=MESSAGES, api_key="x")
        )
    with pytest.raises(RealProviderCallError):
        litellm.embedding(model="openai/text-embedding-3-small", input=["x"], api_key="sk-fake")
    with pytest.raises(RealProviderCallError, match="bare model name"):
        litellm.completion(model="gpt-4o-mini", messages=MESSAGES, api_key="sk-fake")
    with pytest.raises(RealProviderCallError):
        litellm.completion(
            model="scripted/x", custom_llm_provider="openai", messages=MESSAGES, api_key="k"
        )
    assert network_spy == []
    assert len(guard.take_violations()) == 4


def test_scripted_calls_pass_the_guard(litellm: Any, network_spy: list[Any]) -> None:
    script = ScriptedModel()
    script.otherwise().reply_text("allowed", times=None)
    with script.installed():
        sync = litellm.completion(model="scripted/m", messages=MESSAGES)
        async_ = asyncio.run(litellm.acompletion(model="scripted/m", messages=MESSAGES))
    assert sync.choices[0].message.content == async_.choices[0].message.content == "allowed"
    assert guard.take_violations() == []
    assert all(kind != "connect" or _is_loopback(addr) for kind, addr in network_spy)


def _is_loopback(address: Any) -> bool:
    return isinstance(address, tuple) and address[0] in ("127.0.0.1", "::1", "localhost")


def test_check_model_call_is_inert_when_inactive() -> None:
    if guard.is_active():  # the pytest plugin keeps it on for the whole session
        with pytest.raises(RealProviderCallError):
            guard.check_model_call("openai/gpt-4o")
        guard.take_violations()
    else:
        guard.check_model_call("openai/gpt-4o")
    assert guard.provider_of("scripted/a") == "scripted"
    assert guard.provider_of("openrouter/openai/gpt-4o") == "openrouter"
    assert guard.provider_of("gpt-4o") is None
    assert guard.provider_of("scripted/a", "azure") == "azure"


def test_non_local_connections_are_refused() -> None:
    with guard.blocking():
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            with pytest.raises(NonLocalConnectionError, match=r"10\.255\.255\.1:80"):
                sock.connect(("10.255.255.1", 80))
            with pytest.raises(NonLocalConnectionError):
                sock.connect_ex(("93.184.215.14", 443))
        finally:
            sock.close()
        with pytest.raises(NonLocalConnectionError, match=r"example\.com"):
            socket.getaddrinfo("example.com", 443)
        with pytest.raises(NonLocalConnectionError):
            socket.create_connection(("api.openai.com", 443), timeout=1)

        async def dial() -> None:
            await asyncio.open_connection("api.openai.com", 443)

        with pytest.raises(NonLocalConnectionError):
            asyncio.run(dial())
        refused = guard.take_violations()
    assert len(refused) == 5
    assert all("little-dist test guard" in item for item in refused)


def test_loopback_and_unix_sockets_still_work(tmp_path: Path) -> None:
    with guard.blocking():
        server = socket.create_server(("127.0.0.1", 0))
        try:
            port = server.getsockname()[1]
            client = socket.create_connection(("localhost", port), timeout=5)
            conn, _ = server.accept()
            client.sendall(b"ping")
            assert conn.recv(4) == b"ping"
            client.close()
            conn.close()
        finally:
            server.close()
        left, right = socket.socketpair()
        left.sendall(b"x")
        assert right.recv(1) == b"x"
        left.close()
        right.close()
        socket.getaddrinfo(socket.gethostname(), 80)
        assert guard.take_violations() == []


def test_deactivate_restores_sockets() -> None:
    before = socket.socket.connect
    with guard.blocking():
        assert guard.is_active()
    assert socket.socket.connect is before


@pytest.mark.slow
def test_import_hook_patches_litellm_imported_later(tmp_path: Path) -> None:
    program = textwrap.dedent(
        """
        import sys
        from little_dist.testing import guard
        guard.activate()
        assert "litellm" not in sys.modules
        import litellm
        try:
            litellm.completion(model="openai/gpt-4o-mini",
                               messages=[{"role": "user", "content": "x"}], api_key="sk-fake")
        except guard.RealProviderCallError as error:
            print("REFUSED", error)
        """
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "REFUSED litellm.completion(model='openai/gpt-4o-mini')" in done.stdout


def test_install_from_env() -> None:
    assert guard.install_from_env({}) is False
    assert guard.install_from_env({guard.GUARD_ENV_VAR: "1"}) is True
    try:
        assert guard.is_active()
    finally:
        guard.deactivate()


@pytest.mark.slow
def test_pytest_plugin_fails_a_test_that_swallowed_a_refusal(tmp_path: Path) -> None:
    (tmp_path / "test_sneaky.py").write_text(
        textwrap.dedent(
            """
            import litellm

            def test_sneaky():
                try:
                    litellm.completion(model="openai/gpt-4o-mini",
                                       messages=[{"role": "user", "content": "x"}],
                                       api_key="sk-fake")
                except Exception:
                    pass  # a careless caller hides the error

            def test_scripted(scripted_model):
                scripted_model.otherwise().reply_text("fine")
                r = litellm.completion(model="scripted/m",
                                       messages=[{"role": "user", "content": "x"}])
                assert r.choices[0].message.content == "fine"
            """
        )
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "little_dist.testing.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "-q",
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    # test_sneaky's body passed, but its teardown errors; test_scripted passes.
    assert "2 passed" in done.stdout and "1 error" in done.stdout, done.stdout + done.stderr
    assert "ERROR test_sneaky.py::test_sneaky" in done.stdout
    assert "tried to leave the machine" in done.stdout
    assert "openai/gpt-4o-mini" in done.stdout
