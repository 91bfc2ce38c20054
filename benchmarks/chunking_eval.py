"""How to cut checkpoint values into chunks (issue 12): measured on the benchmark agent's real values.

Runs the agent (plain channel, fanout 3) with a saver that records every value LangGraph hands it,
in order (`put_writes` values and `put` checkpoints, serialized by JsonPlusSerializer), then replays
them through each chunking strategy as one thread would store them: a chunk already held by the
thread costs nothing; a new one is sent once, compressed; a row holds its chunk ids and its inline
bytes. No I/O to D1: these are the value bytes a saver would send, and the CPU it would spend.

    python -m benchmarks chunking [--turns 30,100,300] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

from benchmarks.workload import build_graph, first_input
from d1saver.storage import chunking as _chunking
from d1saver.storage import codec as _codec
from d1saver.storage.chunking import Piece

ID_CHARS = 27  # a 20-byte id in base64url, as measured then (schema v8 writes base85: 25)
ENTRY_OVERHEAD = 3  # quotes and comma of an id in a JSON manifest


# --- the values, as LangGraph hands them to a saver ------------------------------------------

def capture(turns: int, variant: str = "plain") -> list[tuple[str, bytes]]:
    """[(kind, msgpack bytes)] in call order: kind "w" for a pending write, "c" for a checkpoint."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    serde = JsonPlusSerializer()
    events: list[tuple[str, bytes]] = []

    class Recorder(InMemorySaver):
        def put(self, config, checkpoint, metadata, new_versions):
            events.append(("c", serde.dumps_typed(checkpoint)[1]))
            return super().put(config, checkpoint, metadata, new_versions)

        def put_writes(self, config, writes, task_id, task_path=""):
            events.extend(("w", serde.dumps_typed(v)[1]) for _, v in writes)
            return super().put_writes(config, writes, task_id, task_path)

    graph = build_graph(Recorder(), variant=variant, turns=turns, fanout=3)
    graph.invoke(first_input(), {"configurable": {"thread_id": "eval"}}, durability="sync")
    return events


# --- strategies: bytes -> pieces ---------------------------------------------------------------

def whole(data: bytes) -> list[Piece]:
    """0.1.x: the whole value inline in its row."""
    return [Piece(data, None)] if data else []


def fastcdc(avg: int) -> Callable[[bytes], list[Piece]]:
    """Byte-level FastCDC over the whole value (min avg/4, max 4*avg); pieces under 256 B inline."""
    from pyfastcdc import FastCDC

    cdc = FastCDC(avg_size=avg, min_size=avg // 4, max_size=avg * 4)

    def cut(data: bytes) -> list[Piece]:
        out = []
        for c in cdc.cut_buf(data):
            piece = bytes(c.data)
            out.append(Piece(piece, _chunking.chunk_id(piece) if len(piece) >= _chunking.STORED_MIN else None))
        return out
    return cut


def grouped(k: int) -> Callable[[bytes], list[Piece]]:
    """Structure-aware pieces, then each run of consecutive stored pieces grouped: a group closes
    after a piece whose id falls in 1/k of the id space; the open group at the end of a run stays
    inline (it changes at the next append). Fewer ids and rows, but a checkpoint's group no longer
    matches the write that brought its message."""
    def cut(data: bytes) -> list[Piece]:
        out: list[Piece] = []
        run: list[Piece] = []

        def flush_open() -> None:
            if run:
                out.append(Piece(b"".join(p.data for p in run), None))
                run.clear()
        for p in _chunking.split(data):
            if p.id is None:
                flush_open()
                out.append(p)
                continue
            run.append(p)
            if p.id.encode()[0] % k == 0:  # content-defined group boundary
                body = b"".join(x.data for x in run)
                out.append(Piece(body, _chunking.chunk_id(body)))
                run.clear()
        flush_open()
        return out
    return cut


def id_tree(k: int) -> Callable[[bytes], tuple[list[Piece], list[Piece]]]:
    """Structure-aware pieces, with each run of consecutive ids folded into a content-defined tree
    (a "prolly tree": a node closes after an id that falls in 1/k of the id space; a closed node is
    itself a stored chunk listing its children's ids, 20 bytes each). The row lists the top nodes
    and, inline, the ids of the open node at each level (they change at the next append)."""
    def fold(ids: list[Piece]) -> tuple[list[Piece], list[Piece]]:
        row: list[Piece] = []
        nodes: list[Piece] = []
        level = ids
        while len(level) > k:
            closed: list[Piece] = []
            group: list[Piece] = []
            for p in level:
                group.append(p)
                if ord(p.id[0]) % k == 0:
                    body = b"".join(base64_id(x.id) for x in group)
                    node = Piece(body, _chunking.chunk_id(body))
                    closed.append(node)
                    nodes.append(node)
                    group = []
            row[:0] = group  # the open tail of this level, after the levels above
            level = closed
        row[:0] = level
        return row, nodes

    def cut(data: bytes) -> tuple[list[Piece], list[Piece]]:
        row: list[Piece] = []
        reachable: list[Piece] = []
        run: list[Piece] = []
        for p in [*_chunking.split(data), Piece(b"", None)]:
            if p.id is not None:
                run.append(p)
                reachable.append(p)
                continue
            if run:
                top, nodes = fold(run)
                row.extend(top)
                reachable.extend(nodes)
                run = []
            if p.data:
                row.append(p)
        return row, reachable
    return cut


def base64_id(text: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(text + "=")


STRATEGIES: dict[str, Callable[[bytes], list[Piece]]] = {}


def strategies() -> dict[str, Callable[[bytes], list[Piece]]]:
    if not STRATEGIES:
        STRATEGIES.update({
            "0.1.x whole value": whole,
            "fastcdc 2K (0.5/2/8 KB)": fastcdc(2048),
            "fastcdc 8K (2/8/32 KB)": fastcdc(8192),
            "fastcdc 16K (4/16/64 KB)": fastcdc(16384),
            "structure (elements)": _chunking.split,
            "structure, groups of ~8": grouped(8),
            "structure + id tree, k=8": id_tree(8),
            "structure + id tree, k=16": id_tree(16),
        })
    return STRATEGIES


# --- replay one thread ------------------------------------------------------------------------

def _d_compressed(data: bytes) -> bytes | None:
    """What schema v7's "d:" stored (these measurements chose it): zlib with DICT_V1 from 128
    bytes, when that saved 10%."""
    if len(data) >= 128:
        packed = _codec._deflate(data)
        if len(packed) <= len(data) * 0.9:
            return packed
    return None


def encoded_len(data: bytes) -> int:
    """Length of schema v7's `d:`/`b:` text for `data`, without base85-encoding (pure Python,
    slow) for real."""
    if not data:
        return 2
    packed = _d_compressed(data)
    if packed is not None:
        return 2 + math.ceil(len(packed) / 4) * 5
    return 2 + 4 * math.ceil(len(data) / 3)


@dataclass
class Outcome:
    strategy: str
    turns: int
    checkpoints: int = 0
    value_bytes: int = 0  # raw msgpack handed to the saver
    new_bytes: int = 0  # raw bytes sent: new chunks + inline parts
    sent_bytes: int = 0  # encoded: new chunks compressed + manifests (ids + inline parts compressed)
    manifest_bytes: int = 0  # of sent_bytes: ids and inline parts
    chunk_rows: int = 0  # new chunks (one row each)
    ids_per_checkpoint: float = 0.0
    max_ids: int = 0
    cut_cpu_s: float = 0.0  # cutting and naming, all values
    encode_cpu_s: float = 0.0  # compressing what is sent

    @property
    def dedup(self) -> float:
        """New bytes over value bytes: the share of what LangGraph hands over that must be sent."""
        return self.new_bytes / self.value_bytes


def replay(events: list[tuple[str, bytes]], name: str, cut: Callable[[bytes], list[Piece]], turns: int) -> Outcome:
    out = Outcome(name, turns)
    held: set[str] = set()
    ids_total = 0
    for kind, data in events:
        t0 = time.process_time()
        cut_result = cut(data)
        t1 = time.process_time()
        pieces, reachable = cut_result if isinstance(cut_result, tuple) else (cut_result, cut_result)
        inline = b"".join(p.data for p in pieces if p.id is None)
        ids = [p.id for p in pieces if p.id is not None]
        new = list({p.id: p for p in reachable if p.id is not None and p.id not in held}.values())
        held.update(p.id for p in new)
        sent = sum(encoded_len(p.data) for p in new)
        manifest = (encoded_len(inline) if inline else 0) + len(ids) * (ID_CHARS + ENTRY_OVERHEAD)
        out.encode_cpu_s += time.process_time() - t1
        out.cut_cpu_s += t1 - t0
        out.value_bytes += len(data)
        out.new_bytes += len(inline) + sum(len(p.data) for p in new)
        out.sent_bytes += sent + manifest
        out.manifest_bytes += manifest
        out.chunk_rows += len(new)
        if kind == "c":
            out.checkpoints += 1
            ids_total += len(ids)
            out.max_ids = max(out.max_ids, len(ids))
    out.ids_per_checkpoint = ids_total / max(out.checkpoints, 1)
    return out


# --- per-chunk compression: zlib with DICT_V1 vs zstd --------------------------------------

def compression(events: list[tuple[str, bytes]]) -> list[dict[str, object]]:
    """Every distinct stored chunk of the run (structure-aware) compressed alone by each codec."""
    import zstandard

    chunks = list({p.id: p.data for _, d in events for p in _chunking.split(d) if p.id}.values())
    raw_dict = zstandard.ZstdCompressionDict(_codec.DICT_V1, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    codecs: dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {
        "none": (lambda b: b, lambda b: b),
        "zlib 6": (lambda b: zlib.compress(b, 6), zlib.decompress),
        "zlib 6 + DICT_V1 (today's d:)": (_codec._deflate, _codec._inflate),
    }
    for level in (3, 9):
        c = zstandard.ZstdCompressor(level=level, dict_data=raw_dict, write_checksum=False,
                                     write_content_size=True, write_dict_id=False)
        d = zstandard.ZstdDecompressor(dict_data=raw_dict)
        codecs[f"zstd {level} + DICT_V1 as raw dictionary"] = (c.compress, d.decompress)
        plain = zstandard.ZstdCompressor(level=level, write_checksum=False)
        codecs[f"zstd {level}, no dictionary"] = (plain.compress, zstandard.ZstdDecompressor().decompress)
    rows = []
    for name, (pack, unpack) in codecs.items():
        t0 = time.process_time()
        packed = [pack(c) for c in chunks]
        t1 = time.process_time()
        assert [unpack(p) for p in packed] == chunks
        t2 = time.process_time()
        rows.append({"codec": name, "chunks": len(chunks), "raw_kb": sum(map(len, chunks)) / 1024,
                     "packed_kb": sum(map(len, packed)) / 1024,
                     "compress_us_per_chunk": (t1 - t0) / len(chunks) * 1e6,
                     "decompress_us_per_chunk": (t2 - t1) / len(chunks) * 1e6})
    return rows


# --- CPU per put at the largest size, the saver's whole path -----------------------------------

def cpu_per_put(events: list[tuple[str, bytes]]) -> list[dict[str, object]]:
    """CPU per checkpoint over the last 50 puts: 0.1.x encodes the whole value; a chunked saver
    cuts and names the value, then encodes only its inline part and its new chunks (the thread
    holding every chunk of the values before those 50 puts and their writes)."""
    start = max(i for i, (k, _) in enumerate(events) if k == "c") - 3 * 50  # ~50 puts and their writes
    puts = [d for k, d in events[start:] if k == "c"]  # (their writes' chunks count as new here)
    rows = []

    def timed(name: str, fn: Callable[[bytes], object]) -> None:
        t0 = time.process_time()
        for d in puts:
            fn(d)
        rows.append({"path": name, "ms_per_put": (time.process_time() - t0) / len(puts) * 1e3,
                     "value_kb": sum(map(len, puts)) / len(puts) / 1024})

    timed("0.1.x: encode whole value (zlib+DICT_V1, base85)", _codec.encode)
    timed("0.1.x without base85: zlib+DICT_V1 only", _d_compressed)
    for name in ("fastcdc 2K (0.5/2/8 KB)", "structure (elements)", "structure + id tree, k=8"):
        cut = strategies()[name]
        held: set[str] = set()
        for _, d in events[:start]:
            result = cut(d)
            held.update(p.id for p in (result[1] if isinstance(result, tuple) else result) if p.id)
        timed(f"{name}: cut + name", cut)

        def cut_and_encode(d: bytes, cut=cut, held=held) -> None:
            result = cut(d)
            row, reachable = result if isinstance(result, tuple) else (result, result)
            _codec.encode(b"".join(p.data for p in row if p.id is None))
            for p in reachable:
                if p.id and p.id not in held:
                    _codec.encode(p.data)
                    held.add(p.id)
        timed(f"{name}: cut + name + encode inline and new chunks", cut_and_encode)
    timed("msgpack skip only (walk element boundaries)", lambda d: _chunking._skip(d, 0))
    return rows


def framing(events: list[tuple[str, bytes]]) -> list[dict[str, object]]:
    """The inline part of each checkpoint (structure-aware), compressed alone by each codec."""
    import zstandard

    inline = [b"".join(p.data for p in _chunking.split(d) if p.id is None) for k, d in events if k == "c"]
    raw_dict = zstandard.ZstdCompressionDict(_codec.DICT_V1, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    zstd = zstandard.ZstdCompressor(level=9, dict_data=raw_dict, write_checksum=False, write_dict_id=False)
    rows = []
    for name, pack in (("none", lambda b: b), ("zlib 6 + DICT_V1 (d:)", _codec._deflate),
                       ("zstd 9 + DICT_V1 as raw dictionary", zstd.compress)):
        rows.append({"codec": name, "checkpoints": len(inline),
                     "bytes per checkpoint": sum(len(pack(b)) for b in inline) / len(inline)})
    return rows


def iter_runs(turns: list[int]) -> Iterator[tuple[int, list[tuple[str, bytes]]]]:
    for t in turns:
        yield t, capture(t)


def _table(rows: list[dict[str, object]]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        lines.append("| " + " | ".join(f"{v:,.2f}" if isinstance(v, float) else str(v) for v in r.values()) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, object]:
    p = argparse.ArgumentParser(prog="python -m benchmarks chunking", description=__doc__.splitlines()[0])
    p.add_argument("--turns", default="30,100,300")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    turns = [int(t) for t in args.turns.split(",")]
    results: dict[str, object] = {"replay": [], "compression": [], "cpu": []}
    last: list[tuple[str, bytes]] = []
    for t, events in iter_runs(turns):
        last = events
        for name, cut in strategies().items():
            o = replay(events, name, cut, t)
            results["replay"].append(asdict(o) | {"dedup": o.dedup})
            print(f"  {t:4} turns {name:28} sent {o.sent_bytes / 1024:9,.1f} KB  new/total {o.dedup:.4f}  "
                  f"rows {o.chunk_rows:5}  ids/ckpt {o.ids_per_checkpoint:6.1f}  cut {o.cut_cpu_s:.2f} s", flush=True)
    results["compression"] = compression(last)
    results["cpu"] = cpu_per_put(last)
    results["framing"] = framing(last)
    rows = [{"turns": r["turns"], "strategy": r["strategy"], "value KB": r["value_bytes"] / 1024,
             "new/total": r["dedup"], "value KB sent": r["sent_bytes"] / 1024,
             "of which ids+inline KB": r["manifest_bytes"] / 1024, "chunk rows": r["chunk_rows"],
             "chunk rows/ckpt": r["chunk_rows"] / r["checkpoints"],
             "ids/ckpt (max)": f"{r['ids_per_checkpoint']:.1f} ({r['max_ids']})",
             "cut+name CPU s": r["cut_cpu_s"]} for r in results["replay"]]
    print("\n## Replay (value bytes only; one thread)\n")
    print(_table(rows))
    print(f"\n## Compression of each distinct chunk alone ({max(turns)} turns, structure-aware chunks)\n")
    print(_table(results["compression"]))
    print(f"\n## CPU per put, last 50 checkpoints of {max(turns)} turns\n")
    print(_table(results["cpu"]))
    print(f"\n## Inline framing of a checkpoint, compressed alone ({max(turns)} turns)\n")
    print(_table(results["framing"]))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return results


if __name__ == "__main__":
    main()
