"""What the bash tool's egress proxy costs: per command, per byte, per connection.

Run from the repository root (as root, or as a user with unprivileged user namespaces: the
listener is then opened by a helper process instead of a thread, which costs more)::

    .venv/bin/python bench/egress.py [--commands N] [--mib M]

Prints:

(a) the median wall time of a bash-tool command (``true``) with network off and on: on, the
    worker finds the command's sandbox and opens the proxy's listener inside it first;
(b) the time to fetch M MiB over plain HTTP from a server on the host's loopback through the
    proxy (curl in the sandbox), and the rate;
(c) the worker's threads while one command holds 32 tunnels open (no thread a connection).
"""

from __future__ import annotations

import argparse
import http.server
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from little_dist.sandbox import Mount
from little_dist.sandbox.bash import BashSession
from little_dist.sandbox.bash_capabilities import BashCapabilities


def session(folder: Path, network: Any) -> BashSession:
    own = folder / "own"
    own.mkdir(parents=True, exist_ok=True)
    return BashSession(
        [Mount(own, "/mnt/scratch/own", writable=True)],
        "/mnt/scratch/own",
        capabilities=BashCapabilities(network=network),
    )


SITE = "bench-egress-site"


class Site(http.server.ThreadingHTTPServer):
    """The benchmark's server: a thread a connection, named so that (c) leaves them out."""

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread, args=(request, client_address), name=SITE
        )
        thread.daemon = True
        thread.start()


def worker_threads() -> int:
    """This process's threads but the benchmark's HTTP server's (one a connection)."""
    return sum(t.name != SITE for t in threading.enumerate())


def median_ms(shell: BashSession, command: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        result = shell.run({"cmd": command})
        times.append((time.perf_counter() - started) * 1000)
        assert result["exitCode"] == 0, result
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=15)
    parser.add_argument("--mib", type=int, default=64)
    args = parser.parse_args()
    body = b"x" * (args.mib * 1024 * 1024)

    class Big(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = Site(("127.0.0.1", 0), Big)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    network = {
        "allow": [f"http://127.0.0.1:{port}", f"https://127.0.0.1:{port}"],
        "denyPrivateRanges": False,
    }
    with tempfile.TemporaryDirectory() as folder:
        off, on = session(Path(folder) / "off", False), session(Path(folder) / "on", network)
        try:
            median_ms(on, "true", 1)  # warm up (the isolation probe)
            cost_off = median_ms(off, "true", args.commands)
            cost_on = median_ms(on, "true", args.commands)
            print(
                f"(a) command 'true': network off {cost_off:.1f} ms, on {cost_on:.1f} ms "
                f"(+{cost_on - cost_off:.1f} ms), median of {args.commands}"
            )
            started = time.perf_counter()
            fetched = on.run(
                {
                    "cmd": f"curl -sS -o /dev/null -w '%{{size_download}}' "
                    f"http://127.0.0.1:{port}/big"
                }
            )
            seconds = time.perf_counter() - started
            assert fetched["stdout"] == str(len(body)), fetched
            print(
                f"(b) {args.mib} MiB through the proxy: {seconds:.2f} s, "
                f"{args.mib / seconds:.0f} MiB/s (command included)"
            )
            before = worker_threads()
            program = (
                "import socket\nheld = []\nfor _ in range(32):\n"
                "    s = socket.create_connection(('127.0.0.1', 3128))\n"
                f"    s.sendall(b'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n')\n"
                "    s.recv(100)\n    held.append(s)\n"
                "open('held', 'w').close()\n"
                "import os, time\n"
                "while not os.path.exists('release'):\n    time.sleep(0.01)\n"
            )
            own = Path(folder) / "on" / "own"
            runner = threading.Thread(
                target=on.run, args=({"cmd": f"python3 - <<'EOF'\n{program}\nEOF"},)
            )
            runner.start()
            while not (own / "held").exists() and runner.is_alive():
                time.sleep(0.01)
            during = worker_threads()
            (own / "release").touch()
            runner.join()
            print(
                f"(c) worker threads: {before} before, {during} while 32 tunnels are held "
                "(the benchmark's HTTP server's threads left out)"
            )
        finally:
            off.close()
            on.close()
            server.shutdown()


if __name__ == "__main__":
    main()
