from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["tests.conftest_services", "little_dist.testing.pytest_plugin"]

CONFORMANCE_DIR = Path(__file__).parent / "conformance"


def load_vectors(name: str) -> Any:
    """Load a conformance vector file from tests/conformance/ (e.g. ``"canonical"``)."""
    return json.loads((CONFORMANCE_DIR / f"{name}.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def conformance_dir() -> Path:
    return CONFORMANCE_DIR


@pytest.fixture(autouse=True)
def _registry_only_pricing_by_default() -> Iterator[None]:
    """Each test starts with folds priced from the registry only, as upstream prices them.

    Entry points such as ``run_workflow`` install litellm's cost map as the process-wide
    fallback; without this reset, whether a test sees it would depend on test order.
    """
    from little_dist.run_state import set_default_pricing_fallback

    previous = set_default_pricing_fallback(None)
    yield
    set_default_pricing_fallback(previous)
