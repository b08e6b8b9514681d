"""A process-wide guard that keeps tests away from real LLM providers and the network.

While active (:func:`activate` / :func:`blocking`, reference-counted and thread-safe):

* every litellm call (``completion``, ``acompletion``, ``embedding``, ``responses``, ... — all
  pass through litellm's ``function_setup``) whose provider is not ``scripted`` raises
  :class:`RealProviderCallError` before litellm builds a request. The provider is the
  ``custom_llm_provider=`` keyword, else the model's prefix (``openai/gpt-4o-mini`` ->
  ``openai``); a bare model name counts as a real provider. litellm is patched when it is
  imported (an import hook), so the guard itself never imports it;
* as a second line, ``socket.getaddrinfo`` refuses names other than ``localhost`` and this
  machine's host name, and ``socket.connect``/``connect_ex`` refuse addresses that are not
  loopback (``127.0.0.0/8``, ``::1``), unspecified, or Unix sockets, raising
  :class:`NonLocalConnectionError`. Redis, the S3 server and Flower on 127.0.0.1 stay
  reachable.

Libraries may catch these errors and wrap them (litellm retries, httpx turns them into
connection errors), so every refusal is also recorded; :func:`take_violations` returns and
clears the record, and the pytest plugin fails any test that left one behind.

Worker processes started by tests honour ``LITTLE_NETWORK_GUARD=1`` via
:func:`install_from_env`; the pytest plugin sets it for its children.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import ipaddress
import socket
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any

__all__ = [
    "ALLOWED_PROVIDERS",
    "GUARD_ENV_VAR",
    "NetworkGuardError",
    "NonLocalConnectionError",
    "RealProviderCallError",
    "activate",
    "blocking",
    "check_model_call",
    "deactivate",
    "install_from_env",
    "is_active",
    "provider_of",
    "take_violations",
    "violations",
]

ALLOWED_PROVIDERS = frozenset({"scripted"})
GUARD_ENV_VAR = "LITTLE_NETWORK_GUARD"


class NetworkGuardError(RuntimeError):
    """A test tried to leave the machine. Not a :class:`LittleError` on purpose: nothing in
    little-dist may treat it as an ordinary step failure."""


class RealProviderCallError(NetworkGuardError):
    """A litellm call to a provider other than ``scripted`` while the guard is active."""


class NonLocalConnectionError(NetworkGuardError):
    """A socket connection (or name lookup) for a host that is not this machine."""


_lock = threading.RLock()
_depth = 0
_violations: list[str] = []
_socket_originals: dict[str, Any] = {}


def is_active() -> bool:
    return _depth > 0


def violations() -> list[str]:
    """What the guard refused since the last :func:`take_violations` (oldest first)."""
    with _lock:
        return list(_violations)


def take_violations() -> list[str]:
    """Return and clear the record of refusals."""
    with _lock:
        taken = list(_violations)
        _violations.clear()
        return taken


def _refuse(error: NetworkGuardError) -> NetworkGuardError:
    with _lock:
        _violations.append(str(error))
    return error


# -- litellm -------------------------------------------------------------------------------


def provider_of(model: Any, custom_llm_provider: Any = None) -> str | None:
    """The litellm provider a call goes to, as the guard judges it (``None``: unknown)."""
    if isinstance(custom_llm_provider, str) and custom_llm_provider:
        return custom_llm_provider
    if isinstance(model, str) and "/" in model:
        return model.split("/", 1)[0]
    return None


def check_model_call(
    model: Any, custom_llm_provider: Any = None, *, call: str = "completion"
) -> None:
    """Raise :class:`RealProviderCallError` if the guard is active and this call would reach a
    provider other than ``scripted``."""
    if not is_active():
        return
    provider = provider_of(model, custom_llm_provider)
    if provider in ALLOWED_PROVIDERS:
        return
    raise _refuse(
        RealProviderCallError(
            f"litellm.{call}(model={model!r}) would call the real provider "
            f"{provider or 'inferred from a bare model name'!r}; tests may only use "
            "'scripted/<name>' models (little_dist.testing.ScriptedModel)"
        )
    )


def _patch_litellm_utils(module: ModuleType) -> None:
    original = getattr(module, "function_setup", None)
    if original is None or getattr(original, "__little_guard__", False):
        return

    def guarded_function_setup(
        original_function: Any, rules_obj: Any, start_time: Any, *args: Any, **kwargs: Any
    ) -> Any:
        model = args[0] if args else kwargs.get("model")
        check_model_call(model, kwargs.get("custom_llm_provider"), call=str(original_function))
        return original(original_function, rules_obj, start_time, *args, **kwargs)

    guarded_function_setup.__little_guard__ = True  # type: ignore[attr-defined]
    guarded_function_setup.__wrapped__ = original  # type: ignore[attr-defined]
    module.function_setup = guarded_function_setup  # type: ignore[attr-defined]


class _LitellmPatcher(importlib.abc.MetaPathFinder):
    """Patches ``litellm.utils`` right after it executes, so the guard never imports it."""

    target = "litellm.utils"

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.target:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader: Any = spec.loader
        exec_original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            exec_original(module)
            _patch_litellm_utils(module)

        loader.exec_module = exec_module
        return spec


_patcher = _LitellmPatcher()


def _install_litellm_guard() -> None:
    module = sys.modules.get(_LitellmPatcher.target)
    if module is not None:
        _patch_litellm_utils(module)
    elif _patcher not in sys.meta_path:
        sys.meta_path.insert(0, _patcher)


# -- sockets -------------------------------------------------------------------------------


def _is_local_host(host: Any) -> bool:
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if host is None or host == "":
        return True
    if not isinstance(host, str):
        return False
    name = host.strip("[]").split("%", 1)[0].lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def _check_address(family: int, address: Any) -> None:
    if family == getattr(socket, "AF_UNIX", None) or not isinstance(address, tuple):
        return
    if not _is_local_host(address[0]):
        raise _refuse(
            NonLocalConnectionError(
                f"connection to {address[0]}:{address[1]} refused by the little-dist test guard "
                "(only loopback addresses are reachable in tests)"
            )
        )


def _install_socket_guard() -> None:
    if _socket_originals:
        return
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo
    own_names = {socket.gethostname().lower()}

    def connect(self: socket.socket, address: Any) -> None:
        _check_address(self.family, address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        _check_address(self.family, address)
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        text = host.decode("ascii", "replace") if isinstance(host, bytes) else host
        is_literal = False
        if isinstance(text, str):
            try:
                ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
                is_literal = True  # no lookup happens; connect() judges the address
            except ValueError:
                pass
        if not (is_literal or _is_local_host(text) or str(text).lower() in own_names):
            raise _refuse(
                NonLocalConnectionError(
                    f"name lookup for {text!r} refused by the little-dist test guard "
                    "(only localhost is reachable in tests)"
                )
            )
        return real_getaddrinfo(host, *args, **kwargs)

    _socket_originals.update(
        connect=real_connect, connect_ex=real_connect_ex, getaddrinfo=real_getaddrinfo
    )
    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = getaddrinfo


def _remove_socket_guard() -> None:
    if not _socket_originals:
        return
    socket.socket.connect = _socket_originals["connect"]  # type: ignore[method-assign]
    socket.socket.connect_ex = _socket_originals["connect_ex"]  # type: ignore[method-assign]
    socket.getaddrinfo = _socket_originals["getaddrinfo"]
    _socket_originals.clear()


# -- switching -----------------------------------------------------------------------------


def activate() -> None:
    """Turn the guard on (calls nest: each needs a matching :func:`deactivate`)."""
    global _depth
    with _lock:
        _depth += 1
        if _depth == 1:
            _install_litellm_guard()
            _install_socket_guard()


def deactivate() -> None:
    """Undo one :func:`activate`; the last one restores sockets (litellm's patch stays, inert)."""
    global _depth
    with _lock:
        if _depth == 0:
            return
        _depth -= 1
        if _depth == 0:
            _remove_socket_guard()
            if _patcher in sys.meta_path:
                sys.meta_path.remove(_patcher)


@contextmanager
def blocking() -> Iterator[None]:
    """The guard, active for a ``with`` block."""
    activate()
    try:
        yield
    finally:
        deactivate()


def install_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Activate the guard if ``LITTLE_NETWORK_GUARD`` is ``1``/``true`` (worker start-up)."""
    import os

    env = os.environ if environ is None else environ
    if env.get(GUARD_ENV_VAR, "").strip().lower() in {"1", "true", "yes"}:
        activate()
        return True
    return False
