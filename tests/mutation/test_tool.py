"""The mutation tool itself (`./dev mutate`), cheaply: the mutants it makes of a statement,
every statement of the catalogue read, one known mutant killed by the tests and one known
equivalent left alive, and a Python mutant placed in memory only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from d1saver.sql.query import q
from tests.mutation import python, sql
from tests.mutation.equivalent import reason

ROOT = Path(__file__).resolve().parents[2]
# Dropping the packed-write part of the prefetch of list(None, filter=...) (issue 26: every
# saver and fleet test passed without it).
PACKED = "OR substr(w.value,1,2)='p:'"


def texts(query: object, kind: str) -> list[str]:
    return [m.sql for m in sql.mutants_of(query) if m.kind == kind]


def test_the_mutants_of_a_statement() -> None:
    query = q("""SELECT a, b FROM t WHERE x = :x AND (y < :y OR z IS NULL)
                 ORDER BY a DESC, b LIMIT :n""", name="T")
    assert texts(query, "drop-and") == [
        "SELECT a,b FROM t WHERE (y<?2 OR z IS NULL)ORDER BY a DESC,b LIMIT ?3",
        "SELECT a,b FROM t WHERE x=?1 ORDER BY a DESC,b LIMIT ?3"]
    assert texts(query, "drop-or") == [
        "SELECT a,b FROM t WHERE x=?1 AND(z IS NULL)ORDER BY a DESC,b LIMIT ?3",
        "SELECT a,b FROM t WHERE x=?1 AND(y<?2)ORDER BY a DESC,b LIMIT ?3"]
    # A boundary moved; a conjunct negated (x<>?1) is left to its drop (one mutant a clause).
    assert texts(query, "flip-cmp") == [
        "SELECT a,b FROM t WHERE x=?1 AND(y<=?2 OR z IS NULL)ORDER BY a DESC,b LIMIT ?3"]
    assert texts(query, "swap-dir") == [
        "SELECT a,b FROM t WHERE x=?1 AND(y<?2 OR z IS NULL)ORDER BY a ASC,b LIMIT ?3",
        "SELECT a,b FROM t WHERE x=?1 AND(y<?2 OR z IS NULL)ORDER BY a DESC,b DESC LIMIT ?3"]
    # The last parameter stays named: D1 is sent as many values as before.
    assert texts(query, "drop-limit") == [
        "SELECT a,b FROM t WHERE x=?1 AND(y<?2 OR z IS NULL)ORDER BY a DESC,b LIMIT "
        "COALESCE(-1,?3)"]


def test_every_statement_is_read_and_mutated() -> None:
    queries = [s for s in sql.statements() if sql.mutable(s)]
    assert len(queries) > 150
    # Each is read whole; all but the plainest (SELECT * FROM t) have mutants.
    assert sum(bool(sql.mutants_of(query)) for query in queries) > 0.9 * len(queries)
    delta = sql.by_name()["SELECT_PAGE_DELTA_ALL_FILTERED"]
    packed = [m for m in sql.mutants_of(delta) if m.kind == "drop-or" and PACKED in m.where]
    assert len(packed) == 1 and sql.prepares(delta, packed[0].sql)
    assert sql.find(packed[0].id) == packed[0] == sql.find(packed[0].stable)


def pytest_under(mutant: str, *tests: str) -> int:
    env = {**os.environ, "D1SAVER_MUTANT": mutant}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                           *tests], cwd=ROOT, env=env, capture_output=True,
                          check=False).returncode


def test_a_known_mutant_is_killed_and_a_known_equivalent_survives() -> None:
    delta = sql.by_name()["SELECT_PAGE_DELTA_ALL_FILTERED"]
    (packed,) = [m for m in sql.mutants_of(delta) if m.kind == "drop-or" and PACKED in m.where]
    test = ("tests/saver/test_read_variants.py::"
            "test_histories_served_after_a_filtered_list_of_every_thread[100]")
    assert pytest_under(packed.id, test) == 1
    # One namespace's page orders by thread and namespace too, which its WHERE fixes.
    page = sql.by_name()["SELECT_PAGE_THREAD_NS"]
    (same,) = [m for m in sql.mutants_of(page) if m.kind == "swap-dir"
               and "checkpoint_ns [DESC->ASC]" in m.where]
    assert reason(same) is not None
    assert pytest_under(same.id, "tests/saver/test_read_variants.py::test_get_tuple") == 0


def test_a_python_mutant_is_placed_in_memory_only() -> None:
    (mutant,) = [m for m in python.mutants_of("d1saver.ops.rows") if m.function == "unpacked"
                 and m.kind == "negate" and m.where.startswith("not (isinstance")]
    assert python.placeable(mutant)
    check = (
        "from tests.mutation import python\n"
        "from d1saver.ops.rows import unpacked\n"
        "row = ['w', 't', '', 'c', 'task', None, '', 0, '', None, 'p:[[0,\"a\",null,\"v\"]]']\n"
        "assert len(unpacked([row])[0]) == 11 and unpacked([row])[0][-1] == 'v'\n"
        f"python.apply(python.find({mutant.id!r}))\n"
        "assert unpacked([row])[0][-1] != 'v'\n")
    subprocess.run([sys.executable, "-c", check], cwd=ROOT, check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    source = python.module_path("d1saver.ops.rows").read_text(encoding="utf-8")
    assert "isinstance(value, str) and value.startswith(\"p:\")" in source  # nothing written


def test_a_mutant_of_a_cached_function_answers_from_its_new_code() -> None:
    """manifest._closes is cached (lru_cache): a mutant placed after a call must not answer
    from the old code's results, and the map must see each test run its lines (the cache is
    cleared before each test mapped)."""
    (mutant,) = [m for m in python.mutants_of("d1saver.storage.manifest")
                 if m.function == "_closes" and m.kind == "flip-cmp" and "==" in m.where]
    check = (
        "from tests.mutation import python\n"
        "from d1saver.storage import manifest\n"
        "from d1saver.storage.chunking import chunk_id\n"
        "ref = chunk_id(b'a message')\n"
        "before = manifest._closes(ref)\n"
        f"python.apply(python.find({mutant.id!r}))\n"
        "assert manifest._closes(ref) is not before\n")
    subprocess.run([sys.executable, "-c", check], cwd=ROOT, check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_mutant_child_gives_its_tests_a_tmp_path(tmp_path: Path, pytestconfig: Any) -> None:
    """A forked child's tests get their tmp_path under a base directory of the child's own:
    it must exist, or every test using tmp_path fails in set-up and kills any mutant."""
    from _pytest.tmpdir import TempPathFactory

    from tests.mutation.__main__ import own_basetemp

    factory = TempPathFactory.from_config(pytestconfig, _ispytest=True)
    own_basetemp(factory, tmp_path / "mutate-x" / "0.tmp")
    made = factory.mktemp("test_something", numbered=True)
    assert made.is_dir() and made.parent == tmp_path / "mutate-x" / "0.tmp"
