"""The host's only way into a folder a sandboxed command can write: :class:`WritableFolder`.

A command may leave anything in a folder it can write: a symlink to a host file where the
host will read or write next, a FIFO that blocks the reader, a link to ``/dev/zero``, a tree
thousands of folders deep, a folder with mode 000, names that are not UTF-8. So the host never
touches such a folder by path. Every open, read, write, walk, chown and delete goes through
this module, which

* opens each path one name at a time, relative to a directory descriptor, with ``O_NOFOLLOW``
  (``O_DIRECTORY`` for folders): a link anywhere on the way is refused, never followed;
* reads only regular files, checked with ``fstat`` on the descriptor it reads from (opened
  ``O_NONBLOCK``, so a FIFO cannot block the open), and at most ``limit`` bytes;
* replaces what it writes (a link or FIFO in the way is removed, not written through);
* walks without recursion, with bounded depth and entries, holding one descriptor per level;
* removes trees of any depth without recursion and with a bounded number of descriptors
  (a folder past :data:`REMOVE_DEPTH` is renamed up to the top and removed from there), taking
  back permissions a command removed from its own folders.

What it refuses it says with :class:`UnsafeEntryError` (or the caller's error type, for a
walk past its bounds), one line naming the entry.

Which folders are sandbox-writable, and what the host does in each, is listed in
:data:`little_dist.sandbox.WRITABLE_MOUNTS`; a :class:`~little_dist.sandbox.mounts.Mount`
made writable at a target that list does not name is refused.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from little_dist.errors import InvalidInputError

__all__ = [
    "MAX_DEPTH",
    "MAX_ENTRIES",
    "REMOVE_DEPTH",
    "Entry",
    "UnsafeEntryError",
    "WritableFolder",
    "entry_kind",
    "remove_tree",
]

#: Folders deeper than this below a writable folder's root are refused by a walk.
MAX_DEPTH: Final = 64
#: Entries (files, folders, links, ...) a walk visits before it refuses the tree.
MAX_ENTRIES: Final = 200_000
#: Descriptors a removal holds at once: a folder deeper is first renamed up to the root.
REMOVE_DEPTH: Final = 32
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_PATH_FLAGS: Final = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK: Final = 1 << 20
_flattened = itertools.count()


class UnsafeEntryError(InvalidInputError):
    """An entry the host will not use as asked: a link, FIFO, socket or device where a file
    or folder is expected, a file over its size limit, or a path that leaves the folder."""


def entry_kind(mode: int) -> str:
    """What ``mode`` (an ``lstat`` mode) is, in words: ``"a file"``, ``"a symlink"``, ..."""
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _parts(relative: str) -> list[str]:
    """The names of ``relative`` (a path inside the folder), checked to stay inside."""
    if "\0" in relative or relative.startswith("/"):
        raise UnsafeEntryError(f"path {relative[:120]!r}: expected a relative path")
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafeEntryError(f"path {relative[:120]!r}: leaves its folder")
    return parts


@dataclass
class Entry:
    """One entry a walk found: its path relative to the folder, its ``lstat`` and, while the
    walk is at it, a way to read it (:meth:`read`) that never follows a link."""

    relative: str
    info: os.stat_result
    depth: int
    _dir_fd: int = field(repr=False)
    _name: str = field(repr=False)

    @property
    def kind(self) -> str:
        return entry_kind(self.info.st_mode)

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.info.st_mode)

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.info.st_mode)

    @property
    def utf8(self) -> bool:
        """Whether the path is valid UTF-8 (a name that is not cannot go into an event)."""
        try:
            self.relative.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True

    def read(self, limit: int) -> bytes:
        """The file's bytes (at most ``limit``; more is :class:`UnsafeEntryError`); only
        valid during the walk that yielded this entry."""
        return _read_at(self._dir_fd, self._name, limit, self.relative)


class WritableFolder:
    """A host folder a sandboxed command can write (see the module docstring).

    ``root`` itself is made by the host and must be a real folder (not a link). Every method
    works relative to a descriptor of it opened here; :meth:`close` it (or use ``with``).
    """

    def __init__(self, root: Path | str) -> None:
        self.path = Path(root)
        self._fd = -1
        try:
            self._fd = os.open(self.path, _DIR_FLAGS)
        except PermissionError:  # a command (as the worker's own user) took the rights away
            self._fd = _taking_back(
                os.open(self.path, _PATH_FLAGS), lambda: os.open(self.path, _DIR_FLAGS)
            )
        except OSError as exc:
            raise UnsafeEntryError(
                f"{self.path}: not a folder the host can use ({_said(exc)})"
            ) from None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> WritableFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # -- one path ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def folder(
        self, relative: str = "", *, make: bool = False, mode: int = 0o755, clear_way: bool = False
    ) -> Iterator[int]:
        """A descriptor of folder ``relative`` (made when ``make``, one name at a time, each
        with ``mode``), never through a link; :class:`UnsafeEntryError` when a name on the
        way is not a folder, unless ``clear_way``: then what is there is removed (a path the
        host owns by contract, such as where it writes a result)."""
        fd = os.dup(self._fd)
        try:
            for part in _parts(relative):
                made = False
                if clear_way:
                    with contextlib.suppress(FileNotFoundError):
                        info = os.stat(part, dir_fd=fd, follow_symlinks=False)
                        if not stat.S_ISDIR(info.st_mode):
                            os.unlink(part, dir_fd=fd)
                if make:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, mode, dir_fd=fd)
                        made = True
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise UnsafeEntryError(
                        f"{relative[:120]!r}: {part[:60]!r} is {_what(fd, part, exc)}, not a folder"
                    ) from None
                os.close(fd)
                fd = child
                if made:
                    os.fchmod(fd, mode)  # past the umask, on the folder opened (not a name)
            yield fd
        finally:
            os.close(fd)

    def read(self, relative: str, limit: int) -> bytes:
        """The bytes of regular file ``relative``, at most ``limit`` of them."""
        *folders, name = _parts(relative) or [""]
        if not name:
            raise UnsafeEntryError(f"path {relative!r}: names no file")
        with self.folder("/".join(folders)) as fd:
            return _read_at(fd, name, limit, relative)

    def read_if_file(self, relative: str, limit: int) -> bytes | None:
        """As :meth:`read`, but None when there is no such file (nothing, or not a file)."""
        try:
            return self.read(relative, limit)
        except UnsafeEntryError:
            return None

    def write(
        self, relative: str, data: bytes, *, mode: int = 0o644, clear_way: bool = False
    ) -> None:
        """Make ``relative`` a regular file holding ``data`` (its folders made as needed):
        whatever was at that name (a link, a FIFO, a file) is replaced, never written
        through; a folder there, or a non-folder on the way, is :class:`UnsafeEntryError`,
        unless ``clear_way`` (see :meth:`folder`): then they are removed too."""
        *folders, name = _parts(relative) or [""]
        if not name:
            raise UnsafeEntryError(f"path {relative!r}: names no file")
        with self.folder("/".join(folders), make=True, clear_way=clear_way) as fd:
            _remove_entry(fd, name, relative, folders_too=clear_way)
            out = os.open(
                name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                mode,
                dir_fd=fd,
            )
            try:
                os.fchmod(out, mode)
                view = memoryview(data)
                while view:
                    view = view[os.write(out, view) :]
            finally:
                os.close(out)

    def make_folders(self, relative: str, mode: int = 0o755) -> bool:
        """Make folder ``relative`` and those above it; False (nothing more made) when a
        name on the way is a link or not a folder."""
        try:
            with self.folder(relative, make=True, mode=mode):
                return True
        except UnsafeEntryError:
            return False

    def kind_of(self, relative: str) -> str | None:
        """What ``relative`` is (:func:`entry_kind`), None when it does not exist or a name
        above it is not a folder."""
        *folders, name = _parts(relative) or [""]
        try:
            with self.folder("/".join(folders)) as fd:
                if not name:
                    return "a folder"
                return entry_kind(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
        except (UnsafeEntryError, FileNotFoundError, NotADirectoryError):
            return None

    # -- the whole tree ----------------------------------------------------------------------

    def walk(
        self,
        *,
        max_depth: int = MAX_DEPTH,
        max_entries: int = MAX_ENTRIES,
        error: Callable[[str], Exception] = UnsafeEntryError,
    ) -> Iterator[Entry]:
        """Every entry below the root, folders before what they hold, names sorted; links
        and other non-folders are yielded, never entered. Past ``max_depth`` folders or
        ``max_entries`` entries it raises ``error(message)``."""
        stack: list[tuple[int, str, Iterator[str]]] = []
        fd = os.dup(self._fd)
        stack.append((fd, "", iter(sorted(os.listdir(fd)))))
        seen = 0
        try:
            while stack:
                fd, prefix, names = stack[-1]
                name = next(names, None)
                if name is None:
                    os.close(fd)
                    stack.pop()
                    continue
                seen += 1
                if seen > max_entries:
                    raise error(f"more than {max_entries} entries in {self.path.name}/")
                relative = prefix + name
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                depth = len(stack)
                yield Entry(relative, info, depth, fd, name)
                if not stat.S_ISDIR(info.st_mode):
                    continue
                if depth >= max_depth:
                    raise error(f"folders deeper than {max_depth} levels at {relative[:120]!r}")
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                        continue  # gone or replaced meanwhile: nothing to enter
                    if exc.errno != errno.EACCES:
                        raise
                    child = _open_taking_back(fd, name)
                stack.append((child, relative + "/", iter(sorted(os.listdir(child)))))
        finally:
            for fd, _, _ in stack:
                os.close(fd)

    def clear(self) -> None:
        """Remove everything inside the root (the root stays)."""
        _clear(self._fd, self._fd)

    def chown_all(self, uid: int, gid: int) -> None:
        """Make the root and everything below it ``uid``'s, links themselves included
        (never what they point to)."""
        os.fchown(self._fd, uid, gid)
        for entry in self.walk():
            with contextlib.suppress(FileNotFoundError):
                os.chown(entry._name, uid, gid, dir_fd=entry._dir_fd, follow_symlinks=False)


def remove_tree(path: Path | str) -> None:
    """Remove folder ``path`` and everything in it, however deep, never following a link,
    taking back permissions its contents removed; nothing when it does not exist. ``path``
    itself must not be a link (a link there is removed, not followed)."""
    path = Path(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(path)
        return
    with WritableFolder(path) as folder:
        folder.clear()
    os.rmdir(path)


# -- helpers ---------------------------------------------------------------------------------


def _said(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a symlink"
    if exc.errno == errno.ENOTDIR:
        return "not a folder"
    if exc.errno == errno.ENOENT:
        return "missing"
    return exc.strerror or str(exc)


def _what(dir_fd: int, name: str, exc: OSError) -> str:
    """What ``name`` is, for a message, when opening it as asked failed with ``exc``."""
    try:
        return entry_kind(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return _said(exc)


def _read_at(dir_fd: int, name: str, limit: int, shown: str) -> bytes:
    try:
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        except PermissionError:  # the command's own file, its rights taken away
            fd = _taking_back(
                os.open(name, _PATH_FLAGS, dir_fd=dir_fd),
                lambda: os.open(name, _FILE_FLAGS, dir_fd=dir_fd),
            )
    except OSError as exc:
        raise UnsafeEntryError(
            f"{shown[:120]!r}: {_what(dir_fd, name, exc)}, not a file to read"
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeEntryError(f"{shown[:120]!r}: {entry_kind(info.st_mode)}, not a file")
        if info.st_size > limit:
            raise UnsafeEntryError(f"{shown[:120]!r}: {info.st_size} bytes, over {limit}")
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        got = 0
        while got <= limit:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:  # it grew while read
            raise UnsafeEntryError(f"{shown[:120]!r}: over {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _taking_back(path_fd: int, reopen: Callable[[], int]) -> int:
    """Give an entry its owner's rights back, then ``reopen`` it: a command running as the
    worker's own user (no root) may have taken them from its own files and folders. The
    change is made on the entry ``path_fd`` (``O_PATH``, opened without following links)
    holds, through ``/proc/self/fd``: never on what a link points to, and only on a file or
    folder."""
    try:
        mode = os.fstat(path_fd).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise UnsafeEntryError(f"{entry_kind(mode)} where a file or folder was expected")
        os.chmod(f"/proc/self/fd/{path_fd}", stat.S_IMODE(mode) | 0o700)
    finally:
        os.close(path_fd)
    return reopen()


def _open_taking_back(parent: int, name: str) -> int:
    return _taking_back(
        os.open(name, _PATH_FLAGS | os.O_DIRECTORY, dir_fd=parent),
        lambda: os.open(name, _DIR_FLAGS, dir_fd=parent),
    )


def _open_child(parent: int, name: str) -> int:
    """A descriptor of folder ``name`` in ``parent`` that can be emptied (owner rwx)."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except PermissionError:
        return _open_taking_back(parent, name)
    if os.geteuid() != 0 and os.fstat(fd).st_mode & 0o700 != 0o700:
        os.fchmod(fd, 0o700)
    return fd


def _remove_entry(dir_fd: int, name: str, shown: str, *, folders_too: bool) -> None:
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    if not folders_too:
        raise UnsafeEntryError(f"{shown[:120]!r}: a folder, expected a file")
    child = _open_child(dir_fd, name)
    try:
        _clear(child, child)
    finally:
        os.close(child)
    os.rmdir(name, dir_fd=dir_fd)


def _move_up(parent: int, name: str, root: int) -> str:
    """Rename folder ``name`` in ``parent`` into ``root`` under a fresh name; that name."""
    for _ in range(16):
        moved = f".little-removing-{os.urandom(8).hex()}"
        try:
            os.rename(name, moved, src_dir_fd=parent, dst_dir_fd=root)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                continue  # a name the command made: try another
            raise
        return moved
    raise UnsafeEntryError(f"{name[:60]!r}: cannot be moved aside to be removed")


def _clear(fd: int, root: int) -> None:
    """Remove everything in folder ``fd``, without recursion. A folder :data:`REMOVE_DEPTH`
    levels down is renamed into ``root`` (a folder on the same file system, ``fd`` or above
    it) and emptied from there later, so at most that many descriptors are open at once
    however deep the tree is."""
    work: list[str | None] = [None]  # None: fd itself; a name: a folder moved into root
    while work:
        item = work.pop()
        start = os.dup(fd) if item is None else _open_child(root, item)
        if item is None and os.geteuid() != 0 and os.fstat(start).st_mode & 0o700 != 0o700:
            os.fchmod(start, 0o700)
        stack: list[tuple[int, str | None, Iterator[str]]] = [
            (start, None, iter(os.listdir(start)))
        ]
        try:
            while stack:
                current, own_name, names = stack[-1]
                name = next(names, None)
                if name is None:
                    stack.pop()
                    os.close(current)
                    if own_name is not None:
                        os.rmdir(own_name, dir_fd=stack[-1][0])
                    continue
                try:
                    info = os.stat(name, dir_fd=current, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if not stat.S_ISDIR(info.st_mode):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=current)
                    continue
                if len(stack) >= REMOVE_DEPTH:
                    work.append(_move_up(current, name, root))
                    continue
                child = _open_child(current, name)
                stack.append((child, name, iter(os.listdir(child))))
        finally:
            for current, _, _ in stack:
                with contextlib.suppress(OSError):
                    os.close(current)
        if item is not None:
            os.rmdir(item, dir_fd=root)
