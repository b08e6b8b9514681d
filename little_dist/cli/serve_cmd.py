"""``little serve [--host 127.0.0.1] [--port 8080]``: the fleet's HTTP API.

A FastAPI app (:mod:`little_dist.http`) on uvicorn: ``POST /v1/runs`` submits a run of a
workflow the served app defines (``--app MODULE``, default ``LITTLE_APP``), ``GET
/v1/runs/{id}`` is ``little status``, ``GET /v1/runs/{id}/events`` the run's events as
Server-Sent Events; ``/healthz`` and ``/readyz`` for probes; ``/metrics`` for Prometheus;
``/openapi.json``; the live run viewer for people at ``/ui``. Every ``/v1`` route (and the
viewer's content) needs a bearer token from ``little tokens create``. The fleet is the one ``little
submit`` reaches (``LITTLE_WORLD``, ``LITTLE_*``; ``--world`` overrides ``LITTLE_WORLD``).

``--openapi`` prints the OpenAPI document and exits (``docs/openapi.json`` is its output).
SIGTERM or SIGINT stops it gracefully (requests in flight get up to 5 s, then the app shuts
down and closes its client), and the process then ends by that signal, as uvicorn does. Exit
2 on usage errors (an app that cannot be imported, a port that cannot be bound, a world not
on Redis).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Final

from little_dist.cli.submit_cmd import add_fleet_options, fleet_settings
from little_dist.redaction import redact

__all__ = ["register", "run"]

EXIT_USAGE = 2
#: The server process's GIL switch interval (seconds; CPython's default is 0.005).
_SWITCH_INTERVAL_S: Final = 0.0005


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"expected a port from 1 to 65535, got {value}")
    return value


def register(sub: Any, name: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help="serve the fleet's HTTP API",
        description="Serve the HTTP API: submit runs, read their status, watch their events.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=8080, help="port to bind (default 8080)")
    parser.add_argument(
        "--app",
        metavar="MODULE",
        action="append",
        default=None,
        help="module defining the workflows POST /v1/runs accepts by id (repeatable; "
        "default $LITTLE_APP)",
    )
    parser.add_argument(
        "--openapi", action="store_true", help="print the OpenAPI document and exit"
    )
    parser.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    add_fleet_options(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    from little_dist.http.app import make_app
    from little_dist.http.fleet_access import FleetAccess

    if args.openapi:
        app = make_app(FleetAccess(fleet_settings(args), None))
        print(json.dumps(app.openapi(), indent=2, ensure_ascii=False))
        return 0
    settings = fleet_settings(args)
    modules = args.app if args.app else ([settings.app] if settings.app else [])
    from little_dist.fleet.app_registry import AppImportError, load_registry

    try:
        registry = load_registry(modules) if modules else None
    except AppImportError as exc:
        print(f"little serve: {redact(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    if registry is None:
        print(
            "little serve: no --app (nor LITTLE_APP): POST /v1/runs will refuse every workflow id",
            file=sys.stderr,
        )
    from little_dist.world.factory import fleet_redis_url

    if fleet_redis_url(settings) is None:
        print(
            "little serve: the HTTP API serves a fleet on Redis: set LITTLE_WORLD (or --world) "
            "to a redis:// URL",
            file=sys.stderr,
        )
        return EXIT_USAGE
    import uvicorn

    # A request crosses threads (the event loop hands its route to a worker thread and
    # takes the answer back) while other requests' work holds the GIL in bursts (JSON,
    # botocore): at CPython's default switch interval (5 ms) each handover can wait that
    # long for a busy thread to let go, several times per request.
    sys.setswitchinterval(_SWITCH_INTERVAL_S)
    app = make_app(FleetAccess(settings, registry))
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits 1 when it cannot bind
        if exc.code not in (0, None):
            print(f"little serve: cannot serve on {args.host}:{args.port}", file=sys.stderr)
            return EXIT_USAGE
    if not server.started:
        print(f"little serve: cannot serve on {args.host}:{args.port}", file=sys.stderr)
        return EXIT_USAGE
    return 0
