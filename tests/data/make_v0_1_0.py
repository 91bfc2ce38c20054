"""Generate the frozen 0.1.0 database: tests/data/v0_1_0.jsonl and v0_1_0_expected.json.

Run ONCE, with the released 0.1.0 code first on the path (tag v0.1.0 = commit
6669e6b55beb22588a9b6e0f69325f87978717d6, checked out at /work/v010), from the repository root:

    PYTHONPATH=/work/v010 /work/main/.venv/bin/python tests/data/make_v0_1_0.py

The committed files were made exactly so, on 2026-11-23, by this script as committed with them,
with langgraph 1.2.22, langgraph-checkpoint 4.3.2, langchain-core 1.7.2, Python 3.11.7 and
zlib 1.2.13 (the versions are also in the expected file's "generated_by"). Never regenerate
them for a later version: they are what 0.1.0 wrote and read, and every later version must
read, resume and compact them (tests/saver/test_v0_1_0_data.py). The script refuses to run
with any d1saver but 0.1.0's.

It runs the scenarios of v0_1_0_graphs.py (real LangGraph graphs) on a 0.1.0 D1Saver over the
in-process local D1, then dumps every row of the data tables and d1saver_schema (one JSON object
per row, in primary-key order, so the file is text and diffs), and records what the 0.1.0 saver
and graphs read back for every thread. Before writing, it loads the dump into a fresh database
with the same loader the tests use and checks that 0.1.0 reads back the same from it.
Checkpoint ids (uuid6, time-based) and timestamps differ from run to run; everything else is
fixed (message ids, inputs, seeds of the version counters and of the 2.1 MB texts).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import platform
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
V010_COMMIT = "6669e6b"


def _import(name: str) -> Any:
    """Import a sibling module by path: `tests` on the path would be 0.1.0's own tests/."""
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


graphs = _import("v0_1_0_graphs")
fixture = _import("v0_1_0_fixture")

import d1saver  # noqa: E402
from d1saver import D1Saver, Statement  # noqa: E402
from d1saver.local import LocalD1, LocalD1Transport  # noqa: E402


def d1saver_commit() -> str:
    """The commit of the d1saver on the path; refuses anything but 0.1.0."""
    root = Path(d1saver.__file__).resolve().parent.parent
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "d1saver"],
                           capture_output=True, text=True, check=True).stdout.strip()
    if not commit.startswith(V010_COMMIT) or dirty:
        sys.exit(f"d1saver at {root} is {commit} (dirty: {bool(dirty)}), not 0.1.0 "
                 f"({V010_COMMIT}): run with PYTHONPATH=/work/v010")
    return commit


def new_saver(engine: LocalD1) -> D1Saver:
    return D1Saver(account_id="acc", database_id="v010", api_token="token",
                   api_base_url="http://d1.local/client/v4", transport=LocalD1Transport(engine))


def write_threads(saver: D1Saver) -> None:
    for name in graphs.THREADS:
        random.seed(name)  # D1Saver's channel versions draw a random suffix
        graphs.play(name, saver, graphs.config(name), Counter())


def dump(saver: D1Saver) -> list[tuple[str, dict[str, Any]]]:
    rows = []
    for table, columns in fixture.COLUMNS.items():
        sql = (f"SELECT {', '.join(columns)} FROM {table} "
               f"ORDER BY {', '.join(fixture.KEYS[table])}")
        (result,) = saver.execute([Statement(sql)])
        assert result.columns == list(columns), (table, result.columns)
        rows += [(table, dict(zip(columns, row))) for row in result.rows]
    return rows


def read_back(saver: D1Saver) -> dict[str, Any]:
    subst = {name: name for name in graphs.THREADS}
    threads, states = {}, {}
    for name in graphs.THREADS:
        threads[name] = fixture.read_thread(saver, name, subst)
        for entry in threads[name]["checkpoints"]:  # get_tuple agrees with list
            conf = {k: entry[k] for k in ("thread_id", "checkpoint_ns", "checkpoint_id")}
            got = saver.get_tuple({"configurable": conf})
            assert got is not None and fixture.tuple_entry(got, subst) == entry, conf
        states[name] = fixture.read_graph(graphs.graph_for(name, saver), name, subst)
    return {"threads": threads, "graphs": states}


def check_scenarios(rows: list[tuple[str, dict[str, Any]]], seen: dict[str, Any]) -> None:
    """The database holds what each scenario is for."""
    def of(table: str, thread: str) -> list[dict[str, Any]]:
        return [r for t, r in rows if t == table and r["thread_id"] == thread]

    delta = seen["threads"][graphs.DELTA]["checkpoints"]
    snapshots = [e for e in delta if "messages" in e["channel_values"]]
    assert snapshots and len(snapshots) < len(delta), "DeltaChannel: snapshots and non-snapshots"
    assert seen["graphs"][graphs.INTERRUPTED]["state"]["interrupts"], "interrupted is paused"
    assert any(r["checkpoint_ns"] for r in of("checkpoints", graphs.SUBGRAPH)), "subgraph ns rows"
    assert seen["graphs"][graphs.SUBGRAPH]["state"]["tasks"][0]["interrupts"], "paused in subgraph"
    head = seen["threads"][graphs.FAILED_SIBLING]["checkpoints"][0]
    channels = [w[1] for w in head["pending_writes"]]
    assert "__error__" in channels and "log" in channels, f"failed sibling: {channels}"
    assert of("tags", graphs.TAGGED), "a tag"
    big = of("chunks", graphs.BIG)
    assert {r["owner"] == "" for r in big} == {True, False}, "chunked checkpoint and chunked write"
    assert all(len(r["data"]) <= 1_800_000 for r in big)


def main() -> None:
    commit = d1saver_commit()
    engine = LocalD1()
    saver = new_saver(engine)
    saver.setup()
    write_threads(saver)
    rows = dump(saver)
    seen = read_back(saver)
    check_scenarios(rows, seen)

    # The loader the tests use, on the schema as 0.1.0 creates it (the frozen copy in
    # tests/data, checked byte for byte), gives a database that 0.1.0 reads back identically.
    schema = Path(d1saver.__file__).resolve().parent.parent / "schema.sql"
    assert fixture.SCHEMA_PATH.read_bytes() == schema.read_bytes(), "copy 0.1.0's schema.sql"
    fresh = new_saver(LocalD1())
    fixture.create_v010_schema(fresh)
    fixture.load_rows(fresh, rows)
    assert read_back(fresh) == seen, "the loaded dump reads back differently"

    with fixture.ROWS_PATH.open("w", encoding="utf-8") as f:
        for table, row in rows:
            f.write(json.dumps({"table": table, "row": row}, ensure_ascii=False,
                               separators=(",", ":")) + "\n")
    versions = {p: importlib.metadata.version(p)
                for p in ("langgraph", "langgraph-checkpoint", "langchain-core")}
    out = {"generated_by": {"d1saver_commit": commit, "python": platform.python_version(),
                            **versions,
                            "schema_sql_sha256": hashlib.sha256(schema.read_bytes()).hexdigest(),
                            "command": "PYTHONPATH=/work/v010 /work/main/.venv/bin/python "
                                       "tests/data/make_v0_1_0.py"},
           "row_counts": dict(Counter(t for t, _ in rows)),
           **seen}
    fixture.EXPECTED_PATH.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n",
                                     encoding="utf-8")
    size = fixture.ROWS_PATH.stat().st_size + fixture.EXPECTED_PATH.stat().st_size
    print(f"{len(rows)} rows {out['row_counts']}, {size / 1e6:.2f} MB in tests/data")


if __name__ == "__main__":
    main()
