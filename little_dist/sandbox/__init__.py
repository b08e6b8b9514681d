"""The sandbox: run a command isolated by the kernel, with limits, over declared mounts.

One entry point, :func:`run_sandboxed`, used by the bash tool and by ``code.run``. A command
runs in its own mount, PID, IPC, UTS, cgroup, user and network namespaces (bubblewrap), sees a
read-only system and only the :class:`Mount` s it is given, gets a stripped environment, and is
held to :class:`SandboxLimits` (CPU, memory, processes, open files, file size by the kernel;
wall clock and output by the parent). Where the kernel refuses namespaces, it refuses to run
unless the operator opted into a weaker mode (:mod:`little_dist.sandbox.isolation`).

What a host needs: the ``bubblewrap`` package (Debian) and ``prlimit`` (util-linux), and
either root (each command then runs as a user id of its own, ``UID_BASE`` upward) or
unprivileged user namespaces (``kernel.unprivileged_userns_clone=1`` where that exists,
``user.max_user_namespaces`` > 0). In Kubernetes the worker container needs a seccomp and
AppArmor profile that allow ``unshare``/``clone`` of namespaces and ``mount`` inside them
(e.g. ``seccompProfile: Unconfined`` and ``appArmorProfile: Unconfined``, or a profile that
allows those calls); it does not need ``privileged`` or added capabilities.

The rule for host code: a folder a command can write (:data:`WRITABLE_MOUNTS`) holds whatever
the command left there, so every open, read, write, walk, chown or delete the host does in one
goes through :mod:`little_dist.sandbox.writable` (relative to a directory descriptor, never
following a link, regular files only and bounded, no recursion), and :data:`HOST_TOUCHES`
lists each such place. Nothing is exchanged with a command through files it can write: the
bash session's state comes back on a pipe (:mod:`little_dist.sandbox.state_channel`).
"""

from little_dist.sandbox.isolation import Isolation, SandboxUnavailableError
from little_dist.sandbox.limits import DEFAULT_LIMITS, SandboxLimits
from little_dist.sandbox.mounts import (
    HOST_TOUCHES,
    WRITABLE_MOUNTS,
    HostTouch,
    Mount,
    MountError,
)
from little_dist.sandbox.process import SandboxResult, run_sandboxed

__all__ = [
    "DEFAULT_LIMITS",
    "HOST_TOUCHES",
    "WRITABLE_MOUNTS",
    "HostTouch",
    "Isolation",
    "Mount",
    "MountError",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailableError",
    "run_sandboxed",
]
