"""A response D1 should never send (rows of the wrong shape, a record that is not one row)
is refused with a typed ResponseError naming what is wrong, never read into a silent wrong
answer. Each operation (an Op generator, docs/ARCHITECTURE.md) is fed the bad result as the
reply to what it sends."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from d1saver.core.errors import ConfigError, ResponseError
from d1saver.core.protocol import Commit, Result, Statement
from d1saver.ops.operations import Operations
from d1saver.sql import catalogue as _sql
from d1saver.storage.values import Values

CONFIG = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "1"}}


def exchange(statements: Sequence[Statement]) -> Generator[Any, Any, list[Result]]:
    """The client's exchange, answered by the test: the statements out, the results in."""
    return (yield list(statements))


def answered(op: Generator[Any, Any, Any], *replies: list[Result]) -> Any:
    """Drive `op`, answering each request it makes (an exchange, or a Commit) in turn."""
    action = next(op)
    for reply in replies:
        assert isinstance(action, (list, Commit)), action
        try:
            action = op.send(reply)
        except StopIteration as stop:
            return stop.value
    raise AssertionError(f"the operation asked more: {action}")


def operations() -> Operations:
    return Operations(Values(JsonPlusSerializer()), exchange, auto_setup=False)


def nothing() -> Result:
    return Result(columns=[], rows=[])


@pytest.mark.parametrize("records", [[[1]], [[1], [1]]])
def test_untag_refuses_a_record_that_is_not_one_row(records: list[list[int]]) -> None:
    """untag answers from the batch's record of the tag's deletion: one row, or an error."""
    record = Result(columns=list(_sql.OP_RESULT_COLUMNS), rows=records)
    if len(records) == 1:
        assert answered(operations().untag(CONFIG, "kept"), [nothing()] * 3 + [record])
        return
    with pytest.raises(ResponseError, match="2 rows, not 1"):
        answered(operations().untag(CONFIG, "kept"), [nothing()] * 3 + [record])


def history_rows(*rows: list[Any], columns: Sequence[str] = _sql.DELTA_HISTORY_COLUMNS
                 ) -> list[Result]:
    return [Result(columns=list(columns), rows=list(rows))]


def chunk_row(data: str) -> list[Any]:
    """A DELTA_HISTORY row of content-addressed chunks: ids and data joined by spaces."""
    return ["h", None, None, None, None, None, None, None, None, None, data]


def test_delta_history_refuses_chunks_that_are_not_id_and_data_pairs() -> None:
    ops = operations()
    assert answered(ops.delta_history(CONFIG, ["messages"]), history_rows(chunk_row("i1 d1"))
                    ) == {"messages": {"writes": []}}
    with pytest.raises(ResponseError, match="not pairs of id and data"):
        answered(ops.delta_history(CONFIG, ["messages"]), history_rows(chunk_row("i1 d1 i2")))


def test_delta_history_refuses_columns_it_does_not_expect() -> None:
    """Rows read by position under other columns' names (a statement edited on one side)."""
    cols = list(_sql.DELTA_HISTORY_COLUMNS)
    swapped = [cols[1], cols[0], *cols[2:]]
    with pytest.raises(ResponseError, match="columns"):
        answered(operations().delta_history(CONFIG, ["messages"]),
                 history_rows(chunk_row("i1 d1"), columns=swapped))


def test_get_tuple_refuses_a_walk_under_columns_it_does_not_expect() -> None:
    """The DeltaChannel walk that rides along with the page is checked as the page is."""
    cols = list(_sql.PAGE_COLUMNS)
    page = Result(columns=cols, rows=[])
    walk = ["h", "t", None, None, None, None, None, None, None, None, "i1 d1"]
    assert answered(operations().get_tuple(CONFIG), [page, Result(columns=cols, rows=[walk])]
                    ) is None
    with pytest.raises(ResponseError, match="columns"):
        answered(operations().get_tuple(CONFIG),
                 [page, Result(columns=[cols[1], cols[0], *cols[2:]], rows=[walk])])


def test_tags_refuse_columns_they_do_not_expect() -> None:
    """LIST_TAGS' (name, checkpoint_id) swapped would name each tag by its checkpoint."""
    cols = list(_sql.LIST_TAGS_COLUMNS)
    row = [["kept", "1"]]
    assert answered(operations().tags(CONFIG), [Result(columns=cols, rows=row)]) == {"kept": "1"}
    with pytest.raises(ResponseError, match="columns"):
        answered(operations().tags(CONFIG), [Result(columns=cols[::-1], rows=row)])


def test_a_schema_record_without_a_version_is_refused_by_name() -> None:
    """The schema read that rides along with an instance's first request: d1saver_schema
    without a version column is a ResponseError saying so, before any migration is chosen."""
    ops = Operations(Values(JsonPlusSerializer()), exchange)
    tags = Result(columns=list(_sql.LIST_TAGS_COLUMNS), rows=[])
    with pytest.raises(ResponseError, match="no version"):
        answered(ops.tags(CONFIG), [Result(columns=["min_reader"], rows=[[1]]), tags])


def test_key_census_refuses_columns_it_does_not_expect() -> None:
    """Counts under swapped names (table, key, count) would be counted under the wrong key."""
    census = Result(columns=list(_sql.KEY_CENSUS_COLUMNS), rows=[["checkpoints", None, 2]])
    staged = Result(columns=list(_sql.STAGED_VALUES_COLUMNS), rows=[[0]])
    memory = Result(columns=list(_sql.KEY_CENSUS_COLUMNS), rows=[])
    assert answered(operations().key_census(), [census, staged, memory]) == {
        "checkpoints": {"plaintext": 2}, "writes": {}}
    bad_census = Result(columns=["head", "tbl", "row_count"], rows=census.rows)
    bad_staged = Result(columns=["moved"], rows=[[0]])
    for reply in ([bad_census, staged, memory], [census, bad_staged, memory]):
        with pytest.raises(ResponseError, match="columns"):
            answered(operations().key_census(), reply)


def test_a_database_that_needs_a_newer_d1saver_is_refused() -> None:
    """The schema record names the oldest d1saver that may use the database (min_reader):
    above this one's schema version, the first request's answer is a ConfigError saying to
    upgrade, whatever the statement found."""
    newer = _sql.SCHEMA_VERSION + 1
    tags = Result(columns=list(_sql.LIST_TAGS_COLUMNS), rows=[])
    schema = Result(columns=["version", "min_reader"], rows=[[newer, newer]])
    with pytest.raises(ConfigError, match="upgrade d1saver"):
        answered(Operations(Values(JsonPlusSerializer()), exchange).tags(CONFIG), [schema, tags])
    usable = Result(columns=["version", "min_reader"], rows=[[newer, _sql.SCHEMA_VERSION]])
    assert answered(Operations(Values(JsonPlusSerializer()), exchange).tags(CONFIG),
                    [usable, tags]) == {}
