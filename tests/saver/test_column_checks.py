"""Readers of ops/ refuse a result whose columns are not the ones their statement names (an
older or newer schema, a statement edited on one side only) with a typed error, rather than
reading values from the wrong columns."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import pytest

from d1saver.core.errors import ResponseError
from d1saver.core.protocol import Result, Statement
from d1saver.ops import reseal, statements, transfer
from d1saver.sql import reseal as reseal_sql
from d1saver.sql import transfers as transfer_sql


def swapped(columns: Sequence[str], width: int) -> Result:
    """A row of the right width under the first two columns' names swapped."""
    names = [columns[1], columns[0], *columns[2:]]
    return Result(columns=names, rows=[["x"] * width])


@pytest.mark.parametrize("read, cols", [
    (reseal.raw_frozen, reseal_sql.RAW_FROZEN_COLUMNS),
    (reseal.raw_checkpoints, reseal_sql.RAW_CHECKPOINT_COLUMNS),
    (reseal.raw_writes, reseal_sql.RAW_WRITE_COLUMNS)], ids=["frozen", "checkpoints", "writes"])
def test_raw_pages_refuse_columns_they_do_not_expect(read: Any, cols: Sequence[str]) -> None:
    """The pages copies and rekeying read (every row of a thread, to re-seal)."""
    with pytest.raises(ResponseError, match="columns"):
        read(swapped(cols, len(cols)))


def test_staged_elsewhere_refuses_columns_it_does_not_expect() -> None:
    cols = transfer_sql.STAGED_ELSEWHERE_COLUMNS
    assert statements.staged_elsewhere(Result(columns=list(cols), rows=[["db", "s"]])) == [
        ("db", "s")]
    with pytest.raises(ResponseError, match="columns"):
        statements.staged_elsewhere(swapped(cols, len(cols)))


def test_read_thread_refuses_columns_it_does_not_expect() -> None:
    def exchange(stmts: list[Statement]) -> Generator[Any, Any, list[Result]]:
        yield from ()
        return [swapped(transfer_sql.TRANSFER_PAGE_COLUMNS[t], 99) for t in transfer.TABLES]

    with pytest.raises(ResponseError, match="columns"):
        next(transfer.read_thread(exchange, "t"))


def test_read_thread_refuses_a_reply_missing_a_result() -> None:
    """A reply with fewer results than statements sent is refused, never read as tables
    that hold no rows."""
    def exchange(stmts: list[Statement]) -> Generator[Any, Any, list[Result]]:
        yield from ()
        return [Result(columns=list(transfer_sql.TRANSFER_PAGE_COLUMNS[t]), rows=[])
                for t in transfer.TABLES[:-1]]

    with pytest.raises(ResponseError, match="results"):
        next(transfer.read_thread(exchange, "t"))


def test_deleted_refuses_columns_it_does_not_expect() -> None:
    """Whether a move deleted its source is read from LEAVING's column `moved`; any other
    column is refused rather than read as "deleted"."""
    results = [Result(columns=[], rows=[]) for _ in range(40)]
    at = len(results) - (len(transfer_sql.LEAVE) + len(transfer_sql.DROP_THREAD) + 3)
    results[at] = Result(columns=list(transfer_sql.LEAVING_COLUMNS), rows=[[1]])
    assert transfer.deleted(results)
    results[at] = Result(columns=["changes"], rows=[[1]])
    with pytest.raises(ResponseError, match="columns"):
        transfer.deleted(results)
