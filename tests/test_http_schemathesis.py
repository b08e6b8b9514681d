"""schemathesis against ``little serve``'s served OpenAPI document, on a real fleet (Redis,
``weed mini``, a worker, the scheduler and ``little serve``, each a process).

Every operation gets requests generated from the document, valid ones and invalid ones
(a bounded number of each, :data:`EXAMPLES`), with a token that holds every scope: no
answer is a 5xx, and every answer is one the document declares (its status, content type,
headers and body schema). The fleet holds a completed and a failed run first, so the
listing, status and report have real ones to answer with besides the generated ids.
"""

from __future__ import annotations

from typing import Any, Final

import pytest

from little_dist import Client
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.http_service import APP, start_serve, token_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(280)]

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

#: Generated requests per operation and phase (schemathesis's --max-examples).
EXAMPLES: Final = 25
#: What every answer is checked for: no 5xx; status, content type, headers and body as the
#: document declares; invalid requests refused; a route that needs a token refuses none;
#: a method the document does not list refused. (Not ``positive_data_acceptance``: a
#: schema-valid body may name a workflow the app does not define, a 422 by design; nor the
#: checks that need runs made by the generated requests, which name no real workflow.)
CHECKS: Final = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "missing_required_header",
    "unsupported_method",
    "allow_header_conformance",
    "ignored_auth",
)
_OTHER_CHECKS: Final = (
    "positive_data_acceptance",
    "use_after_free",
    "ensure_resource_availability",
    "object_level_authorization",
)


def _failures(events: Any) -> tuple[list[str], int]:
    """The failed checks and errors among the engine's events; the requests sent."""
    from schemathesis.engine import Status
    from schemathesis.engine import events as engine_events

    failures: list[str] = []
    sent = 0
    for event in events:
        if isinstance(event, engine_events.NonFatalError | engine_events.FatalError):
            failures.append(f"error: {getattr(event, 'label', '')}: {event.value!r}")
        recorder = getattr(event, "recorder", None)
        if recorder is None:
            continue
        sent += len(recorder.interactions)
        for checks in recorder.checks.values():
            for check in checks:
                if check.status == Status.FAILURE and check.failure_info is not None:
                    info = check.failure_info
                    failures.append(
                        f"{recorder.label}: {check.name}: {info.failure.title}: "
                        f"{info.failure.message}\n  {info.code_sample}"
                    )
    return failures, sent


def test_every_operation_answers_as_its_openapi_document_says_and_never_5xx(
    fleet_env: FleetEnv,
) -> None:
    import schemathesis
    from schemathesis.config import SchemathesisConfig

    start_worker(fleet_env, roles=["worker"], app=APP)
    start_scheduler(fleet_env)
    served = start_serve(fleet_env)
    redis, store = token_store(fleet_env)
    try:
        token = store.create(["admin"]).token
    finally:
        redis.close()
    with Client(served.url, token=token) as client:
        for workflow in ("http.steps", "http.broken"):
            ended = client.wait(client.submit(workflow, {"sleep": 0}), timeout=60)
            assert ended.status in ("completed", "failed")

    config = SchemathesisConfig.from_dict(
        {
            "headers": {"Authorization": f"Bearer {token}"},
            "request-timeout": 30,
            # (no crash cache replayed from an earlier run, none left in the checkout)
            "cache": {"enabled": False},
            "generation": {"max-examples": EXAMPLES, "database": "none"},
            "checks": {
                **{name: {"enabled": True} for name in CHECKS},
                **{name: {"enabled": False} for name in _OTHER_CHECKS},
            },
        }
    )
    schema = schemathesis.openapi.from_url(f"{served.url}/openapi.json", config=config)
    operations = [result.ok().label for result in schema.get_all_operations()]
    assert len(operations) >= 9, operations
    failures, sent = _failures(schemathesis.engine.from_schema(schema).execute())
    assert sent >= 10 * len(operations), f"only {sent} requests for {len(operations)} operations"
    assert not failures, "\n\n".join(failures)
