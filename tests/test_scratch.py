"""Run scratch (little_dist.scratch): a step's files published with its commit, seen by its
peers and its next visit, on the embedded world and across machines on Redis + S3."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from little_dist.errors import InvalidInputError
from little_dist.event_types import typed
from little_dist.sandbox import run_sandboxed
from little_dist.scratch import AttemptScratch, ScratchLimitError, scratch_files
from little_dist.world import LocalWorld
from little_dist.world.base import World

RUN = "run_scratch_test"


def sh(scratch: AttemptScratch, command: str) -> Any:
    return run_sandboxed(["bash", "-c", command], mounts=scratch.mounts, cwd="/mnt/scratch/own")


def commit(world: World, scratch: AttemptScratch) -> list[str]:
    """What an attempt's commit does with its scratch: the artifacts, then the events."""
    changes = scratch.changes()
    world.append_batch_with_artifacts(RUN, changes.events, changes.artifacts)
    return changes.skipped


def files_of(world: World) -> Any:
    return scratch_files(world.list_events(RUN))


def test_a_peer_sees_what_a_completed_step_wrote_and_nothing_it_did_not_commit(
    tmp_path: Path,
) -> None:
    world = LocalWorld(tmp_path / "world")
    with AttemptScratch(world, RUN, "research", 1, files_of(world)) as research:
        made = sh(research, "mkdir -p notes && echo 'cats purr' > notes/a.txt && echo x > b.txt")
        assert made.exit_code == 0
        assert commit(world, research) == []
    with AttemptScratch(world, RUN, "killed", 1, files_of(world)) as killed:
        sh(killed, "echo never > lost.txt")  # killed before its commit: nothing published
    with AttemptScratch(world, RUN, "write", 1, files_of(world)) as write:
        seen = sh(
            write,
            "cat /mnt/scratch/peer-steps/research/notes/a.txt; ls /mnt/scratch/peer-steps;"
            " ls /mnt/scratch/own; echo y > /mnt/scratch/peer-steps/research/b.txt",
        )
    assert seen.stdout.splitlines() == ["cats purr", "research"]
    assert "Read-only file system" in seen.stderr
    assert set(files_of(world)) == {"research"}


def test_a_steps_next_visit_starts_from_its_files_and_publishes_only_changes(
    tmp_path: Path,
) -> None:
    world = LocalWorld(tmp_path / "world")
    with AttemptScratch(world, RUN, "loop", 1, files_of(world)) as first:
        sh(first, "echo 1 > keep.txt; echo 1 > change.txt; echo 1 > drop.txt")
        commit(world, first)
    with AttemptScratch(world, RUN, "loop", 2, files_of(world)) as second:
        assert sh(second, "cat keep.txt change.txt drop.txt").stdout == "1\n1\n1\n"
        sh(second, "echo 2 > change.txt; rm drop.txt; echo new > new.txt; chmod +x new.txt")
        changes = second.changes()
    kinds = sorted((e.type, e.payload["path"]) for e in changes.events)
    assert kinds == [
        ("harness.file.created", "/mnt/scratch/own/new.txt"),
        ("harness.file.deleted", "/mnt/scratch/own/drop.txt"),
        ("harness.file.updated", "/mnt/scratch/own/change.txt"),
    ]
    assert len(changes.artifacts) == 2  # keep.txt is not stored again
    world.append_batch_with_artifacts(RUN, changes.events, changes.artifacts)
    files = files_of(world)["loop"]
    assert sorted(files) == ["change.txt", "keep.txt", "new.txt"] and files["new.txt"].executable
    for event in world.list_events(RUN):
        typed(event)  # upstream's file event shapes


def test_links_devices_and_fifos_are_not_published(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "world")
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    with AttemptScratch(world, RUN, "tricky", 1, files_of(world)) as tricky:
        sh(tricky, "echo ok > real.txt; ln -s /etc/passwd link; mkfifo pipe; ln -s .. up")
        os.symlink(outside, tricky.own / "host-link")  # as if made behind the sandbox's back
        skipped = commit(world, tricky)
    assert sorted(skipped) == [
        "host-link (a symlink, not published)",
        "link (a symlink, not published)",
        "pipe (a FIFO, not published)",
        "up (a symlink, not published)",
    ]
    assert sorted(files_of(world)["tricky"]) == ["real.txt"]


def test_limits_fail_the_attempt_with_a_clear_error(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "world")
    with AttemptScratch(world, RUN, "big", 1, {}, max_bytes=1000) as big:
        sh(big, "head -c 2000 /dev/zero > big.bin")
        with pytest.raises(ScratchLimitError, match="scratch of step 'big' is over its limit"):
            big.changes()
    with AttemptScratch(world, RUN, "long", 1, {}) as long:
        deep = long.own.joinpath(*["d" * 200] * 5)  # 1,004 bytes of folders, then a file
        deep.mkdir(parents=True)
        (deep / ("f" * 30)).write_text("x")
        with pytest.raises(ScratchLimitError, match="path over 1024 bytes"):
            long.changes()


def test_a_snapshot_of_own_restores_on_a_fresh_folder_without_links(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "world")
    with AttemptScratch(world, RUN, "snap", 1, {}) as first:
        sh(first, "mkdir -p d && echo one > d/a.txt && echo x > run.sh && chmod +x run.sh")
        sh(first, "ln -s /etc/passwd link; mkfifo pipe")
        manifest = first.snapshot()
        again = first.snapshot()  # unchanged files are neither read nor stored again
    assert again == manifest
    assert sorted(manifest["files"]) == ["d/a.txt", "run.sh"]
    assert manifest["files"]["run.sh"]["executable"] is True
    # Nothing is published by a snapshot: peers see no file of it.
    assert files_of(world) == {}
    with AttemptScratch(world, RUN, "snap", 2, {}) as second:
        (second.own / "stale.txt").write_text("from the start of attempt 2")
        second.restore(manifest)
        found = sorted(str(p.relative_to(second.own)) for p in second.own.rglob("*"))
        assert found == ["d", "d/a.txt", "run.sh"]
        assert (second.own / "d" / "a.txt").read_text() == "one\n"
        assert os.access(second.own / "run.sh", os.X_OK)
        # ... and the commit publishes them, under the refs the snapshot stored.
        commit(world, second)
    published = files_of(world)["snap"]
    assert {k: v.artifact_ref for k, v in published.items()} == {
        k: v["artifactRef"] for k, v in manifest["files"].items()
    }


@pytest.mark.parametrize("bad", ["../escape", "/abs", "a//b", "a/./b", "nul\0byte"])
def test_a_manifest_naming_a_path_out_of_own_is_refused(tmp_path: Path, bad: str) -> None:
    world = LocalWorld(tmp_path / "world")
    entry = {"bytes": 1, "sha256": "sha256:00", "artifactRef": "artifact://art_0"}
    with (
        AttemptScratch(world, RUN, "evil", 1, {}) as evil,
        pytest.raises(InvalidInputError, match="own-tree manifest: bad entry"),
    ):
        evil.restore({"files": {bad: entry}})
    assert not (tmp_path / "escape").exists()


@pytest.mark.integration
def test_a_step_on_another_machine_sees_its_peers_files(
    redis_url: str, redis_key_prefix: str, s3_service: Any
) -> None:
    from little_dist.world.redis_s3 import RedisS3World

    name = uuid.uuid4().hex[:10]
    spec = f"{redis_url}?key_prefix={redis_key_prefix}{name}:&s3_prefix={s3_service.prefix}{name}/"

    def machine() -> RedisS3World:
        return RedisS3World.from_url(
            spec,
            s3_endpoint=s3_service.endpoint,
            s3_bucket=s3_service.bucket,
            aws_access_key_id=s3_service.access_key_id,
            aws_secret_access_key=s3_service.secret_access_key,
        )

    one, two = machine(), machine()
    try:
        with AttemptScratch(one, RUN, "fetch", 1, files_of(one)) as fetch:
            sh(fetch, "head -c 300000 /dev/urandom > data.bin; echo done > status.txt")
            written = (fetch.own / "data.bin").read_bytes()
            commit(one, fetch)
        with AttemptScratch(two, RUN, "use", 1, files_of(two)) as use:
            peer = use.mounts[-1].source
            assert (peer / "data.bin").read_bytes() == written
            assert sh(use, "cat /mnt/scratch/peer-steps/fetch/status.txt").stdout == "done\n"
        # A snapshot taken on one machine restores on the other (a retried attempt's replay).
        with AttemptScratch(one, RUN, "retried", 1, files_of(one)) as killed:
            sh(killed, "head -c 200000 /dev/urandom > mine.bin")
            manifest = killed.snapshot()
            mine = (killed.own / "mine.bin").read_bytes()
        with AttemptScratch(two, RUN, "retried", 2, files_of(two)) as retry:
            retry.restore(manifest)
            assert (retry.own / "mine.bin").read_bytes() == mine
    finally:
        one.close()
        two.close()
