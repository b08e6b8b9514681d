"""What the kernel sandbox costs per command: start-up against a bare ``subprocess.run``.

Run from the repository root::

    .venv/bin/python bench/sandbox.py [--commands N]

Prints the isolation and limits the sandbox runs under here, then, for each command, the median
wall time of :func:`little_dist.sandbox.run_sandboxed` (the command's cgroup where there is one,
prlimit, bubblewrap's namespaces and mounts, the user switch, output capture and the disk
watch) and of a bare ``subprocess.run`` of the same command (the same binaries: the sandbox's
``PATH``) in the same run, and their difference and ratio:

(a) ``true`` — the sandbox's fixed cost;
(b) ``bash -c 'echo hi'`` — a bash tool command;
(c) ``python3 -c 'print(1)'`` — a small program;
(d) a ``code.run`` step (:func:`~little_dist.sandbox.code_run.run_code`: pins checked, files
    written, Deno in the sandbox, output parsed) against a bare ``deno run`` of the same file.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from little_dist.lwir.step_checks import code_file_digest
from little_dist.sandbox import Mount, run_sandboxed
from little_dist.sandbox.code_run import deno_binary, run_code
from little_dist.sandbox.system import BASE_PATH

COMMANDS = {
    "(a) true": ["true"],
    "(b) bash -c 'echo hi'": ["bash", "-c", "echo hi"],
    "(c) python3 -c 'print(1)'": ["python3", "-c", "print(1)"],
}


def _median_ms(fn: Callable[[], object], count: int) -> float:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=30, help="runs of each command")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        mount = Mount(Path(folder), "/mnt/scratch/own", writable=True)
        probe = run_sandboxed(["true"], mounts=[mount])  # the one-off isolation probe
        print(f"isolation: {probe.isolation}, limits: {probe.limits}")
        print(f"{'command':<28} {'sandbox ms':>11} {'bare ms':>8} {'extra ms':>9} {'ratio':>6}")
        for name, argv in COMMANDS.items():
            sandboxed = _median_ms(
                lambda argv=argv: run_sandboxed(argv, mounts=[mount], cwd="/mnt/scratch/own"),
                args.commands,
            )
            bare = _median_ms(
                lambda argv=argv: subprocess.run(
                    argv, cwd=folder, capture_output=True, env={"PATH": BASE_PATH}
                ),
                args.commands,
            )
            _row(name, sandboxed, bare)
        _code_run_row(Path(folder), args.commands)


def _row(name: str, sandboxed: float, bare: float) -> None:
    extra, ratio = sandboxed - bare, sandboxed / bare
    print(f"{name:<28} {sandboxed:>11.1f} {bare:>8.1f} {extra:>9.1f} {ratio:>6.1f}")


def _code_run_row(folder: Path, count: int) -> None:
    source = "console.log(JSON.stringify({ ok: true }));\n"
    (folder / "main.ts").write_text(source)
    config = {
        "entrypoint": "main.ts",
        "files": {"main.ts": {"content": source, "sha256": code_file_digest(source)}},
        "sandbox": {"network": "deny", "env": "deny", "fs": "deny"},
    }
    deno = str(deno_binary())
    sandboxed = _median_ms(lambda: run_code(config, {}), count)
    bare = _median_ms(
        lambda: subprocess.run(
            [deno, "run", "--no-prompt", "--no-config", "main.ts"], cwd=folder, capture_output=True
        ),
        count,
    )
    _row("(d) code.run (deno)", sandboxed, bare)


if __name__ == "__main__":
    main()
