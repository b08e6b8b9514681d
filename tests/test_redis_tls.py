"""``rediss://``: the settings check the TLS options, Celery's broker gets them, and a fleet
runs over TLS against a real ``redis-server --tls-port`` with a certificate made by
``openssl`` for the test."""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from little_dist.fleet.app import celery_config
from little_dist.redis_tls import broker_use_ssl
from little_dist.settings import SettingsError, load_settings
from tests import workflows_for_tests as wf
from tests.conftest_services import S3Service
from tests.fleet_processes import FleetEnv, make_fleet_env, start_worker
from tests.redis_server import RedisServer


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, a server certificate it signed for 127.0.0.1, and a CA that signed nothing."""
    where = tmp_path_factory.mktemp("tls")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=where, check=True, capture_output=True)

    for ca in ("ca", "other-ca"):
        openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-subj", f"/CN=little {ca}",
        )  # fmt: skip
    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=127.0.0.1",
    )  # fmt: skip
    (where / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "san.cnf",
    )  # fmt: skip
    return {name: where / name for name in ("ca.pem", "other-ca.pem", "server.pem", "server.key")}


def problems_for(env: dict[str, str]) -> tuple[str, ...]:
    with pytest.raises(SettingsError) as caught:
        load_settings(env)
    return caught.value.problems


# -- the settings ---------------------------------------------------------------------------------


def test_a_rediss_url_must_say_whether_the_certificate_is_checked() -> None:
    (problem,) = problems_for({"LITTLE_REDIS_URL": "rediss://:s3cret-pw@redis:6380/0"})
    assert problem.startswith("LITTLE_REDIS_URL='rediss://:**********@redis:6380/0': ")
    assert "ssl_cert_reqs=required" in problem and "s3cret-pw" not in problem


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("ssl_cert_reqs=maybe", "ssl_cert_reqs='maybe': expected required, optional or none"),
        ("ssl_cert_reqs=required&ssl_ca_certs=/no/ca.pem", "ssl_ca_certs='/no/ca.pem': no such"),
        ("ssl_cert_reqs=required&ssl_ca_path=/no/dir", "ssl_ca_path='/no/dir': no such dir"),
        ("ssl_cert_reqs=required&ssl_check_hostname=yes", "expected true or false"),
        ("ssl_cert_reqs=none&ssl_certs=x", "unknown TLS option ssl_certs"),
    ],
)
def test_bad_tls_options_are_named(query: str, says: str) -> None:
    (problem,) = problems_for({"LITTLE_BROKER_URL": f"rediss://redis:6380/0?{query}"})
    assert problem.startswith("LITTLE_BROKER_URL=") and says in problem, problem


def test_a_client_certificate_needs_its_key(certs: dict[str, Path]) -> None:
    url = f"rediss://redis/0?ssl_cert_reqs=required&ssl_certfile={certs['server.pem']}"
    (problem,) = problems_for({"LITTLE_WORLD": url, "LITTLE_S3_BUCKET": "little"})
    assert problem.startswith("LITTLE_WORLD=") and "ssl_keyfile go together" in problem


def test_tls_options_on_a_plain_url_are_refused() -> None:
    (problem,) = problems_for({"LITTLE_REDIS_URL": "redis://redis/0?ssl_cert_reqs=required"})
    assert "needs a rediss:// URL" in problem


def test_the_broker_gets_the_urls_tls_options(certs: dict[str, Path]) -> None:
    url = (
        f"rediss://fleet:pw@redis:6380/0?ssl_cert_reqs=required&ssl_ca_certs={certs['ca.pem']}"
        "&ssl_check_hostname=true"
    )
    settings = load_settings({"LITTLE_REDIS_URL": url})
    assert settings.broker_url == url
    assert celery_config(settings)["broker_use_ssl"] == {
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
        "ssl_ca_certs": str(certs["ca.pem"]),
        "ssl_check_hostname": True,
    }
    assert "broker_use_ssl" not in celery_config(load_settings({}))
    assert broker_use_ssl("rediss://r/0?ssl_cert_reqs=none") == {"ssl_cert_reqs": ssl.CERT_NONE}


# -- a real TLS Redis ----------------------------------------------------------------------------


@pytest.fixture
def tls_redis(tmp_path: Path, certs: dict[str, Path]) -> Iterator[RedisServer]:
    server = RedisServer.start_new(
        tmp_path, tls=(certs["server.pem"], certs["server.key"], certs["ca.pem"])
    )
    try:
        yield server
    finally:
        server.kill()


def tls_url(server: RedisServer, ca: Path) -> str:
    return f"rediss://127.0.0.1:{server.port}/0?ssl_cert_reqs=required&ssl_ca_certs={ca}"


@pytest.mark.integration
def test_the_broker_refuses_a_server_its_ca_did_not_sign(
    tls_redis: RedisServer, certs: dict[str, Path]
) -> None:
    from little_dist.fleet.app import make_celery_app

    trusted = make_celery_app(
        load_settings({"LITTLE_REDIS_URL": tls_url(tls_redis, certs["ca.pem"])})
    )
    with trusted.connection_for_write() as connection:
        connection.ensure_connection(max_retries=1)
        with connection.channel() as channel:
            assert channel.client.ping()
    wrong = tls_url(tls_redis, certs["other-ca.pem"])
    untrusted = make_celery_app(load_settings({"LITTLE_REDIS_URL": wrong}))
    with untrusted.connection_for_write() as connection, pytest.raises(Exception) as refused:
        connection.ensure_connection(max_retries=1)
    assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_fleet_runs_over_tls(
    tls_redis: RedisServer, certs: dict[str, Path], s3_service: S3Service, tmp_path: Path
) -> None:
    url = tls_url(tls_redis, certs["ca.pem"])
    base = f"rediss://127.0.0.1:{tls_redis.port}/0"
    fleet: FleetEnv = make_fleet_env(base, s3_service, tmp_path)
    tls_query = url.split("?", 1)[1]
    fleet.redis_url = url
    fleet.env["LITTLE_REDIS_URL"] = fleet.env["LITTLE_BROKER_URL"] = url
    fleet.env["LITTLE_WORLD"] = fleet.env["LITTLE_WORLD"].replace("?", f"?{tls_query}&", 1)
    try:
        worker = start_worker(fleet, concurrency=2)
        client = fleet.client()
        run_id = client.submit(wf.chain_lwir(3), {})
        state = client.wait(run_id, timeout=60)
        assert state.status == "completed", worker.output()[-3000:]
        assert state.output == {"n": 2}
        assert "rediss://" in worker.output()  # Celery's banner names the broker it uses
    finally:
        fleet.close()
