"""The HTTP API's tokens against ``little serve`` as a process (Redis and ``weed mini``; no
worker): every scope refused where it should be (401, 403), revoked tokens, ``little
tokens`` (stored hashed), per-token rates (429) and workflow restrictions.
"""

from __future__ import annotations

import json

import pytest

from little_dist.world.fleet_keys import api_tokens_key
from tests.fleet_processes import ROOT, FleetEnv, fleet_env
from tests.http_service import RUN, is_problem, little, start_serve, token_store, v1_calls

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

OPENAPI = ROOT / "docs" / "openapi.json"


def test_every_v1_route_refuses_a_missing_bad_or_revoked_token_and_a_wrong_scope(
    fleet_env: FleetEnv,
) -> None:
    served = start_serve(fleet_env)
    redis, store = token_store(fleet_env)
    try:
        with served.client() as http:
            assert http.get("/healthz").json() == {"status": "ok", "checks": {}}
            for name, answer in v1_calls(http).items():
                body = is_problem(answer, 401)
                assert answer.headers["www-authenticate"].startswith("Bearer"), name
                assert "bearer token is required" in body["detail"]
        for bad in ["nonsense", "ldt_000000000000." + "x" * 43]:
            with served.client(bad) as http:
                for answer in v1_calls(http).values():
                    assert "not valid" in is_problem(answer, 401)["detail"]
        tokens = {
            scope: store.create([scope]).token
            for scope in (
                "runs:submit",
                "runs:read",
                "runs:cancel",
                "approvals:decide",
                "schedules:write",
                "admin",
            )
        }
        allowed = {  # route -> the scopes that reach it (past auth: 202 or 404)
            "runs:submit": {"runs:submit", "admin"},
            "runs:read": {"runs:read", "admin"},
            "runs:read events": {"runs:read", "admin"},
            "runs:read list": {"runs:read", "admin"},
            "runs:read report": {"runs:read", "admin"},
            "runs:cancel": {"runs:cancel", "admin"},
            "runs:read workflows": {"runs:read", "admin"},
            "runs:read approvals": {"runs:read", "admin"},
            "approvals:decide": {"approvals:decide", "admin"},
            "runs:read schedules": {"runs:read", "admin"},
            "schedules:write delete": {"schedules:write", "admin"},
        }
        for scope, token in tokens.items():
            with served.client(token) as http:
                for route, answer in v1_calls(http).items():
                    if scope in allowed[route]:
                        assert answer.status_code in (200, 202, 404), (scope, route, answer.text)
                    else:
                        body = is_problem(answer, 403)
                        assert route.split()[0] in body["detail"], body
        # Revoked: refused at once.
        (admin,) = [record for record in store.list() if record.scopes == ("admin",)]
        assert store.revoke(admin.id)
        with served.client(tokens["admin"]) as http:
            is_problem(http.get("/v1/runs/run_nobody"), 401)
    finally:
        redis.close()


def test_little_tokens_makes_lists_and_revokes_tokens_stored_hashed(fleet_env: FleetEnv) -> None:
    made = little(
        fleet_env, "tokens", "create", "--scope", "runs:read,runs:submit", "--name", "ci job"
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("ldt_") and "not shown again" in made.stderr
    redis, store = token_store(fleet_env)
    try:
        stored = redis.hgetall(api_tokens_key(fleet_env.signal_stream))
        assert len(stored) == 1
        assert token.split(".", 1)[1].encode() not in b"".join(stored.values())  # hash only
        record = store.verify(token)
        assert record is not None and record.scopes == ("runs:submit", "runs:read")
    finally:
        redis.close()
    listed = json.loads(little(fleet_env, "tokens", "list", "--json").stdout)
    assert listed == [record.to_json()] and listed[0]["name"] == "ci job"
    assert token.split(".", 1)[1] not in little(fleet_env, "tokens", "list").stdout
    bad = little(fleet_env, "tokens", "create", "--scope", "runs:everything")
    assert bad.returncode == 1 and "unknown scope 'runs:everything'" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert little(fleet_env, "tokens", "revoke", record.id).returncode == 0
    gone = little(fleet_env, "tokens", "revoke", record.id)
    assert gone.returncode == 1 and f"no token {record.id}" in gone.stderr
    assert json.loads(little(fleet_env, "tokens", "list", "--json").stdout) == []


def test_a_token_with_a_rate_is_refused_429_once_it_is_used_up(fleet_env: FleetEnv) -> None:
    served = start_serve(fleet_env)
    made = little(fleet_env, "tokens", "create", "--scope", "runs:read", "--rate", "3/minute")
    assert made.returncode == 0, made.stderr
    limited = made.stdout.strip()
    redis, store = token_store(fleet_env)
    try:
        free = store.create(["runs:read"]).token
    finally:
        redis.close()
    with served.client(limited) as http:
        assert [http.get("/v1/workflows").status_code for _ in range(3)] == [200] * 3
        over = http.get("/v1/runs/run_nobody")
        body = is_problem(over, 429)
        assert "3/minute" in body["detail"]
        assert 0 < int(over.headers["retry-after"]) <= 60
    with served.client(free) as http:  # another token's window is its own
        assert [http.get("/v1/workflows").status_code for _ in range(5)] == [200] * 5
    listed = little(fleet_env, "tokens", "list").stdout
    assert "3/minute" in listed
    bad = little(fleet_env, "tokens", "create", "--scope", "runs:read", "--rate", "lots")
    assert bad.returncode == 1 and "--rate: expected a rate such as" in bad.stderr


def test_a_token_restricted_to_workflows_submits_only_those(fleet_env: FleetEnv) -> None:
    served = start_serve(fleet_env)
    made = little(
        fleet_env, "tokens", "create", "--scope", "runs:submit", "--workflow", "http.broken"
    )
    assert made.returncode == 0, made.stderr
    with served.client(made.stdout.strip()) as http:
        refused = http.post("/v1/runs", json=RUN)
        body = is_problem(refused, 403)
        assert body["errors"][0]["pointer"] == "/workflow"
        assert "'http.steps'" in body["detail"] and "http.broken" in body["detail"]
        allowed = http.post("/v1/runs", json={"workflow": "http.broken", "input": {}})
        assert allowed.status_code == 202, allowed.text
    (listed,) = json.loads(little(fleet_env, "tokens", "list", "--json").stdout)
    assert listed["workflows"] == ["http.broken"]


def test_the_event_loops_token_check_answers_as_the_threads_one(
    redis_url: str, redis_key_prefix: str
) -> None:
    """``verify_async`` (each request's check, in the server's event loop) and ``verify``
    agree on a valid token, a wrong secret, an unknown id, a malformed and a revoked one."""
    import asyncio

    import redis as redis_lib
    from redis.asyncio import Redis as AsyncRedis

    from little_dist.http.tokens import TokenStore

    client = redis_lib.Redis.from_url(redis_url)
    store = TokenStore(client, f"{redis_key_prefix}tokens-async")
    try:
        good = store.create(["runs:read"], name="reader").token
        revoked = store.create(["admin"]).token
        store.revoke(revoked.split(".", 1)[0].removeprefix("ldt_"))
        token_id, secret = good.split(".", 1)
        cases = [
            good,
            f"{token_id}.{'A' * len(secret)}",  # the secret is wrong
            f"ldt_{'0' * 12}.{secret}",  # no such id
            "not-a-token",
            revoked,
        ]

        async def checked() -> list[object]:
            loop_client = AsyncRedis.from_url(redis_url)
            try:
                return [await store.verify_async(token, loop_client) for token in cases]
            finally:
                await loop_client.aclose()

        in_loop = asyncio.run(checked())
        assert in_loop == [store.verify(token) for token in cases]
        assert in_loop[0] is not None and in_loop[0].scopes == ("runs:read",)
        assert in_loop[1:] == [None] * 4
    finally:
        client.delete(f"{redis_key_prefix}tokens-async")
        client.close()


def test_three_hundred_requests_at_once_are_all_let_in(fleet_env: FleetEnv) -> None:
    """Each request's token is checked in the server's event loop over its own Redis client:
    past its connections, requests wait for one (none answered 503 "Too many connections"
    as a plain asyncio pool does past 100)."""
    import asyncio

    import httpx

    served = start_serve(fleet_env)
    redis, store = token_store(fleet_env)
    try:
        token = store.create(["runs:read"]).token
    finally:
        redis.close()

    async def all_at_once() -> list[int]:
        limits = httpx.Limits(max_connections=310, max_keepalive_connections=0)
        async with httpx.AsyncClient(
            base_url=served.url,
            headers={"Authorization": f"Bearer {token}"},
            limits=limits,
            timeout=60,
        ) as http:
            answers = await asyncio.gather(*(http.get("/v1/workflows") for _ in range(300)))
        return [answer.status_code for answer in answers]

    assert asyncio.run(all_at_once()) == [200] * 300
