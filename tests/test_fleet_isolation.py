"""Two tests' fleets cannot see each other: the suite runs them at once (pytest-xdist).

A fleet test's scheduler and workers find runs, signals and tasks only through names in the
environment :func:`tests.fleet_processes.make_fleet_env` gives them; every such name is the
test's own. A shared Redis (database 15 by default) and one S3 bucket per session hold them
all, so the names are what keeps the fleets apart.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from tests.conftest_services import S3Service
from tests.fleet_processes import ALL_ROLES, make_fleet_env

S3 = S3Service("http://127.0.0.1:1", "little-test", "key", "secret", "session-abc/")


def _names(tmp_path: Path) -> dict[str, str]:
    fleet = make_fleet_env("redis://127.0.0.1:6379/15", S3, tmp_path)
    query = parse_qs(urlsplit(fleet.env["LITTLE_WORLD"]).query)
    settings = fleet.settings()
    names = {
        "key prefix": query["key_prefix"][0],
        "S3 prefix": query["s3_prefix"][0],
        "signal stream": settings.signal_stream,
        "signal group": settings.signal_group,
    }
    names |= {f"{role} queue": settings.queue_for(role) for role in ALL_ROLES}  # type: ignore[arg-type]
    return names


def test_two_fleets_share_no_redis_key_queue_stream_group_or_s3_prefix(tmp_path: Path) -> None:
    one, other = _names(tmp_path / "one"), _names(tmp_path / "other")
    assert set(one.values()).isdisjoint(other.values()), (one, other)
    # Every Redis name is under the fleet's key prefix, which its teardown deletes.
    prefix = one["key prefix"]
    assert all(one[f"{role} queue"].startswith(prefix) for role in ALL_ROLES)
    assert one["signal stream"].startswith(prefix)
    # Objects go under the session's prefix, in a folder of the fleet's own.
    assert one["S3 prefix"].startswith(S3.prefix) and one["S3 prefix"] != S3.prefix
