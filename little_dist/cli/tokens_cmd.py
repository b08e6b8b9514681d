"""``little tokens create|list|revoke``: the HTTP API's bearer tokens.

``create --scope SCOPE [--scope ...] [--name NAME] [--rate 600/minute] [--workflow ID ...]``
prints the new token once (only its hash is stored: it cannot be shown again); scopes are
``runs:submit``, ``runs:read``, ``runs:cancel``, ``approvals:decide``, ``schedules:write`` and
``admin`` (every scope), also comma-separated; ``--rate`` caps its requests (a ``limits`` rate
string; over it, a 429); ``--workflow`` names the workflows it may submit runs of (another is a
403). ``list`` shows each token's id, when it was made, its scopes, rate and name (``--json``:
and its workflows); ``revoke ID`` removes one (the next request with it is refused). The tokens
live in the fleet's Redis (``LITTLE_WORLD``, ``--world``).

Exit 0 on success, 1 for a token id that does not exist or a bad scope or rate, 2 usage
errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from little_dist.cli.submit_cmd import add_fleet_options, fleet_settings

__all__ = ["register", "run"]


def register(sub: Any, name: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help="make, list and revoke the HTTP API's tokens",
        description="Bearer tokens of the HTTP API (little serve).",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="make a token and print it (once)")
    create.add_argument(
        "--scope",
        action="append",
        required=True,
        metavar="SCOPE",
        help="runs:submit, runs:read, runs:cancel, approvals:decide, schedules:write or admin "
        "(repeatable, or "
        "comma-separated)",
    )
    create.add_argument("--name", default="", help="what the token is for")
    create.add_argument(
        "--rate",
        default=None,
        metavar="RATE",
        help="its requests' rate, e.g. 600/minute (default: no limit)",
    )
    create.add_argument(
        "--workflow",
        action="append",
        default=[],
        metavar="ID",
        help="a workflow id it may submit runs of (repeatable; default: any)",
    )
    create.add_argument("--json", action="store_true", help="print the token and its record")
    listing = actions.add_parser("list", help="list the tokens (never their secrets)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    revoke = actions.add_parser("revoke", help="revoke a token")
    revoke.add_argument("token_id", metavar="ID")
    for action in (create, listing, revoke):
        add_fleet_options(action)
    return parser


def run(args: argparse.Namespace) -> int:
    from little_dist.http.fleet_access import open_redis
    from little_dist.http.tokens import TokenStore
    from little_dist.world.fleet_keys import api_tokens_key

    settings = fleet_settings(args)
    redis = open_redis(settings)
    try:
        store = TokenStore(redis, api_tokens_key(settings.signal_stream))
        if args.action == "create":
            scopes = [part.strip() for value in args.scope for part in value.split(",")]
            issued = store.create(
                [s for s in scopes if s], name=args.name, rate=args.rate, workflows=args.workflow
            )
            if args.json:
                print(json.dumps({**issued.record.to_json(), "token": issued.token}))
            else:
                print(issued.token)
                print(
                    f"little tokens: token {issued.record.id} "
                    f"({', '.join(issued.record.scopes)}); it is not shown again",
                    file=sys.stderr,
                )
            return 0
        if args.action == "list":
            records = store.list()
            if args.json:
                print(json.dumps([record.to_json() for record in records], indent=2))
            for record in records if not args.json else ():
                rate = record.rate or "-"
                print(
                    f"{record.id}  {record.created_at}  {','.join(record.scopes):<32}  "
                    f"{rate:<12}  {record.name}"
                )
            return 0
        if not store.revoke(args.token_id):
            print(f"little tokens: no token {args.token_id}", file=sys.stderr)
            return 1
        print(f"revoked {args.token_id}")
        return 0
    finally:
        redis.close()
