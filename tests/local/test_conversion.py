"""D1's value rules alone: numbers cross as JavaScript doubles, BLOBs come back as byte arrays."""

from __future__ import annotations

from d1saver.local.conversion import bind_value, json_value, unhex


def test_parameters_bind_as_doubles() -> None:
    assert [bind_value(v) for v in (5, True, 2.5, "5", None)] == [5.0, 1.0, 2.5, "5", None]
    assert type(bind_value(5)) is float


def test_results_serialize_as_javascript_would() -> None:
    assert json_value(b"AB") == [65, 66]
    assert json_value(2.0) == 2 and type(json_value(2.0)) is int
    assert json_value(float("inf")) is None and json_value(float("nan")) is None
    assert json_value(2**53 + 1) == 2**53  # past 2**53 a double loses the last digit
    assert json_value(2.0**60) == 2.0**60 and type(json_value(2.0**60)) is float
    assert json_value("x") == "x" and json_value(None) is None


def test_unhex_matches_sqlite() -> None:
    assert unhex("4142") == b"AB" and unhex(b"4142") == b"AB"
    assert unhex("41-42", "-") == b"AB"
    assert unhex("414") is None and unhex("zz") is None and unhex(None) is None
    assert unhex("") == b""
