"""A private ``redis-server`` on a free port, for tests and benchmarks that must restart,
kill or reconfigure Redis (the shared server on 6379 is never touched).

The server keeps its data in its own directory, with AOF on and the ``appendfsync`` mode
asked for; :meth:`RedisServer.kill` ends it with SIGKILL (a crash: nothing is flushed on
the way out), :meth:`RedisServer.start` starts it again on the same port and directory, so
it loads what its AOF holds. :meth:`RedisServer.aof_tail` names the AOF file appends go
to (Redis 7's multi-part AOF: ``appendonlydir/*.incr.aof``), which a test truncates to
simulate a host crash that lost the last writes.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["RedisServer", "start_redis_server"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class RedisServer:
    """One ``redis-server`` process this object started, and its directory."""

    directory: Path
    port: int
    appendfsync: str
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 20.0) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.directory),
                "--appendonly",
                "yes",
                "--appendfsync",
                self.appendfsync,
                "--save",
                "",
                "--maxmemory-policy",
                "noeviction",
                "--logfile",
                str(self.directory / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not answer on port {self.port}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: the process ends at once, as on a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)

    def aof_tail(self) -> Path:
        """The AOF file the server appends writes to now."""
        found = sorted((self.directory / "appendonlydir").glob("*.incr.aof"))
        if not found:
            raise RuntimeError(f"no incremental AOF file under {self.directory}")
        return found[-1]


def start_redis_server(directory: Path, *, appendfsync: str = "always") -> RedisServer:
    """A new ``redis-server`` with AOF on, on a free port, keeping its data in ``directory``."""
    server = RedisServer(directory, _free_port(), appendfsync)
    server.start()
    return server
