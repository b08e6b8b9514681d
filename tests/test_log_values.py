"""json_safe: values as the log stores them, plain JSON whatever a tool or the harness hands
over (its plain-type fast path must give what the general walk gives)."""

from __future__ import annotations

import dataclasses
import enum
from collections import OrderedDict
from typing import Any

import pytest
from pydantic import BaseModel

from little_dist.harness.log_values import json_safe


class Point(BaseModel):
    x: int
    label: str = "p"


@dataclasses.dataclass
class Pair:
    left: Any
    right: Any


class Colour(enum.StrEnum):
    red = "red"


class Count(int):
    pass


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("text", "text"),
        (3, 3),
        (True, True),
        (None, None),
        (1.5, 1.5),
        (float("nan"), None),
        (float("inf"), None),
        ((1, "a", (2,)), [1, "a", [2]]),
        ({1: "one", "two": (2,)}, {"1": "one", "two": [2]}),
        ({"point": Point(x=1)}, {"point": {"x": 1, "label": "p"}}),
        ([Pair(1, (2, 3))], [{"left": 1, "right": [2, 3]}]),
        (OrderedDict([("b", 1), ("a", (2,))]), {"b": 1, "a": [2]}),
        ({"when": b"bytes"}, {"when": "b'bytes'"}),
        ({"set": {1}}, {"set": "{1}"}),
    ],
)
def test_values_become_plain_json(value: Any, expected: Any) -> None:
    assert json_safe(value) == expected


def test_plain_containers_are_copied_and_subclasses_of_leaves_kept() -> None:
    inner = {"a": [1, 2]}
    out = json_safe({"inner": inner})
    assert out == {"inner": {"a": [1, 2]}}
    assert out["inner"] is not inner and out["inner"]["a"] is not inner["a"]
    # A str or int subclass is a JSON leaf as it is (the canonical encoder prints it).
    assert json_safe(Colour.red) is Colour.red
    assert json_safe(Count(4)) == 4 and type(json_safe(Count(4))) is Count
