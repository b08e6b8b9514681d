from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# The property tests check properties, not how fast their inputs are drawn: on the loaded
# 2-core CI machine one slow draw (a second, while the integration tests run beside it)
# failed test_canonical's round trip with FailedHealthCheck. Their own settings still
# choose how many examples; this only drops the clock from every one of them.
settings.register_profile("little", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("little")

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
