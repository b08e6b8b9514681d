"""What ``little run`` runs: the workflow named on the command line (a workflow folder or its
name in ``little-workflow.json``, an LWIR file, or ``module:attribute``), its validated input
and its capabilities -- everything that can be wrong is found here, before a world is
opened."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from little_dist.cli.app_modules import (
    capabilities_of,
    import_app_module,
    merge_capabilities,
    resolve_attribute,
)
from little_dist.cli.json_input import read_input, read_json
from little_dist.cli.locked_versions import input_binding_problem, is_locked_version
from little_dist.cli.run_problems import InvalidWorkflowOrInput, UsageProblem, one_line
from little_dist.limits import InputLimits

__all__ = [
    "Resolver",
    "check_input_binding",
    "load_folder",
    "prepare",
    "workflow_folder",
]

_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")

Resolver = Callable[[Any, str], Any]


def prepare(args: argparse.Namespace) -> tuple[Resolver, Any, Any]:
    """``(resolve(world, run_id) -> WorkflowVersion | None, run input, capabilities)``.

    Everything that can be wrong with the command line, the workflow or the input is found
    here, before a world is opened.
    """
    from little_dist.runtime import Capabilities
    from little_dist.settings import SettingsError, load_limits

    try:
        limits = load_limits()
    except SettingsError as exc:
        raise UsageProblem("; ".join(exc.problems)) from None
    if args.run_id is not None:
        from little_dist.ids import InvalidIdError, validate_run_id

        try:
            validate_run_id(args.run_id)
        except InvalidIdError as exc:
            raise UsageProblem(f"--run-id: {exc}") from None
    run_input = read_input(args.input, limits.max_json_depth, limits.max_input_bytes)
    limits.check_input(run_input)
    app_parts: list[Capabilities] = [capabilities_of(import_app_module(name)) for name in args.app]
    target = args.workflow
    resolve: Resolver
    folder = workflow_folder(target)
    if folder is not None:
        definition = load_folder(folder)
        resolve, run_input, own, checked = _workflow_from_object(
            definition, run_input, target, limits
        )
        app_parts.insert(0, own)
    elif _TARGET.fullmatch(target) and not os.path.exists(target):
        module_name, _, attribute = target.partition(":")
        module = import_app_module(module_name)
        try:
            obj = resolve_attribute(module, attribute)
        except AttributeError:
            raise UsageProblem(f"module {module_name!r} has no attribute {attribute!r}") from None
        resolve, run_input, own, checked = _workflow_from_object(obj, run_input, target, limits)
        app_parts.insert(0, capabilities_of(module) if own is None else own)
    else:
        label = "<stdin>" if target == "-" else target
        document = read_json(
            target,
            label,
            limits.max_json_depth,
            max_bytes=limits.max_lwir_bytes,
            setting="LITTLE_MAX_LWIR_BYTES",
        )
        if is_locked_version(document):
            limits.check_lwir(document["lwir"], label)
            checked = _locked_version(document, run_input, label)
        else:
            if isinstance(document, dict) and "lwir" in document:
                document = document["lwir"]  # a WorkflowVersion-like document: its LWIR
            limits.check_lwir(document, label)
            checked = _compile(document, run_input, label)
        resolve = _fixed(checked, run_input)
    capabilities = merge_capabilities(app_parts)
    # What will run, when it is known before the run (not for a planner's draft):
    # `little eval run` hashes its steps' input cones.
    resolve.checked = checked  # type: ignore[attr-defined]
    if checked is not None:
        from little_dist.runtime import check_grants

        # What the run may use is what the app (and the workflow's module) provides: the
        # document selects among it, never names more.
        check_grants(checked, capabilities, "the app")
    return resolve, run_input, capabilities


def workflow_folder(target: str) -> str | None:
    """The workflow folder ``target`` names (a folder, or a name in the nearest
    ``little-workflow.json``), or ``None`` when it names an LWIR file or ``module:attribute``.
    Something that is none of these (no such file, no such workflow) is a usage problem."""
    if not os.path.isdir(target) and (
        target == "-" or os.path.exists(target) or ":" in target or target.endswith(".json")
    ):
        return None
    from little_dist.errors import InvalidInputError
    from little_dist.workspace import resolve_workflow_reference

    try:
        return str(resolve_workflow_reference(target))
    except InvalidInputError as exc:
        raise UsageProblem(f"{target}: {exc}") from None


def load_folder(folder: str) -> Any:
    """The workflow a folder defines (:func:`~little_dist.workspace.load_workflow`); what is
    wrong with it is a usage problem naming the file."""
    from little_dist.errors import InvalidInputError
    from little_dist.workspace import load_workflow

    try:
        return load_workflow(folder)
    except InvalidInputError as exc:
        raise UsageProblem(str(exc)) from None


def _fixed(version: Any, run_input: Any) -> Resolver:
    _check_input(version, run_input)
    return lambda world, run_id: version


def _compile(document: Any, run_input: Any, label: str) -> Any:
    from little_dist.compiler import LwirInvalidError, compile_lwir

    try:
        return compile_lwir(document, input=run_input)
    except LwirInvalidError as exc:
        raise _invalid_lwir(exc, label) from None
    except RecursionError:
        raise InvalidWorkflowOrInput(f"{label}: workflow is nested too deeply") from None


def check_input_binding(lock: Mapping[str, Any], run_input: Any, label: str) -> None:
    """:func:`~little_dist.cli.locked_versions.input_binding_problem` as a refusal (exit 1)."""
    problem = input_binding_problem(lock, run_input)
    if problem is not None:
        raise InvalidWorkflowOrInput(f"{label}: {problem[0]}", problem[1:])


def _locked_version(document: Mapping[str, Any], run_input: Any, label: str) -> Any:
    """The WorkflowVersion ``document`` holds, its hashes checked and its input binding
    honoured, as it is: not compiled again."""
    from little_dist.compiler import (
        LwirInvalidError,
        WorkflowVersion,
        WorkflowVersionMismatchError,
    )

    try:
        version = WorkflowVersion.from_json(document)
    except LwirInvalidError as exc:
        raise _invalid_lwir(exc, label) from None
    except WorkflowVersionMismatchError as exc:
        raise InvalidWorkflowOrInput(f"{label}: {one_line(str(exc))}") from None
    except RecursionError:
        raise InvalidWorkflowOrInput(f"{label}: workflow is nested too deeply") from None
    check_input_binding(version.lock, run_input, label)
    return version


def _invalid_lwir(exc: Any, label: str) -> InvalidWorkflowOrInput:
    findings = [f for f in exc.findings if f.severity == "error"]
    noun = "finding" if len(findings) == 1 else "findings"
    return InvalidWorkflowOrInput(
        f"{label}: invalid workflow, {len(findings)} {noun}",
        [f"{f.code} {f.path}: {f.message}" for f in findings],
    )


def _check_input(version: Any, run_input: Any) -> None:
    from little_dist.local_runner import RunInputError, check_run_input

    try:
        check_run_input(version, run_input)
    except RunInputError as exc:
        noun = "problem" if len(exc.problems) == 1 else "problems"
        raise InvalidWorkflowOrInput(
            f"input does not match the workflow's input schema ({len(exc.problems)} {noun})",
            [
                f"input{problem}" if problem.startswith("/") else f"input {problem}"
                for problem in exc.problems
            ],
        ) from None


def _workflow_from_object(
    obj: Any, run_input: Any, label: str, limits: InputLimits
) -> tuple[Resolver, Any, Any, Any]:
    """``(resolver, run input, Capabilities | None, document)`` for what
    ``module:attribute`` names; ``document`` (a version or a fixed plan) is what the
    capabilities are checked against (``None``: the planner's draft, checked as it is bound).

    Accepted: a workflow made with ``define_workflow`` (planned, or its ``plan=`` used, as
    :func:`~little_dist.run_workflow` does, and its own tools and models); a compiled
    WorkflowVersion; a dict holding LWIR (or a compiled version's JSON); a function without
    arguments returning one of these.
    """
    from little_dist.authoring import InputValidationError, WorkflowDefinition
    from little_dist.compiler import WorkflowVersion

    if callable(obj) and not isinstance(obj, type | WorkflowDefinition):
        if not _takes_no_arguments(obj):
            raise UsageProblem(f"{label} is a function that needs arguments, not a workflow")
        try:
            obj = obj()  # a factory: `module:make_workflow`
        except Exception as exc:
            raise UsageProblem(
                f"{label}() raised {type(exc).__name__}: {one_line(str(exc))}"
            ) from None
    if isinstance(obj, WorkflowDefinition):
        definition = obj
        try:
            run_input = definition.validate_input(run_input)
        except InputValidationError as exc:
            raise InvalidWorkflowOrInput(
                f"input does not match the input schema of {definition.id}",
                [f"{where}: {what}" for where, what in exc.problems],
            ) from None
        capabilities = definition.capabilities()

        def resolve(world: Any, run_id: str) -> Any:
            from little_dist.planner import resolve_version

            return resolve_version(world, run_id, definition, run_input, capabilities=capabilities)

        # The workflow's own run limits, for the command line's to fill in (see run_cmd).
        resolve.workflow_limits = (definition.timeout_ms, definition.max_attempts)  # type: ignore[attr-defined]

        return resolve, run_input, capabilities, definition.plan
    if isinstance(obj, WorkflowVersion):
        limits.check_lwir(obj.lwir, label)
        check_input_binding(obj.lock, run_input, label)
        return _fixed(obj, run_input), run_input, None, obj
    if is_locked_version(obj):
        limits.check_lwir(obj["lwir"], label)
        version = _locked_version(obj, run_input, label)
        return _fixed(version, run_input), run_input, None, version
    if isinstance(obj, Mapping):
        document = obj.get("lwir", obj)
        limits.check_lwir(document, label)
        version = _compile(document, run_input, label)
        return _fixed(version, run_input), run_input, None, version
    raise UsageProblem(
        f"{label} is a {type(obj).__name__}, not a workflow (expected a workflow made with "
        "define_workflow, LWIR, or a WorkflowVersion)"
    )


def _takes_no_arguments(fn: Callable[..., Any]) -> bool:
    import inspect

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return all(
        p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        for p in signature.parameters.values()
    )
