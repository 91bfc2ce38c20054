"""Statements that share text are built from named parts (d1saver/sql/parts.py and each
module's own): the variants of a family differ only where they are meant to, so a clause cannot
be dropped from one copy alone (0.2.0's catalogue wrote each copy out; one lost a clause and
served wrong DeltaChannel histories). The aggregate holds every module's statements once."""

from __future__ import annotations

import pytest

from d1saver.sql import catalogue, reads, schema
from d1saver.sql.__main__ import main
from d1saver.sql.parts import not_staged, tree_walk
from d1saver.sql.query import Query

MODULES = catalogue.MODULES


def _one_text(variants: list[tuple[Query, dict[str, str]]]) -> set[str]:
    """Each variant's text without its own parts: one text if the variants differ only in
    those parts."""
    texts = set()
    for query, parts in variants:
        text = query.text
        for name, part in parts.items():
            assert part in text, (query.name, name)
            text = text.replace(part, "")
        texts.add(text)
    return texts


@pytest.mark.parametrize("delta", [False, True])
def test_the_page_variants_differ_only_in_their_scope_and_filter(delta: bool) -> None:
    prefix = "SELECT_PAGE_DELTA_" if delta else "SELECT_PAGE_"
    variants = []
    for scope_name, scope in [("THREAD_NS", reads.THREAD_NS), ("THREAD", reads.THREAD),
                              ("ALL", reads.ALL)]:
        for suffix, where in [("", ""), ("_FILTERED", reads.METADATA_FILTER)]:
            query = getattr(catalogue, prefix + scope_name + suffix)
            assert (reads.METADATA_FILTER in query.text) == bool(where), query.name
            variants.append((query, {"scope": scope, **({"filter": where} if where else {})}))
    assert len(_one_text(variants)) == 1
    assert len(variants) == 6


def test_every_chunk_read_walks_the_one_tree_walk() -> None:
    for query in [*(q for name, q in vars(catalogue).items() if name.startswith("SELECT_PAGE_")),
                  catalogue.DELTA_HISTORY]:
        assert tree_walk("refs", "vals") in query.text, query.name
    for query in catalogue.PAGE_DELTA_OF.values():
        assert tree_walk("seen", "page_out") in query.text, query.name


@pytest.mark.parametrize("table", ["CHECKPOINTS", "WRITES", "FROZEN"])
def test_the_raw_pages_differ_only_in_their_scope(table: str) -> None:
    one, every = getattr(catalogue, f"RAW_{table}_THREAD"), getattr(catalogue, f"RAW_{table}_ALL")
    assert one.text.replace("thread_id = :thread_id AND ", "", 1) == every.text.replace(
        f"\n      AND {not_staged()}", "", 1)


def test_the_aggregate_holds_every_statement_once_in_module_order() -> None:
    """catalogue.STATEMENTS (the snapshot's, the mutation tester's) is each module's
    statements in the order of MODULES, each once, then the migration steps'."""
    seen: list[Query] = []
    for module in MODULES:
        seen += [s for s in module.STATEMENTS if not any(s is t for t in seen)]
    steps = [s for v in range(1, schema.SCHEMA_VERSION + 1) for s in schema.migration(v)]
    assert [s.name for s in catalogue.STATEMENTS] == [s.name for s in [*seen, *steps]]
    assert all(a is b for a, b in zip(catalogue.STATEMENTS, seen))
    # Every statement the aggregate names is its module's own object.
    for name, value in vars(catalogue).items():
        if isinstance(value, Query):
            assert any(getattr(m, name, None) is value for m in MODULES), name


def test_a_statement_reads_as_written_and_as_sent(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["SELECT_PAGE_THREAD", "MIGRATIONS[6][0]"]) == 0
    out = capsys.readouterr().out
    assert "-- SELECT_PAGE_THREAD (d1saver/sql/reads.py)" in out
    assert catalogue.SELECT_PAGE_THREAD.text.strip() in out
    assert catalogue.SELECT_PAGE_THREAD.sql in out and "?1 thread_id" in out
    assert "-- MIGRATIONS[6][0] (d1saver/sql/schema.py)" in out
    assert main(["NO_SUCH_STATEMENT"]) == 2
