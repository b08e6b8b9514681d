"""``little memory ls|cat|put``: an operator's look into, and write to, the memory stores.

The store is a workflow's (``--workflow ID``, the store its steps see at
``/mnt/memory/workflow/``) or the organisation's (``--store org``, ``/mnt/memory/org/``).
``ls [PREFIX]`` lists the files (path, bytes, version; ``--json`` one object per line),
``cat PATH`` prints one, ``put PATH`` stores stdin (or ``--from FILE``) at ``PATH`` as a new
version, by the same compare-and-set the runs use (a run that commits the file at the same
moment is not overwritten: the later change is kept as a conflict copy, and ``put`` says
so). Exit 0 on success; 1 for a workflow with no memory, a missing file or a path that
leaves the store (``..``, absolute, NUL, too long), with a one-line reason; 2 for usage.

``put`` reads at most :data:`MAX_PUT_BYTES` (64 MiB, the most one attempt mounts of a store),
refusing more before anything is stored; ``--from`` must name a regular file (not a FIFO, a
device or a folder: leave ``--from`` out to read standard input). Both happen before the
world is opened.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Final

from little_dist.cli.common import add_world_options, open_world_for_reading, open_world_for_writing

__all__ = ["MAX_PUT_BYTES", "register", "run"]

#: The most ``put`` stores in one file: what one attempt mounts of a store at most
#: (:class:`~little_dist.memory.AttemptMemory`'s ``max_bytes``), so every run can still read it.
MAX_PUT_BYTES: Final = 64 * 1024 * 1024


def register(sub: Any, name: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help="list, print or write the files of a memory store",
        description="List, print or write the files of a workflow's (or the org's) memory.",
    )
    actions = parser.add_subparsers(dest="memory_action", metavar="ACTION", required=True)
    for action, help_text in (
        ("ls", "list a store's files"),
        ("cat", "print a file"),
        ("put", "write a file from stdin or --from"),
    ):
        cmd = actions.add_parser(action, help=help_text, description=help_text)
        cmd.add_argument("--workflow", metavar="ID", default=None, help="the workflow's store")
        cmd.add_argument(
            "--store",
            choices=("workflow", "org"),
            default="workflow",
            help="which store: the workflow's (default) or the org's",
        )
        if action == "ls":
            cmd.add_argument("prefix", metavar="PREFIX", nargs="?", default="")
            cmd.add_argument("--json", action="store_true", help="one JSON object per file")
        else:
            cmd.add_argument("path", metavar="PATH")
        if action == "put":
            cmd.add_argument("--from", dest="source", metavar="FILE", default=None)
        add_world_options(cmd)
    return parser


def run(args: argparse.Namespace) -> int:
    from little_dist.memory import memory_store_for

    store_id, shown = _store(args)
    writing = args.memory_action == "put"
    # What `put` stores is read (and refused) before the world is opened: nothing is made.
    data = _put_data(args) if writing else b""
    world = open_world_for_writing(args) if writing else open_world_for_reading(args)
    try:
        store = memory_store_for(world)
        if args.memory_action == "ls":
            return _ls(store, store_id, shown, args)
        if args.memory_action == "cat":
            return _cat(store, store_id, shown, args.path)
        return _put(store, store_id, shown, args, data)
    finally:
        world.close()


def _store(args: argparse.Namespace) -> tuple[str, str]:
    from little_dist.memory import workflow_store_id

    if args.store == "org":
        if args.workflow is not None:
            raise _usage("give --workflow or --store org, not both")
        return "org", "the org's memory"
    if args.workflow is None:
        raise _usage("name the store: --workflow ID (or --store org)")
    return workflow_store_id(args.workflow), f"workflow {args.workflow!r}"


def _usage(message: str) -> SystemExit:
    print(f"little memory: error: {message}", file=sys.stderr)
    return SystemExit(2)


def _ls(store: Any, store_id: str, shown: str, args: argparse.Namespace) -> int:
    from little_dist.memory import MemoryNotFoundError

    entries = [e for _, e in sorted(store.entries(store_id).items()) if e.exists]
    if not entries and store_id != "org":
        raise MemoryNotFoundError(f"no memory for {shown} (store {store_id})")
    prefix = args.prefix.strip("/")
    if prefix:
        entries = [e for e in entries if e.path == prefix or e.path.startswith(prefix + "/")]
        if not entries:
            raise MemoryNotFoundError(f"{shown}: no file under {args.prefix!r}")
    for entry in entries:
        if args.json:
            line = {"path": entry.path, "bytes": entry.size, "version": entry.version}
            print(json.dumps({**line, "sha256": entry.sha256}))
        else:
            print(f"{entry.size:>10}  v{entry.version:<5} {entry.path}")
    return 0


def _cat(store: Any, store_id: str, shown: str, path: str) -> int:
    from little_dist.memory import MemoryNotFoundError, check_memory_path

    check_memory_path(path)
    entries = store.entries(store_id)
    entry = entries.get(path)
    if entry is None or not entry.exists:
        if not any(e.exists for e in entries.values()) and store_id != "org":
            raise MemoryNotFoundError(f"no memory for {shown} (store {store_id})")
        raise MemoryNotFoundError(f"{shown}: no file {path!r}")
    sys.stdout.flush()
    sys.stdout.buffer.write(store.read(store_id, entry))
    sys.stdout.buffer.flush()
    return 0


def _put_data(args: argparse.Namespace) -> bytes:
    from little_dist.bounded_read import read_file, read_stdin
    from little_dist.memory import check_memory_path

    check_memory_path(args.path)
    why = "the most one run mounts of a store"
    if args.source is None:
        return read_stdin(MAX_PUT_BYTES, why=why)
    return read_file(
        args.source,
        MAX_PUT_BYTES,
        label=f"--from {args.source}",
        why=why,
        stream_hint="leave --from out to read standard input",
    )


def _put(store: Any, store_id: str, shown: str, args: argparse.Namespace, data: bytes) -> int:
    from little_dist.memory import MemoryChange

    now = store.entries(store_id).get(args.path)
    base = 0 if now is None else now.version
    (applied,) = store.commit(store_id, [MemoryChange(args.path, base, data)], writer="operator")
    if applied.outcome == "conflict":
        print(
            f"{shown}: {args.path} changed meanwhile; yours is kept as {applied.conflict_path}",
            file=sys.stderr,
        )
        return 1
    print(f"{shown}: {args.path} version {applied.version} ({len(data)} bytes)")
    return 0
