from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Annotated, Any, Literal

import jsonschema
import pytest
from pydantic import BaseModel, Field

from little_dist.canonical import sha256_digest
from little_dist.errors import InvalidInputError, NotFoundError
from little_dist.tools import InvalidToolInputError, Tool, ToolRegistry, tool


class Address(BaseModel):
    street: str
    title: str | None = None  # a property named like a schema keyword must survive


@tool
def lookup_customer(
    account_id: Annotated[str, Field(description="The account to look up")],
    limit: int = 10,
    mode: Literal["brief", "full"] = "brief",
    address: Address | None = None,
) -> dict[str, Any]:
    """Find a customer by account id.

    Longer explanation that is not part of the description.
    """
    return {"account": account_id, "limit": limit, "mode": mode, "address": address}


def test_schema_from_signature_is_draft07_and_openai_shaped() -> None:
    entry = lookup_customer.to_openai()
    assert entry["type"] == "function"
    function = entry["function"]
    assert function["name"] == "lookup_customer"
    assert function["description"] == "Find a customer by account id."
    schema = function["parameters"]
    jsonschema.Draft7Validator.check_schema(schema)
    assert schema["type"] == "object"
    assert schema["required"] == ["account_id"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["account_id"] == {
        "type": "string",
        "description": "The account to look up",
    }
    assert schema["properties"]["limit"] == {"type": "integer", "default": 10}
    assert schema["properties"]["mode"]["enum"] == ["brief", "full"]
    assert "$defs" not in schema
    assert set(schema["definitions"]["Address"]["properties"]) == {"street", "title"}
    assert schema["properties"]["address"]["anyOf"][0] == {"$ref": "#/definitions/Address"}
    assert "title" not in schema  # pydantic's generated titles are dropped
    # The schema accepts what the tool accepts, and refuses what it refuses.
    validator = jsonschema.Draft7Validator(schema)
    assert validator.is_valid({"account_id": "A1", "address": {"street": "Main"}})
    assert not validator.is_valid({"limit": 3})


def test_call_validates_and_converts_arguments() -> None:
    result = lookup_customer.call({"account_id": "A1", "address": {"street": "Main St"}})
    assert result == {
        "account": "A1",
        "limit": 10,
        "mode": "brief",
        "address": Address(street="Main St"),
    }
    assert lookup_customer.call({"account_id": "A2", "limit": "5"})["limit"] == 5


def test_invalid_arguments_name_the_tool_and_the_argument() -> None:
    with pytest.raises(InvalidToolInputError) as raised:
        lookup_customer.call({"account_id": 7, "limit": "many", "extra": True})
    error = raised.value
    assert isinstance(error, InvalidInputError)
    assert error.tool_name == "lookup_customer"
    assert [path for path, _ in error.problems] == ["account_id", "limit", "extra"]
    assert "tool 'lookup_customer': invalid input: account_id:" in str(error)
    assert "(got 'many')" in str(error)
    with pytest.raises(InvalidToolInputError, match=r"account_id: Field required"):
        lookup_customer.call({})
    with pytest.raises(InvalidToolInputError, match=r"\$: expected an object, got list"):
        lookup_customer.call([1, 2])  # type: ignore[arg-type]
    with pytest.raises(InvalidToolInputError, match=r"address\.street: Field required"):
        lookup_customer.call({"account_id": "A", "address": {}})


def test_decorated_function_still_callable_directly() -> None:
    assert lookup_customer("A9")["account"] == "A9"


def test_parameter_names_that_clash_with_basemodel_attributes() -> None:
    @tool(name="render", description="Render a template.")
    def render(schema: str, json: int = 0, model_config: bool = False) -> str:
        return f"{schema}:{json}:{model_config}"

    assert render.call({"schema": "s", "json": 2, "model_config": True}) == "s:2:True"
    assert set(render.input_schema["properties"]) == {"schema", "json", "model_config"}
    assert render.description == "Render a template."


def test_positional_only_parameters() -> None:
    @tool
    def add(a: int, b: int, /) -> int:
        return a + b

    assert add.call({"a": 2, "b": 3}) == 5


def test_variadic_parameters_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="variadic"):

        @tool
        def bad(*items: int) -> None:
            return None


class SearchInput(BaseModel):
    """Search the knowledge base."""

    query: str = Field(description="What to search for")
    top_k: int = Field(3, ge=1, le=10)


def test_input_model_passed_whole_or_as_fields() -> None:
    def search(request: SearchInput) -> list[str]:
        return [request.query] * request.top_k

    whole = tool(search, input_model=SearchInput)
    assert whole.description == "Search the knowledge base."
    assert whole.input_schema["properties"]["query"]["description"] == "What to search for"
    assert whole.input_schema["properties"]["top_k"]["maximum"] == 10
    assert whole.call({"query": "q", "top_k": 2}) == ["q", "q"]
    with pytest.raises(InvalidToolInputError, match=r"top_k: Input should be less than"):
        whole.call({"query": "q", "top_k": 11})

    def search_fields(query: str, top_k: int) -> str:
        return f"{query}/{top_k}"

    fields = tool(search_fields, name="search_fields", input_model=SearchInput)
    assert fields.call({"query": "x"}) == "x/3"


def test_async_tools() -> None:
    @tool
    async def fetch(url: str) -> str:
        """Fetch a page."""
        await asyncio.sleep(0)
        return f"<{url}>"

    assert fetch.call({"url": "u"}) == "<u>"
    assert asyncio.run(fetch.acall({"url": "v"})) == "<v>"
    assert asyncio.run(lookup_customer.acall({"account_id": "A"}))["account"] == "A"

    async def inside_a_loop() -> None:
        with pytest.raises(InvalidInputError, match="use 'await acall"):
            fetch.call({"url": "u"})

    asyncio.run(inside_a_loop())


def test_json_schema_tool() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    weather = Tool.from_json_schema("mcp.weather", schema, lambda city: f"sunny in {city}")
    assert weather.call({"city": "Oslo"}) == "sunny in Oslo"
    with pytest.raises(InvalidToolInputError, match=r"tool 'mcp.weather': invalid input: \$:"):
        weather.call({})
    with pytest.raises(InvalidInputError, match="not valid JSON Schema"):
        Tool.from_json_schema("broken", {"type": "nonsense"})


@pytest.mark.parametrize("name", ["1tool", "has space", "", "a/b", "ünicode"])
def test_invalid_tool_names(name: str) -> None:
    with pytest.raises(InvalidInputError, match="Expected pattern"):
        tool(lambda: None, name=name)


def test_registry() -> None:
    @tool
    def ping() -> str:
        """Say pong."""
        return "pong"

    registry = ToolRegistry([lookup_customer, ping])
    assert registry.names() == ["lookup_customer", "ping"]
    assert "ping" in registry and "pong" not in registry
    assert len(registry) == 2
    assert registry.call("ping", {}) == "pong"
    assert registry.get("nope") is None
    with pytest.raises(NotFoundError, match=r"no tool named 'nope' \(registered: lookup_customer"):
        registry["nope"]
    with pytest.raises(InvalidInputError, match=r"Tool 'ping' is already registered\."):
        registry.register(ping)
    with pytest.raises(InvalidInputError, match="only Tool objects"):
        registry.register(lambda: None)  # type: ignore[arg-type]
    assert [entry["function"]["name"] for entry in registry.to_openai()] == [
        "lookup_customer",
        "ping",
    ]
    assert [entry["function"]["name"] for entry in registry.to_openai(["ping"])] == ["ping"]
    assert registry.snapshot_for_manifest()[1] == {
        "id": "ping",
        "description": "Say pong.",
        "inputSchemaHash": sha256_digest(ping.input_schema),
    }
    assert [t.name for t in registry] == ["lookup_customer", "ping"]


def test_tools_module_does_not_import_litellm() -> None:
    code = "import sys, little_dist.tools; assert 'litellm' not in sys.modules"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
