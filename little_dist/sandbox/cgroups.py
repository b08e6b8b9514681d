"""A cgroup for each command: memory, processes and CPU of the whole command, and a kill that
reaches every process of it, however they are arranged.

Which limits a command runs under (``limits`` in its result and events), found out once per
worker process, best first:

``cgroup2``  a cgroup v2 subtree the worker may write, with the ``memory`` and ``pids``
             controllers: ``LITTLE_SANDBOX_CGROUP`` (a folder under the cgroup2 mount) or,
             by default, the worker's own cgroup (``/proc/self/cgroup``). The controllers a
             child needs can only be enabled in a cgroup without processes of its own, so the
             worker first moves every process of that cgroup into a leaf child,
             ``little-worker`` (what systemd asks of a service with ``Delegate=yes``). Each
             command gets ``memory.max`` (``memory.swap.max`` 0: no swap either,
             ``memory.oom.group``: an out-of-memory kill ends the whole command), ``pids.max``
             and ``cpu.max``, and ends with ``cgroup.kill``.
``cgroup1``  cgroup v1 ``memory`` and ``pids`` hierarchies the worker may write (``cpu``,
             ``cpuacct`` and a cgroup2 mount used when writable too): ``memory.limit_in_bytes``
             and ``memory.memsw.limit_in_bytes`` (memory plus swap, where swap accounting is
             on), ``pids.max``, ``cpu.cfs_quota_us``; it ends with ``cgroup.kill`` of its
             cgroup2 group where there is one (a hybrid layout), else by SIGKILL to every
             process the cgroup lists until it lists none.
``rlimits``  no cgroup: the per-process limits of :mod:`little_dist.sandbox.limits` only.

``LITTLE_SANDBOX_LIMITS`` (``auto``, the default; ``cgroup2``, ``cgroup1``, ``rlimits``) makes
one mode required: the sandbox refuses to run where it cannot have it
(:class:`~little_dist.sandbox.isolation.SandboxUnavailableError`).

Layout: ``<base>/little-sandbox/w-<pid>-<random>/c<n>`` in each hierarchy, ``<base>`` the
worker's cgroup there. A worker process holds an ``flock`` on each of its ``w-`` folders (one
per hierarchy) for its life; the first command of a worker process removes every ``w-`` folder
whose own lock nobody holds (a crashed worker's), killing what is left in it. Each folder is
judged by its own lock: processes of one host may sit in different cgroups of one hierarchy and
the same cgroup of another (so one's folders are not all where another looks). A command's
process enters its cgroups before it executes anything else (a ``/bin/sh`` prefix writes its
own pid into each ``cgroup.procs``, then ``exec``s the rest): nothing runs in the worker
between ``fork`` and ``exec``, and nothing untrusted runs outside the cgroup.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import os
import secrets
import shlex
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from little_dist.errors import InvalidInputError
from little_dist.sandbox.isolation import SandboxUnavailableError
from little_dist.sandbox.limits import SandboxLimits

__all__ = [
    "CGROUP_ENV",
    "LIMITS_ENV",
    "Cgroups",
    "CommandCgroup",
    "LimitsMode",
    "cgroups_for",
]

LimitsMode = Literal["cgroup2", "cgroup1", "rlimits"]
#: ``auto`` (the default), or the one mode the sandbox must have.
LIMITS_ENV: Final = "LITTLE_SANDBOX_LIMITS"
#: The delegated cgroup v2 folder commands' cgroups are made in (default: the worker's own).
CGROUP_ENV: Final = "LITTLE_SANDBOX_CGROUP"
#: Exit status of the prefix when a command could not enter its cgroup (nothing else ran).
ENTER_FAILED: Final = 125
ENTER_MARKER: Final = "little-sandbox: the command could not enter its cgroup"
_ROOT: Final = "little-sandbox"
_LEAF: Final = "little-worker"
_SWEEP_MAX: Final = 1000
_KILL_ROUNDS: Final = 200
_CPU_PERIOD_US: Final = 100_000


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read(path: Path) -> str:
    with open(path, encoding="ascii", errors="replace") as f:
        return f.read(65536)


def _pids(folder: Path) -> list[int]:
    try:
        return [int(line) for line in _read(folder / "cgroup.procs").split()]
    except (OSError, ValueError):
        return []


def _field(text: str, name: str) -> int:
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name and value.strip().isdigit():
            return int(value)
    return 0


def _kill_listed(folders: list[Path]) -> None:
    """SIGKILL every process the folders list, until they list none (a fork racing the kill
    is listed on the next round; ``pids.max`` bounds how many there can be)."""
    for _ in range(_KILL_ROUNDS):
        pids = {pid for folder in folders for pid in _pids(folder)}
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.001)


def _remove(folder: Path) -> bool:
    """Remove a cgroup folder (children first); False while processes are still leaving."""
    try:
        children = [entry.path for entry in os.scandir(folder) if entry.is_dir()]
    except FileNotFoundError:
        return True
    except OSError:
        return False
    done = all(_remove(Path(child)) for child in children[:_SWEEP_MAX])
    try:
        os.rmdir(folder)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return done


# --- where the hierarchies are --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Hierarchy:
    """One mounted hierarchy: ``version`` 2 (unified) or 1 with its ``controllers``, and the
    folder of this process's cgroup in it."""

    version: int
    controllers: frozenset[str]
    own: Path


def _unescape(path: str) -> str:
    return path.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")


def _hierarchies(mountinfo: str, cgroup: str) -> list[_Hierarchy]:
    """The hierarchies mounted here and this process's cgroup folder in each, from
    ``/proc/self/mountinfo`` and ``/proc/self/cgroup``."""
    own_v1: dict[frozenset[str], str] = {}
    own_v2: str | None = None
    for line in cgroup.splitlines():
        number, _, rest = line.partition(":")
        names, _, own = rest.partition(":")
        if number == "0" and names == "":
            own_v2 = own
        elif names:
            own_v1[frozenset(names.split(","))] = own
    found: list[_Hierarchy] = []
    seen: set[tuple[int, frozenset[str]]] = set()
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, extra = left.split(), right.split()
        if len(fields) < 5 or len(extra) < 3 or extra[0] not in ("cgroup", "cgroup2"):
            continue
        root, point = _unescape(fields[3]), _unescape(fields[4])
        path: str | None
        if extra[0] == "cgroup2":
            version, controllers, path = 2, frozenset[str](), own_v2
        else:
            options = set(extra[2].split(","))
            match = [names for names in own_v1 if names and names <= options]
            if not match:
                continue
            version, controllers, path = 1, match[0], own_v1[match[0]]
        if path is None or (version, controllers) in seen:
            continue
        if root != "/" and path != root and not path.startswith(root.rstrip("/") + "/"):
            continue  # a mount of some other part of the hierarchy
        relative = path[len(root) :] if root != "/" else path
        found.append(_Hierarchy(version, controllers, Path(point + relative).resolve()))
        seen.add((version, controllers))
    return found


def _read_proc(name: str) -> str:
    try:
        return _read(Path("/proc/self") / name)
    except OSError:
        return ""


# --- one command's cgroups ------------------------------------------------------------------


@dataclass
class CommandCgroup:
    """The cgroup folders of one command (one per hierarchy) and what they say of it."""

    mode: LimitsMode
    folders: list[Path]
    #: its cgroup2 folder (cgroup.kill, cpu.stat; memory.events in cgroup2 mode), if any
    unified: Path | None
    #: its v1 memory folder (memory.oom_control), in cgroup1 mode
    memory_v1: Path | None = None
    #: its v1 cpuacct folder (cpuacct.usage), in cgroup1 mode without a cgroup2 folder
    cpuacct_v1: Path | None = None
    _owner: Cgroups | None = field(default=None, repr=False)

    def enter_prefix(self) -> list[str]:
        """The argv prefix that puts the process in its cgroups, then executes the rest."""
        writes = " && ".join(
            f"echo $$ > {shlex.quote(str(folder / 'cgroup.procs'))}" for folder in self.folders
        )
        script = (
            f"{{ {writes}; }} || {{ echo {shlex.quote(ENTER_MARKER)} >&2; "
            f'exit {ENTER_FAILED}; }}; exec "$@"'
        )
        return ["/bin/sh", "-c", script, "little-sandbox-enter"]

    def pids(self) -> list[int]:
        """The command's processes now (this process's PID namespace)."""
        return sorted({pid for folder in self.folders for pid in _pids(folder)})

    def kill(self) -> None:
        """SIGKILL every process of the command, at once where the kernel can
        (``cgroup.kill``), else one by one until none is left."""
        if self.unified is not None:
            try:
                _write(self.unified / "cgroup.kill", "1")
                return
            except OSError:
                pass  # before Linux 5.14: no cgroup.kill
        _kill_listed(self.folders)

    def cpu_seconds(self) -> float | None:
        """CPU time the command's processes have used, all of them together."""
        try:
            if self.unified is not None:
                return _field(_read(self.unified / "cpu.stat"), "usage_usec") / 1e6
            if self.cpuacct_v1 is not None:
                return int(_read(self.cpuacct_v1 / "cpuacct.usage").strip() or 0) / 1e9
        except (OSError, ValueError):
            pass
        return None

    def oom_kills(self) -> int:
        """How many of its processes the kernel killed for want of memory."""
        try:
            if self.mode == "cgroup2" and self.unified is not None:
                return _field(_read(self.unified / "memory.events"), "oom_kill")
            if self.memory_v1 is not None:
                return _field(_read(self.memory_v1 / "memory.oom_control"), "oom_kill")
        except OSError:
            pass
        return 0

    def close(self) -> None:
        """Kill what is left and remove the folders; those whose processes are still leaving
        (a killed process takes a moment) at the next command, or at the worker's exit."""
        self.kill()
        left = [folder for folder in self.folders if not _remove(folder)]
        if left and self._owner is not None:
            self._owner.remove_later(left)


# --- one worker process's cgroups -----------------------------------------------------------


@dataclass
class _Tree:
    """This worker process's ``w-`` folder in one hierarchy."""

    hierarchy: _Hierarchy
    folder: Path  # <own>/little-sandbox/w-<pid>-<random>


class Cgroups:
    """The cgroup folders of one worker process, where its commands' cgroups are made."""

    def __init__(self, mode: LimitsMode, trees: list[_Tree], locks: list[int]) -> None:
        self.mode = mode
        self._trees = trees
        self._locks = locks  # each tree's flock'd w- folder: held for the process's life
        self._count = 0
        self._guard = threading.Lock()
        self._pending: list[Path] = []
        self._pid = os.getpid()

    def command(self, limits: SandboxLimits) -> CommandCgroup:
        """A new command's cgroups, limits written: its process enters them with
        :meth:`CommandCgroup.enter_prefix`; :meth:`CommandCgroup.close` removes them."""
        with self._guard:
            self._count += 1
            name = f"c{self._count}"
            pending, self._pending = self._pending, []
        self._pending_removed(pending)
        made: list[Path] = []
        command = CommandCgroup(self.mode, made, None, _owner=self)
        try:
            for tree in self._trees:
                folder = tree.folder / name
                os.mkdir(folder)
                made.append(folder)
                self._limit(tree.hierarchy, folder, limits, command)
        except OSError as exc:
            command.close()
            raise SandboxUnavailableError(
                f"the sandbox could not make a command's cgroup in {tree.folder}: {exc}"
            ) from exc
        return command

    def remove(self) -> None:
        """Remove this worker process's folders (at its exit; a crashed worker's are swept by
        the next worker to start)."""
        if os.getpid() != self._pid:
            return  # a forked child's exit: the folders are its parent's
        for tree in self._trees:
            _remove(tree.folder)

    def remove_later(self, folders: list[Path]) -> None:
        with self._guard:
            self._pending.extend(folders)

    def _pending_removed(self, folders: list[Path]) -> None:
        left = [folder for folder in folders if not _remove(folder)]
        if left:
            self.remove_later(left)

    def _limit(
        self, hierarchy: _Hierarchy, folder: Path, limits: SandboxLimits, command: CommandCgroup
    ) -> None:
        memory, tasks = str(int(limits.memory_bytes)), str(int(limits.processes))
        quota = max(1000, int(limits.cpu_cores * _CPU_PERIOD_US))
        if hierarchy.version == 2:
            command.unified = folder
            if self.mode != "cgroup2":
                return  # a hybrid layout's unified hierarchy: kill and CPU time only
            _write(folder / "memory.max", memory)
            _write(folder / "pids.max", tasks)
            for name, value in (
                ("memory.swap.max", "0"),
                ("memory.oom.group", "1"),
                ("cpu.max", f"{quota} {_CPU_PERIOD_US}"),
            ):
                with contextlib.suppress(FileNotFoundError):  # no swap, or no cpu controller
                    _write(folder / name, value)
            return
        names = hierarchy.controllers
        if "memory" in names:
            _write(folder / "memory.limit_in_bytes", memory)
            with contextlib.suppress(FileNotFoundError):  # swap accounting off
                _write(folder / "memory.memsw.limit_in_bytes", memory)
            command.memory_v1 = folder
        if "pids" in names:
            _write(folder / "pids.max", tasks)
        if "cpu" in names:
            # A parent's own quota may be lower: then the parent's holds, which is fine.
            with contextlib.suppress(OSError):
                _write(folder / "cpu.cfs_period_us", str(_CPU_PERIOD_US))
                _write(folder / "cpu.cfs_quota_us", str(quota))
        if "cpuacct" in names:
            command.cpuacct_v1 = folder


_found: dict[tuple[int, str, str], Cgroups | None] = {}
_found_lock = threading.Lock()


def cgroups_for(env: Mapping[str, str] | None = None) -> Cgroups | None:
    """This worker process's cgroups, set up on first use; None where commands run under
    ``rlimits``. Raises :class:`SandboxUnavailableError` when ``LITTLE_SANDBOX_LIMITS``
    requires a mode this host cannot give."""
    environ = os.environ if env is None else env
    wanted = environ.get(LIMITS_ENV) or "auto"
    if wanted not in ("auto", "cgroup2", "cgroup1", "rlimits"):
        raise InvalidInputError(
            f"{LIMITS_ENV}={wanted!r}: expected 'auto' (the default), 'cgroup2', 'cgroup1' "
            "or 'rlimits'"
        )
    delegated = environ.get(CGROUP_ENV) or ""
    key = (os.getpid(), wanted, delegated)  # a forked worker makes its own
    with _found_lock:
        if key in _found:
            return _found[key]
        found, reasons = _set_up(wanted, delegated)
        if found is None and wanted not in ("auto", "rlimits"):
            raise SandboxUnavailableError(
                f"{LIMITS_ENV}={wanted} but this host gives no such cgroup: "
                f"{'; '.join(reasons)} (see docs/operations.md, 'The sandbox')"
            )
        _found[key] = found
        return found


def _set_up(wanted: str, delegated: str) -> tuple[Cgroups | None, list[str]]:
    if wanted == "rlimits":
        return None, []
    hierarchies = _hierarchies(_read_proc("mountinfo"), _read_proc("cgroup"))
    reasons: list[str] = []
    if wanted in ("auto", "cgroup2"):
        try:
            return _cgroup2(hierarchies, delegated), reasons
        except OSError as exc:
            reasons.append(f"cgroup2: {exc}")
    if wanted in ("auto", "cgroup1"):
        try:
            return _cgroup1(hierarchies), reasons
        except OSError as exc:
            reasons.append(f"cgroup1: {exc}")
    return None, reasons


def _refused(message: str) -> OSError:
    return OSError(errno.EACCES, message)


def _cgroup2(hierarchies: list[_Hierarchy], delegated: str) -> Cgroups:
    unified = [h for h in hierarchies if h.version == 2]
    if not unified:
        raise _refused("no cgroup2 mount")
    own = unified[0].own
    if delegated:
        base = Path(delegated).resolve()
        if not (base / "cgroup.subtree_control").exists():
            raise _refused(f"{CGROUP_ENV}={delegated} is not a cgroup2 folder")
    else:
        base = own.parent if own.name == _LEAF else own
    controllers = set(_read(base / "cgroup.controllers").split())
    if not {"memory", "pids"} <= controllers:
        raise _refused(f"{base} offers the controllers {sorted(controllers)}, not memory and pids")
    if not os.access(base / "cgroup.subtree_control", os.W_OK):
        raise _refused(f"{base} is not writable by this worker (no delegation)")
    wanted = ["memory", "pids", *(["cpu"] if "cpu" in controllers else [])]
    if not set(wanted) <= set(_read(base / "cgroup.subtree_control").split()):
        if (base / "cgroup.type").exists():  # not the hierarchy's root: no processes of its own
            _evacuate(base)
        _enable(base, wanted)
    root = base / _ROOT
    with contextlib.suppress(FileExistsError):
        os.mkdir(root)
    _enable(root, wanted)
    hierarchy = _Hierarchy(2, frozenset(wanted), base)
    return _claim("cgroup2", [(hierarchy, root)], lambda folder: _enable(folder, wanted))


def _enable(folder: Path, controllers: list[str]) -> None:
    _write(folder / "cgroup.subtree_control", " ".join(f"+{name}" for name in controllers))


def _evacuate(base: Path) -> None:
    """Move every process of ``base`` into its leaf ``little-worker``: a cgroup v2 folder
    that hands controllers to children may hold no process itself."""
    leaf = base / _LEAF
    with contextlib.suppress(FileExistsError):
        os.mkdir(leaf)
    for _ in range(100):
        pids = _pids(base)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                _write(leaf / "cgroup.procs", str(pid))
    raise _refused(f"processes kept appearing in {base}: could not move them to {leaf}")


def _cgroup1(hierarchies: list[_Hierarchy]) -> Cgroups:
    v1 = [h for h in hierarchies if h.version == 1]
    names = set().union(*(h.controllers for h in v1)) if v1 else set()
    if not {"memory", "pids"} <= names:
        raise _refused("no cgroup v1 memory and pids hierarchies")
    # A hybrid layout's cgroup v2 folder, if writable: cgroup.kill, and cpu.stat (then a
    # cpuacct hierarchy of its own is one folder more per command for nothing).
    unified: list[tuple[_Hierarchy, Path]] = []
    for hierarchy in hierarchies:
        if hierarchy.version == 2:
            with contextlib.suppress(OSError):
                unified.append((hierarchy, _made(hierarchy.own / _ROOT)))
    wanted = {"memory", "pids", "cpu"} | (set() if unified else {"cpuacct"})
    useful = [h for h in v1 if h.controllers & wanted]
    # the memory hierarchy first: its w- folder carries the worker's lock
    useful.sort(key=lambda h: "memory" not in h.controllers)
    chosen: list[tuple[_Hierarchy, Path]] = []
    for hierarchy in useful:
        try:
            chosen.append((hierarchy, _made(hierarchy.own / _ROOT)))
        except OSError as exc:
            if hierarchy.controllers & {"memory", "pids"}:
                raise _refused(f"cannot make a cgroup in {hierarchy.own}: {exc}") from exc
            # cpu, cpuacct: optional
    return _claim("cgroup1", chosen + unified, lambda folder: None)


def _made(folder: Path) -> Path:
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder)
    return folder


def _claim(
    mode: LimitsMode,
    chosen: list[tuple[_Hierarchy, Path]],
    prepare: Callable[[Path], None],
) -> Cgroups:
    """Sweep crashed workers' folders, then make and lock this process's ``w-`` folders."""
    roots = [root for _, root in chosen]
    _sweep(roots)
    for _ in range(3):
        name = f"w-{os.getpid()}-{secrets.token_hex(4)}"
        trees: list[_Tree] = []
        locks: list[int] = []
        try:
            for hierarchy, root in chosen:
                folder = root / name
                os.mkdir(folder)
                trees.append(_Tree(hierarchy, folder))
                lock = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                locks.append(lock)
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                prepare(folder)
            # Another worker's sweep may have taken a folder for a dead one's between its
            # mkdir and our lock: then it is gone (or locked), and we try a new name.
            if all(
                os.stat(tree.folder).st_ino == os.fstat(lock).st_ino
                for tree, lock in zip(trees, locks, strict=True)
            ):
                cgroups = Cgroups(mode, trees, locks)
                atexit.register(cgroups.remove)
                return cgroups
        except (FileNotFoundError, BlockingIOError):
            pass
        except OSError:
            _give_up(trees, locks)
            raise
        _give_up(trees, locks)
    raise _refused(f"could not claim a worker folder in {roots[0]}")


def _give_up(trees: list[_Tree], locks: list[int]) -> None:
    for tree in trees:
        _remove(tree.folder)
    for lock in locks:
        os.close(lock)


def _sweep(roots: list[Path]) -> None:
    """Remove the ``w-`` folders no live worker holds (a crashed worker's), killing what is
    left in them. Each folder is judged by its own lock, never by a folder of the same name
    in another hierarchy (which may be another cgroup's, or none at all)."""
    for root in roots:
        try:
            names = sorted(
                entry.name
                for _, entry in zip(range(_SWEEP_MAX), os.scandir(root), strict=False)
                if entry.name.startswith("w-") and entry.is_dir(follow_symlinks=False)
            )
        except OSError:
            continue
        for name in names:
            with _unheld(root / name) as dead:
                if not dead:
                    continue
                commands = [Path(e.path) for e in _subfolders(root / name)]
                for folder in commands:
                    if (folder / "cgroup.kill").exists():
                        with contextlib.suppress(OSError):
                            _write(folder / "cgroup.kill", "1")
                _kill_listed(commands)
                _remove(root / name)


def _subfolders(folder: Path) -> list[os.DirEntry[str]]:
    try:
        return [e for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)][:_SWEEP_MAX]
    except OSError:
        return []


@contextlib.contextmanager
def _unheld(folder: Path) -> Iterator[bool]:
    """Whether no live worker holds ``folder``'s lock (held by us while inside)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:  # removed meanwhile: nothing to sweep
        yield False
        return
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
