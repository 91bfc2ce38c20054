"""`./dev mutate`: mutation testing of the SQL, ops/ and storage/ (docs/RELIABILITY.md).

Each mutant (tests/mutation/sql.py, tests/mutation/python.py) runs against the tests that
cover it, stopping at the first failure: a failure kills it, a pass lets it survive. The
tests most likely to kill it go first: the one that killed it last time, then those that
killed its siblings (the same statement or function), then the tests written for it, then the
rest fastest first. Which tests cover what comes from a map (build/mutation/map.json) made by
running the suite's fast tests once under tests/mutation/plugin.py: the statements each test
sends, and the lines of ops/ and storage/ it runs; only the test files changed since are
mapped again. The suite is collected once; each mutant runs in a child forked from it (two
at a time by default), applied in memory: the source is never written. Results are kept by
the mutant and a digest of the code and of the tests it ran (build/mutation/results.jsonl):
a rerun runs only the mutants whose code or tests changed.

    ./dev mutate                         every mutant (the full run; about an hour on 2 cores)
    ./dev mutate --budget 200            an even sample of 200
    ./dev mutate --budget 240 --stratify an even sample of 80 in each area
    ./dev mutate --area sql --statement 'SELECT_PAGE_DELTA_*'
    ./dev mutate --area ops --module rows
    ./dev mutate --status survived       the survivors of earlier runs again
    ./dev mutate --report                the latest results of the mutants in scope
    ./dev mutate --list --area storage   the mutants only, nothing run
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "mutation"
MAP = BUILD / "map.json"
RESULTS = BUILD / "results.jsonl"
MAPPER = "tests/mutation/plugin.py"  # how the map is made: a map made otherwise is made again
AREAS = ("sql", "ops", "storage")

# Tests that read a statement's text rather than what it does: they would kill every SQL
# mutant without saying anything of its behaviour, so they never count.
TEXT_TESTS = (
    "tests/sql/test_statements.py::",  # the snapshot of the text sent
    "tests/gateway/test_compaction_generated.py::",  # the Worker's copy of the text
    "tests/sql/test_schema.py::test_inserts_name_columns_the_tables_have",
    "tests/mutation/",  # the tool's own tests
)
# Test files neither mapped nor run against mutants: the long harnesses (their short CI
# budgets are minutes each; `./dev soak` runs them), the real engine's and the Agent Server's
# tests (a subprocess each; the mutant is applied in this process only), the browser, the
# packaging and docs checks, and the tool's own tests.
UNMAPPED = (
    "tests/mutation/", "tests/gateway/", "tests/agent_server/", "tests/ui/test_browser.py",
    "tests/reliability/test_kill_points.py", "tests/reliability/test_crash.py",
    "tests/reliability/test_stateful.py", "tests/reliability/test_interleavings.py",
    "tests/saver/test_large_and_long.py", "tests/test_release.py", "tests/test_docs.py",
    "tests/test_benchmarks.py", "tests/sql/test_statements.py",
)
MARKERS = "not realengine and not agentserver and not soak"

# Tests that go first for some targets (statement names, or module:function, as globs),
# after the killers: the tests written for them.
PRIORITY: list[tuple[str, str]] = [
    ("SELECT_PAGE_*", "tests/saver/test_read_variants.py::"),
    ("DELTA_HISTORY", "tests/saver/test_read_variants.py::"),
    ("d1saver.ops.rows:*", "tests/saver/test_read_variants.py::"),
    *((target, "tests/saver/test_clause_boundaries.py::") for target in (
        "SELECT_PAGE_*", "DELTA_HISTORY", "RAW_*", "REKEY_*", "KEY_CENSUS", "THREADS_*",
        "LEFTOVERS", "TRANSFER_PAGE_*", "STAGED_VALUES")),
    # Retention's statements: twin threads compacted apart and together, every table compared.
    *((target, "tests/compaction/test_retention_twins.py::") for target in (
        "FREEZE*", "PLAN_KEEP", "PLAN_RELINK", "APPLY_RELINK", "REBIND_FROZEN", "DELETE_UNKEPT_*",
        "RECORD_PLAN", "SUMMARIZE_PLAN", "GC_CHUNKS", "GROWTH")),
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
    key: str = ""  # the mutant and what its result depends on (the cache's key)


# --- digests: what a result depends on ---------------------------------------------------


@cache
def file_digest(rel: str) -> str:
    path = ROOT / rel
    return hashlib.sha1(path.read_bytes()).hexdigest()[:16] if path.exists() else "-"


def _digest(paths: Iterable[Path]) -> str:
    h = hashlib.sha1()
    for path in sorted(paths):
        rel = path.relative_to(ROOT).as_posix()
        h.update(f"{rel}\0{file_digest(rel)}\0".encode())
    return h.hexdigest()[:16]


@cache
def code_digest() -> str:
    """The product: every module of d1saver and compaction, and the schema."""
    return _digest([*(ROOT / "d1saver").rglob("*.py"), *(ROOT / "compaction").rglob("*.py"),
                    ROOT / "schema.sql"])


@cache
def helpers_digest() -> str:
    """What every test shares: conftests, helper modules, data, and how a mutant is applied."""
    tests = ROOT / "tests"
    return _digest([p for p in tests.rglob("*.py") if not p.name.startswith("test_")
                    and "mutation" not in p.relative_to(tests).parts[:1]]
                   + [tests / "mutation" / n for n in ("plugin.py", "sql.py", "python.py")])


def result_key(stable: str, tests: Sequence[str]) -> str:
    files = sorted({t.split("::", 1)[0] for t in tests})
    h = hashlib.sha1(f"{stable}\0{code_digest()}\0{helpers_digest()}".encode())
    for f in files:
        h.update(f"{f}\0{file_digest(f)}\0".encode())
    return h.hexdigest()[:16]


# --- the map -------------------------------------------------------------------------------


def test_files() -> list[str]:
    """The test files mapped and run against mutants."""
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")
                  if not p.relative_to(ROOT).as_posix().startswith(UNMAPPED))


def _groups(files: Sequence[str], jobs: int, old: dict[str, Any] | None) -> list[list[str]]:
    """`files` in `jobs` groups of about equal time (the old map's, else a second for each
    2 KB of the file)."""
    seconds: Counter = Counter()
    for t in (old or {}).get("tests", []):
        seconds[t["id"].split("::", 1)[0]] += t["seconds"]
    for f in files:
        if f not in seconds:
            seconds[f] = (ROOT / f).stat().st_size / 2000
    groups: list[list[str]] = [[] for _ in range(max(1, jobs))]
    load = [0.0] * len(groups)
    for f in sorted(files, key=lambda f: -seconds.get(f, 1.0)):
        k = load.index(min(load))
        groups[k].append(f)
        load[k] += seconds.get(f, 1.0)
    return [g for g in groups if g]


def make_map(files: Sequence[str], jobs: int, target: Path = MAP) -> None:
    """Map `files` (in `jobs` processes) and merge them into the map, replacing their tests."""
    BUILD.mkdir(parents=True, exist_ok=True)
    old = json.loads(target.read_text(encoding="utf-8")) if target.exists() else None
    print(f"mutate: mapping {len(files)} test files in {jobs} processes", flush=True)
    start = time.monotonic()
    procs = []
    for n, group in enumerate(_groups(files, jobs, old)):
        out = target.with_suffix(f".part{n}.json")
        env = {**os.environ, "D1SAVER_MUTATION_MAP": str(out)}
        env.pop("D1SAVER_MUTANT", None)
        log = open(target.with_suffix(f".part{n}.log"), "w", encoding="utf-8")
        procs.append((out, log, subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
             "-m", MARKERS, *group], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)))
    data: dict[str, Any] = {"tests": [], "lines": {}}
    for out, log, proc in procs:
        proc.wait()
        log.close()
        if out.exists():
            data = _merge(data, json.loads(out.read_text(encoding="utf-8")), ())
            out.unlink()
        else:
            print(f"mutate: a mapping process wrote nothing (see {log.name})", flush=True)
    print(f"mutate: mapped in {time.monotonic() - start:.0f} s", flush=True)
    if old is not None:
        data = _merge(old, data, files)
    data["files"] = {**(old or {}).get("files", {}), **{f: file_digest(f) for f in files}}
    data["measured"] = {f: file_digest(f) for f in data["lines"]}
    data["mapper"] = file_digest(MAPPER)
    target.write_text(json.dumps(data), encoding="utf-8")


def _merge(old: dict[str, Any], new: dict[str, Any], replaced: Sequence[str]
           ) -> dict[str, Any]:
    """The old map without the tests of the files `replaced` (and of those the new map
    holds), with the new map's tests."""
    fresh = {t["id"] for t in new["tests"]}
    gone = tuple(f + "::" for f in replaced)
    keep_old = [t for t in old["tests"] if t["id"] not in fresh and not t["id"].startswith(gone)]
    tests = keep_old + new["tests"]
    index = {t["id"]: i for i, t in enumerate(tests)}
    lines: dict[str, dict[str, list[int]]] = {}
    for source in (old, new):
        names = [t["id"] for t in source["tests"]]
        for file, by_line in source["lines"].items():
            target = lines.setdefault(file, {})
            for line, idxs in by_line.items():
                keep = [index[names[i]] for i in idxs if names[i] in index and (
                    source is new or names[i] not in fresh)]
                if keep:
                    target[str(line)] = sorted(set(target.get(str(line), [])) | set(keep))
    return {**old, "tests": tests, "lines": lines}


def stale_files(data: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(test files to map again: new, changed, or covering a changed module of ops/ or
    storage/; files mapped that are gone or no longer mapped)."""
    now = test_files()
    mapped = data.get("files", {})
    todo = {f for f in now if mapped.get(f) != file_digest(f)}
    names = [t["id"].split("::", 1)[0] for t in data["tests"]]
    for file, digest in data.get("measured", {}).items():
        if file_digest(file) != digest:  # its lines moved: map again what ran it
            todo.update(names[i] for idxs in data["lines"].get(file, {}).values() for i in idxs)
    gone = sorted(set(mapped) - set(now))
    return sorted(todo & set(now)), gone


def update_map(jobs: int, remap: bool, target: Path = MAP) -> dict[str, Any]:
    """The map, made or brought up to date first."""
    if target.exists() and (remap or json.loads(target.read_text(encoding="utf-8")).get(
            "mapper") != file_digest(MAPPER)):  # mapped another way: all of it again
        target.unlink()
    if not target.exists():
        make_map(test_files(), jobs, target)
    data = json.loads(target.read_text(encoding="utf-8"))
    todo, gone = stale_files(data)
    if gone:
        data = _merge(data, {"tests": [], "lines": {}}, gone)
        data["files"] = {f: d for f, d in data.get("files", {}).items() if f not in gone}
        target.write_text(json.dumps(data), encoding="utf-8")
    if todo:
        make_map(todo, min(jobs, len(todo)), target)
        data = json.loads(target.read_text(encoding="utf-8"))
    return data


class Coverage:
    """Which tests cover a statement or lines of a file."""

    def __init__(self, data: dict[str, Any], slow: float) -> None:
        self.tests = list(data["tests"])
        self.usable = [t["outcome"] == "passed" and not t["id"].startswith(TEXT_TESTS)
                       and "[wrangler" not in t["id"] and t["seconds"] <= slow
                       for t in self.tests]
        self.by_statement: dict[str, set[int]] = {}
        for i, t in enumerate(self.tests):
            for name in t["statements"]:
                self.by_statement.setdefault(name, set()).add(i)
        self.lines = {f: {int(k): v for k, v in by.items()} for f, by in data["lines"].items()}
        self.seconds = {t["id"]: t["seconds"] for t in self.tests}

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
        rng = random.Random(args.seed)
        if args.stratify:  # an equal share of the budget for each area in scope
            areas = sorted({e.area for e in out})
            chosen = set()
            for area in areas:
                mine = [i for i, e in enumerate(out) if e.area == area]
                chosen.update(rng.sample(mine, min(len(mine), args.budget // len(areas))))
        else:
            chosen = set(rng.sample(range(len(out)), args.budget))
        out = [e for i, e in enumerate(out) if i in chosen]
    for e in out:
        e.key = result_key(e.stable, e.tests)
    if args.status:  # within the sample: the same sample whatever ran before
        latest = _latest()
        out = [e for e in out if latest.get(e.stable, {"status": "not-run"})["status"]
               in args.status]
    return out, unusable


# --- results -------------------------------------------------------------------------------


def _rows() -> list[dict[str, Any]]:
    if not RESULTS.exists():
        return []
    return [json.loads(line) for line in RESULTS.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def _latest() -> dict[str, dict[str, Any]]:
    """The latest result of each mutant run before, by stable id."""
    return {row["stable"]: row for row in _rows()}


def _cached() -> dict[str, dict[str, Any]]:
    """The latest result of each mutant by its key (the mutant, the code and its tests)."""
    return {row["key"]: row for row in _rows() if row.get("key")}


# --- running -------------------------------------------------------------------------------


def _warm() -> None:
    """What every test needs made once, in the parent of the forked runs."""
    from hypothesis import settings

    from tests.saver import mirror

    # No example database (a mutant's failures must not replay in the suite's runs), and no
    # deadline (the machine's load is not a mutant's doing).
    settings.register_profile("mutate", database=None, deadline=None)
    settings.load_profile("mutate")
    mirror.record_corpus()  # InMemorySaver only: the same for every mutant, made once


@dataclass
class Job:
    entry: Entry
    items: list[Any]
    pid: int
    start: float
    out: Path
    basetemp: Path
    checked: float = 0.0


def own_basetemp(factory: Any, basetemp: Path) -> None:
    """tmp_path under a directory of this child's own, made first: pytest makes no directory
    it is given, and a test whose tmp_path cannot be made fails in set-up, which would count
    as a kill whatever the mutant."""
    if factory is not None:
        basetemp.mkdir(parents=True, exist_ok=True)
        factory._basetemp = basetemp


def _child(entry: Entry, items: list[Any], max_seconds: float, out: Path,
           basetemp: Path) -> None:
    """In the forked child: apply the mutant, run the items in order until one fails."""
    from _pytest.runner import runtestprotocol

    from tests.mutation import plugin

    try:
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.environ["D1SAVER_MUTANT"] = entry.id
        own_basetemp(getattr(items[0].config, "_tmp_path_factory", None), basetemp)
        plugin.apply(entry.id)
        start = time.monotonic()
        with out.open("w", encoding="utf-8") as log:
            for n, item in enumerate(items):
                if n and time.monotonic() - start > max_seconds:
                    log.write(f"capped {n}\n")
                    break
                log.write(f"start {n} {time.monotonic()}\n")
                log.flush()
                nxt = items[n + 1] if n + 1 < len(items) else None
                reports = runtestprotocol(item, log=False, nextitem=nxt)
                if any(r.failed for r in reports):
                    log.write(f"killed {n} {item.nodeid}\n")
                    break
            else:
                log.write(f"survived {len(items)}\n")
    except BaseException:  # noqa: B036, BLE001 - the child reports any failure as an error
        import traceback
        with out.open("a", encoding="utf-8") as log:
            log.write("error " + traceback.format_exc().replace("\n", "\\n") + "\n")
    finally:
        os._exit(0)


class Runner:
    """A pytest plugin: the suite is collected once; each mutant runs in a forked child."""

    def __init__(self, found: list[Entry], args: argparse.Namespace, cover: Coverage | None
                 ) -> None:
        self.found = found
        self.args = args
        self.cover = cover
        self.results: list[tuple[Entry, dict[str, Any]]] = []
        self.by_target: dict[str, Counter] = defaultdict(Counter)  # killers of siblings
        self.killer: dict[str, str] = {}
        for row in _rows():
            if row["status"] == "killed" and row.get("killer"):
                self.killer[row["stable"]] = row["killer"]
                self.by_target[row.get("target", "")][row["killer"]] += 1
        self.missing: set[str] = set()

    def order(self, e: Entry, items: dict[str, Any]) -> list[Any]:
        """The entry's tests that were collected, most likely to kill it first."""
        killers = self.by_target.get(e.target, Counter())
        priority = tuple(p for g, p in PRIORITY if fnmatch.fnmatchcase(e.target, g))
        seconds = self.cover.seconds if self.cover else {}

        def rank(t: str) -> tuple[int, float, float]:
            if t == self.killer.get(e.stable):
                return 0, 0.0, 0.0
            if killers.get(t):
                return 1, -killers[t], seconds.get(t, 0.0)
            return (2 if priority and t.startswith(priority) else 3), 0.0, seconds.get(t, 0.0)

        tests = []
        for t in e.tests:  # a node id; or (--tests) a file or a test's parametrized ids
            found = [t] if t in items else [n for n in items if n.startswith((t + "::", t + "["))]
            tests += found
            if not found:
                self.missing.add(t)
        tests.sort(key=rank)
        if self.args.max_tests:
            tests = tests[:self.args.max_tests]
        return [items[t] for t in tests]

    def pytest_runtestloop(self, session: Any) -> bool:
        items = {item.nodeid: item for item in session.items}
        _warm()
        queue = sorted(self.found, key=lambda e: (e.area, e.target, e.id))
        total, done, running = len(queue), 0, {}
        start = time.monotonic()
        BUILD.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="mutate-"))
        print(f"mutate: {total} mutants to run, {self.args.jobs} at a time", flush=True)
        with RESULTS.open("a", encoding="utf-8") as results:
            while queue or running:
                while queue and len(running) < self.args.jobs:
                    e = queue.pop(0)
                    chosen = self.order(e, items)
                    if not chosen:
                        self.finish(results, e, {"status": "no-tests", "seconds": 0.0,
                                                 "ran": 0})
                        done += 1
                        continue
                    out = scratch / f"{done + len(running)}.out"
                    basetemp = scratch / f"{done + len(running)}.tmp"
                    sys.stdout.flush()
                    sys.stderr.flush()
                    pid = os.fork()
                    if pid == 0:
                        _child(e, chosen, self.args.max_seconds, out, basetemp)
                    running[pid] = Job(e, chosen, pid, time.monotonic(), out, basetemp)
                if not running:
                    continue
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid in running:
                    job = running.pop(pid)
                    self.finish(results, job.entry, self.outcome(job, status, None))
                    done += 1
                    if done % 100 == 0:
                        minutes = (time.monotonic() - start) / 60
                        print(f" {done}/{total} in {minutes:.0f} min", flush=True)
                    continue
                for job in list(running.values()):
                    timed_out = self.timed_out(job)
                    if timed_out is not None:
                        self.kill(job.pid)
                        os.waitpid(job.pid, 0)
                        running.pop(job.pid)
                        self.finish(results, job.entry, self.outcome(job, 0, timed_out))
                        done += 1
                time.sleep(0.05)
        shutil.rmtree(scratch, ignore_errors=True)
        self.seconds = time.monotonic() - start
        return True

    def timed_out(self, job: Job) -> str | None:
        """The test that has run too long (and killed the job), or None."""
        now = time.monotonic()
        if now - job.checked < 1.0:
            return None
        job.checked = now
        try:
            lines = job.out.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            lines = []
        last = [ln for ln in lines if ln.startswith("start ")]
        if not last:
            return "(set-up)" if now - job.start > 300 else None
        _, n, began = last[-1].split(" ")
        item = job.items[int(n)]
        seconds = self.cover.seconds.get(item.nodeid, 10.0) if self.cover else 10.0
        limit = max(self.args.test_timeout, 10 * seconds)
        return item.nodeid if now - float(began) > limit else None

    @staticmethod
    def kill(pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def outcome(self, job: Job, status: int, timed_out: str | None) -> dict[str, Any]:
        self.kill(job.pid)  # anything the tests started and left behind
        shutil.rmtree(job.basetemp, ignore_errors=True)
        seconds = round(time.monotonic() - job.start, 2)
        try:
            lines = job.out.read_text(encoding="utf-8").splitlines()
            job.out.unlink()
        except FileNotFoundError:
            lines = []
        ran = sum(ln.startswith("start ") for ln in lines)
        if timed_out is not None:
            return {"status": "timeout", "seconds": seconds, "ran": ran, "killer": timed_out,
                    "detail": f"TIMEOUT {timed_out}"}
        last = lines[-1] if lines else f"error the child ended ({status}) with no result"
        word, _, rest = last.partition(" ")
        if word == "killed":
            nodeid = rest.split(" ", 1)[1]
            return {"status": "killed", "seconds": seconds, "ran": ran, "killer": nodeid,
                    "detail": f"FAILED {nodeid}"}
        if word in ("survived", "capped"):
            return {"status": "survived", "seconds": seconds, "ran": ran,
                    "capped": word == "capped"}
        return {"status": "error", "seconds": seconds, "ran": ran,
                "detail": rest.replace("\\n", "\n")[-2000:]}

    def finish(self, results: Any, e: Entry, row: dict[str, Any]) -> None:
        row = {"id": e.id, "stable": e.stable, "key": e.key, "target": e.target,
               "tests": len(e.tests), **row}
        row.setdefault("detail", "")
        if row["status"] == "killed":
            self.killer[e.stable] = row["killer"]
            self.by_target[e.target][row["killer"]] += 1
        results.write(json.dumps(row) + "\n")
        results.flush()
        self.results.append((e, row))
        mark = {"killed": ".", "timeout": "T", "error": "E", "survived": "S",
                "no-tests": "0"}[row["status"]]
        if row.get("capped"):
            mark = "s"
        print(mark, end="", flush=True)


def run(found: list[Entry], args: argparse.Namespace, cover: Coverage | None
        ) -> tuple[list[tuple[Entry, dict[str, Any]]], float]:
    """Run the mutants (one pytest session, a forked child each); their results."""
    import pytest

    if not found:
        return [], 0.0
    runner = Runner(found, args, cover)
    needed = sorted({t for e in found for t in e.tests})
    files = sorted({t.split("::", 1)[0] for t in needed})
    os.environ.pop("D1SAVER_MUTANT", None)
    os.environ.pop("D1SAVER_MUTATION_MAP", None)
    pytest.main(["-q", "-s", "-p", "no:cacheprovider", "--no-header", "-o", "addopts=",
                 "-W", "ignore", "-m", MARKERS, *files], plugins=[runner])
    print()
    if runner.missing:
        print(f"mutate: {len(runner.missing)} tests of the map were not collected "
              f"(renamed or gone since it was made), as {sorted(runner.missing)[:2]}")
    return runner.results, getattr(runner, "seconds", 0.0)


# --- the report ----------------------------------------------------------------------------


def report(results: list[tuple[Entry, dict[str, Any]]], unusable: Counter,
           total_seconds: float, verbose: bool = True) -> tuple[float, list[str]]:
    """Print the table, the survivors and the equivalents; (the kill rate, the lines of the
    table)."""
    lines = [f"{'area':<9}{'mutants':>9}{'not run':>9}{'killed':>8}{'survived':>10}"
             f"{'equivalent':>12}{'errors':>8}{'kill rate':>11}"]
    overall: Counter = Counter()
    rows = []
    for area in AREAS:
        mine = [(e, r) for e, r in results if e.area == area]
        if not mine and not unusable[area]:
            continue
        c: Counter = Counter()
        for e, r in mine:
            s = r["status"]
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
        lines.append(f"{area:<9}{c['mutants']:>9}{c['unusable']:>9}{c['killed']:>8}"
                     f"{c['survived']:>10}{c['equivalent']:>12}{c['error']:>8}{rate:>11}")
    status = Counter(r["status"] for _, r in results)
    capped = sum(bool(r.get("capped")) for _, r in results if r["status"] == "survived")
    print()
    print("\n".join(lines))
    print(f"\nkilled by a failing test {status['killed']}, by a timeout {status['timeout']}; "
          f"errors (not counted) {status['error']}; survived {status['survived']} "
          f"({capped} of them stopped at the time cap), with no covering test "
          f"{status['no-tests']}; not run (no longer prepares, or cannot be placed) "
          f"{sum(unusable.values())}")
    survivors = [(e, r) for e, r in results if r["status"] in ("survived", "no-tests")]
    fresh = [(e, r) for e, r in survivors if not e.equivalent]
    if fresh and verbose:
        print(f"\nsurvivors ({len(fresh)}):")
        for e, r in sorted(fresh, key=lambda er: er[0].id):
            note = (" (no covering test)" if r["status"] == "no-tests" else
                    f" ({r.get('ran', 0)} of {r.get('tests', 0)} tests run: time cap)"
                    if r.get("capped") else "")
            print(f"  {e.id}  {e.kind}{note}\n      {e.where}")
    judged_eq = [(e, e.equivalent) for e, _ in survivors if e.equivalent]
    if judged_eq and verbose:
        print(f"\nequivalent survivors ({len(judged_eq)}), each with the reason:")
        for e, why in sorted(judged_eq, key=lambda ew: ew[0].id):
            print(f"  {e.id}  {e.kind}: {why}\n      {e.where}")
    errors = [(e, r) for e, r in results if r["status"] == "error"]
    for e, r in errors[:5]:
        print(f"\nerror running {e.id}:\n{r.get('detail', '')[-600:]}")
    judged = overall["killed"] + overall["survived"]
    rate = overall["killed"] / judged if judged else 1.0
    summary = (f"kill rate {100 * rate:.1f}% of {judged} non-equivalent mutants; "
               f"{len(results)} mutants, {total_seconds / 60:.1f} min")
    print("\n" + summary)
    return rate, [*lines, "", summary]


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
                             "no-tests, error, killed, timeout, not-run), run again")
    parser.add_argument("--budget", type=int, help="run at most this many, an even sample")
    parser.add_argument("--seed", type=int, default=26, help="of the sample (--budget)")
    parser.add_argument("--stratify", action="store_true",
                        help="split the budget equally between the areas in scope")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    parser.add_argument("--max-tests", type=int, help="run at most this many tests a mutant")
    parser.add_argument("--max-seconds", type=float, default=60.0,
                        help="start no further test of a mutant after this long (default 60)")
    parser.add_argument("--test-timeout", type=float, default=60.0,
                        help="a test running longer than this, and ten times its time in the "
                             "map, kills its mutant as a timeout (default 60)")
    parser.add_argument("--slow", type=float, default=30.0,
                        help="tests that took longer than this in the map are not run "
                             "against mutants (default 30)")
    parser.add_argument("--tests", nargs="+", metavar="TEST",
                        help="run these tests for every mutant instead of those the map names")
    parser.add_argument("--map", type=Path, default=MAP, help="the map of tests to use")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--remap", action="store_true", help="map the whole suite again first")
    parser.add_argument("--fresh", action="store_true",
                        help="run every mutant in scope, whatever the earlier results")
    parser.add_argument("--report", action="store_true",
                        help="report the latest results of the mutants in scope, run nothing")
    parser.add_argument("--min-rate", type=float, default=0.0,
                        help="exit 1 below this kill rate (0..1)")
    args = parser.parse_args(argv)
    if args.list:
        found, unusable = entries(args, None)
        for e in found:
            print(f"{e.id}  {e.kind}  {e.where}")
        print(f"{len(found)} mutants; not run (no longer prepare, cannot be placed): "
              f"{dict(unusable)}")
        return 0
    start = time.monotonic()
    cover = None
    if not args.tests:
        if args.report and args.map.exists():
            cover = Coverage(json.loads(args.map.read_text(encoding="utf-8")), args.slow)
        elif not args.report:
            cover = Coverage(update_map(args.jobs, args.remap, args.map), args.slow)
    found, unusable = entries(args, cover)
    cached = _cached()
    latest = _latest()
    if args.report:
        done = []
        stale = 0
        for e in found:
            row = cached.get(e.key) if cover is not None else None
            if row is None and e.stable in latest:
                row, stale = latest[e.stable], stale + 1
            if row is not None:
                done.append((e, row))
        print(f"mutate: {len(done)} of {len(found)} mutants in scope have a result"
              + (f" ({stale} from before their code or tests changed)" if stale else ""))
        rate, _ = report(done, unusable, sum(r["seconds"] for _, r in done))
        return 1 if rate < args.min_rate else 0
    rerun = args.fresh or bool(args.status)
    todo = [e for e in found if rerun or e.key not in cached]
    print(f"mutate: {len(found)} mutants in scope; {len(found) - len(todo)} have a result "
          f"for the code and tests as they are; {len(todo)} to run", flush=True)
    ran, seconds = run(todo, args, cover)
    fresh = {e.stable for e, _ in ran}
    results = ran + [(e, cached[e.key]) for e in found
                     if e.stable not in fresh and e.key in cached]
    rate, lines = report(results, unusable, time.monotonic() - start)
    BUILD.mkdir(parents=True, exist_ok=True)
    (BUILD / "summary.txt").write_text(
        f"{time.strftime('%Y-%m-%d %H:%M')}: {len(ran)} mutants run in {seconds / 60:.1f} min "
        f"({args.jobs} at a time), {len(results) - len(ran)} from earlier results; whole "
        f"command {(time.monotonic() - start) / 60:.1f} min\n" + "\n".join(lines) + "\n",
        encoding="utf-8")
    return 1 if rate < args.min_rate else 0


if __name__ == "__main__":
    sys.exit(main())
