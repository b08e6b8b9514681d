"""``GET /v1/runs`` cursors: what a page names is what the next one starts after."""

from __future__ import annotations

import typing

import pytest

from little_dist.http.cursors import RunStatusWord, decode_cursor, encode_cursor
from little_dist.http.problems import Problem
from little_dist.report.runs import STATUSES, RunSummary


def test_a_cursor_names_the_start_and_id_of_the_last_run_of_a_page() -> None:
    last = RunSummary("run_a-1", "wf", "running", "2026-12-05T22:00:00.123Z", None, None)
    cursor = encode_cursor(last)
    assert "=" not in cursor and "/" not in cursor and "+" not in cursor
    assert decode_cursor(cursor) == ("2026-12-05T22:00:00.123Z", "run_a-1")


@pytest.mark.parametrize("bad", ["", "x", "not-a-cursor", "WzFd", "eyJhIjoxfQ", "W251bGwsMV0"])
def test_a_cursor_no_page_gave_is_a_400_naming_the_query_parameter(bad: str) -> None:
    with pytest.raises(Problem) as refused:
        decode_cursor(bad)
    assert refused.value.status == 400
    assert refused.value.errors[0]["query"] == "cursor"


def test_the_status_filter_takes_the_statuses_little_runs_shows() -> None:
    assert typing.get_args(RunStatusWord) == STATUSES
