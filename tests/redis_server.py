"""A private ``redis-server`` for tests that restart or kill Redis, or configure it.

The shared server on 127.0.0.1:6379 must never be restarted or reconfigured; a test that
needs to do either starts its own server on a free port in a temporary directory::

    server = RedisServer.start_new(tmp_path)      # no persistence: a restart empties it
    server.kill()                                 # SIGKILL, as a crash
    server.start()                                # the same port and directory again
    server.stop()

``config`` (a redis.conf path) and ``args`` (``--name value`` pairs) configure it; the port,
bind address and directory are always set here, after them, so they win. ``tls`` (the
server's certificate, its key, and the CA that signed it) serves TLS only, on the port.
``launcher`` replaces ``redis-server CONFIG`` (a start script that execs redis-server and
passes its further arguments on), run with ``env`` added to the environment.
:func:`start_redis_server` starts one with AOF on, for the durability tests and benchmarks
(:meth:`RedisServer.aof_tail` names the file a test truncates to lose the last writes).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.ports import reserve_port
from tests.session_lifetime import interrupted, tied

__all__ = ["RedisServer", "free_port", "start_redis_server"]


def free_port() -> int:
    """A port for a test's server, held by this process (see :mod:`tests.ports`): a server
    stopped and started again finds it still free."""
    return reserve_port()


@dataclass
class RedisServer:
    """One private ``redis-server`` process (restartable on the same port)."""

    port: int
    directory: Path
    config: Path | None = None
    args: list[str] = field(default_factory=list)
    tls: tuple[Path, Path, Path] | None = None
    launcher: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @classmethod
    def start_new(
        cls,
        tmp: Path,
        *,
        config: Path | None = None,
        args: list[str] | None = None,
        tls: tuple[Path, Path, Path] | None = None,
        launcher: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> RedisServer:
        directory = tmp / f"redis-{time.monotonic_ns()}"
        directory.mkdir(parents=True)
        server = cls(free_port(), directory, config, list(args or []), tls, launcher, env or {})
        server.start()
        return server

    @property
    def log_path(self) -> Path:
        return self.directory / "redis.log"

    def url(self, db: int = 0, *, user: str | None = None, password: str | None = None) -> str:
        auth = ""
        if password is not None:
            auth = f"{user or ''}:{password}@"
        return f"redis://{auth}127.0.0.1:{self.port}/{db}"

    def start(self, timeout: float = 10.0) -> None:
        if self.launcher:
            argv = list(self.launcher)
        elif self.config is not None:
            argv = ["redis-server", str(self.config)]
        else:
            argv = ["redis-server", "--save", "", "--appendonly", "no"]
        argv += self.args
        if self.tls is None:
            argv += ["--port", str(self.port)]
        else:
            cert, key, ca = self.tls
            argv += ["--port", "0", "--tls-port", str(self.port), "--tls-auth-clients", "no"]
            argv += ["--tls-cert-file", str(cert), "--tls-key-file", str(key)]
            argv += ["--tls-ca-cert-file", str(ca)]
        argv += ["--bind", "127.0.0.1"]
        argv += ["--dir", str(self.directory), "--daemonize", "no"]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                tied(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"redis-server exited ({self.process.returncode}):\n"
                    + self.log_path.read_text(errors="replace")[-2000:]
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5),
            ):
                return
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not listen on {self.port} in {timeout:g}s")

    def kill(self) -> None:
        """SIGKILL (a crash: nothing is written on the way down)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if interrupted():  # the session is ending: at once
            self.kill()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def aof_tail(self) -> Path:
        """The AOF file the server appends writes to now (Redis 7's multi-part AOF:
        ``appendonlydir/*.incr.aof``), which a test truncates to simulate a host crash that
        lost the last writes."""
        found = sorted((self.directory / "appendonlydir").glob("*.incr.aof"))
        if not found:
            raise RuntimeError(f"no incremental AOF file under {self.directory}")
        return found[-1]


def start_redis_server(directory: Path, *, appendfsync: str = "always") -> RedisServer:
    """A new server with AOF on (``appendfsync`` as asked), on a free port, keeping its data
    in ``directory``: :meth:`RedisServer.kill` then :meth:`RedisServer.start` loads what its
    AOF holds."""
    directory.mkdir(parents=True, exist_ok=True)
    args = ["--appendonly", "yes", "--appendfsync", appendfsync, "--save", ""]
    server = RedisServer(free_port(), directory, args=[*args, "--maxmemory-policy", "noeviction"])
    server.start()
    return server
