"""The event envelope: every fact about a run is one of these, in a per-run log.

``sequence`` is 1-based and contiguous within a run. ``eventId`` is derived from the
envelope's content (see :func:`little_dist.ids.event_id_for`), so it is the same wherever the
event is recorded. ``recordedAt`` is an ISO-8601 UTC timestamp with milliseconds, as
JavaScript's ``Date#toISOString`` prints it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Event", "EventInput"]


class EventInput(BaseModel):
    """What a writer asks the world to append; the world assigns sequence, id and time."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    type: str = Field(min_length=1)
    payload: dict[str, Any] = Field(default_factory=dict)
    occurrence_id: str | None = Field(default=None, alias="occurrenceId", min_length=1)


class Event(BaseModel):
    """One recorded event. Serialize with ``model_dump(by_alias=True, exclude_none=True)``."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    event_id: str = Field(alias="eventId")
    run_id: str = Field(alias="runId")
    sequence: int = Field(ge=1)
    type: str
    occurrence_id: str | None = Field(default=None, alias="occurrenceId")
    recorded_at: str = Field(alias="recordedAt")
    payload: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The upstream JSON shape (``occurrenceId`` only when present)."""
        return self.model_dump(by_alias=True, exclude_none=True)
