"""Every catalogued event type is written somewhere, or documented as upstream-only (issue 35,
item 8): the catalogue names no type that nothing here emits without saying why."""

from __future__ import annotations

import re
from pathlib import Path

from little_dist.events import EVENT_TYPES, UPSTREAM_ONLY_EVENT_TYPES

PACKAGE = Path(__file__).resolve().parent.parent / "little_dist"
# Modules that name event types to read them (the catalogue, the fold, the reports) rather
# than to write them.
READERS = ("events.py", "event_types/", "run_state/", "report/", "http/viewer/")


def _writer_sources() -> dict[str, str]:
    return {
        str(path.relative_to(PACKAGE)): path.read_text(encoding="utf-8")
        for path in sorted(PACKAGE.rglob("*.py"))
        if not str(path.relative_to(PACKAGE)).startswith(READERS)
    }


def _named_in(sources: dict[str, str], event_type: str) -> list[str]:
    literal = re.compile(r"""["']""" + re.escape(event_type) + r"""["']""")
    return [name for name, text in sources.items() if literal.search(text)]


def test_every_catalogued_type_is_written_or_documented_as_upstream_only() -> None:
    sources = _writer_sources()
    silent = [
        t for t in EVENT_TYPES if t not in UPSTREAM_ONLY_EVENT_TYPES and not _named_in(sources, t)
    ]
    assert silent == [], "catalogued, never written, and not documented as upstream-only"


def test_upstream_only_types_are_really_never_written() -> None:
    sources = _writer_sources()
    written = {t: _named_in(sources, t) for t in UPSTREAM_ONLY_EVENT_TYPES}
    assert {t: where for t, where in written.items() if where} == {}


def test_upstream_only_types_are_catalogued_with_a_reason() -> None:
    assert set(UPSTREAM_ONLY_EVENT_TYPES) <= set(EVENT_TYPES)
    assert all(len(reason) > 40 for reason in UPSTREAM_ONLY_EVENT_TYPES.values())
    # The side channel is written (report_outcome), not upstream-only.
    assert "outcome.reported" not in UPSTREAM_ONLY_EVENT_TYPES


def test_the_check_finds_a_writer() -> None:
    # The scan sees real writers (so an empty "silent" list above means something).
    sources = _writer_sources()
    assert "harness/outcomes.py" in _named_in(sources, "outcome.reported")
    assert "harness/bash_tool.py" in _named_in(sources, "harness.runtime.command.started")
    assert _named_in(sources, "harness.filesystem.mounted") == []
