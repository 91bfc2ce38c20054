"""The metadata filter as the page statements' parameter (ops/statements.validate_filter):
one [path, document] pair per key, nested keys as nested documents; no filter, no parameter;
a bad key or a value JSON cannot hold refused before anything is sent."""

from __future__ import annotations

import json
import math

import pytest

from d1saver.core.errors import ConfigError, SerializationError
from d1saver.ops.statements import validate_filter


def test_each_key_is_a_path_and_the_document_that_holds_its_value() -> None:
    got = validate_filter({"source": "loop", "a.b-c.d_1": [1, "é"], "n": None})
    assert json.loads(got or "") == [
        ["$.source", '{"source":"loop"}'],
        ["$.a.b-c.d_1", '{"a":{"b-c":{"d_1":[1,"é"]}}}'],
        ["$.n", '{"n":null}']]


@pytest.mark.parametrize("empty", [None, {}])
def test_no_filter_is_no_parameter(empty: dict | None) -> None:
    assert validate_filter(empty) is None


@pytest.mark.parametrize("key", ["", "a b", "a..b", ".a", "a.", "a'b", 3])
def test_a_bad_key_is_refused(key: object) -> None:
    with pytest.raises(ConfigError, match="invalid metadata filter key"):
        validate_filter({"ok": 1, key: 1})  # type: ignore[dict-item]


@pytest.mark.parametrize("value", [math.nan, object(), {(1, 2): "x"}])
def test_a_value_json_cannot_hold_is_refused(value: object) -> None:
    with pytest.raises(SerializationError, match="must be JSON"):
        validate_filter({"ok": 1, "v": value})
