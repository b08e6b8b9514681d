"""The test process's fork server ("zygote"): ``little`` processes without their start-up cost.

Started by :mod:`tests.zygote` (``python tests/zygote_server.py FD PARENT_PID PDEATHSIG``),
one per pytest process that needs it. It imports once what every ``little worker``,
``little scheduler`` and ``little submit`` would import again (litellm, 2.5 to 3.5 CPU-seconds
by itself; Celery, kombu, redis, boto3; the package's fleet modules), then forks a child per
request. The child becomes what ``python -m MODULE ARGS`` (``little_dist.cli``, mostly) would
have been: its own standard input and outputs (passed over the socket), working directory,
environment (all of it replaced; ``/proc/PID/environ`` still shows the zygote's),
``sys.argv``, ``sys.path``, a session of its own when asked, and ``PR_SET_PDEATHSIG``
(SIGKILL when the zygote ends: the zygote has it towards its pytest process, so the child
still dies with the test session). Then it runs the module as ``__main__`` and exits with
its exit code (:func:`run_module`).

The zygote forks only single-threaded, with no connection open: it imports modules, nothing
more (no Redis or S3 client, no thread; checked at start). Standard library only, apart from
the modules it preloads; it does not import the ``tests`` package.

The protocol, on ``SOCK_SEQPACKET`` sockets (one message each):

* the control socket (FD, from the client): the zygote sends ``ready``; each request is a
  JSON object (``module``, ``args``, ``env``, ``cwd``, ``new_session``, ``name``) with four
  file descriptors: a reply socket, then the child's stdin, stdout and stderr. End of file: the
  zygote exits.
* the reply socket: ``pid N`` with a pidfd of the child (signals sent through it never reach
  another process that reused the pid), then ``exit CODE`` once the zygote has reaped it
  (CODE as ``subprocess`` gives it: negative for a signal), or ``error TEXT`` if the fork
  failed.
"""

from __future__ import annotations

import atexit
import codecs
import contextlib
import ctypes
import gc
import importlib
import io
import json
import os
import runpy
import select
import signal
import socket
import sys
import tempfile
import threading

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
#: What every ``little`` process of the tests imports (``little_dist.cli`` imports the rest of
#: its commands when it builds its parser).
PRELOAD = (
    "litellm",
    "celery",
    "celery.app.base",
    "celery.apps.worker",
    "celery.bin.celery",
    "celery.bin.worker",
    "celery.concurrency.prefork",
    "celery.concurrency.thread",
    "celery.worker.consumer",
    "celery.worker.strategy",
    "celery.events",
    "kombu.transport.redis",
    "redis",
    "boto3",
    "boto3.s3.transfer",
    "botocore.session",
    "little_dist.cli",
    "little_dist.fleet.app",
    "little_dist.fleet.client",
    "little_dist.fleet.scheduler",
    "little_dist.fleet.tasks",
    "little_dist.fleet.worker_slots",
    "little_dist.fleet.app_registry",
    "little_dist.world.factory",
    "little_dist.testing.scripted",
    "little_dist.testing._provider",
    "little_dist.testing.guard",
)


def _prctl(option: int, value: int | bytes) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option})")


def _open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def preload() -> None:
    """Import :data:`PRELOAD` and build the CLI's parser (which imports every command).

    A module this interpreter cannot import is left out (said in the zygote's log): a child
    that needs it fails to import it as a new process would. (The zygote of an unprivileged
    user runs the interpreter that user finds, which may lack what the venv's has: Debian's
    Python 3.11.2 and redis-py's asyncio part, which needs ``async_timeout`` before 3.11.3.)
    """
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception as exc:
            print(f"zygote: not preloaded: {name}: {exc!r}", file=sys.stderr)
    try:
        from little_dist.cli import build_parser

        build_parser()
    except Exception as exc:
        print(f"zygote: the CLI's parser not built: {exc!r}", file=sys.stderr)


def serve(control: socket.socket, owned: set[int]) -> dict[str, object] | None:
    """Fork a child per request until the control socket ends (then ``None``); in a child,
    the request it is to run."""
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, reply socket)
    while True:
        readable, _, _ = select.select([control, *children], [], [])
        for ready in readable:
            if ready is not control:
                pid, reply = children.pop(ready)
                _, status = os.waitpid(pid, 0)
                os.close(ready)
                _send(reply, f"exit {os.waitstatus_to_exitcode(status)}")
                reply.close()
                continue
            message, fds, flags, _ = socket.recv_fds(control, 1 << 20, 8)
            if not message:
                return None
            reply = socket.socket(fileno=fds[0])
            stdio = fds[1:]
            if flags & socket.MSG_TRUNC or len(stdio) != 3:
                _send(reply, "error the request was cut short")
                for fd in stdio:
                    os.close(fd)
                reply.close()
                continue
            request = json.loads(message)
            zygote = os.getpid()
            # The child closes the pipe once it is set up (its session, its descriptors): the
            # test gets the pid then, as subprocess.Popen returns only after the exec.
            setup_done, child_ready = os.pipe()
            try:
                pid = os.fork()
            except OSError as exc:
                _send(reply, f"error fork: {exc}")
                pid = -1
            if pid == 0:
                os.close(setup_done)
                # Nothing of the zygote's stays open in the child but what its modules own:
                # closed through their objects, before any number can be reused.
                for pidfd, (_, other) in children.items():
                    other.close()
                    os.close(pidfd)
                reply.close()
                control.close()
                _become_child(request, stdio, zygote=zygote, owned=owned | {child_ready})
                os.close(child_ready)
                return request
            os.close(child_ready)
            if pid > 0:
                os.read(setup_done, 1)  # end of file: the child is set up (or it died)
            os.close(setup_done)
            for fd in stdio:
                os.close(fd)
            if pid < 0:
                reply.close()
                continue
            pidfd = os.pidfd_open(pid)
            _send(reply, f"pid {pid}", [pidfd])
            children[pidfd] = (pid, reply)


def _send(reply: socket.socket, text: str, fds: list[int] | None = None) -> None:
    with contextlib.suppress(OSError):  # the test no longer listens (it ended, or closed)
        socket.send_fds(reply, [text.encode()], fds or [])


def _become_child(
    request: dict[str, object], stdio: list[int], *, zygote: int, owned: set[int]
) -> None:
    """In a forked child: become the process the request describes (not yet running)."""
    if request.get("new_session"):
        os.setsid()
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != zygote:  # the zygote ended before the signal was set
        os._exit(1)
    for target, fd in enumerate(stdio):
        os.dup2(fd, target)
    for fd in _open_fds() - {0, 1, 2} - owned:
        with contextlib.suppress(OSError):  # (the listing's own descriptor, closed by now)
            os.close(fd)  # the passed descriptors (now 0-2), as a subprocess with close_fds
    env = request["env"]
    assert isinstance(env, dict)
    os.chdir(str(request["cwd"]))
    os.environ.clear()
    os.environ.update(env)
    args = request["args"]
    assert isinstance(args, list)
    here = os.getcwd()
    sys.argv = ["-m", *args]  # (runpy puts the module's file first, as python -m does)
    sys.path[:] = [here, *_pythonpath(env), *_ZYGOTE_TAIL]
    tempfile.tempdir = None  # from TMPDIR again, on first use
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    sys.pycache_prefix = env.get("PYTHONPYCACHEPREFIX") or None
    importlib.invalidate_caches()
    _fresh_stdio(env)
    name = str(request.get("name") or "little")
    _prctl(_PR_SET_NAME, name.encode()[:15])


def _pythonpath(env: dict[str, str]) -> list[str]:
    return [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


def _fresh_stdio(env: dict[str, str]) -> None:
    """Standard streams on fds 0-2 as Python makes them at start-up for ``env`` (buffering,
    encoding, error handlers); the log handlers that wrote to the zygote's follow."""
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    encoding, _, errors = (env.get("PYTHONIOENCODING") or "").partition(":")
    encoding = codecs.lookup(encoding).name if encoding else _STDIO_DEFAULTS[0]
    old = {id(sys.stdout): 1, id(sys.stderr): 2}
    streams = []
    for fd in (0, 1, 2):
        tty = os.isatty(fd)
        # The standard streams of the process from now on (never closed, as Python's own).
        if fd == 0:
            raw: io.RawIOBase | io.BufferedIOBase = open(fd, "rb", closefd=False)  # noqa: SIM115
        else:
            raw = open(fd, "wb", 0 if unbuffered else -1, closefd=False)  # noqa: SIM115
        stream = io.TextIOWrapper(
            raw,  # type: ignore[arg-type]
            encoding=encoding,
            errors="backslashreplace" if fd == 2 else (errors or _STDIO_DEFAULTS[1]),
            newline="\n",
            line_buffering=not unbuffered and fd != 0 and (tty or fd == 2),
            write_through=unbuffered and fd != 0,
        )
        streams.append(stream)
    sys.stdin = sys.__stdin__ = streams[0]
    sys.stdout = sys.__stdout__ = streams[1]
    sys.stderr = sys.__stderr__ = streams[2]
    import logging

    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            fd = old.get(id(getattr(handler, "stream", None)))
            if fd is not None:
                handler.stream = streams[fd]  # type: ignore[attr-defined]


#: The zygote's own stdout encoding and error handler (no PYTHONIOENCODING: the locale's).
_STDIO_DEFAULTS = (sys.stdout.encoding, sys.stdout.errors)
_ZYGOTE_TAIL: list[str] = []


def main(argv: list[str]) -> dict[str, object] | None:
    """The zygote's life; in a forked child, the request it is to run."""
    control = socket.socket(fileno=int(argv[1]))
    parent = int(argv[2])
    if argv[3] == "1":
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            return None
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the session's Ctrl-C is the tests' to handle
    before = _open_fds()
    preload()
    owned = _open_fds() - before
    if threading.active_count() != 1:
        print(f"zygote: preloading started threads: {threading.enumerate()}", file=sys.stderr)
        return None
    own = {os.path.abspath(p) for p in _pythonpath(dict(os.environ))}
    _ZYGOTE_TAIL[:] = [p for p in sys.path[1:] if os.path.abspath(p) not in own]
    gc.collect()
    gc.freeze()  # the preloaded heap stays shared: no collection in a child touches it
    _send(control, "ready")
    request = serve(control, owned)
    if request is not None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return request


def run_module(module: str) -> int:
    """In a child: ``python -m MODULE`` (``sys.argv`` set), and the exit code the interpreter
    would end with. Then what the interpreter does at exit but its finalization (0.1
    CPU-second of tearing down a heap the child shares with the zygote, copied page by page):
    non-daemon threads joined, ``atexit`` functions run, streams flushed, as
    ``multiprocessing`` ends its children."""
    code: object = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code & 0xFF


if __name__ == "__main__":
    _request = main(sys.argv)
    os._exit(0 if _request is None else run_module(str(_request["module"])))
