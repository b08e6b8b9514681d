"""The ``--app`` module of the redaction tests: every provider and tool error holds credentials.

Imported by ``little run --app tests.secrets_app`` and ``little worker --app
tests.secrets_app`` (run from the repository root), so it imports nothing from pytest.

* :data:`PROVIDER_ERROR`: the text the scripted provider raises on every call (an
  ``AuthenticationError``, as a provider that refused a key raises it): an OpenAI-style key,
  an ``Authorization: Bearer`` header and a Google key in a request URL's ``key=``.
* ``leak``: a tool that raises an error holding a key and a password URL.
* :func:`model_lwir`, :func:`tool_lwir`: one-step LWIR runs of a model call and of ``leak``.
* ``planned``: a workflow without a plan, so the planner's model call fails.
* :data:`SECRETS`: every credential above; none may appear anywhere once the runs failed.
"""

from __future__ import annotations

from typing import Any

from little_dist import define_workflow, model
from little_dist.tools import ToolRegistry, tool
from tests.lwir_builder import workflow_doc

__all__ = [
    "PROVIDER_ERROR",
    "SECRETS",
    "TOOL_ERROR",
    "build_script",
    "leak",
    "model_lwir",
    "models",
    "planned",
    "tool_lwir",
    "tools",
]

OPENAI_KEY = "sk-proj-abc123DEF456ghi789JKL012mno345PQR678stu901vwx"
BEARER_TOKEN = "xyzBearerTok3n0123456789abcdefXYZ"
GOOGLE_KEY = "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW"
REDIS_PASSWORD = "hunter2-redis-pass"
SECRETS = (OPENAI_KEY, BEARER_TOKEN, GOOGLE_KEY, REDIS_PASSWORD)

PROVIDER_ERROR = (
    f"Incorrect API key provided: {OPENAI_KEY}. Request headers: "
    f"{{'Authorization': 'Bearer {BEARER_TOKEN}', 'Content-Type': 'application/json'}}; "
    f"url: https://api.example/v1/models/gpt:generate?key={GOOGLE_KEY}&alt=json"
)
TOOL_ERROR = f"cannot reach redis://:{REDIS_PASSWORD}@cache:6379/0 (api_key={OPENAI_KEY})"


@tool
def leak(n: int = 0) -> dict[str, Any]:
    """Always fails, with credentials in its error."""
    raise RuntimeError(TOOL_ERROR)


tools = ToolRegistry([leak])
models = {"model.fast": "scripted/fast"}

planned = define_workflow(
    id="secrets.planned",
    description="Answer a question (planned by a model that refuses the key).",
    input={"type": "object", "properties": {"question": {"type": "string"}}},
    output={"type": "object", "properties": {"answer": {"type": "string"}}},
    model=model("scripted/planner", id="fast"),
    tools=[leak],
)


def build_script() -> Any:
    """The scripted provider: every call raises ``AuthenticationError(PROVIDER_ERROR)``."""
    from little_dist.testing import ScriptedModel

    script = ScriptedModel()
    script.otherwise().raise_error("auth", message=PROVIDER_ERROR, times=None)
    return script


def model_lwir() -> dict[str, Any]:
    step = {
        "id": "draft",
        "uses": "ai.generate",
        "with": {"model": "model.fast", "prompt": "Say hello."},
        "output": {"mode": "object", "schema": {"type": "object"}},
    }
    return workflow_doc("secrets.model", [step])


def tool_lwir() -> dict[str, Any]:
    step = {
        "id": "call",
        "uses": "tool.call",
        "with": {"tool": "leak", "args": {"n": 1}},
        "output": {"mode": "json", "schema": True},
    }
    return workflow_doc("secrets.tool", [step])
