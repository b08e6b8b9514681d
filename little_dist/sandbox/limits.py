"""What one sandboxed command may use: CPU, memory, processes, disk, files, time and output.

Each limit holds for the whole command (every process it starts) where the worker has a
cgroup for it (:mod:`little_dist.sandbox.cgroups`: memory, processes, CPU) or the parent
measures it (the wall clock, the output caps, the disk its writable mounts use, and in a cgroup
the CPU time of all its processes together: :mod:`little_dist.sandbox.supervise`). The kernel's
per-process limits (``setrlimit`` in the child before it runs anything) hold as well, always:
without a cgroup (``limits: "rlimits"``) they are all there is for memory, processes and CPU
time, and each process may then use the whole of them. Defaults fit a shell command or a small
program an agent writes; a workflow or an operator narrows or widens them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from little_dist.errors import InvalidInputError

__all__ = ["DEFAULT_LIMITS", "SandboxLimits"]

_MIB: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """The limits of one sandboxed command.

    ``cpu_seconds``    CPU time: of all the command's processes together in a cgroup (the
                       parent ends it, ``stopped: "cpu"``), and of each process
                       (``RLIMIT_CPU``; the kernel sends SIGXCPU, then SIGKILL)
    ``cpu_cores``      CPU bandwidth of the whole command, in cores (a cgroup's quota)
    ``memory_bytes``   memory of the whole command, swap included (a cgroup: past it the
                       kernel's OOM killer ends the command, ``stopped: "memory"``), and
                       address space of each process (``RLIMIT_AS``: an allocation past it
                       fails)
    ``processes``      processes and threads the command may run at once (a cgroup's
                       ``pids.max``, and ``RLIMIT_NPROC``, counted for the sandbox's own user
                       id, see the package docstring)
    ``disk_bytes``     what the files in its writable mounts may take on disk while it runs
                       (the parent sums them, past it ends the command, ``stopped: "disk"``);
                       the same bound as a scratch's publish limit
    ``disk_files``     files, folders and links its writable mounts may hold (as above)
    ``open_files``     open file descriptors (``RLIMIT_NOFILE``)
    ``file_bytes``     the largest file it may write (``RLIMIT_FSIZE``; SIGXFSZ past it)
    ``wall_seconds``   wall-clock time; past it the whole sandbox is killed
    ``output_bytes``   stdout and stderr kept, each; the rest is dropped with a marker
    ``output_kill_bytes`` output dropped past which the command is killed (a runaway printer)
    ``tmp_bytes``      size of the sandbox's private ``/tmp`` (a tmpfs)
    ``memory_kind``    how ``memory_bytes`` is held: ``"address_space"`` (``RLIMIT_AS``, the
                       default), or ``"data"`` (``RLIMIT_DATA``: writable memory only) for
                       runtimes that reserve far more address space than they use (V8)
    """

    cpu_seconds: int = 30
    cpu_cores: float = 1.0
    memory_bytes: int = 1024 * _MIB
    processes: int = 64
    disk_bytes: int = 256 * _MIB
    disk_files: int = 100_000
    open_files: int = 256
    file_bytes: int = 64 * _MIB
    wall_seconds: float = 60.0
    output_bytes: int = 64 * 1024
    output_kill_bytes: int = 64 * _MIB
    tmp_bytes: int = 64 * _MIB
    memory_kind: Literal["address_space", "data"] = "address_space"

    def __post_init__(self) -> None:
        if self.memory_kind not in ("address_space", "data"):
            raise InvalidInputError(
                f"sandbox limit memory_kind={self.memory_kind!r}: expected 'address_space' "
                "or 'data'"
            )
        for name in self.__slots__:
            if name == "memory_kind":
                continue
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise InvalidInputError(
                    f"sandbox limit {name}={value!r}: expected a number greater than 0"
                )


DEFAULT_LIMITS: Final = SandboxLimits()
