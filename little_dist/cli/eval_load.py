"""What ``little eval`` works on: an eval set read from a file or the world, its item bodies,
all checked; each problem one line naming the file, the path in it and the finding code."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from little_dist.evals import EvalSetVersion, EvalStore, eval_store_for
from little_dist.world.base import World

__all__ = ["EvalFileProblem", "LoadedEvalSet", "load_eval_set"]


class EvalFileProblem(Exception):
    """Why an eval set cannot be used: ``lines`` to print, ``code`` to exit with."""

    def __init__(self, lines: list[str], code: int = 1) -> None:
        super().__init__(lines[0] if lines else "")
        self.lines = lines
        self.code = code


@dataclass
class LoadedEvalSet:
    label: str
    version: EvalSetVersion
    bodies: dict[str, Any]  # bodySha -> body
    warnings: list[dict[str, str]]
    store_: EvalStore
    world: World | None  # (None: a local world that validate did not make)

    def store(self) -> None:
        """Put the set and its bodies in the world (a no-op for what is there already)."""
        from little_dist.canonical import canonical_json

        for body_sha, body in self.bodies.items():
            self.store_.put_body(body_sha, canonical_json(body))
        self.store_.put_eval_set(self.version)


def load_eval_set(args: argparse.Namespace) -> LoadedEvalSet:
    """The set ``args.set`` names with the bodies of every index entry (from ``--items``,
    else the world); raises :class:`EvalFileProblem`. The caller closes ``.world``."""
    unmade = _unmade_local_world(args) if args.verb == "validate" else None
    if unmade is not None:  # (validate writes nothing: no world is made to read an empty one)
        from little_dist.evals.local_store import LocalEvalStore

        return _load(args, None, LocalEvalStore(unmade))
    world = _open_world(args)
    try:
        return _load(args, world, eval_store_for(world))
    except BaseException:
        world.close()
        raise


def _unmade_local_world(args: argparse.Namespace) -> Path | None:
    """The data directory of the local world the options name, when there is none yet."""
    from little_dist.cli.common import world_spec
    from little_dist.errors import InvalidInputError

    try:
        spec = world_spec(args)
    except InvalidInputError as exc:
        raise EvalFileProblem([f"little eval: {exc}"], 2) from None
    if "://" in spec or spec.strip() in ("memory:", "memory"):
        return None
    folder = Path(spec.removeprefix("local:"))
    return None if (folder / "events" / "events.db").is_file() else folder


def _open_world(args: argparse.Namespace) -> World:
    """The world the other commands would use: ``--world``, ``--data-dir`` or
    ``LITTLE_WORLD``; with ``--fleet``, the fleet's (``--world`` or the fleet settings)."""
    from little_dist.cli.common import open_world_for_writing
    from little_dist.cli.run_problems import one_line
    from little_dist.errors import LittleError

    try:
        if getattr(args, "fleet", False):
            if args.data_dir:
                raise EvalFileProblem(
                    [
                        "little eval: --fleet keeps eval sets in the fleet's world (--world or "
                        "LITTLE_WORLD), not in --data-dir"
                    ],
                    2,
                )
            from little_dist.cli.submit_cmd import fleet_settings
            from little_dist.world.factory import world_from_settings

            return world_from_settings(fleet_settings(args))
        return open_world_for_writing(args)
    except LittleError as exc:
        raise EvalFileProblem([f"little eval: {one_line(str(exc))}"], 2) from None


def _load(args: argparse.Namespace, world: World | None, store: EvalStore) -> LoadedEvalSet:
    from little_dist.errors import InvalidInputError, NotFoundError
    from little_dist.evals import register_eval_set, verify_eval_set_bodies

    label = args.set
    if not os.path.exists(args.set) and args.set.startswith("evset_"):
        try:
            document = store.get_eval_set(args.set)
        except (NotFoundError, InvalidInputError) as exc:
            raise EvalFileProblem([f"little eval: {args.set}: {exc}"]) from None
    else:
        document = _read(args.set)
    bundle = document["bundle"] if _is_version(document) else document
    try:
        version, warnings = register_eval_set(bundle, known_lineages=store.known_lineages())
    except InvalidInputError as exc:
        raise EvalFileProblem(_lines(label, getattr(exc, "findings", None), exc)) from None
    items, items_label = _items(args, version, store)
    found = verify_eval_set_bodies(version.bundle, items)
    if not found.valid:
        single = args.items is not None and not isinstance(_read(args.items), list)
        moved = [{**f, "path": _items_path(f["path"], single)} for f in found.errors]
        raise EvalFileProblem(_lines(items_label, moved, None))
    from little_dist.evals import eval_item_body_sha

    bodies = {eval_item_body_sha(body): body for body in items}
    return LoadedEvalSet(label, version, bodies, warnings + found.warnings, store, world)


def _items(
    args: argparse.Namespace, version: EvalSetVersion, store: EvalStore
) -> tuple[list[Any], str]:
    from little_dist.errors import InvalidInputError, NotFoundError

    if args.items is not None:
        given = _read(args.items)
        return (given if isinstance(given, list) else [given]), args.items
    bodies = []
    for entry in version.bundle["index"]:
        try:
            bodies.append(store.get_body(entry["bodySha"]))
        except NotFoundError:
            raise EvalFileProblem(
                [
                    f"little eval: {args.set}: no body for index entry {entry['itemSha']} in "
                    f"{store.where} (give --items FILE)"
                ]
            ) from None
        except InvalidInputError as exc:
            raise EvalFileProblem([f"little eval: {exc}"]) from None
    return bodies, f"{store.where}/eval-items"


def _read(path: str) -> Any:
    from little_dist.cli.json_input import read_json
    from little_dist.cli.run_problems import UsageProblem, one_line

    try:
        return read_json(path, path, 64, max_bytes=16 << 20, setting="the eval file bound")
    except UsageProblem as exc:
        raise EvalFileProblem([f"little eval: {one_line(str(exc))}"]) from None
    except Exception as exc:  # (read_json's own limit errors say what is wrong)
        raise EvalFileProblem([f"little eval: {path}: {one_line(str(exc))}"]) from None


def _is_version(document: Any) -> bool:
    return isinstance(document, dict) and "bundle" in document and "canonicalJson" in document


def _items_path(path: str, single: bool) -> str:
    # verify_eval_set_bodies says "$.bodies[i]..."; in the items file that is "$[i]..."
    # (or "$..." when the file holds one body).
    if not path.startswith("$.bodies"):
        return path
    rest = path.removeprefix("$.bodies")
    if single and rest.startswith("[0]"):
        return "$" + rest.removeprefix("[0]")
    return "$" + rest


def _lines(label: str, findings: Any, exc: Exception | None) -> list[str]:
    from little_dist.cli.run_problems import one_line

    if not findings:
        return [f"little eval: {label}: {one_line(str(exc))}"]
    lines = [one_line(f"{label}: {f['path']}: {f['message']} ({f['code']})") for f in findings]
    noun = "finding" if len(findings) == 1 else "findings"
    lines.append(f"little eval: {label}: invalid, {len(findings)} {noun}")
    return lines
