from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = [
    "tests.session_lifetime",
    "tests.conftest_services",
    "little_dist.testing.pytest_plugin",
]

CONFORMANCE_DIR = Path(__file__).parent / "conformance"


def load_vectors(name: str) -> Any:
    """Load a conformance vector file from tests/conformance/ (e.g. ``"canonical"``)."""
    return json.loads((CONFORMANCE_DIR / f"{name}.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def conformance_dir() -> Path:
    return CONFORMANCE_DIR
