"""`./dev mutate`: mutation testing of the SQL, ops/ and storage/ (docs/RELIABILITY.md).

Each mutant (tests/mutation/sql.py, tests/mutation/python.py) runs against the tests that
cover it, fastest first, stopping at the first failure: a failure kills it, a pass lets it
survive. Which tests cover what comes from a map made by running the suite once under the
recorder of tests/mutation/plugin.py (build/mutation/map.json; `--remap` makes it again,
`--map-tests PATH...` adds or refreshes some tests' entries). One mutant at a time, in a child
forked from a process that has imported the suite's dependencies once; the source is never
written.

    ./dev mutate                         every mutant (hours on two cores)
    ./dev mutate --budget 200            an even sample of 200
    ./dev mutate --area sql --statement 'SELECT_PAGE_DELTA_*'
    ./dev mutate --area ops --module rows
    ./dev mutate --list --area storage   the mutants only, nothing run
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "mutation"
MAP = BUILD / "map.json"
RESULTS = BUILD / "results.jsonl"
AREAS = ("sql", "ops", "storage")

# Tests that read a statement's text rather than what it does: they would kill every SQL
# mutant without saying anything of its behaviour, so they never count.
TEXT_TESTS = (
    "tests/sql/test_statements.py::",  # the snapshot of the text sent
    "tests/gateway/test_compaction_generated.py::",  # the Worker's copy of the text
    "tests/sql/test_schema.py::test_inserts_name_columns_the_tables_have",
    "tests/mutation/",  # the tool's own tests
)


# Tests that go first for some targets (statement names, or module:function, as globs),
# before the others fastest first: the tests written for them (so `--max-tests` keeps them).
PRIORITY: list[tuple[str, str]] = [
    ("SELECT_PAGE_*", "tests/saver/test_read_variants.py::"),
    ("DELTA_HISTORY", "tests/saver/test_read_variants.py::"),
    ("d1saver.ops.rows:*", "tests/saver/test_read_variants.py::"),
]


@dataclass
class Entry:
    """One mutant to run, whatever its area."""

    id: str
    stable: str  # the id without the position: what equivalent.py names
    area: str
    target: str  # a statement's name, or module:function
    kind: str
    where: str
    tests: list[str] = field(default_factory=list)
    seconds: float = 0.0  # the covering tests' time in the map
    equivalent: str | None = None  # why it is judged equivalent (tests/mutation/equivalent.py)


# --- the map -------------------------------------------------------------------------------


def _tree_digest() -> str:
    h = hashlib.sha1()
    for folder in ("d1saver", "tests", "compaction"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            h.update(path.relative_to(ROOT).as_posix().encode())
            h.update(path.read_bytes())
    h.update((ROOT / "schema.sql").read_bytes())
    return h.hexdigest()[:16]


def make_map(paths: Sequence[str] = (), target: Path = MAP) -> None:
    """Run the suite (or `paths`, merged into the map if there is one) under the recorder."""
    BUILD.mkdir(parents=True, exist_ok=True)
    out = target.with_suffix(".part.json")
    env = {**os.environ, "D1SAVER_MUTATION_MAP": str(out)}
    env.pop("D1SAVER_MUTANT", None)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
            "not realengine", *(paths or ["tests"])]
    print("mutate: mapping tests to what they cover:", " ".join(args[3:]), flush=True)
    start = time.monotonic()
    subprocess.run(args, cwd=ROOT, env=env, check=False)
    print(f"mutate: mapped in {time.monotonic() - start:.0f} s", flush=True)
    data = json.loads(out.read_text(encoding="utf-8"))
    out.unlink()
    if paths and target.exists():
        data = _merge(json.loads(target.read_text(encoding="utf-8")), data)
    data["digest"] = _tree_digest()
    target.write_text(json.dumps(data), encoding="utf-8")


def _merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The old map with the new one's tests replacing theirs."""
    fresh = {t["id"] for t in new["tests"]}
    tests = [t for t in old["tests"] if t["id"] not in fresh] + new["tests"]
    index = {t["id"]: i for i, t in enumerate(tests)}
    lines: dict[str, dict[str, list[int]]] = {}
    for source, from_new in ((old, False), (new, True)):
        names = [t["id"] for t in source["tests"]]
        for file, by_line in source["lines"].items():
            target = lines.setdefault(file, {})
            for line, idxs in by_line.items():
                keep = [index[names[i]] for i in idxs if (names[i] in fresh) == from_new]
                if keep:
                    target[str(line)] = sorted(set(target.get(str(line), [])) | set(keep))
    return {"tests": tests, "lines": lines}


class Coverage:
    """Which tests cover a statement or lines of a file, fastest first."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.tests = [t for t in data["tests"]]
        self.usable = [t["outcome"] == "passed" and not t["id"].startswith(TEXT_TESTS)
                       and "[wrangler" not in t["id"] for t in self.tests]
        self.by_statement: dict[str, set[int]] = {}
        for i, t in enumerate(self.tests):
            for name in t["statements"]:
                self.by_statement.setdefault(name, set()).add(i)
        self.lines = {f: {int(k): v for k, v in by.items()} for f, by in data["lines"].items()}

    def ordered(self, idxs: Iterable[int]) -> tuple[list[str], float]:
        chosen = sorted({i for i in idxs if self.usable[i]},
                        key=lambda i: (self.tests[i]["seconds"], self.tests[i]["id"]))
        return ([self.tests[i]["id"] for i in chosen],
                sum(self.tests[i]["seconds"] for i in chosen))

    def of_statements(self, names: Iterable[str]) -> tuple[list[str], float]:
        return self.ordered(i for n in names for i in self.by_statement.get(n, ()))

    def of_lines(self, file: str, first: int, last: int) -> tuple[list[str], float]:
        by_line = self.lines.get(file, {})
        return self.ordered(i for ln in range(first, last + 1) for i in by_line.get(ln, ()))


def _covering_statements(name: str, queries: dict[str, Any]) -> list[str]:
    """The statements that exercise one statement: itself; for a trigger or a view of the
    schema, those that write its table (directly, or through a view whose trigger does)."""
    import re

    query = queries[name]
    if not name.startswith("SCHEMA["):
        return [name]
    m = re.match(r"CREATE (?:TRIGGER|VIEW) IF NOT EXISTS (\w+)", query.sql)
    on = re.search(r"\bON (\w+)", query.sql)
    table = on.group(1) if on and query.sql.startswith("CREATE TRIGGER") else (
        m.group(1) if m else "")
    tables = {table}
    for other in queries.values():  # views whose triggers write the table
        if other.name.startswith("SCHEMA[") and other.sql.startswith("CREATE TRIGGER"):
            body = other.sql.split(" BEGIN ", 1)[-1]
            view = re.search(r"INSTEAD OF INSERT ON (\w+)", other.sql)
            if view and re.search(rf"\b{table}\b", body):
                tables.add(view.group(1))
    return [q.name for q in queries.values() if not q.name.startswith(("SCHEMA[", "MIGRATIONS["))
            and any(re.search(rf"\b{t}\b", q.sql) for t in tables)]


# --- the mutants ---------------------------------------------------------------------------


def entries(args: argparse.Namespace, cover: Coverage | None) -> tuple[list[Entry], Counter]:
    """The mutants in scope, and per area how many could not be used (did not prepare, or
    could not be placed)."""
    from tests.mutation import python, sql
    from tests.mutation.equivalent import reason

    out: list[Entry] = []
    unusable: Counter = Counter()
    if "sql" in args.area:
        queries = sql.by_name()
        names = [n for n in queries if sql.mutable(queries[n]) and (
            not args.statement or any(fnmatch.fnmatchcase(n, p) for p in args.statement))]
        ok, bad = sql.generate(names)
        unusable["sql"] += len(bad)
        covering = {n: _covering_statements(n, queries) for n in names}
        for m in ok:
            e = Entry(m.id, m.stable, "sql", m.statement, m.kind, m.where, equivalent=reason(m))
            if cover is not None:
                e.tests, e.seconds = cover.of_statements(covering[m.statement])
            out.append(e)
    py_areas = [a for a in args.area if a in python.MODULES]
    if py_areas:
        for m in python.generate(py_areas, args.module or None):
            if not python.placeable(m):
                unusable[m.area] += 1
                continue
            e = Entry(m.id, m.stable, m.area, f"{m.module}:{m.function}", m.kind,
                      f"line {m.line}: {m.where}", equivalent=reason(m))
            if cover is not None:
                file = python.module_path(m.module).relative_to(ROOT).as_posix()
                e.tests, e.seconds = cover.of_lines(file, m.line, m.end_line)
            out.append(e)
    if args.tests:  # the tests given, for every mutant, in the order given
        for e in out:
            e.tests, e.seconds = list(args.tests), 60.0
    if args.kind:
        out = [e for e in out if e.kind in args.kind]
    if args.mutant:
        out = [e for e in out if e.id in args.mutant or e.stable in args.mutant]
    if args.budget is not None and len(out) > args.budget:
        chosen = set(random.Random(args.seed).sample(range(len(out)), args.budget))
        out = [e for i, e in enumerate(out) if i in chosen]
    if args.status:  # within the sample: the same sample whatever ran before
        latest = _latest()
        out = [e for e in out if latest.get(e.stable, ("not-run",))[0] in args.status]
    return out, unusable


# --- running -------------------------------------------------------------------------------


def _warm() -> None:
    """Import what every test needs once, in the parent of the forked runs."""
    import langgraph.checkpoint.memory  # noqa: F401
    import langgraph.graph  # noqa: F401
    import pytest  # noqa: F401

    import d1saver  # noqa: F401
    import tests.conftest  # noqa: F401
    from tests.mutation import python, sql  # noqa: F401
    from tests.saver import mirror

    mirror.record_corpus()  # InMemorySaver only: the same for every mutant, made once


def run_one(entry: Entry, timeout: float, max_tests: int | None) -> tuple[str, float, str]:
    """(status, seconds, the failing test or log) of one mutant: killed, survived, timeout,
    no-tests or error."""
    tests = entry.tests[:max_tests] if max_tests else entry.tests
    if not tests:
        return "no-tests", 0.0, ""
    log = tempfile.NamedTemporaryFile(prefix="mutant-", suffix=".log", delete=False)
    log.close()
    first = Path(log.name + ".failed")
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: apply the mutant (the plugin reads the variable), run the tests
        code = 3
        try:
            os.setpgid(0, 0)
            fd = os.open(log.name, os.O_WRONLY | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.environ["D1SAVER_MUTANT"] = entry.id
            import pytest

            class FirstFailure:
                def pytest_runtest_logreport(self, report: Any) -> None:
                    if report.failed and not first.exists():
                        first.write_text(report.nodeid, encoding="utf-8")

            code = int(pytest.main(["-x", "-q", "-p", "no:cacheprovider", "-p",
                                    "no:hypothesispytest", "--no-header", "--tb=line", "-o",
                                    "addopts=", "-W", "ignore", *tests],
                                   plugins=[FirstFailure()]))
        except BaseException:  # noqa: B036 - the child reports any failure as an error code
            import traceback
            traceback.print_exc()
            code = 3
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    status = ""
    while True:
        done, wait = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(wait)
            break
        if time.monotonic() - start > timeout:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            status, code = "timeout", -1
            break
        time.sleep(0.02)
    seconds = time.monotonic() - start
    text = Path(log.name).read_text(encoding="utf-8", errors="replace")
    os.unlink(log.name)
    if not status:
        status = {0: "survived", 1: "killed", 5: "no-tests"}.get(code, "error")
    detail = ""
    if status == "killed" and first.exists():
        detail = "FAILED " + first.read_text(encoding="utf-8")
    elif status == "error":
        detail = text[-2000:]
    first.unlink(missing_ok=True)
    return status, seconds, detail


def _latest() -> dict[str, tuple[str, float, str]]:
    """The latest (status, seconds, detail) of each mutant run before, by stable id."""
    out: dict[str, tuple[str, float, str]] = {}
    if RESULTS.exists():
        for line in RESULTS.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            out[row["stable"]] = (row["status"], row["seconds"], row["detail"])
    return out


def _killers() -> dict[str, str]:
    """The test that killed each mutant in earlier runs (build/mutation/results.jsonl)."""
    out: dict[str, str] = {}
    if RESULTS.exists():
        for line in RESULTS.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row["status"] == "killed" and row["detail"].startswith(("FAILED ", "ERROR ")):
                out[row["stable"]] = row["detail"].split(" ", 1)[1]
    return out


# --- the report ----------------------------------------------------------------------------


def report(results: list[tuple[Entry, str, float, str]], unusable: Counter,
           total_seconds: float) -> float:
    rows = []
    print()
    print(f"{'area':<9}{'mutants':>9}{'unusable':>10}{'killed':>8}{'survived':>10}"
          f"{'equivalent':>12}{'errors':>8}{'kill rate':>11}")
    overall = Counter()
    for area in AREAS:
        mine = [(e, s) for e, s, _, _ in results if e.area == area]
        if not mine and not unusable[area]:
            continue
        c = Counter()
        for e, s in mine:
            if s in ("killed", "timeout"):
                c["killed"] += 1
            elif s == "error":
                c["error"] += 1
            elif e.equivalent:
                c["equivalent"] += 1
            else:
                c["survived"] += 1
        c["mutants"] = len(mine)
        c["unusable"] = unusable[area]
        overall.update(c)
        rows.append((area, c))
    rows.append(("total", overall))
    for area, c in rows:
        judged = c["killed"] + c["survived"]
        rate = f"{100 * c['killed'] / judged:.1f}%" if judged else "-"
        print(f"{area:<9}{c['mutants']:>9}{c['unusable']:>10}{c['killed']:>8}{c['survived']:>10}"
              f"{c['equivalent']:>12}{c['error']:>8}{rate:>11}")
    status = Counter(s for _, s, _, _ in results)
    print(f"\nkilled by a failing test {status['killed']}, by a timeout {status['timeout']}; "
          f"errors (not counted) {status['error']}; survived with tests {status['survived']}, "
          f"with no covering test {status['no-tests']}; "
          f"unusable (no longer prepares, or cannot be placed) {sum(unusable.values())}")
    survivors = [(e, s) for e, s, _, _ in results if s in ("survived", "no-tests")]
    fresh = [(e, s) for e, s in survivors if not e.equivalent]
    if fresh:
        print(f"\nsurvivors ({len(fresh)}):")
        for e, s in fresh:
            note = " (no covering test)" if s == "no-tests" else ""
            print(f"  {e.id}  {e.kind}{note}\n      {e.where}")
    judged_eq = [(e, e.equivalent) for e, _ in survivors if e.equivalent]
    if judged_eq:
        print(f"\nequivalent survivors ({len(judged_eq)}), each with the reason:")
        for e, why in judged_eq:
            print(f"  {e.id}  {e.kind}: {why}\n      {e.where}")
    errors = [(e, d) for e, s, _, d in results if s == "error"]
    for e, d in errors[:5]:
        print(f"\nerror running {e.id}:\n{d[-600:]}")
    judged = overall["killed"] + overall["survived"]
    rate = overall["killed"] / judged if judged else 1.0
    print(f"\nkill rate {100 * rate:.1f}% of {judged} non-equivalent mutants; "
          f"{len(results)} run in {total_seconds / 60:.1f} min")
    return rate


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev mutate", description=__doc__.split("\n")[0])
    parser.add_argument("--area", nargs="+", choices=AREAS, default=list(AREAS))
    parser.add_argument("--statement", action="append", default=[],
                        help="only statements whose name matches (a glob; repeatable)")
    parser.add_argument("--module", action="append", default=[],
                        help="only this module of ops/ or storage/ (e.g. rows; repeatable)")
    parser.add_argument("--kind", action="append", default=[], help="only this operator")
    parser.add_argument("--mutant", action="append", default=[], help="only this mutant id")
    parser.add_argument("--status", nargs="+", metavar="STATUS",
                        help="only mutants whose latest result is one of these (survived, "
                             "no-tests, error, killed, timeout, not-run)")
    parser.add_argument("--budget", type=int, help="run at most this many, an even sample")
    parser.add_argument("--seed", type=int, default=26, help="of the sample (--budget)")
    parser.add_argument("--max-tests", type=int, help="run at most this many tests a mutant")
    parser.add_argument("--tests", nargs="+", metavar="TEST",
                        help="run these tests for every mutant instead of those the map names")
    parser.add_argument("--map", type=Path, default=MAP, help="the map of tests to use")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--remap", action="store_true", help="map the whole suite again first")
    parser.add_argument("--map-tests", nargs="+", metavar="PATH",
                        help="map these tests again (new or changed), merged into the map")
    parser.add_argument("--report", action="store_true",
                        help="report the latest results of earlier runs (results.jsonl) for "
                             "the mutants in scope, run nothing")
    parser.add_argument("--min-rate", type=float, default=0.0,
                        help="exit 1 below this kill rate (0..1)")
    args = parser.parse_args(argv)
    if args.map_tests:
        make_map(args.map_tests, args.map)
    if args.list:
        found, unusable = entries(args, None)
        for e in found:
            print(f"{e.id}  {e.kind}  {e.where}")
        print(f"{len(found)} mutants; unusable: {dict(unusable)}")
        return 0
    if args.report:
        found, unusable = entries(args, None)
        latest = _latest()
        done = [(e, *latest[e.stable]) for e in found if e.stable in latest]
        print(f"mutate: {len(done)} of {len(found)} mutants in scope have a result")
        rate = report(done, unusable, sum(r[2] for r in done))
        return 1 if rate < args.min_rate else 0
    if args.map_tests or args.tests:
        pass
    elif args.remap or not args.map.exists():
        make_map((), args.map)
    data = (json.loads(args.map.read_text(encoding="utf-8")) if args.map.exists()
            else {"tests": [], "lines": {}, "digest": _tree_digest()})
    if not args.tests and data.get("digest") != _tree_digest():
        print("mutate: the code or the tests changed since the map was made: tests added since "
              "are not run (--remap, or --map-tests PATH for new tests)", flush=True)
    cover = Coverage(data)
    found, unusable = entries(args, cover)
    killers = _killers()
    for e in found:  # the tests written for the target, then the last killer, go first
        first = [p for g, p in PRIORITY if fnmatch.fnmatchcase(e.target, g)]
        if first:
            e.tests.sort(key=lambda t: not t.startswith(tuple(first)))
        killer = killers.get(e.stable)
        if killer in e.tests:
            e.tests.remove(killer)
            e.tests.insert(0, killer)
    _warm()
    print(f"mutate: {len(found)} mutants to run, one at a time", flush=True)
    results: list[tuple[Entry, str, float, str]] = []
    BUILD.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with RESULTS.open("a", encoding="utf-8") as log:
        for n, e in enumerate(found, 1):
            timeout = 60 + 4 * e.seconds
            status, seconds, detail = run_one(e, timeout, args.max_tests)
            results.append((e, status, seconds, detail))
            log.write(json.dumps({"id": e.id, "stable": e.stable, "status": status,
                                  "seconds": round(seconds, 2), "detail": detail[-300:],
                                  "tests": len(e.tests)}) + "\n")
            log.flush()
            mark = {"killed": ".", "timeout": "T", "error": "E", "survived": "S",
                    "no-tests": "0"}[status]
            print(mark, end="\n" if n % 80 == 0 else "", flush=True)
    rate = report(results, unusable, time.monotonic() - start)
    return 1 if rate < args.min_rate else 0


if __name__ == "__main__":
    sys.exit(main())
