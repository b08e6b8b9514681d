"""A workflow's bash capabilities: upstream's normal form in the definition hash and the
planner's capability manifest (upstream's ``normalizeBashCapabilities``)."""

from __future__ import annotations

import pytest

from little_dist import InvalidInputError, define_workflow
from little_dist.planner.request import orchestration_request
from little_dist.sandbox.bash_capabilities import BashCapabilities, bash_capabilities


def workflow(**kwargs: object):  # type: ignore[no-untyped-def]
    return define_workflow(id="bash.demo", model="scripted/demo", **kwargs)  # type: ignore[arg-type]


def test_the_default_is_upstreams_normal_form() -> None:
    snapshot = workflow().snapshot().to_json()
    assert snapshot["bashConfig"] == {"network": False, "python": True, "javascript": True}


def test_network_true_means_https_get_and_head_with_private_ranges_denied() -> None:
    assert BashCapabilities(network=True).normalized()["network"] == {
        "allowedUrlPrefixes": ["https://"],
        "allowedMethods": ["GET", "HEAD"],
        "denyPrivateRanges": True,
    }


def test_an_allowlist_is_normalised_as_upstream_does() -> None:
    given = {
        "network": {
            "allow": ["https://b.example/", "https://a.example/"],
            "methods": ["POST", "GET"],
            "timeoutMs": 500,
        }
    }
    assert bash_capabilities(given).normalized() == {
        "network": {
            "allowedUrlPrefixes": ["https://a.example/", "https://b.example/"],
            "allowedMethods": ["GET", "POST"],
            "timeoutMs": 500,
            "denyPrivateRanges": True,
        },
        "python": True,
        "javascript": True,
    }


def test_bash_capabilities_are_part_of_the_definition_hash_and_the_manifest() -> None:
    plain, no_python = workflow(), workflow(bash={"python": False})
    assert plain.definition_hash() != no_python.definition_hash()
    manifest = orchestration_request(no_python, {}).body["capabilityManifest"]
    assert manifest["bash"] == {"network": False, "python": False, "javascript": True}


@pytest.mark.parametrize(
    ("bash", "message"),
    [
        ({"shell": "zsh"}, "unknown capability 'shell'"),
        ({"python": "yes"}, r"bash.python: expected true or false"),
        ({"network": "on"}, "bash.network: expected true, false or an allowlist object"),
        ({"network": {"allow": "https://x"}}, "bash.network.allow: expected a list of strings"),
        ({"network": {"ports": [1]}}, "bash.network: unknown field 'ports'"),
        ("all", "expected BashCapabilities or a dict"),
    ],
)
def test_bad_capabilities_are_refused_naming_the_workflow(bash: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message) as caught:
        workflow(bash=bash)
    assert "workflow 'bash.demo'" in str(caught.value)
