"""Approvals from Python: ``Client.approvals``, ``Client.approve``, ``Client.reject``.

Two mixins, one per kind of client: :class:`FleetApprovals` reads and appends to the
fleet's world (as ``little approvals`` does), :class:`HttpApprovals` asks ``little serve``
(``GET /v1/approvals``, ``POST /v1/approvals/{id}``, scopes ``runs:read`` and
``approvals:decide``). Both answer :class:`~little_dist.approvals.Approval` records and raise
the same errors: :class:`~little_dist.approvals.ApprovalNotFoundError` for an id that names
no approval, :class:`~little_dist.approvals.ApprovalDecidedError` for one decided already
(by someone else, or its deadline) or whose run has ended, and
:class:`~little_dist.world.base.RunNotFoundError` for an unknown ``run_id``.

A decision records who (``by``; default: the client's holder name on the fleet, the token's
name over HTTP), why (``reason``) and how (``via``: ``api`` on the fleet, ``http`` over
HTTP, with the token's id); the first decision stands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import quote

from little_dist.approvals import (
    Approval,
    ApprovalNotFoundError,
    decide_approval,
    list_approvals,
)
from little_dist.approvals.records import approval_from_json
from little_dist.errors import NotFoundError
from little_dist.ids import validate_run_id
from little_dist.world.base import RunNotFoundError

if TYPE_CHECKING:
    import httpx

    from little_dist.settings import Settings
    from little_dist.world.base import World

__all__ = ["FleetApprovals", "HttpApprovals"]


class _Fleet(Protocol):
    """What :class:`FleetApprovals` uses of the ``Client`` it is mixed into."""

    _holder: str
    _fleet_redis: Any

    @property
    def world(self) -> World: ...

    @property
    def settings(self) -> Settings: ...

    def _open_fleet_redis(self) -> None: ...


class FleetApprovals:
    """``Client``'s approvals on the fleet's world (its ``world``, ``settings``, holder name
    and fleet Redis: :class:`_Fleet`)."""

    def _active_run_ids(self) -> list[str] | None:
        """The runs the fleet's sweeps walk, the only ones that can wait for a person
        (``None``: no fleet Redis; every run of the world is looked at)."""
        client = cast(_Fleet, self)
        client._open_fleet_redis()
        if client._fleet_redis is None:
            return None
        from little_dist.fleet.sweeper import ActiveRuns
        from little_dist.world.fleet_keys import active_runs_key

        key = active_runs_key(client.settings.signal_stream)
        return ActiveRuns(client._fleet_redis, key).members()

    def approvals(self, run_id: str | None = None) -> list[Approval]:
        """The approvals waiting for a person, oldest first: of the fleet's active runs, or
        of ``run_id`` only."""
        world = cast(_Fleet, self).world
        if run_id is not None:
            validate_run_id(run_id)
            if world.last_sequence(run_id) == 0:
                raise RunNotFoundError(run_id)
            return list_approvals(world, run_ids=[run_id])
        return list_approvals(world, run_ids=self._active_run_ids())

    def approve(
        self, approval_id: str, *, reason: str | None = None, by: str | None = None
    ) -> Approval:
        """Let the held call run; the approval as decided. The step resumes on any worker."""
        return self._decide_on_fleet(approval_id, True, reason, by)

    def reject(
        self, approval_id: str, *, reason: str | None = None, by: str | None = None
    ) -> Approval:
        """Fail the held call as a rule's deny does; the approval as decided."""
        return self._decide_on_fleet(approval_id, False, reason, by)

    def _decide_on_fleet(
        self, approval_id: str, allow: bool, reason: str | None, by: str | None
    ) -> Approval:
        client = cast(_Fleet, self)
        who = by or client._holder
        return decide_approval(
            client.world, approval_id, allow=allow, by=who, via="api", reason=reason
        )


class HttpApprovals:
    """``Client(url)``'s approvals over ``little serve`` (needs the client's ``_request``)."""

    if TYPE_CHECKING:

        def _request(
            self,
            method: str,
            path: str,
            *,
            run_id: str | None = None,
            json_body: Any = None,
            headers: Any = None,
        ) -> httpx.Response: ...

    def approvals(self, run_id: str | None = None) -> list[Approval]:
        """``GET /v1/approvals`` (``?runId=``): the pending approvals, oldest first."""
        path = "/v1/approvals"
        if run_id is not None:
            path += f"?runId={validate_run_id(run_id)}"
        answer = self._request("GET", path, run_id=run_id)
        return [approval_from_json(item) for item in answer.json()["approvals"]]

    def approve(
        self, approval_id: str, *, reason: str | None = None, by: str | None = None
    ) -> Approval:
        """``POST /v1/approvals/{id}`` approving: the held call runs."""
        return self._decide_over_http(approval_id, "approve", reason, by)

    def reject(
        self, approval_id: str, *, reason: str | None = None, by: str | None = None
    ) -> Approval:
        """``POST /v1/approvals/{id}`` rejecting: the call fails as a rule's deny does."""
        return self._decide_over_http(approval_id, "reject", reason, by)

    def _decide_over_http(
        self, approval_id: str, decision: str, reason: str | None, by: str | None
    ) -> Approval:
        # (a 409 approval_decided is ApprovalDecidedError already: see http_answers.error_of)
        if not isinstance(approval_id, str) or not approval_id:
            raise ApprovalNotFoundError(str(approval_id), "not an approval id")
        body: dict[str, Any] = {"decision": decision}
        if reason is not None:
            body["reason"] = reason
        if by is not None:
            body["by"] = by
        try:
            path = f"/v1/approvals/{quote(approval_id, safe='')}"
            answer = self._request("POST", path, json_body=body)
        except NotFoundError as exc:
            raise ApprovalNotFoundError(approval_id, str(exc)) from None
        return approval_from_json(answer.json())
