"""Per-role harness selection, delegation, session events and output self-repair.

The runtime runs every task through :meth:`HarnessRegistry.run`:

1. the harness for ``ctx.role`` is the custom one given for that role, else the default;
2. ``harness.session.started`` is recorded with the manifest (``ctx.manifest`` plus the
   harness's ``harnessId``, the step path, model slot and model digest, tools and skills
   digests); a session of a step that an earlier attempt already started is first checked
   against that attempt's recorded manifest (:mod:`.drift`): any difference records
   ``little.harness.capability_drift`` and fails the attempt, cause ``capability_drift``;
3. the harness runs; a :class:`~.types.DelegateToDefault` answer records a second
   ``harness.session.started`` (the default's ``harnessId``) and runs the default harness;
4. for ``ai.generate`` steps, the output is checked against the step's output contract and,
   while it fails, the step is re-run with ``with.outputRepairNote`` (the ``[OUTPUT
   REPAIR]`` findings and schema) per the repair policy — ``onFailure.repair`` or, by
   default, ``{mode: "self", maxAttempts: 3}`` (upstream's ``resolveRepairPolicy``) — each
   round recorded as ``StepRepairAttempted {stepPath, stepId, attempt, findings}``; still
   invalid after the last round -> :class:`~.errors.StepSchemaError` (``step_schema_error``);
5. ``harness.session.completed`` (``usage``, ``output: {result}``) or
   ``harness.session.failed`` (``error`` envelope) is recorded, and the result returned (or
   the error raised again).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, Final

from little_dist.canonical import sha256_digest
from little_dist.errors import LeaseLostError
from little_dist.harness.default import DefaultHarness
from little_dist.harness.drift import (
    CAPABILITY_DRIFT_EVENT,
    CapabilityDriftError,
    check_manifest_drift,
)
from little_dist.harness.errors import HarnessConfigError, StepSchemaError, envelope_for
from little_dist.harness.log_values import frozen_digest, json_safe
from little_dist.harness.output_modes import output_findings, output_spec, repair_note
from little_dist.harness.types import (
    NO_MODEL,
    DelegateToDefault,
    ExecuteStepResult,
    ExecuteStepTask,
    Harness,
    HarnessContext,
    HarnessResult,
    HarnessRole,
    HarnessTask,
)

__all__ = ["DEFAULT_REPAIR_ATTEMPTS", "HarnessRegistry", "harness_id_of", "resolve_repair_policy"]

DEFAULT_REPAIR_ATTEMPTS = 3


def harness_id_of(harness: object) -> str:
    found = getattr(harness, "harness_id", None)
    return found if isinstance(found, str) and found else type(harness).__name__


def resolve_repair_policy(step: Mapping[str, Any]) -> tuple[str, int] | None:
    """``(mode, maxAttempts)`` for ``step``: its ``onFailure.repair``, else ``("self", 3)``
    for ``ai.generate`` steps, else ``None``."""
    on_failure = step.get("onFailure")
    repair = on_failure.get("repair") if isinstance(on_failure, Mapping) else None
    if isinstance(repair, Mapping):
        attempts = repair.get("maxAttempts")
        count = attempts if isinstance(attempts, int) and attempts >= 0 else 0
        return (str(repair.get("mode", "self")), count)
    if step.get("uses") == "ai.generate":
        return ("self", DEFAULT_REPAIR_ATTEMPTS)
    return None


def _schema_digest(tool: object) -> str:
    schema = getattr(tool, "input_schema", None)
    # A Tool's schema is fixed when the tool is made: hashed once per schema object.
    return frozen_digest(schema) if isinstance(schema, dict) else sha256_digest(json_safe(schema))


def _description_digest(tool: object) -> str:
    description = getattr(tool, "description", None)
    return _text_digest(description if isinstance(description, str) else "")


@functools.lru_cache(maxsize=1024)
def _text_digest(text: str) -> str:
    return sha256_digest(text)


def _skill_identity(skill: object) -> tuple[str, ...]:
    name, description = getattr(skill, "name", ""), getattr(skill, "description", "")
    body = getattr(skill, "body", "")
    content = getattr(skill, "content_hash", "")
    # An inline skill is its text; a folder skill also its files' content hash.
    if content:
        return (name, description, body, content, ",".join(getattr(skill, "allowed_tools", ())))
    return (name, description, body)


def _model_digest(model: object) -> str:
    # (a step with no model, tool.call or code.run: the same every time)
    if model is NO_MODEL:
        return _NO_MODEL_DIGEST
    if model is None:
        return _ABSENT_MODEL_DIGEST
    return _digest_of_model(model)


def _digest_of_model(model: object) -> str:
    return sha256_digest(
        json_safe(
            {
                "litellmModel": getattr(model, "litellm_model", None),
                "pricingKey": getattr(model, "pricing_key", None),
                "settings": getattr(model, "settings", None),
            }
        )
    )


_NO_MODEL_DIGEST: Final = _digest_of_model(NO_MODEL)
_ABSENT_MODEL_DIGEST: Final = _digest_of_model(None)


@functools.lru_cache(maxsize=256)
def _pairs_digest(items: tuple[tuple[str, ...], ...]) -> str:
    """Digest of sorted (name, ...) tuples as a list of lists: the same few per process."""
    return sha256_digest([list(item) for item in items])


def _result_json(result: HarnessResult) -> dict[str, Any]:
    # (json_safe copies, and dumps nested dataclasses: asdict's deep copy first is not needed)
    data = {field.name: json_safe(getattr(result, field.name)) for field in fields(result)}
    if "artifact_refs" in data:
        data["artifactRefs"] = data.pop("artifact_refs")
    if "fixed_source" in data:
        data["fixedSource"] = data.pop("fixed_source")
    return data


class HarnessRegistry:
    """Chooses the harness per role and runs tasks through it (module docstring).

    ``HarnessRegistry()`` uses :class:`~.default.DefaultHarness` for every role;
    ``overrides={"worker.code-run": my_harness}`` replaces it for some roles; ``default=``
    replaces the fallback itself. ``repair=False`` turns output self-repair off.
    """

    def __init__(
        self,
        default: Harness | None = None,
        overrides: Mapping[HarnessRole, Harness] | None = None,
        *,
        repair: bool = True,
    ) -> None:
        self.default: Harness = default if default is not None else DefaultHarness()
        self.overrides: dict[HarnessRole, Harness] = dict(overrides or {})
        self.repair = repair

    @property
    def harness_id(self) -> str:
        return harness_id_of(self.default)

    def harness_for(self, role: HarnessRole) -> Harness:
        return self.overrides.get(role, self.default)

    def manifest_for(self, harness: object, ctx: HarnessContext) -> dict[str, Any]:
        """The session manifest: defaults first, ``ctx.manifest`` over them, our harness id."""
        tools = tuple(
            sorted(
                (name, _schema_digest(tool), _description_digest(tool))
                for name, tool in ctx.tools.items()
            )
        )
        skills = tuple(sorted(_skill_identity(skill) for skill in ctx.skills))
        manifest: dict[str, Any] = {
            "stepPath": ctx.recorder.step_path,
            "modelSlotId": ctx.model.slot_id,
            "modelHash": _model_digest(ctx.model),
            "allowedToolsHash": _pairs_digest(tools),
            "skillsHash": _pairs_digest(skills),
        }
        if ctx.permissions:  # rules change what the session may do: part of its manifest
            manifest["permissionsHash"] = ctx.permissions.ruleset_hash()
        manifest.update(json_safe(dict(ctx.manifest)))
        manifest["harnessId"] = harness_id_of(harness)
        return manifest

    def run(self, task: HarnessTask, ctx: HarnessContext) -> HarnessResult:
        """Run ``task`` for ``ctx.role``; never returns :class:`DelegateToDefault`."""
        primary = self.harness_for(ctx.role)
        started: set[int] = set()
        try:
            if (
                self.repair
                and isinstance(task, ExecuteStepTask)
                and task.step.get("uses") == "ai.generate"
            ):
                result = self._run_with_repair(primary, task, ctx, started)
            else:
                result = self._run_once(primary, task, ctx, started)
        except Exception as exc:
            # A lost lease means a newer attempt owns the step; the original error says more.
            with contextlib.suppress(LeaseLostError):
                ctx.recorder.session_failed(envelope_for(exc))
            raise
        ctx.recorder.session_completed(_result_json(result))
        return result

    def run_step(self, task: ExecuteStepTask, ctx: HarnessContext) -> ExecuteStepResult:
        """:meth:`run` for an ``execute_step`` task, typed."""
        result = self.run(task, ctx)
        assert isinstance(result, ExecuteStepResult)  # run() checked the result's kind
        return result

    def _start(
        self,
        harness: Harness,
        ctx: HarnessContext,
        task: HarnessTask,
        *,
        delegated: bool,
        started: set[int],
    ) -> None:
        if id(harness) in started:
            return
        started.add(id(harness))
        manifest = json_safe(self.manifest_for(harness, ctx))
        recorded = ctx.memo.recorded_manifest(ctx.role, delegated=delegated)
        if recorded is not None:
            try:
                check_manifest_drift(
                    recorded[0],
                    recorded[1],
                    manifest,
                    where=f"run {ctx.run_id} step {ctx.recorder.step_path} ({ctx.role})",
                )
            except CapabilityDriftError as drift:
                recorder = ctx.recorder
                recorder.append(
                    CAPABILITY_DRIFT_EVENT,
                    {
                        "runId": ctx.run_id,
                        "stepPath": recorder.step_path,
                        "attempt": recorder.attempt,
                        "role": ctx.role,
                        **drift.event_payload(),
                    },
                    recorder.occurrence("capability-drift", "default")
                    if delegated
                    else recorder.occurrence("capability-drift"),
                )
                raise
        ctx.recorder.session_started(
            role=ctx.role,
            task_kind=task.kind,
            manifest=manifest,
            delegated=delegated,
            parent_run_id=ctx.parent_run_id,
        )

    def _run_once(
        self, primary: Harness, task: HarnessTask, ctx: HarnessContext, started: set[int]
    ) -> HarnessResult:
        self._start(primary, ctx, task, delegated=False, started=started)
        result = primary.run(task, ctx)
        if isinstance(result, DelegateToDefault):
            if primary is self.default:
                raise HarnessConfigError(
                    f"the default harness {harness_id_of(primary)} delegated a "
                    f"{task.kind} task to itself"
                )
            self._start(self.default, ctx, task, delegated=True, started=started)
            result = self.default.run(task, ctx)
            if isinstance(result, DelegateToDefault):
                raise HarnessConfigError(
                    f"the default harness {harness_id_of(self.default)} delegated a "
                    f"{task.kind} task"
                )
        kind = getattr(result, "kind", None)
        if kind != task.kind:
            what = f"a {kind!r} result" if isinstance(kind, str) else repr(result)[:200]
            raise HarnessConfigError(f"harness returned {what} for a {task.kind!r} task")
        return result

    def _run_with_repair(
        self, primary: Harness, task: ExecuteStepTask, ctx: HarnessContext, started: set[int]
    ) -> HarnessResult:
        step = task.step
        policy = resolve_repair_policy(step)
        rounds = 0 if policy is None else policy[1]
        spec = output_spec(step)
        result = self._run_once(primary, task, ctx, started)
        for _ in range(rounds):
            findings = output_findings(step, getattr(result, "output", None))
            if not findings:
                return result
            ctx.recorder.repair_attempted(str(step.get("id")), findings)
            config = step.get("with")
            repaired = {
                **step,
                "with": {
                    **(config if isinstance(config, Mapping) else {}),
                    "outputRepairNote": repair_note(spec, findings),
                },
            }
            retry = ExecuteStepTask(repaired, task.step_input, task.step_context)
            result = self._run_once(primary, retry, ctx, started)
        findings = output_findings(step, getattr(result, "output", None))
        if findings:
            raise StepSchemaError(
                f"step '{step.get('id')}' output does not satisfy its {spec.get('mode')} output "
                f"contract after {rounds} repair attempt(s): " + "; ".join(findings),
                findings,
            )
        return result
