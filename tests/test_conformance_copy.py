"""The vectors in tests/conformance/ must stay byte-identical to shared/conformance/."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import CONFORMANCE_DIR

SHARED = Path(__file__).resolve().parents[2] / "shared" / "conformance"


def test_every_vector_file_is_copied() -> None:
    assert sorted(p.name for p in CONFORMANCE_DIR.glob("*.json")) == [
        "canonical.json",
        "expressions.json",
        "ids.json",
        "lwir_validation.json",
        "pricing.json",
        "run_state.json",
    ]


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared/conformance is not beside this checkout")
def test_copies_match_shared_byte_for_byte() -> None:
    shared = sorted(p.name for p in SHARED.glob("*.json"))
    ours = sorted(p.name for p in CONFORMANCE_DIR.glob("*.json"))
    assert ours == shared, "a vector file was added or removed in shared/conformance"
    drifted = [n for n in shared if (SHARED / n).read_bytes() != (CONFORMANCE_DIR / n).read_bytes()]
    assert not drifted, f"tests/conformance drifted from shared/conformance: {drifted}"
