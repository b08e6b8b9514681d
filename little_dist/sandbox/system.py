"""What a sandboxed command sees of the system: bubblewrap's arguments and the environment.

A read-only ``/usr`` (bash, coreutils, python3 and their libraries) with the top-level links
a merged-``/usr`` system has (``/bin``, ``/lib``, ...), the few files of ``/etc`` programs
read (the dynamic linker's cache, Debian's alternatives, CA certificates), a private ``/proc``
and ``/dev``, a private ``/tmp`` of bounded size, and the mounts — nothing else: no home
directory, no worker files, no host processes, no network.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Final

from little_dist.errors import InvalidInputError
from little_dist.sandbox.limits import SandboxLimits
from little_dist.sandbox.mounts import Mount

__all__ = [
    "BASE_PATH",
    "bwrap_arguments",
    "drop_to",
    "namespace_arguments",
    "sandbox_environment",
]

BASE_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
_TOP_LEVEL: Final = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_ETC: Final = ("/etc/ld.so.cache", "/etc/alternatives", "/etc/ssl/certs", "/etc/localtime")
_RESERVED: Final = frozenset({"PATH", "HOME", "TMPDIR", "LANG", "PWD"})


def sandbox_environment(extra: Mapping[str, str] | None, *, home: str) -> dict[str, str]:
    """The whole environment of a sandboxed command: nothing of the worker's."""
    environment = {"PATH": BASE_PATH, "HOME": home, "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
    for name, value in (extra or {}).items():
        if not name or "=" in name or "\0" in name or "\0" in str(value):
            raise InvalidInputError(f"sandbox environment variable {name!r}: not a valid name")
        if name not in _RESERVED:
            environment[name] = str(value)
    return environment


def namespace_arguments(user: int | None) -> list[str]:
    """Every namespace; as root (``user`` given) all but the user namespace, so that
    bubblewrap keeps root's right to bind any source and :func:`drop_to` switches users."""
    if user is None:
        return ["--unshare-all"]
    return [
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]


def drop_to(user: int | None) -> list[str]:
    """The command's prefix that makes it ``user`` with no capabilities, as root; else none."""
    if user is None:
        return []
    return [
        "setpriv",
        f"--reuid={user}",
        f"--regid={user}",
        "--clear-groups",
        "--no-new-privs",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
    ]


def bwrap_arguments(
    mounts: Sequence[Mount],
    cwd: str,
    environment: Mapping[str, str],
    limits: SandboxLimits,
    user: int | None,
    hide: Sequence[str] = (),
) -> list[str]:
    """bubblewrap's arguments (before ``--`` and the command)."""
    args = [*namespace_arguments(user), "--die-with-parent", "--new-session"]
    args += ["--hostname", "sandbox"]
    args += ["--clearenv"]
    for name, value in environment.items():
        args += ["--setenv", name, value]
    args += ["--ro-bind", "/usr", "/usr"]
    for name in _TOP_LEVEL:
        host = "/" + name
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            args += ["--ro-bind", host, host]
    # bubblewrap makes the folders above a bind 0700 (root's, as root): /etc and /etc/ssl
    # must be open to the sandbox's user (certificates, awk by way of /etc/alternatives).
    for folder in _parents(path for path in _ETC if os.path.exists(path)):
        args += ["--perms", "0755", "--dir", folder]
    for path in _ETC:
        args += ["--ro-bind-try", path, path]
    for path in _hidden_files(hide):
        args += ["--ro-bind", "/dev/null", path]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--perms", "1777", "--size", str(int(limits.tmp_bytes)), "--tmpfs", "/tmp"]
    for folder in _parents(mount.target for mount in mounts):
        args += ["--perms", "0755", "--dir", folder]  # bubblewrap would make them 0700
    for mount in sorted(mounts, key=lambda m: m.target.count("/")):
        args += ["--bind" if mount.writable else "--ro-bind", str(mount.source), mount.target]
    args += ["--chdir", cwd]
    return args


def _hidden_files(hide: Sequence[str]) -> list[str]:
    """The files to cover for ``hide``: a link's target, not the link (bubblewrap cannot put
    its file where a link is, and a link into ``/etc/alternatives`` is resolved against the
    host's root), each once; one outside the sandbox's system (``/usr``) is not there to hide."""
    found: set[str] = set()
    for path in hide:
        real = os.path.realpath(path)
        if real.startswith("/usr/") and os.path.isfile(real):
            found.add(real)
    return sorted(found)


def _parents(targets: Iterable[str]) -> list[str]:
    """The folders above the mount targets, outermost first (``/mnt``, ``/mnt/scratch``)."""
    found: set[str] = set()
    for target in targets:
        found.update(str(parent) for parent in PurePosixPath(target).parents if str(parent) != "/")
    return sorted(found, key=lambda folder: (folder.count("/"), folder))
