"""Which isolation this process's sandboxes get, found out once by trying it.

``namespaces`` (the default and the only strong mode): bubblewrap puts the command in its own
mount, PID, IPC, UTS, cgroup, user and network namespaces. Where the kernel refuses them (an
unprivileged container without user namespaces, bubblewrap missing), the sandbox refuses to
run — :class:`SandboxUnavailableError`, saying why — unless the operator opted into
``rlimits`` with ``LITTLE_SANDBOX_ISOLATION=rlimits``: the command then runs with the same
limits, a stripped environment and no network namespace, and sees the host's file system as
the worker's user does. Each command's result names the isolation it ran under, and so do the
step's events.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from little_dist.errors import InvalidInputError, LittleError

__all__ = [
    "ISOLATION_ENV",
    "Isolation",
    "IsolationProbe",
    "SandboxUnavailableError",
    "isolation_for",
    "probe_namespaces",
]

Isolation = Literal["namespaces", "rlimits"]
ISOLATION_ENV: Final = "LITTLE_SANDBOX_ISOLATION"
#: The bubblewrap binary (a setting so that an operator can point at their own build).
BWRAP_ENV: Final = "LITTLE_SANDBOX_BWRAP"


class SandboxUnavailableError(LittleError):
    """The kernel sandbox cannot run here and no weaker mode was opted into."""


@dataclass(frozen=True, slots=True)
class IsolationProbe:
    """What trying bubblewrap once found: ``error`` is None when namespaces work."""

    bwrap: str | None
    error: str | None


_probes: dict[tuple[str | None, int | None], IsolationProbe] = {}


def bwrap_path(env: Mapping[str, str] | None = None) -> str | None:
    environ = os.environ if env is None else env
    given = environ.get(BWRAP_ENV)
    return shutil.which(given) if given else shutil.which("bwrap")


def probe_namespaces(bwrap: str | None, user: int | None) -> IsolationProbe:
    """Try bubblewrap's namespaces once per (binary, root or not) in this process."""
    key = (bwrap, None if user is None else 0)
    found = _probes.get(key)
    if found is not None:
        return found
    if bwrap is None:
        found = IsolationProbe(None, "bubblewrap (bwrap) is not installed")
    else:
        from little_dist.sandbox.system import namespace_arguments

        argv = [bwrap, *namespace_arguments(user), "--die-with-parent", "--ro-bind", "/usr", "/usr"]
        argv += ["--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib"]
        argv += ["--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "/usr/bin/true"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError) as exc:
            found = IsolationProbe(bwrap, f"{bwrap} could not start: {exc}")
        else:
            error = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            found = IsolationProbe(bwrap, None if done.returncode == 0 else error)
    _probes[key] = found
    return found


def isolation_for(
    bwrap: str | None, user: int | None, env: Mapping[str, str] | None = None
) -> Isolation:
    """The isolation to run under: ``namespaces`` when they work; else ``rlimits`` if the
    operator opted in; else :class:`SandboxUnavailableError`."""
    environ = os.environ if env is None else env
    wanted = environ.get(ISOLATION_ENV) or "namespaces"
    if wanted not in ("namespaces", "rlimits"):
        raise InvalidInputError(
            f"{ISOLATION_ENV}={wanted!r}: expected 'namespaces' (the default) or 'rlimits'"
        )
    probe = probe_namespaces(bwrap, user)
    if probe.error is None:
        return "namespaces"
    if wanted == "rlimits":
        return "rlimits"
    raise SandboxUnavailableError(
        f"the sandbox cannot isolate commands here: {probe.error}. Install bubblewrap and "
        "allow user namespaces (see docs/operations.md, 'The sandbox'), or set "
        f"{ISOLATION_ENV}=rlimits to run commands with limits but without namespaces"
    )
