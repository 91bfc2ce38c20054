"""Operations that rewrite a thread's rows page by page: copy_thread under keys (each value
re-sealed for its new row) and rekeying. A part of `Operations` (d1saver/ops/operations.py), kept apart
because it is the one place that reads raw rows and writes them back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from d1saver.ops import reseal as _reseal
from d1saver.ops import reseal_memory as _reseal_memory
from d1saver.ops import rows as _rows
from d1saver.sql import catalogue as _sql
from d1saver.sql import memory as _memory_sql
from d1saver.ops import statements as st
from d1saver.storage.crypto import key_id_of_text
from d1saver.core.errors import ConfigError, QueryError
from d1saver.core.protocol import Op, Result, Statement
from d1saver.storage.values import Values

T = TypeVar("T")
# Re-sealing one page: its raw rows -> statements, adding to the counts.
Build = Callable[[list[Any], _reseal.RekeyCounts], list[Statement]]
_RACE_RETRIES = 3


class Rewrites(ABC):
    """copy_thread, key_census and rekey, over the host's `exchange` and `values`."""

    values: Values

    @abstractmethod
    def exchange(self, statements: Sequence[Statement]) -> Op[list[Result]]:
        ...  # Operations.exchange

    @abstractmethod
    def _changing(self, thread_ids: Sequence[str] | None, op: Op[T], *,
                  deletes: bool = False) -> Op[T]:
        ...  # Operations._changing

    def copy_thread(self, source: str, target: str, page_size: int) -> Op[None]:
        """`source`'s rows copied onto another thread (Fleet.copy_thread leaves a thread copied
        onto itself alone before it gets here: re-inserting its rows would drop derived rows)."""
        return (yield from self._changing([str(target)], self._copy_thread(source, target,
                                                                           page_size),
                                          deletes=True))

    def _copy_thread(self, source: str, target: str, page_size: int) -> Op[None]:
        """One atomic batch of INSERT ... SELECT without keys. With keys a value is bound to its
        thread, so the rows are read in pages and written re-sealed for the target: each
        request carries one page's rows and the next page's read: per table (checkpoints,
        writes, frozen DeltaChannel rows) ceil((rows + 1) / page_size) requests and one more
        at most, each atomic."""
        if self.values.sealer is None:
            yield from self.exchange(st.copy_thread_statements(source, target))
            return
        source, target = str(source), str(target)
        yield from self._rewrite(
            lambda c: _reseal.checkpoints_statement(source, c, page_size, None),
            _reseal.raw_checkpoints, lambda r: r.key,
            lambda rows, _: _reseal.copy_checkpoints(self.values, rows, target), page_size)
        frozen = _reseal.frozen_statement
        done = yield from self._rewrite(
            lambda c: _reseal.writes_statement(source, c, page_size, None),
            _reseal.raw_writes, lambda r: r.cursor,
            lambda rows, _: _reseal.copy_writes(self.values, rows, target), page_size,
            last=[*Statement.bind_each([_sql.COPY_TAGS, _sql.COPY_DELTA_UNWRITTEN],
                                       {"source": source, "target": target}),
                  frozen(source, None, page_size)])
        yield from self._rewrite(
            lambda c: frozen(source, c, page_size), _reseal.raw_frozen, lambda r: r.cursor,
            lambda rows, _: _reseal.copy_frozen(self.values, rows, target), page_size,
            first=done.tail)

    # --- rekeying (with keys) -----------------------------------------------------------

    def key_census(self) -> Op[dict[str, dict[str, int]]]:
        """Stored values per table and key id ("plaintext" for values under none): the
        checkpoints' tables, and D1Store's items and D1Cache's entries when there are any;
        values of staged rows, which rekey skips, under "staged" (only if there are any)."""
        result, staged, memory = yield from self.exchange([
            Statement.bind(_sql.KEY_CENSUS), Statement.bind(_sql.STAGED_VALUES),
            Statement.bind(_memory_sql.MEMORY_KEY_CENSUS)])
        out = _rows.read_rows(_reseal.census, result, key_id_of_text, staged)
        for table, per_key in _rows.read_rows(_reseal.census, memory, key_id_of_text).items():
            if per_key:
                out[table] = per_key
        return out

    def rekey(self, table: str, *, page_size: int, plaintext: bool,
              guard: Sequence[Statement] = (),
              progress: Callable[[_reseal.RekeyCounts], None] | None = None
              ) -> Op[_reseal.RekeyCounts]:
        """Re-seal `table`'s values ("checkpoints" with their metadata, "writes",
        "delta_frozen", or memory's "store_items" and "cache_entries") that are not under the
        newest key, in keyset pages; each page's rewrite is one atomic batch led by `guard`
        (the compaction lease's), so a run stopped midway is continued by the next. With
        `plaintext`, values written before keys were set are sealed too: one stored by content
        is read with the chunks it reaches and sealed whole, and the chunks no row reaches any
        more go in the same batch."""
        heads = self.values._sealer().fresh_heads
        plans = {**_reseal.REKEY_PLANS, **_reseal_memory.REKEY_PLANS}
        if table not in plans:
            raise ConfigError(f"unknown table {table!r}: rekey one of {tuple(plans)}")
        read, parse, cursor_of, rekey = plans[table]
        # Memory stores nothing by content.
        content = {"content": True} if plaintext and table in _reseal.REKEY_PLANS else {}
        return (yield from self._rewrite(
            lambda c: read(None, c, page_size, heads, **content), parse, cursor_of,
            lambda rows, n: rekey(self.values, rows, n, plaintext=plaintext),
            page_size, guard=guard, progress=progress))

    def _rewrite(self, read: Callable[[Any], Statement], parse: Callable[[Result], list[Any]],
                 cursor_of: Callable[[Any], Any], build: Build, size: int, *,
                 guard: Sequence[Statement] = (), last: Sequence[Statement] = (),
                 first: Result | None = None,
                 progress: Callable[[_reseal.RekeyCounts], None] | None = None
                 ) -> Op[_reseal.RekeyCounts]:
        """Pages of raw rows rewritten: each request carries `guard`, one page's statements and
        the next page's read (`last` rides with the final one: its last result is `tail`, which
        can be the next call's `first` page). A row changed since read fails the batch's guard
        ("head_moved"); the page is read again."""
        counts = _reseal.RekeyCounts()
        cursor, races = None, 0
        if first is None:
            (first,) = yield from self.exchange([read(cursor)])
            counts.requests = 1
        rows = _rows.read_rows(parse, first)
        while True:
            page = _reseal.RekeyCounts()
            stmts = build(rows, page)
            done = len(rows) < size
            after = cursor_of(rows[-1]) if rows else cursor
            batch = [*guard, *stmts] if stmts else []
            batch += [*last] if done else [read(after)]
            try:
                results = (yield from self.exchange(batch)) if batch else []
            except QueryError as exc:
                races += 1
                if "head_moved" not in str(exc) or races > _RACE_RETRIES:
                    raise
                (again,) = yield from self.exchange([read(cursor)])
                rows = _rows.read_rows(parse, again)
                counts.requests += 2
                continue
            counts.requests, counts.pages = counts.requests + bool(batch), counts.pages + 1
            counts.rewritten += page.rewritten
            counts.plaintext += page.plaintext
            if progress is not None:
                progress(counts)
            if done:
                counts.tail = results[-1] if last else None
                return counts
            rows, cursor = _rows.read_rows(parse, results[-1]), after
