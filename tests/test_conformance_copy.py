"""The vectors in tests/conformance/ are upstream facts: they must not change by accident.

``SHA256SUMS`` pins every vector file, so a copy that drifts fails the suite on any machine;
where the team's ``shared/conformance/`` folder sits beside the checkout (the developers' and
CI's machines), the copies must also match it byte for byte, so a vector update there cannot be
missed here.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.conftest import CONFORMANCE_DIR

SHARED = Path(__file__).resolve().parents[2] / "shared" / "conformance"


def _pinned() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (CONFORMANCE_DIR / "SHA256SUMS").read_text(encoding="utf-8").splitlines():
        digest, name = line.split(maxsplit=1)
        pins[name] = digest
    return pins


def test_every_vector_file_is_pinned() -> None:
    files = sorted(p.name for p in CONFORMANCE_DIR.glob("*.json"))
    assert files == sorted(_pinned())
    assert len(files) == 6


def test_vector_files_match_their_pinned_digests() -> None:
    drifted = [
        name
        for name, digest in _pinned().items()
        if hashlib.sha256((CONFORMANCE_DIR / name).read_bytes()).hexdigest() != digest
    ]
    assert not drifted, f"tests/conformance changed without updating SHA256SUMS: {drifted}"


def test_copies_match_the_shared_folder_when_it_is_there() -> None:
    if not SHARED.is_dir():
        # A user's checkout has no shared/ beside it; the pinned digests above still hold.
        return
    shared = sorted(p.name for p in SHARED.glob("*.json"))
    assert shared == sorted(_pinned()), "a vector file was added or removed in shared/"
    drifted = [n for n in shared if (SHARED / n).read_bytes() != (CONFORMANCE_DIR / n).read_bytes()]
    assert not drifted, f"tests/conformance drifted from shared/conformance: {drifted}"
