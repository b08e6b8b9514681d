"""Test support: a scripted LLM provider for litellm and a guard against real network calls.

Importing this package does not import litellm; installing a :class:`ScriptedModel` does.
"""

from __future__ import annotations

from little_dist.testing.guard import (
    NetworkGuardError,
    NonLocalConnectionError,
    RealProviderCallError,
)
from little_dist.testing.provider_quota import ProviderQuota
from little_dist.testing.replies import ERROR_KINDS, Reply, ToolCall, Usage
from little_dist.testing.scripted import (
    METADATA_KEY,
    PROVIDER,
    SCRIPT_ENV_VAR,
    Rule,
    ScriptedModel,
    ScriptedRequest,
    install_from_env,
    install_from_file,
    read_call_log,
)

__all__ = [
    "ERROR_KINDS",
    "METADATA_KEY",
    "PROVIDER",
    "SCRIPT_ENV_VAR",
    "NetworkGuardError",
    "NonLocalConnectionError",
    "ProviderQuota",
    "RealProviderCallError",
    "Reply",
    "Rule",
    "ScriptedModel",
    "ScriptedRequest",
    "ToolCall",
    "Usage",
    "install_from_env",
    "install_from_file",
    "read_call_log",
]
