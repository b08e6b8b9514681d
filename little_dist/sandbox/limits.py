"""What one sandboxed command may use: CPU, memory, processes, files, time and output.

Every limit is enforced by the kernel (``setrlimit`` in the child before it runs anything)
except the wall clock and the output caps, which the parent enforces
(:mod:`little_dist.sandbox.process`). Defaults fit a shell command or a small program an
agent writes; a workflow or an operator narrows or widens them.
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

    ``cpu_seconds``    CPU time (``RLIMIT_CPU``; the kernel sends SIGXCPU, then SIGKILL)
    ``memory_bytes``   address space (``RLIMIT_AS``): an allocation past it fails
    ``processes``      processes and threads the sandbox may run at once (``RLIMIT_NPROC``,
                       counted for the sandbox's own user id, see the package docstring)
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
    memory_bytes: int = 1024 * _MIB
    processes: int = 64
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
