"""The supervisor: after each cycle, ``done`` (with the loop's final output) or ``continue``
(with a note for the next plan).

A supervisor is any callable taking upstream's ``SuperviseOuterLoopState`` (a dict: ``goal``
and ``cycles``, see :func:`~little_dist.outer_loop.decisions.supervise_state`) and returning
a :class:`~little_dist.outer_loop.decisions.Done` / ``Continue`` or upstream's JSON form of
one (upstream's ``planner.supervise``), or a
:class:`~little_dist.outer_loop.decisions.Supervised` that also reports the model call it
made (the loop records its tokens beside the decision, and the loop's report prices them).

:class:`ModelSupervisor`, the default, asks a model (the workflow's planner model unless
another is given) for that JSON, through litellm: the same code path as a real provider, so
the scripted provider of :mod:`little_dist.testing` answers it in tests (its calls carry
``stepPath`` ``"supervisor"`` and the cycle's run id). It returns a ``Supervised``: the
decision and the call's model and usage; its :meth:`~ModelSupervisor.worst_case_usd` is
what the loop holds before the call (:mod:`little_dist.outer_loop.budget`). A reply that
is no decision raises
:class:`SupervisorError`, and its tokens are not recorded (nothing is appended).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from little_dist.canonical import canonical_json
from little_dist.errors import LittleError
from little_dist.harness.replies import json_in_reply
from little_dist.harness.types import ResolvedModel
from little_dist.outer_loop.decisions import Supervised, SupervisorCall, decision_from
from little_dist.redaction import redact

if TYPE_CHECKING:
    from little_dist.pricing import PriceFallback

__all__ = ["SUPERVISOR_STEP_PATH", "ModelSupervisor", "Supervisor", "SupervisorError"]

Supervisor = Callable[[Mapping[str, Any]], Any]

#: The ``stepPath`` a supervisor's model call names in its litellm metadata.
SUPERVISOR_STEP_PATH: Final = "supervisor"


_SUPERVISOR_ROLE = """You are the supervisor of a little-workflow outer loop. Each cycle \
plans and runs a workflow for the goal; you read every cycle's status and output so far and \
decide whether the goal is met. Reply with one JSON object only, no prose:
- {"kind": "done", "finalOutput": <the loop's final output>} when the goal is met (or the \
best output is in hand), or
- {"kind": "continue", "promptNote": "<what the next plan should do differently>"} to run \
another cycle."""


class SupervisorError(LittleError):
    """The supervisor could not decide: its model failed or its reply was not a decision."""


class ModelSupervisor:
    """The default supervisor: one model call per decision (see the module docstring)."""

    def __init__(self, model: ResolvedModel, *, system: str | None = None) -> None:
        self.model = model
        self.system = system

    def messages(self, state: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The prompt of the decision about ``state``."""
        system = "\n\n".join(part for part in (_SUPERVISOR_ROLE, self.system) if part)
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": canonical_json(dict(state))},
        ]

    def worst_case_usd(
        self, state: Mapping[str, Any], pricing_fallback: PriceFallback | None
    ) -> float:
        """The most the decision about ``state`` may cost: its prompt's tokens and its
        output limit, priced as a model call's worst case is (the loop holds it against its
        budget and the key's daily ceilings before the call: :mod:`.budget`)."""
        from little_dist.harness.budget_hold import model_worst_case_usd

        return model_worst_case_usd(self.model, self.messages(state), (), pricing_fallback)

    def __call__(self, state: Mapping[str, Any]) -> Supervised:
        from little_dist.harness.model_calls import import_litellm, usage_from_response

        cycles = state.get("cycles") or []
        run_id = cycles[-1].get("runId") if cycles else None
        messages = self.messages(state)
        try:
            response = import_litellm().completion(
                model=self.model.litellm_model,
                messages=messages,
                metadata={"little": {"stepPath": SUPERVISOR_STEP_PATH, "runId": run_id}},
                **dict(self.model.settings),
            )
        except Exception as error:
            raise SupervisorError(
                f"supervisor model {self.model.litellm_model!r} failed: {redact(str(error))}"
            ) from error
        text = str(response.choices[0].message.content or "")
        try:
            decision = decision_from(
                json_in_reply(text), f"supervisor model {self.model.litellm_model!r}"
            )
        except LittleError as error:
            raise SupervisorError(str(error)) from error
        return Supervised(
            decision, SupervisorCall(self.model.identity(), usage_from_response(response))
        )
