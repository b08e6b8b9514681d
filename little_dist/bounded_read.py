"""Reading what a user names -- a file, or standard input -- with a bound.

Where a file is expected (a workflow file, ``--input FILE``, ``--from FILE``, a skill's files,
a script file) it must be a regular file: a FIFO blocks its reader until someone writes, and
forever when no one does; a device such as ``/dev/zero`` never ends; a directory is not a file.
Those are refused from what :func:`os.stat` says, before anything is opened, and again from
what the opened descriptor is (the path may have been swapped in between; the open does not
wait for a FIFO's writer). A regular file larger than the bound is refused from its size;
otherwise at most ``limit + 1`` bytes are read (a file that grows meanwhile is caught too).

Where a command documents reading a stream (``-`` for standard input), the stream is read up
to ``limit + 1`` bytes: one byte more than the bound means it is too big, and nothing more
is read.

Every refusal is a :class:`ReadRefusedError` with a one-line message naming what and where
(:class:`ReadTooLargeError` for the size), so the CLI prints it as it is, with no traceback.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import BinaryIO, Final

from little_dist.errors import InvalidInputError

__all__ = ["ReadRefusedError", "ReadTooLargeError", "read_file", "read_stdin", "read_stream"]

_CHUNK: Final = 1024 * 1024
_KINDS: Final = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class ReadRefusedError(InvalidInputError):
    """A file or stream that was not read: missing, unreadable, not a regular file, or too
    big. The message is one line naming it."""


class ReadTooLargeError(ReadRefusedError):
    """More than the bound: ``limit`` is the most that may be read."""

    def __init__(self, message: str, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


def read_file(
    path: str | os.PathLike[str],
    limit: int,
    *,
    label: str | None = None,
    why: str = "",
    stream_hint: str = "",
) -> bytes:
    """The bytes of the regular file at ``path`` (symlinks followed), at most ``limit``.

    ``label`` names it in messages (default: the path); ``why`` says where the bound comes
    from (``"LITTLE_MAX_INPUT_BYTES"``); ``stream_hint`` is added to the refusal of a file that
    is not a regular one, to say how the command reads a stream instead (``"give - to read
    standard input"``).
    """
    shown = os.fspath(path) if label is None else label
    try:
        before = os.stat(path)
    except OSError as error:
        raise _unreadable(shown, error) from None
    _check_regular(before, shown, stream_hint)
    _check_size(before.st_size, limit, shown, why)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        raise _unreadable(shown, error) from None
    try:
        opened = os.fstat(descriptor)
        _check_regular(opened, shown, stream_hint)
        _check_size(opened.st_size, limit, shown, why)
        chunks: list[bytes] = []
        held = 0
        while held <= limit:
            chunk = os.read(descriptor, min(_CHUNK, limit + 1 - held))
            if not chunk:
                break
            chunks.append(chunk)
            held += len(chunk)
    except OSError as error:
        raise _unreadable(shown, error) from None
    finally:
        os.close(descriptor)
    _check_size(held, limit, shown, why)
    return b"".join(chunks)


def read_stream(stream: BinaryIO, limit: int, *, label: str, why: str = "") -> bytes:
    """At most ``limit`` bytes of ``stream`` (read to its end, or refused at ``limit + 1``)."""
    try:
        data = stream.read(limit + 1)
    except OSError as error:
        raise _unreadable(label, error) from None
    _check_size(len(data), limit, label, why)
    return data


def read_stdin(limit: int, *, label: str = "<stdin>", why: str = "") -> bytes:
    """:func:`read_stream` of standard input."""
    if sys.stdin is None:  # started with standard input closed
        raise ReadRefusedError(f"cannot read {label}: there is no standard input")
    return read_stream(sys.stdin.buffer, limit, label=label, why=why)


def _check_regular(status: os.stat_result, shown: str, stream_hint: str) -> None:
    mode = status.st_mode
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise ReadRefusedError(f"cannot read {shown}: is a directory")
    kind = next((name for test, name in _KINDS if test(mode)), "not a file")
    hint = f"; {stream_hint}" if stream_hint else ""
    raise ReadRefusedError(f"cannot read {shown}: not a regular file ({kind}){hint}")


def _check_size(size: int, limit: int, shown: str, why: str) -> None:
    if size > limit:
        source = f" ({why})" if why else ""
        raise ReadTooLargeError(
            f"{shown}: more than {limit:,} bytes, too big to read{source}", limit
        )


def _unreadable(shown: str, error: OSError) -> ReadRefusedError:
    if isinstance(error, FileNotFoundError):
        reason = "no such file"
    elif isinstance(error, IsADirectoryError):
        reason = "is a directory"
    elif isinstance(error, PermissionError):
        reason = "permission denied"
    else:
        reason = (error.strerror or type(error).__name__).lower()
    return ReadRefusedError(f"cannot read {shown}: {reason}")
