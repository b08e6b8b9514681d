"""``little eval``: eval sets (upstream's ``eval-set.ts`` bundles and item bodies) checked,
stored in the world (``--world``, ``--data-dir`` or ``LITTLE_WORLD``, as every command), and
run against a workflow.

    little eval validate SET [--items FILE]
    little eval register SET --items FILE
    little eval run [SET --workflow W] [--items FILE] [--role ROLE]... [--concurrency N]
                    [--gate-split dev|sealed --seal-key FILE] [--affected-only]
                    [--judge-model MODEL | --no-judge] [--fleet] [--json]

Without ``SET``, ``run`` runs every eval set of the project it is started in (ours:
``workflows/NAME/evals/*.evalset.json`` with its ``*.items.json``, against that workflow;
``little init`` makes one for its starter workflow).

``SET`` is a bundle file (an ``EvalSet``, or a registered version with a ``bundle`` field) or
the id (``evset_...``) of one stored in the world; ``--items`` a JSON file holding an
``EvalItem`` body or an array of them. A bad file gets one line per finding naming the file,
the path in it and upstream's finding code, exit 1. ``run`` registers the set and its bodies
first, runs every selected item (``resampleK`` times; in this process, at most
``--concurrency`` runs at once) and scores each output (it must equal the item's label, and
the judge model, the card's or ``--judge-model``, must answer each rubric criterion as the
item expects), prints a table (``--json``: the whole result) with cost and what changed since
the last run of the same set, and exits 1 when a case failed or errored.
With ``--affected-only``, a case whose target's input cone (``lwir-input-cone@v1``) is the
same as in the set's last run keeps that result instead of running again. With ``--fleet``
the runs are submitted to the fleet (``--world`` or ``LITTLE_WORLD``) and waited for, and the
set and its results are kept in the fleet's world. ``--gate-split dev|sealed --seal-key FILE``
runs the gate items of one part of the sealed split (upstream's ``SealPolicy``: an item is
sealed when ``BE_uint64(HMAC-SHA256(key, domain ‖ itemSha)[0:8]) < cutoff``; no file stores the
split).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["register", "run"]


def register(subparsers: Any, name: str) -> argparse.ArgumentParser:
    from little_dist.cli.common import add_world_options

    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help="check, store and run eval sets", description=__doc__.split("\n\n")[0]
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    validate = verbs.add_parser("validate", help="check an eval set and its item bodies")
    stored = verbs.add_parser("register", help="store an eval set and its bodies in the world")
    running = verbs.add_parser("run", help="run an eval set against a workflow and score it")
    for verb in (validate, stored, running):
        verb.add_argument(
            "set",
            metavar="SET",
            nargs="?" if verb is running else None,
            default=None,
            help="bundle file, or evset_ id in the world"
            + (" (run: default every eval set of this project)" if verb is running else ""),
        )
        verb.add_argument(
            "--items", metavar="FILE", default=None, help="item body, or array of them (JSON)"
        )
        verb.add_argument("--json", action="store_true", help="print the result as JSON")
        add_world_options(verb)
    running.add_argument(
        "--workflow",
        default=None,
        metavar="WORKFLOW",
        help="workflow folder or name, LWIR file, module:attr (as little run); needed with SET",
    )
    running.add_argument(
        "--role",
        action="append",
        default=None,
        metavar="ROLE",
        help="run only items of this role (repeatable; default every role)",
    )
    running.add_argument(
        "--concurrency",
        type=_positive_int,
        default=4,
        metavar="N",
        help="runs at once (default 4)",
    )
    running.add_argument(
        "--timeout",
        dest="run_timeout",
        default=None,
        metavar="DURATION",
        help="each run's timeout ('10m', or milliseconds), as little test",
    )
    running.add_argument(
        "--affected-only",
        action="store_true",
        help="run only the cases a change can affect: a case whose target's input cone is the "
        "same as in the set's last run keeps that run's result",
    )
    running.add_argument(
        "--app",
        action="append",
        default=[],
        metavar="MODULE",
        help="module providing tools and model slots (as little run --app)",
    )
    running.add_argument(
        "--judge-model",
        metavar="MODEL",
        default=None,
        help="the model that judges rubric criteria (default: the card's judge.modelPin, "
        "as providerId/modelId)",
    )
    running.add_argument(
        "--judge-pricing",
        metavar="MODEL",
        default=None,
        help="price the judge's calls as this provider/model (default: the pricing of the "
        "workflow's model slot that is the judge model, else the judge model)",
    )
    running.add_argument(
        "--no-judge",
        action="store_true",
        help="do not judge rubric criteria (reported unscored; the labels still decide)",
    )
    running.add_argument(
        "--gate-split",
        choices=("dev", "sealed"),
        default=None,
        help="run only the gate items of this part of the sealed split (needs --seal-key)",
    )
    running.add_argument(
        "--seal-key",
        metavar="FILE",
        default=None,
        help="the key the set's gate split is sealed with (the file's bytes, without a "
        "trailing newline); its id must be the card's sealPolicy.sealKeyId",
    )
    running.add_argument(
        "--fleet",
        action="store_true",
        help="run the cases on the fleet (--world or LITTLE_WORLD); the eval set and its "
        "results are kept in the fleet's world",
    )
    running.add_argument(
        "--fleet-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --fleet: give up waiting for a case's run (its case errors)",
    )
    running.add_argument("--quiet", "-q", action="store_true", help="(accepted; runs are quiet)")
    return parser


def run(args: argparse.Namespace) -> int:
    if args.verb == "run" and args.set is None:
        from little_dist.cli.eval_project import run_project_sets

        return run_project_sets(args, _one_set)
    if args.verb == "run" and args.workflow is None:
        print("little eval run: --workflow is needed with SET", file=sys.stderr)
        return 2
    return _one_set(args)


def _one_set(args: argparse.Namespace) -> int:
    from little_dist.cli.eval_load import EvalFileProblem, load_eval_set

    try:
        loaded = load_eval_set(args)
    except EvalFileProblem as exc:
        for line in exc.lines:
            print(line, file=sys.stderr)
        return exc.code
    try:
        return _verb(args, loaded)
    finally:
        if loaded.world is not None:
            loaded.world.close()


def _verb(args: argparse.Namespace, loaded: Any) -> int:
    if args.verb == "validate":
        if args.json:
            print(json.dumps({"valid": True, "id": loaded.version.id, "warnings": loaded.warnings}))
        else:
            for warning in loaded.warnings:
                print(f"warning {warning['code']} {warning['path']}: {warning['message']}")
            print(f"{loaded.label}: valid, {loaded.version.id} ({len(loaded.bodies)} item bodies)")
        return 0
    loaded.store()
    if args.verb == "register":
        said = {"id": loaded.version.id, "hash": loaded.version.hash, "items": len(loaded.bodies)}
        print(json.dumps(said) if args.json else f"registered {said['id']} ({said['hash']})")
        return 0
    from little_dist.cli.eval_run import run_eval_set

    return run_eval_set(args, loaded)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value
