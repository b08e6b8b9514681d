"""The sandbox: run a command isolated by the kernel, with limits, over declared mounts.

One entry point, :func:`run_sandboxed`, used by the bash tool and by ``code.run``. A command
runs in its own mount, PID, IPC, UTS, cgroup, user and network namespaces (bubblewrap), sees a
read-only system and only the :class:`Mount` s it is given, gets a stripped environment, and is
held to :class:`SandboxLimits`. Where the kernel refuses namespaces, it refuses to run unless
the operator opted into a weaker mode (:mod:`little_dist.sandbox.isolation`).

Limits hold per command, not per process, where the worker can give each command a cgroup
(:mod:`little_dist.sandbox.cgroups`: ``cgroup2`` with a delegated subtree, ``cgroup1`` where
its hierarchies are writable): memory (swap included), processes and threads, CPU bandwidth
and CPU time of all its processes together. Without one (``rlimits``) the kernel's
per-process limits are all there is for those, and each result and event says so
(``limits``). In every mode the parent ends the whole command at its wall clock, past its disk
bound (:mod:`little_dist.sandbox.disk`: what its writable mounts take, measured while it
runs), or when it prints without end, and never waits on a pipe a leftover process holds
(:mod:`little_dist.sandbox.supervise`).

What a host needs: the ``bubblewrap`` package (Debian) and ``prlimit`` (util-linux), and
either root (each command then runs as a user id no other live command has,
:mod:`little_dist.sandbox.uids`) or
unprivileged user namespaces (``kernel.unprivileged_userns_clone=1`` where that exists,
``user.max_user_namespaces`` > 0). In Kubernetes the worker container needs a seccomp and
AppArmor profile that allow ``unshare``/``clone`` of namespaces and ``mount`` inside them
(e.g. ``seccompProfile: Unconfined`` and ``appArmorProfile: Unconfined``, or a profile that
allows those calls); it does not need ``privileged`` or added capabilities. Per-command
limits need a writable cgroup as well (see :mod:`little_dist.sandbox.cgroups` and
docs/operations.md, "The sandbox").

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
