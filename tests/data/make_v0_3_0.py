"""Generate the frozen 0.3.0 databases: tests/data/v0_3_0.jsonl, v0_3_0_expected.json and
v0_3_0_schema.sql (schema.sql as 0.3.0 released it).

Run ONCE, at the 0.3.0 release, from the repository root:

    PYTHONPATH=$PWD .venv/bin/python tests/data/make_v0_3_0.py

Never regenerate for a later version: every later release must read these rows back as 0.3.0
did (tests/saver/test_v0_3_0_data.py). It plays the scenarios of v0_1_0_graphs.py on two
databases of the in-process local D1, "plain" and "keyed" (sealed under v0_3_0_fixture.KEY),
prunes the DeltaChannel thread to its newest checkpoint plus the tagged one (so a frozen
history is stored), dumps every data row, and records what the saver and the graphs read back.
Before writing, it loads the dump into fresh databases with the loader the tests use and checks
that they read back the same.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from d1saver import D1Cache, D1Saver, D1Store, __version__  # noqa: E402
from d1saver.local import LocalD1, LocalD1Transport  # noqa: E402
from tests.data import v0_1_0_fixture as read  # noqa: E402
from tests.data import v0_1_0_graphs as graphs  # noqa: E402
from tests.data import v0_3_0_fixture as fx  # noqa: E402
# What does not depend on the release: the columns read, the memory scenario written and read.
from tests.data.make_v0_2_0 import columns_of, read_memory, write_memory  # noqa: E402


def new_saver(engine: LocalD1, database: str, **kwargs: Any) -> D1Saver:
    keys = [fx.KEY] if database == "keyed" else None
    return D1Saver(account_id="acc", database_id=f"v030-{database}", api_token="token",
                   api_base_url="http://d1.local/client/v4", transport=LocalD1Transport(engine),
                   encryption_keys=keys, group_commit=False, **kwargs)


def memory(engine: LocalD1, database: str) -> tuple[D1Store, D1Cache]:
    keys = [fx.KEY] if database == "keyed" else None
    common: dict[str, Any] = dict(account_id="acc", database_id=f"v030-{database}", api_token="token",
                                  api_base_url="http://d1.local/client/v4", transport=LocalD1Transport(engine),
                                  encryption_keys=keys)
    return (D1Store(index={"dims": 8, "embed": fx.embed, "fields": ["text"]}, **common), D1Cache(**common))


def read_back(saver: D1Saver, engine: LocalD1, database: str) -> dict[str, Any]:
    subst = {name: name for name in graphs.THREADS}
    threads, states = {}, {}
    for name in graphs.THREADS:
        threads[name] = read.read_thread(saver, name, subst)
        states[name] = read.read_graph(graphs.graph_for(name, saver), name, subst)
    store, cache = memory(engine, database)
    return {"threads": threads, "graphs": states, "memory": read_memory(store, cache)}


def main() -> None:
    if __version__ != "0.3.0":
        sys.exit(f"this is d1saver {__version__}: the 0.3.0 data is made by 0.3.0 only")
    engine = LocalD1()
    rows: list[dict[str, Any]] = []
    seen: dict[str, Any] = {}
    columns: dict[str, list[str]] = {}
    for database in fx.DATABASES:
        saver = new_saver(engine, database)
        saver.setup()
        for name in graphs.THREADS:
            random.seed(name)
            graphs.play(name, saver, graphs.config(name), Counter())
        delta = {"configurable": {"thread_id": graphs.DELTA, "checkpoint_ns": ""}}
        oldest = list(saver.list(delta))[-1].config
        saver.tag(oldest, "v030-first")
        saver.prune([graphs.DELTA], strategy="keep_latest")
        write_memory(*memory(engine, database))
        columns = columns_of(saver)
        rows += [{"db": database, "table": t, "row": r} for t, r in fx.dump(saver, columns)]
        seen[database] = read_back(saver, engine, database)
        saver.close()
    assert any(r["table"] == "d1saver_chunks" for r in rows if r["db"] == "plain"), "stored by content"
    assert any(r["table"] == "delta_frozen" for r in rows), "a frozen DeltaChannel history"
    assert any(r["table"] == "store_vectors" for r in rows) and any(r["table"] == "cache_entries" for r in rows)
    prefixes = Counter(r["row"]["checkpoint"][:2] for r in rows if r["db"] == "keyed" and r["table"] == "checkpoints")
    assert set(prefixes) <= {"e:", "c:"}, f"keyed rows are sealed (or split sealed): {prefixes}"

    schema = (ROOT / "schema.sql").read_text(encoding="utf-8")
    fx.SCHEMA_PATH.write_text(schema, encoding="utf-8")
    fresh_engine = LocalD1()
    for database in fx.DATABASES:
        loader = new_saver(fresh_engine, database, auto_setup=False)
        fx.create_schema(loader)
        fx.load_rows(loader, rows, database, columns)
        fresh = new_saver(fresh_engine, database)
        got = fx.dump(fresh, columns)
        want = [(r["table"], r["row"]) for r in rows if r["db"] == database]
        if got != want:
            extra = [g for g in got if g not in want][:3]
            missing = [w for w in want if w not in got][:3]
            sys.exit(f"{database}: the loaded rows differ from the dump: extra {Counter(g[0] for g in got if g not in want)} "
                     f"missing {Counter(w[0] for w in want if w not in got)}\n{str(extra)[:600]}\n{str(missing)[:600]}")
        assert read_back(fresh, fresh_engine, database) == seen[database], \
            f"{database}: the loaded dump reads back differently"

    with fx.ROWS_PATH.open("w", encoding="utf-8") as f:
        for item in rows:
            f.write(json.dumps(item, ensure_ascii=False, separators=(",", ":")) + "\n")
    versions = {p: importlib.metadata.version(p) for p in ("langgraph", "langgraph-checkpoint", "langchain-core")}
    out = {"generated_by": {"d1saver": __version__, "python": platform.python_version(), **versions,
                            "schema_sql_sha256": hashlib.sha256(schema.encode("utf-8")).hexdigest(),
                            "command": "PYTHONPATH=$PWD .venv/bin/python tests/data/make_v0_3_0.py"},
           "columns": columns,
           "row_counts": {db: dict(Counter(r["table"] for r in rows if r["db"] == db)) for db in fx.DATABASES},
           "databases": seen}
    fx.EXPECTED_PATH.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    size = fx.ROWS_PATH.stat().st_size + fx.EXPECTED_PATH.stat().st_size
    print(f"{len(rows)} rows {out['row_counts']}, {size / 1e6:.2f} MB in tests/data")


if __name__ == "__main__":
    main()
