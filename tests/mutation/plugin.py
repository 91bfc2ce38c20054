"""The pytest side of `./dev mutate` (registered by tests/conftest.py; idle unless asked).

- D1SAVER_MUTANT=<id> applies one mutant before the tests are collected, in this process only:
  `D1SAVER_MUTANT=sql:SELECT_PAGE_ALL:1a2b3c4d .venv/bin/python -m pytest tests/saver -x`
  replays one by hand.
- D1SAVER_MUTATION_MAP=<file> records, per test, the statements it binds, the lines of ops/
  and storage/ it runs (coverage.py, one dynamic context per test) and its duration, and
  writes them to <file> as JSON: which tests cover each mutant. The functions' caches are
  cleared before each test, so a test is mapped to the lines of a cached function it calls.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ("d1saver/ops/", "d1saver/storage/")


def apply(mutant_id: str) -> None:
    """Apply a mutant by its id (sql:... or py:...)."""
    if mutant_id.startswith("sql:"):
        from tests.mutation import sql
        sql.apply(sql.find(mutant_id))
    elif mutant_id.startswith("py:"):
        from tests.mutation import python
        python.apply(python.find(mutant_id))
    else:
        raise ValueError(f"D1SAVER_MUTANT={mutant_id!r}: expected sql:... or py:...")


class Recorder:
    """What each test runs: statements bound, lines of ops/ and storage/, seconds."""

    def __init__(self, path: str) -> None:
        import coverage

        from d1saver.core.protocol import Statement

        self.path = path
        self.current = ""
        self.statements: dict[str, set[str]] = defaultdict(set)
        self.seconds: dict[str, float] = defaultdict(float)
        self.outcomes: dict[str, str] = {}
        self.cov = coverage.Coverage(data_file=None, include=[str(ROOT / m / "*")
                                                              for m in MEASURED])
        original = Statement.bind.__func__  # type: ignore[attr-defined]
        recorder = self

        def bind(cls: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
            if recorder.current and getattr(query, "name", ""):
                recorder.statements[recorder.current].add(query.name)
            return original(cls, query, params, **kwargs)  # e.g. chunks= (group commit)

        Statement.bind = classmethod(bind)  # type: ignore[method-assign,assignment]
        self.cov.start()

    def write(self) -> None:
        self.cov.stop()
        data = self.cov.get_data()
        tests = sorted(set(self.seconds) | set(self.statements))
        index = {t: i for i, t in enumerate(tests)}
        lines: dict[str, dict[int, list[int]]] = {}
        for file in data.measured_files():
            rel = Path(file).resolve().relative_to(ROOT).as_posix()
            by_line = data.contexts_by_lineno(file)
            lines[rel] = {ln: sorted({index[c] for c in ctxs if c in index})
                          for ln, ctxs in by_line.items()}
        out = {"tests": [{"id": t, "seconds": round(self.seconds.get(t, 0.0), 4),
                          "outcome": self.outcomes.get(t, ""),
                          "statements": sorted(self.statements.get(t, ()))} for t in tests],
               "lines": lines}
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        Path(self.path).write_text(json.dumps(out), encoding="utf-8")


_recorder: Recorder | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _recorder
    mutant = os.environ.get("D1SAVER_MUTANT")
    if mutant:
        apply(mutant)
    path = os.environ.get("D1SAVER_MUTATION_MAP")
    if path and _recorder is None:
        _recorder = Recorder(path)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    if _recorder is None:
        yield
        return
    from tests.mutation import python

    python.clear_caches()  # a call answered from an earlier test's cache runs no line
    _recorder.current = item.nodeid
    _recorder.cov.switch_context(item.nodeid)
    start = time.perf_counter()
    try:
        yield
    finally:
        _recorder.seconds[item.nodeid] += time.perf_counter() - start
        _recorder.current = ""
        _recorder.cov.switch_context("")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _recorder is not None and (report.when == "call" or report.outcome != "passed"):
        _recorder.outcomes.setdefault(report.nodeid, report.outcome)
        if report.outcome != "passed":
            _recorder.outcomes[report.nodeid] = report.outcome


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _recorder is not None:
        _recorder.write()
