"""docs/operations.md shows a curl command for every route of the API (issue 34, item 6):
each ``/v1`` method and path of the committed OpenAPI document is called by a ``curl`` line
of a ``sh`` block, and every such line calls a route the document has."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPERATIONS = ROOT / "docs" / "operations.md"
OPENAPI = ROOT / "docs" / "openapi.json"


def _curl_calls() -> list[tuple[str, str]]:
    """(method, path) of every curl command in the document's ``sh`` blocks."""
    text = OPERATIONS.read_text(encoding="utf-8")
    calls = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        words = shlex.split(block, comments=True)
        starts = [index for index, word in enumerate(words) if word == "curl"]
        ends = [*starts[1:], len(words)] if starts else []
        for start, end in zip(starts, ends, strict=True):
            argv = words[start:end]
            method = argv[argv.index("-X") + 1] if "-X" in argv else "GET"
            (url,) = [arg for arg in argv if arg.startswith("http")]
            path = re.sub(r"^https?://[^/]+", "", url).split("?", 1)[0]
            calls.append((method.lower(), path))
    return calls


def _routes() -> dict[tuple[str, str], re.Pattern[str]]:
    document = json.loads(OPENAPI.read_text(encoding="utf-8"))
    routes = {}
    for path, methods in document["paths"].items():
        if not path.startswith("/v1/"):
            continue
        pattern = re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$")
        for method in methods:
            routes[(method, path)] = pattern
    return routes


def test_every_route_has_a_curl_example_and_every_example_a_route() -> None:
    calls = _curl_calls()
    routes = _routes()
    shown = {
        route
        for route, pattern in routes.items()
        for method, path in calls
        if method == route[0] and pattern.match(path)
    }
    assert set(routes) - shown == set(), "routes without a curl example in docs/operations.md"
    unknown = [
        (method, path)
        for method, path in calls
        # (/metrics and the probes are outside the document on purpose: only /v1 is checked)
        if path.startswith("/v1/")
        and not any(method == m and pattern.match(path) for (m, _), pattern in routes.items())
    ]
    assert unknown == [], "curl examples of routes the API does not have"
    assert ("delete", "/v1/schedules/sch_0f1e2d3c4b5a6978") in calls
