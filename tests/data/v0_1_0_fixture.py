"""The frozen 0.1.0 database: load it into any D1, and read back what a saver sees in it.

`tests/data/v0_1_0.jsonl` holds every row d1saver 0.1.0 wrote for the scenarios of
`v0_1_0_graphs.py` (see `make_v0_1_0.py`); `v0_1_0_expected.json` holds what 0.1.0 read back.
This module is shared by the generator (run with the 0.1.0 code) and by the tests (run with the
current code), so it uses only d1saver's public API: `D1Saver.setup()`, `D1Saver.execute()` with
`Statement`s, and the BaseCheckpointSaver methods. Loaded as a pytest plugin from
tests/conftest.py, it provides the `v010` fixture.

`v0_1_0_schema.sql` is 0.1.0's schema.sql byte for byte (its sha256 is in the expected file),
so a database can also be built as 0.1.0 left it and then upgraded by the current code.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import StateSnapshot
from pydantic import BaseModel

from d1saver import D1Saver, Statement
from tests.support import execute_in_batches

HERE = Path(__file__).resolve().parent
ROWS_PATH = HERE / "v0_1_0.jsonl"
EXPECTED_PATH = HERE / "v0_1_0_expected.json"
SCHEMA_PATH = HERE / "v0_1_0_schema.sql"

# The tables 0.1.0 keeps data in, with their columns as 0.1.0 created them (schema version 1).
# The loader builds its INSERTs from these names only, never from the file's keys.
COLUMNS: dict[str, tuple[str, ...]] = {
    "checkpoints": ("thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "type",
                    "checkpoint", "metadata", "channels", "run_id", "ts"),
    "writes": ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "task_path", "idx",
               "channel", "type", "value"),
    "chunks": ("thread_id", "checkpoint_ns", "checkpoint_id", "owner", "seq", "data"),
    "tags": ("thread_id", "checkpoint_ns", "checkpoint_id", "name", "created_at"),
    "d1saver_schema": ("version", "applied_at"),
}
# Primary keys, for a stable dump order.
KEYS: dict[str, tuple[str, ...]] = {
    "checkpoints": ("thread_id", "checkpoint_ns", "checkpoint_id"),
    "writes": ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"),
    "chunks": ("thread_id", "checkpoint_ns", "checkpoint_id", "owner", "seq"),
    "tags": ("thread_id", "checkpoint_ns", "name"),
    "d1saver_schema": ("version",),
}
# d1saver_schema records what schema 0.1.0 created; the target database's own setup() owns it.
DATA_TABLES = ("checkpoints", "writes", "chunks", "tags")
# One request carries at most this many statements / parameter bytes (a chunk row, 1.8 MB,
# goes alone); D1 caps each value at 2 MB and each statement at 100 params.
BATCH_STATEMENTS = 50
BATCH_BYTES = 1_000_000


# --- rows ---------------------------------------------------------------------------------------


def read_rows(path: Path = ROWS_PATH) -> list[tuple[str, dict[str, Any]]]:
    """The dumped rows as (table, {column: value}), in file order."""
    out = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            item = json.loads(line)
            out.append((item["table"], item["row"]))
    return out


def insert_statement(table: str, row: Mapping[str, Any], thread_suffix: str = "") -> Statement:
    """A parameterized INSERT naming its columns; values (1.8 MB chunks too) bound, never in SQL."""
    columns = COLUMNS[table]
    if set(row) != set(columns):
        raise ValueError(f"{table} row has columns {sorted(row)}, expected {sorted(columns)}")
    values = [row[c] + thread_suffix if c == "thread_id" else row[c] for c in columns]
    sql = (f"INSERT INTO {table} ({', '.join(columns)}) "
           f"VALUES ({', '.join('?' * len(columns))})")
    return Statement(sql, values)


def v1_script(*, lease_lost: bool = True) -> str:
    """0.1.0's schema.sql; with lease_lost=False, version 1 as the commits before compaction
    created it (d1saver_guard without its lease_lost column, which was added in place)."""
    script = SCHEMA_PATH.read_text(encoding="utf-8")
    if not lease_lost:
        script = script.replace(
            "    head_moved INTEGER CONSTRAINT head_moved CHECK (head_moved IS NULL),\n"
            "    lease_lost INTEGER CONSTRAINT lease_lost CHECK (lease_lost IS NULL)\n",
            "    head_moved INTEGER CONSTRAINT head_moved CHECK (head_moved IS NULL)\n")
        assert "lease_lost INTEGER" not in script
    return script


def create_v010_schema(saver: D1Saver, *, lease_lost: bool = True) -> None:
    """Create the schema exactly as 0.1.0 did (version 1), in one request, without setup()."""
    lines = [ln for ln in v1_script(lease_lost=lease_lost).splitlines()
             if not ln.lstrip().startswith("--")]
    # 0.1.0's schema.sql ends each statement with ";" at a line end, and has no other ";\n".
    script = "\n".join(lines)
    saver.execute([Statement(sql.strip()) for sql in script.split(";\n") if sql.strip()])


def load_rows(saver: D1Saver, rows: Iterable[tuple[str, Mapping[str, Any]]], *,
              threads: Sequence[str] | None = None, thread_suffix: str = "") -> dict[str, int]:
    """Insert the data rows (of `threads`, or all) through `saver`; returns rows per table.

    The schema must exist (call `saver.setup()` first). `thread_suffix` is appended to every
    thread id, for databases shared with other tests.
    """
    counts = {t: 0 for t in DATA_TABLES}

    def statements() -> Iterator[Statement]:
        for table, row in rows:
            if table not in DATA_TABLES or (threads is not None and row["thread_id"] not in threads):
                continue
            counts[table] += 1
            yield insert_statement(table, row, thread_suffix)

    execute_in_batches(saver, statements(), max_statements=BATCH_STATEMENTS, max_bytes=BATCH_BYTES)
    return counts


# --- what a saver reads back, as JSON -------------------------------------------------------------

INLINE_MAX = 1000  # a rendering longer than this is kept as its sha256 and length


def _name(obj: Any) -> str:
    return type(obj).__qualname__


def render(obj: Any, subst: Mapping[str, str] | None = None) -> Any:
    """An exact JSON rendering of a loaded value: types named, tuples and sets marked.

    Strings equal to a key of `subst` become its value (thread ids of a shared database back
    to their scenario names). Refuses what it cannot render exactly.
    """
    subst = subst or {}

    def go(o: Any) -> Any:
        if o is None or isinstance(o, bool | int):
            return o
        if isinstance(o, str):
            return subst.get(o, o)
        if isinstance(o, float):
            return {"float": repr(o)}
        if isinstance(o, bytes):
            return {"bytes": o.hex()}
        if isinstance(o, BaseModel):
            return {"__type__": _name(o), **{k: go(v) for k, v in o.model_dump().items()}}
        if isinstance(o, tuple) and hasattr(o, "_fields"):
            return {"__type__": _name(o), **{k: go(getattr(o, k)) for k in o._fields}}
        if is_dataclass(o) and not isinstance(o, type):
            return {"__type__": _name(o), **{f.name: go(getattr(o, f.name)) for f in fields(o)}}
        if isinstance(o, BaseException):
            return {"__type__": _name(o), "args": go(list(o.args))}
        if isinstance(o, tuple):
            return {"tuple": [go(v) for v in o]}
        if isinstance(o, list):
            return [go(v) for v in o]
        if isinstance(o, set | frozenset):
            return {"set": sorted((go(v) for v in o), key=canonical)}
        if isinstance(o, dict):
            if all(isinstance(k, str) for k in o):
                return {subst.get(k, k): go(v) for k, v in o.items()}
            return {"dict": [[go(k), go(v)] for k, v in o.items()]}
        slots = [s for c in type(o).__mro__ for s in getattr(c, "__slots__", ())]
        if slots:  # e.g. langgraph.types.Send
            return {"__type__": _name(o), **{s: go(getattr(o, s)) for s in slots if hasattr(o, s)}}
        raise TypeError(f"cannot render {type(o).__module__}.{_name(o)} exactly")

    return go(obj)


def canonical(rendered: Any) -> str:
    return json.dumps(rendered, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def fingerprint(obj: Any, subst: Mapping[str, str] | None = None) -> Any:
    """The rendering itself when short, else {"sha256", "chars"} of its canonical JSON."""
    rendered = render(obj, subst)
    text = canonical(rendered)
    if len(text) <= INLINE_MAX:
        return rendered
    return {"sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "chars": len(text)}


def tuple_entry(tup: Any, subst: Mapping[str, str]) -> dict[str, Any]:
    """One CheckpointTuple: ids, metadata, the checkpoint, each channel value, pending writes."""
    conf = tup.config["configurable"]
    parent = (tup.parent_config or {}).get("configurable", {})
    checkpoint = dict(tup.checkpoint)
    values = checkpoint.pop("channel_values")
    return {
        "thread_id": subst.get(conf["thread_id"], conf["thread_id"]),
        "checkpoint_ns": conf["checkpoint_ns"],
        "checkpoint_id": conf["checkpoint_id"],
        "parent_checkpoint_id": parent.get("checkpoint_id"),
        "metadata": render(tup.metadata, subst),
        "checkpoint": render(checkpoint, subst),
        "channel_values": {ch: fingerprint(v, subst) for ch, v in values.items()},
        "pending_writes": [[task, ch, fingerprint(v, subst)]
                           for task, ch, v in tup.pending_writes or []],
    }


def read_thread(saver: D1Saver, thread_id: str, subst: Mapping[str, str]) -> dict[str, Any]:
    """What `saver` reads back for one thread: list() over all namespaces, heads and tags."""
    entries = [tuple_entry(t, subst) for t in saver.list({"configurable": {"thread_id": thread_id}})]
    namespaces = sorted({e["checkpoint_ns"] for e in entries})
    heads, tags = {}, {}
    for ns in namespaces:
        conf = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
        head = saver.get_tuple(conf)
        heads[ns] = None if head is None else head.config["configurable"]["checkpoint_id"]
        tags[ns] = saver.tags(conf)
    return {"checkpoints": entries, "heads": heads, "tags": tags}


def snapshot_entry(snap: StateSnapshot, subst: Mapping[str, str]) -> dict[str, Any]:
    """A StateSnapshot as JSON (subgraph states nested)."""
    def task(t: Any) -> dict[str, Any]:
        state = t.state
        return {"id": t.id, "name": t.name, "path": render(t.path, subst),
                "error": render(t.error, subst), "interrupts": render(list(t.interrupts), subst),
                "state": (snapshot_entry(state, subst) if isinstance(state, StateSnapshot)
                          else render(state, subst)),
                "result": fingerprint(t.result, subst)}

    conf = snap.config["configurable"]
    parent = (snap.parent_config or {}).get("configurable", {})
    return {
        "checkpoint_ns": conf.get("checkpoint_ns", ""),
        "checkpoint_id": conf.get("checkpoint_id"),
        "parent_checkpoint_id": parent.get("checkpoint_id"),
        "values": fingerprint(snap.values, subst),
        "next": list(snap.next),
        "metadata": render(snap.metadata, subst),
        "created_at": snap.created_at,
        "tasks": [task(t) for t in snap.tasks],
        "interrupts": render(list(snap.interrupts), subst),
    }


def read_graph(graph: Any, thread_id: str, subst: Mapping[str, str]) -> dict[str, Any]:
    """What the graph sees: get_state(subgraphs=True) of the head, and the root history."""
    cfg = {"configurable": {"thread_id": thread_id}}
    return {"state": snapshot_entry(graph.get_state(cfg, subgraphs=True), subst),
            "history": [snapshot_entry(s, subst) for s in graph.get_state_history(cfg)]}


def without_parents(obj: Any) -> Any:
    """`obj` minus every parent_checkpoint_id: compaction relinks parents past deleted ones."""
    if isinstance(obj, dict):
        return {k: without_parents(v) for k, v in obj.items() if k != "parent_checkpoint_id"}
    if isinstance(obj, list):
        return [without_parents(v) for v in obj]
    return obj


@cache
def expected() -> dict[str, Any]:
    return json.loads(EXPECTED_PATH.read_text(encoding="utf-8"))


@cache
def _rows() -> list[tuple[str, dict[str, Any]]]:
    return read_rows()


# --- the fixture -----------------------------------------------------------------------------------


@dataclass
class V010Db:
    """A database holding the 0.1.0 rows, and a saver (current code) on it."""

    saver: D1Saver
    thread_ids: dict[str, str]  # scenario name (THREADS) -> thread id in this database
    counts: dict[str, int]  # rows loaded per table
    shared: bool  # the database also holds other tests' threads (the real engine)

    @property
    def subst(self) -> dict[str, str]:
        return {tid: name for name, tid in self.thread_ids.items()}

    def config(self, name: str, **configurable: Any) -> dict[str, Any]:
        return {"configurable": {"thread_id": self.thread_ids[name], **configurable}}


@pytest.fixture
def v010(backend: Any) -> Iterator[Callable[..., V010Db]]:
    """Loads the 0.1.0 rows (of the named threads, or all) into the backend's database.

    On the local D1 the database is fresh and thread ids are kept as stored. On the real engine
    every test shares one database (tests/realengine.py), so there each load gets its own thread
    ids (the stored ones plus a suffix).
    """
    savers: list[D1Saver] = []

    def load(*names: str, schema: str = "current", **saver_kwargs: Any) -> V010Db:
        """schema="current": setup() first. "v0.1.0": 0.1.0's schema, and
        "v1-without-lease_lost": version 1 as created before lease_lost existed; both built
        and filled by a loader that never sets up nor migrates, so the saver returned finds
        the database as an older d1saver left it."""
        saver = backend.saver(**saver_kwargs)
        savers.append(saver)
        loader = saver
        if schema in ("v0.1.0", "v1-without-lease_lost"):
            loader = backend.saver(auto_setup=False)
            savers.append(loader)
            create_v010_schema(loader, lease_lost=schema == "v0.1.0")
        elif schema == "current":
            saver.setup()
        else:
            raise ValueError(f"unknown schema {schema!r}")
        suffix = "" if backend.name == "local" else f"@{uuid.uuid4().hex[:12]}"
        stored = sorted({row["thread_id"] for table, row in _rows() if table == "checkpoints"})
        chosen = list(names) or stored
        counts = load_rows(loader, _rows(), threads=chosen, thread_suffix=suffix)
        return V010Db(saver, {n: n + suffix for n in chosen}, counts, shared=bool(suffix))

    yield load
    for saver in savers:
        saver.close()
