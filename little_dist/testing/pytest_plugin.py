"""pytest plugin: no test reaches a real LLM provider or a non-local host.

Enable it from ``tests/conftest.py`` with::

    pytest_plugins = ["little_dist.testing.pytest_plugin"]

For the whole session the network guard (:mod:`little_dist.testing.guard`) is active, and
``LITTLE_NETWORK_GUARD=1`` is exported so worker processes started by tests can activate it
too. A test during which the guard refused anything fails at teardown, even if the refusal was
caught and wrapped on the way (litellm and httpx both do that). The ``scripted_model`` fixture
gives each test a fresh :class:`ScriptedModel`, installed for the test's duration.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from little_dist.testing import guard
from little_dist.testing.scripted import ScriptedModel

__all__ = ["little_network_guard", "pytest_configure", "pytest_unconfigure", "scripted_model"]


def pytest_configure(config: pytest.Config) -> None:
    # litellm would otherwise fetch its price map from GitHub on import.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    guard.activate()
    os.environ[guard.GUARD_ENV_VAR] = "1"


def pytest_unconfigure(config: pytest.Config) -> None:
    guard.deactivate()


@pytest.fixture(autouse=True)
def little_network_guard() -> Iterator[None]:
    """Fail the test if the guard refused a real provider call or a non-local connection."""
    guard.take_violations()
    yield
    refused = guard.take_violations()
    if refused:
        pytest.fail(
            "the test tried to leave the machine (little-dist network guard):\n  "
            + "\n  ".join(refused),
            pytrace=False,
        )


@pytest.fixture
def scripted_model() -> Iterator[ScriptedModel]:
    """A fresh scripted model serving ``scripted/*`` for this test (imports litellm)."""
    script = ScriptedModel()
    with script.installed():
        yield script
