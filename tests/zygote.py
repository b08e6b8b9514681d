"""``little`` processes for the tests, forked from a zygote instead of started from scratch.

Every ``little worker``, ``little scheduler`` or ``little submit`` started as a new Python
process imports litellm, Celery, boto3 and the package again: 0.5 to 3.5 CPU-seconds each,
for about 150 such processes in the suite. :func:`spawn` and :func:`run` start them from this
pytest process's zygote (:mod:`tests.zygote_server`, started on first use), which has
imported all that once and forks: the child is a real process (a pid to signal, wait for and
kill; its own session when asked; its own environment, working directory and standard
streams), it runs ``little_dist.cli.main`` as ``python -m little_dist.cli`` would, and it dies
with the zygote, which dies with this process (``PR_SET_PDEATHSIG``) and the session's reaper.

:func:`spawn` returns a :class:`ZygoteProcess`, which answers what the tests ask of a
``subprocess.Popen`` (``pid``, ``poll``, ``wait``, ``returncode``, ``send_signal``,
``terminate``, ``kill``). Its command line in ``ps`` is the zygote's; its name
(``/proc/PID/comm``) is the one given.

Not through the zygote (a real ``python -m little_dist.cli`` subprocess instead): with
``LITTLE_TEST_ZYGOTE=0``, and for an environment whose interpreter settings (``PYTHON*``
variables other than the ones a child applies itself, ``LITELLM_*``, the locale) differ from
the zygote's, since those take effect when an interpreter starts. Tests of the installed
command itself (its exit codes, its argument parsing as a shell runs it) start it with
``subprocess`` directly.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = [
    "SERVER",
    "Zygote",
    "ZygoteProcess",
    "little_argv",
    "process_name",
    "run",
    "spawn",
    "zygote",
]

ROOT = Path(__file__).resolve().parents[1]
SERVER = Path(__file__).with_name("zygote_server.py")
#: Set to ``0`` to start every ``little`` process from scratch.
ENABLE_ENV = "LITTLE_TEST_ZYGOTE"
#: Variables a child applies itself (the rest of ``PYTHON*`` must be the zygote's).
_CHILD_APPLIES = {
    "PYTHONPATH",
    "PYTHONUNBUFFERED",
    "PYTHONIOENCODING",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONPYCACHEPREFIX",
    "PYTHONBREAKPOINT",
}
#: How long the zygote may take to import what it preloads (on a loaded machine).
START_TIMEOUT = 180.0

FileArg = int | IO[Any] | None


#: The module ``little`` runs.
CLI = "little_dist.cli"


def little_argv(*args: str) -> list[str]:
    """The argv that runs ``little ARGS...`` with this interpreter."""
    return [sys.executable, "-m", CLI, *args]


def process_name(args: Sequence[str]) -> str:
    """The name (``/proc/PID/comm``, 15 bytes at most) of a forked ``little ARGS``:
    ``little worker``, ``little schedule``."""
    return " ".join(["little", *args[:1]])[:15]


def _startup_settings(env: Mapping[str, str]) -> dict[str, str]:
    # The package imports litellm only after setting LITELLM_LOCAL_MODEL_COST_MAP=True where
    # it is unset, as the zygote did: unset is the same as that.
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", **env}
    return {
        key: value
        for key, value in env.items()
        if (key.startswith("PYTHON") and key not in _CHILD_APPLIES)
        or key.startswith("LITELLM_")
        or key in ("LANG", "LC_ALL", "LC_CTYPE")
    }


class ZygoteProcess:
    """A ``little`` process the zygote forked: what the tests use of ``subprocess.Popen``."""

    def __init__(self, args: list[str], pid: int, pidfd: int, reply: socket.socket) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd = pidfd
        self._reply = reply
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<ZygoteProcess pid={self.pid} returncode={self.returncode}>"

    def _read_status(self, timeout: float | None) -> bool:
        """Take the exit status if the zygote sent it within ``timeout`` (lock held)."""
        if self.returncode is not None:
            return True
        readable, _, _ = select.select([self._reply], [], [], timeout)
        if not readable:
            return False
        message = self._reply.recv(256).decode()
        if message.startswith("exit "):
            self.returncode = int(message.split()[1])
        else:  # the zygote is gone (then the kernel killed its children): wait for the end
            select.select([self._pidfd], [], [], 10)
            self.returncode = -signal.SIGKILL
        self._reply.close()
        os.close(self._pidfd)
        return True

    def poll(self) -> int | None:
        with self._lock:
            self._read_status(0)
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if self._read_status(left):
                    assert self.returncode is not None
                    return self.returncode
                if deadline is not None and time.monotonic() >= deadline:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0)

    def send_signal(self, sig: int) -> None:
        with self._lock:
            if self._read_status(0):
                return  # ended: its pid may be another process's now
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __del__(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(OSError):
                self._reply.close()
                os.close(self._pidfd)


class Zygote:
    """A running zygote (:mod:`tests.zygote_server`) and the socket to ask it for children.

    ``user``: a uid the zygote runs as from its start (``setpriv``, from root), so that its
    children are what a new process of that user would be: the interpreter that user finds
    (one under ``/root`` is not theirs to read: another, or the venv's fallback), the
    modules it can read, no privilege ever held."""

    def __init__(self, user: int | None = None) -> None:
        self.user = user
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # What the zygote itself writes (its errors), open as long as the zygote runs.
        self._log = tempfile.TemporaryFile()  # noqa: SIM115
        main_thread = threading.current_thread() is threading.main_thread()
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("LITTLE_", "AWS_", "CELERY_"))
        }
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
        env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        env["PYTHONUNBUFFERED"] = "1"
        env.pop("PYTHONIOENCODING", None)  # its streams are the locale's, which children start from
        self.env = env
        argv = [
            sys.executable,
            str(SERVER),
            str(theirs.fileno()),
            str(os.getpid()),
            "1" if main_thread else "0",
        ]
        if user is not None:
            argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
        self.process = subprocess.Popen(
            argv,
            pass_fds=[theirs.fileno()],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a terminal's Ctrl-C is for the tests
        )
        theirs.close()
        self._control = ours
        self._lock = threading.Lock()
        readable, _, _ = select.select([ours], [], [], START_TIMEOUT)
        if not readable or ours.recv(64) != b"ready":
            said = self.log()[-4000:]
            self.close()
            raise RuntimeError(f"the test zygote did not start:\n{said}")
        self.startup = _startup_settings(env)

    def log(self) -> str:
        """What the zygote wrote (its own errors, not its children's)."""
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")

    def serves(self, env: Mapping[str, str], user: int | None = None) -> bool:
        """Whether a child of this zygote can be what a new process with ``env`` (as
        ``user``) would be: the zygote runs as that user, and it started with ``env``'s
        interpreter settings."""
        if self.process.poll() is not None or user != self.user:
            return False
        return _startup_settings(env) == self.startup

    def spawn(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | os.PathLike[str],
        stdin: FileArg = None,
        stdout: FileArg = None,
        stderr: FileArg = None,
        new_session: bool = False,
        name: str | None = None,
        module: str = CLI,
        user: int | None = None,
    ) -> ZygoteProcess:
        """Fork ``python -m MODULE ARGS`` (see :func:`spawn`); ``user`` must be the
        zygote's."""
        if user != self.user:
            raise ValueError(f"this zygote runs as {self.user}, not {user}: zygote({user})")
        opened: list[int] = []

        def fd_of(value: FileArg, default: int) -> int:
            if value is None:
                return default
            if value == subprocess.DEVNULL:
                opened.append(os.open(os.devnull, os.O_RDWR))
                return opened[-1]
            if isinstance(value, int):
                return value
            return value.fileno()

        stdin_fd = fd_of(stdin, 0)
        stdout_fd = fd_of(stdout, 1)
        stderr_fd = stdout_fd if stderr == subprocess.STDOUT else fd_of(stderr, 2)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        request = {
            "module": module,
            "args": list(args),
            "env": dict(env),
            "cwd": str(Path(cwd).resolve()),
            "new_session": new_session,
            "name": name or (process_name(args) if module == CLI else module),
        }
        import json

        try:
            with self._lock:
                socket.send_fds(
                    self._control,
                    [json.dumps(request).encode()],
                    [theirs.fileno(), stdin_fd, stdout_fd, stderr_fd],
                )
        finally:
            theirs.close()
            for fd in opened:
                os.close(fd)
        readable, _, _ = select.select([ours], [], [], 60)
        message, fds, _, _ = socket.recv_fds(ours, 256, 1) if readable else (b"", [], 0, None)
        text = message.decode()
        if not text.startswith("pid ") or len(fds) != 1:
            ours.close()
            raise RuntimeError(f"the test zygote did not start {module} {args!r}: {text!r}")
        argv = [sys.executable, "-m", module, *args]
        return ZygoteProcess(argv, int(text.split()[1]), fds[0], ours)

    def close(self) -> None:
        self._control.close()  # the zygote's end of file: it exits, its children with it
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


_zygotes: dict[int | None, Zygote] = {}
_zygote_lock = threading.Lock()


def zygote(user: int | None = None) -> Zygote | None:
    """This process's zygote (``user``'s: one that runs as that uid, which needs root), started
    on first use; ``None`` when turned off."""
    if os.environ.get(ENABLE_ENV, "1") == "0" or sys.platform != "linux":
        return None
    if user is not None and os.geteuid() != 0:
        return None
    with _zygote_lock:
        found = _zygotes.get(user)
        if found is None or found.process.poll() is not None:
            found = _zygotes[user] = Zygote(user)
            import atexit

            atexit.register(found.close)
        return found


def spawn(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str],
    stdin: FileArg = None,
    stdout: FileArg = None,
    stderr: FileArg = None,
    new_session: bool = False,
    name: str | None = None,
    module: str = CLI,
    user: int | None = None,
) -> ZygoteProcess | subprocess.Popen[bytes]:
    """Start ``python -m MODULE ARGS`` (``little ARGS``) with ``env`` (all of it) in ``cwd``:
    from the zygote where it can be the same process, else as that command. ``stdin``,
    ``stdout`` and ``stderr`` as ``subprocess.Popen`` takes them, but no ``PIPE``;
    ``new_session``: its own session and process group (``start_new_session``); ``user``: as
    that uid and gid, without other groups (``setpriv --reuid=U --regid=U --clear-groups``,
    from root)."""
    server = zygote(user)
    if server is not None and server.serves(env, user):
        return server.spawn(
            args,
            env=env,
            cwd=cwd,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            new_session=new_session,
            name=name,
            module=module,
            user=user,
        )
    from tests.session_lifetime import tied

    argv = [sys.executable, "-m", module, *args]
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    return subprocess.Popen(
        argv if user is not None else tied(argv),  # (a change of user clears the tie)
        cwd=cwd,
        env=dict(env),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        start_new_session=new_session,
    )


def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str | bytes | None = None,
    text: bool = True,
    timeout: float | None = None,
    check: bool = False,
    module: str = CLI,
    user: int | None = None,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run([python, "-m", MODULE, *ARGS], capture_output=True, ...)`` (``little
    ARGS``), from the zygote where it can be (see :func:`spawn`): the output captured (text
    by default, UTF-8)."""
    env = dict(os.environ if env is None else env)
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(tempfile.TemporaryFile())
        err = stack.enter_context(tempfile.TemporaryFile())
        stdin: FileArg = subprocess.DEVNULL if input is None else None
        if input is not None:
            stdin = stack.enter_context(tempfile.TemporaryFile())
            stdin.write(input.encode() if isinstance(input, str) else input)
            stdin.seek(0)
        process = spawn(
            args,
            env=env,
            cwd=cwd or os.getcwd(),
            stdin=stdin,
            stdout=out,
            stderr=err,
            module=module,
            user=user,
        )
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        except BaseException:
            process.kill()
            process.wait()
            raise
        outputs: list[Any] = []
        for file in (out, err):
            file.seek(0)
            data = file.read()
            if text:  # as subprocess.run(text=True) reads it: universal newlines
                data = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
            outputs.append(data)
    argv = [sys.executable, "-m", module, *args]
    done = subprocess.CompletedProcess(argv, code, outputs[0], outputs[1])
    if check:
        done.check_returncode()
    return done
