"""Tools a workflow's steps may call: definition, JSON Schema, validation, registry.

A tool is a typed Python function. Its input JSON Schema (draft-07 compatible, like the AI
SDK's ``tool({description, inputSchema, execute})``) comes from the signature, its
description from the docstring's first paragraph, and per-argument descriptions from
``Annotated[..., Field(description=...)]``::

    @tool
    def lookup_customer(
        account_id: Annotated[str, Field(description="The account to look up")],
        include_orders: bool = False,
    ) -> dict[str, Any]:
        \"\"\"Find a customer by account id.\"\"\"

    lookup_customer.call({"account_id": "A1"})       # validated, then called
    lookup_customer.to_openai()                      # {"type": "function", "function": {...}}

``tool(fn, input_model=Model)`` takes the schema from a pydantic model instead (the function
then receives the model instance if its one parameter is annotated with the model, else the
fields as keyword arguments); ``Tool.from_json_schema`` wraps a plain JSON Schema (validated
with ``jsonschema``). Tool names follow upstream's pattern ``[A-Za-z][A-Za-z0-9_.-]*``
(OpenAI itself refuses ``.`` in function names, so keep dotted names for MCP-style
prefixes the harness maps). This module imports no litellm.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, overload

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from little_dist.canonical import sha256_digest
from little_dist.errors import InvalidInputError, NotFoundError

__all__ = [
    "InvalidToolInputError",
    "Tool",
    "ToolRegistry",
    "tool",
]

TOOL_ID_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")


class InvalidToolInputError(InvalidInputError):
    """Arguments that do not match a tool's input schema. ``problems`` lists
    ``(argument path, message)`` pairs."""

    def __init__(self, tool_name: str, problems: list[tuple[str, str]]) -> None:
        self.tool_name = tool_name
        self.problems = problems
        details = "; ".join(f"{path}: {message}" for path, message in problems)
        super().__init__(f"tool {tool_name!r}: invalid input: {details}")


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not TOOL_ID_PATTERN.fullmatch(name):
        raise InvalidInputError(
            f"Tool id {name!r} is invalid. Expected pattern [a-zA-Z][a-zA-Z0-9_.-]*."
        )
    return name


def _first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    paragraph = inspect.cleandoc(doc).split("\n\n", 1)[0]
    return " ".join(line.strip() for line in paragraph.splitlines()).strip()


# Keys whose value is a map of name -> schema (a property called "title" must survive there).
_SCHEMA_MAPS = {"properties", "$defs", "definitions", "patternProperties"}
# Keys whose value is data, not a schema.
_DATA_KEYS = {"default", "const", "enum", "examples", "required"}


def _draft07(node: Any) -> Any:
    """pydantic's 2020-12 output in draft-07 form: ``definitions`` instead of ``$defs``,
    array-form ``items`` instead of ``prefixItems``, and no generated ``title``s."""
    if isinstance(node, list):
        return [_draft07(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title":
            continue
        if key in _DATA_KEYS:
            out[key] = value
        elif key in _SCHEMA_MAPS:
            out["definitions" if key == "$defs" else key] = {
                name: _draft07(schema) for name, schema in value.items()
            }
        elif key == "$ref" and isinstance(value, str):
            out[key] = value.replace("#/$defs/", "#/definitions/")
        elif key == "prefixItems":
            out["items"] = _draft07(value)
        else:
            out[key] = _draft07(value)
    if "prefixItems" in node and "items" in node:
        # 2020-12 "items" after prefixItems means extra items; draft-07 calls it additionalItems.
        out["additionalItems"] = _draft07(node["items"])
        out["items"] = _draft07(node["prefixItems"])
    return out


def _model_from_signature(name: str, fn: Callable[..., Any]) -> tuple[type[BaseModel], list[str]]:
    signature = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as error:
        raise InvalidInputError(
            f"tool {name!r}: cannot resolve the type hints of {fn.__qualname__}: {error}"
        ) from error
    fields: dict[str, Any] = {}
    names: list[str] = []
    for position, parameter in enumerate(signature.parameters.values()):
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise InvalidInputError(
                f"tool {name!r}: parameter {parameter.name!r} is variadic; a tool's arguments "
                "must be named parameters"
            )
        annotation = hints.get(parameter.name, Any)
        default = ... if parameter.default is parameter.empty else parameter.default
        # Internal field names avoid clashes with BaseModel attributes ("schema", "json", ...);
        # the alias keeps the parameter's own name in the schema and in validation.
        fields[f"p{position}"] = (annotation, Field(default, alias=parameter.name))
        names.append(parameter.name)
    model = pydantic.create_model(
        f"{name}_input", __config__=ConfigDict(extra="forbid", populate_by_name=False), **fields
    )
    return model, names


class Tool:
    """A named, described, schema-checked callable (see the module docstring)."""

    def __init__(
        self,
        name: str,
        fn: Callable[..., Any] | None,
        *,
        description: str = "",
        input_model: type[BaseModel] | None = None,
        input_schema: Mapping[str, Any] | None = None,
        read_only: bool = False,
        _parameter_names: list[str] | None = None,
        _pass_model: bool = False,
    ) -> None:
        if (input_model is None) == (input_schema is None):
            raise InvalidInputError(f"tool {name!r}: give exactly one of input_model, input_schema")
        if not isinstance(read_only, bool):
            raise InvalidInputError(f"tool {name!r}: read_only must be True or False")
        self.name = _check_name(name)
        self.fn = fn
        self.description = description
        self.read_only = read_only
        self.input_model = input_model
        self._parameter_names = _parameter_names
        self._pass_model = _pass_model
        if input_model is not None:
            raw = input_model.model_json_schema(by_alias=True)
            self.input_schema: dict[str, Any] = _draft07(raw)
        else:
            import jsonschema

            schema = dict(input_schema or {})
            try:
                jsonschema.Draft7Validator.check_schema(schema)
            except jsonschema.SchemaError as error:
                raise InvalidInputError(
                    f"tool {name!r}: input schema is not valid JSON Schema: {error.message}"
                ) from error
            self.input_schema = schema

    @classmethod
    def from_json_schema(
        cls,
        name: str,
        schema: Mapping[str, Any],
        fn: Callable[..., Any] | None = None,
        *,
        description: str = "",
        read_only: bool = False,
    ) -> Tool:
        """A tool whose input is a plain JSON Schema; ``fn`` receives the arguments as
        keyword arguments."""
        return cls(name, fn, description=description, input_schema=schema, read_only=read_only)

    @property
    def records_lazily(self) -> bool:
        """Whether a call of it is recorded with the attempt's next write (a read-only tool:
        made again after a crash mid-call, nothing lost) instead of before it runs."""
        return self.read_only

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly, unvalidated (a decorated function stays usable)."""
        if self.fn is None:
            raise InvalidInputError(f"tool {self.name!r} has no function to call")
        return self.fn(*args, **kwargs)

    def validate(self, arguments: Mapping[str, Any]) -> Any:
        """Check ``arguments`` against the input schema; returns the validated input (a
        pydantic model instance, or the arguments for a JSON-Schema tool)."""
        if not isinstance(arguments, Mapping):
            raise InvalidToolInputError(
                self.name, [("$", f"expected an object, got {type(arguments).__name__}")]
            )
        if self.input_model is not None:
            try:
                return self.input_model.model_validate(dict(arguments))
            except pydantic.ValidationError as error:
                problems = [
                    (
                        ".".join(str(part) for part in item["loc"]) or "$",
                        f"{item['msg']} (got {item['input']!r})"
                        if item["type"] != "missing"
                        else item["msg"],
                    )
                    for item in error.errors()
                ]
                raise InvalidToolInputError(self.name, problems) from error
        import jsonschema

        validator = jsonschema.Draft7Validator(self.input_schema)
        found = sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.path))
        if found:
            problems = [
                (".".join(str(part) for part in item.path) or "$", item.message) for item in found
            ]
            raise InvalidToolInputError(self.name, problems)
        return dict(arguments)

    def _invocation(self, validated: Any) -> tuple[list[Any], dict[str, Any]]:
        if self.input_model is None:
            return [], dict(validated)
        if self._pass_model:
            return [validated], {}
        if self._parameter_names is None:
            names = list(type(validated).model_fields)
            return [], {name: getattr(validated, name) for name in names}
        assert self.fn is not None
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for position, (name, positional_only) in enumerate(_parameter_layout(self.fn)):
            value = getattr(validated, f"p{position}")
            if positional_only:
                args.append(value)
            else:
                kwargs[name] = value
        return args, kwargs

    def call(self, arguments: Mapping[str, Any]) -> Any:
        """Validate ``arguments`` and call the function. An async function runs under
        ``asyncio.run`` (use :meth:`acall` from inside an event loop)."""
        if self.fn is None:
            raise InvalidInputError(f"tool {self.name!r} has no function to call")
        args, kwargs = self._invocation(self.validate(arguments))
        if inspect.iscoroutinefunction(self.fn):
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return asyncio.run(self.fn(*args, **kwargs))
            raise InvalidInputError(
                f"tool {self.name!r} is async and an event loop is running; use 'await acall()'"
            )
        result = self.fn(*args, **kwargs)
        if inspect.isawaitable(result):
            return asyncio.run(_await(result))
        return result

    async def acall(self, arguments: Mapping[str, Any]) -> Any:
        """Validate ``arguments`` and call the function, awaiting it if it is async."""
        if self.fn is None:
            raise InvalidInputError(f"tool {self.name!r} has no function to call")
        args, kwargs = self._invocation(self.validate(arguments))
        result = self.fn(*args, **kwargs)
        if inspect.isawaitable(result):
            return await result
        return result

    def to_openai(self) -> dict[str, Any]:
        """The ``tools=[...]`` entry for OpenAI-format chat APIs (litellm)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema,
            },
        }

    def snapshot(self) -> dict[str, Any]:
        """The manifest entry upstream records per tool: id, description, input schema hash."""
        return {
            "id": self.name,
            "description": self.description,
            "inputSchemaHash": sha256_digest(self.input_schema),
        }


async def _await(awaitable: Any) -> Any:
    return await awaitable


@overload
def tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    input_model: type[BaseModel] | None = None,
    read_only: bool = False,
) -> Tool: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    input_model: type[BaseModel] | None = None,
    read_only: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    input_model: type[BaseModel] | None = None,
    read_only: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Define a tool from a function: ``@tool``, ``@tool(name=...)`` or ``tool(fn, ...)``.

    The name defaults to the function's ``__name__``, the description to its docstring's
    first paragraph (or the input model's docstring).

    ``read_only=True`` says the function changes nothing outside itself (a lookup, a
    computation): its call is then recorded with the attempt's next write instead of in a
    write of its own before it runs, so a ``tool.call`` step of it costs one round trip to
    the world, not two. After a crash mid-call the call is made again (nothing says it
    started): do not mark a tool that writes, sends or charges anything.
    """

    def build(function: Callable[..., Any]) -> Tool:
        tool_name = _check_name(name if name is not None else function.__name__)
        text = description
        if text is None:
            text = _first_paragraph(inspect.getdoc(function))
        if input_model is not None:
            if not text and input_model.__doc__:
                text = _first_paragraph(input_model.__doc__)
            parameters = list(inspect.signature(function).parameters.values())
            hints = typing.get_type_hints(function)
            pass_model = len(parameters) == 1 and hints.get(parameters[0].name) is input_model
            return Tool(
                tool_name,
                function,
                description=text,
                input_model=input_model,
                read_only=read_only,
                _pass_model=pass_model,
            )
        model, names = _model_from_signature(tool_name, function)
        return Tool(
            tool_name,
            function,
            description=text,
            input_model=model,
            read_only=read_only,
            _parameter_names=names,
        )

    if fn is None:
        return build
    return build(fn)


class ToolRegistry:
    """Tools by name; a name can be registered once."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            self.register(item)

    def register(self, item: Tool) -> Tool:
        if not isinstance(item, Tool):
            raise InvalidInputError(
                f"only Tool objects can be registered (got {type(item).__name__}); wrap "
                "functions with little_dist.tools.tool"
            )
        if item.name in self._tools:
            raise InvalidInputError(f"Tool {item.name!r} is already registered.")
        self._tools[item.name] = item
        return item

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __getitem__(self, name: str) -> Tool:
        found = self._tools.get(name)
        if found is None:
            known = ", ".join(self.names()) or "none"
            raise NotFoundError(f"no tool named {name!r} (registered: {known})")
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools[name] for name in self.names())

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._tools)

    def call(self, name: str, arguments: Mapping[str, Any]) -> Any:
        """Validate and call the tool ``name``."""
        return self[name].call(arguments)

    def to_openai(self, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """``tools=[...]`` for the given names (all when ``None``), sorted by name."""
        chosen = self.names() if names is None else sorted(set(names))
        return [self[name].to_openai() for name in chosen]

    def snapshot_for_manifest(self) -> list[dict[str, Any]]:
        """Upstream's registry snapshot: ``{id, description, inputSchemaHash}`` by name."""
        return [self._tools[name].snapshot() for name in self.names()]


@functools.lru_cache(maxsize=1024)
def _parameter_layout(fn: Callable[..., Any]) -> tuple[tuple[str, bool], ...]:
    """``(name, positional_only)`` per parameter; ``inspect.signature`` is too slow to run on
    every tool call."""
    return tuple(
        (parameter.name, parameter.kind is parameter.POSITIONAL_ONLY)
        for parameter in inspect.signature(fn).parameters.values()
    )
