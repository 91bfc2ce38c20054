"""What encryption keys cost: stored bytes per value and CPU per operation, with and without.

The benchmark's agent (benchmarks/workload.py) runs on an in-process local D1 (no latency:
only d1saver's own work is timed), once without keys and once with; then the stored rows are
measured per kind of value, and put / get_tuple / list of the finished thread are timed.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from benchmarks.workload import VARIANTS, build_graph, first_input
from d1saver import D1Saver, Statement
from d1saver.storage import codec as _codec
from d1saver.storage.crypto import Sealer, aad_for_checkpoint
from d1saver.local import LocalD1, LocalD1Transport

KEYS = [bytes(range(32))]
STORED = {
    "checkpoint": "SELECT COUNT(*), SUM(LENGTH(checkpoint)) FROM checkpoints",
    "metadata": "SELECT COUNT(*), SUM(LENGTH(metadata)) FROM checkpoints",
    "write": "SELECT COUNT(*), SUM(LENGTH(value)) FROM writes",
}


def _saver(engine: LocalD1, keys: list[bytes] | None) -> D1Saver:
    return D1Saver(account_id="bench", database_id="keys", api_token="local",
                   api_base_url="http://d1.local/client/v4", transport=LocalD1Transport(engine),
                   encryption_keys=keys)


def _ms(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def measure(variant: str, turns: int, fanout: int, keys: list[bytes] | None,
            repeat: int) -> dict[str, Any]:
    engine = LocalD1()
    saver = _saver(engine, keys)
    config = {"configurable": {"thread_id": f"k-{uuid.uuid4().hex[:8]}"}}
    t0 = time.perf_counter()
    build_graph(saver, variant=variant, turns=turns, fanout=fanout).invoke(
        first_input(), config, durability="sync")
    out: dict[str, Any] = {"run_ms": (time.perf_counter() - t0) * 1000}
    for kind, sql in STORED.items():
        (res,) = saver.client.execute([Statement(sql)])
        out[kind] = (int(res.rows[0][0]), int(res.rows[0][1]))
    head = saver.get_tuple(config)
    assert head is not None
    out["get_tuple_ms"] = _ms(lambda: saver.get_tuple(config), repeat)
    out["list_ms"] = _ms(lambda: list(saver.list(config)), repeat)
    out["put_ms"] = _ms(lambda: saver.put(head.config, head.checkpoint, head.metadata, {}),
                        repeat)
    # The codec alone, on the head checkpoint's serialized bytes: stored text and back.
    data = saver.serde.dumps_typed(head.checkpoint)[1]
    out["bytes"] = len(data)
    if keys is None:
        out["codec_ms"] = _ms(lambda: _codec.decode(_codec.encode(data)), repeat * 10)
    else:
        sealer, aad = Sealer(keys), aad_for_checkpoint("t", "", "c", "checkpoint", type_="msgpack")
        out["codec_ms"] = _ms(lambda: sealer.open_text(sealer.seal_text(data, aad), aad),
                              repeat * 10)
    engine.close()
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks keys", description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=30)
    p.add_argument("--fanout", type=int, default=3)
    p.add_argument("--repeat", type=int, default=20, help="timed repetitions (median shown)")
    args = p.parse_args(argv)
    print(f"## Encryption keys: {args.turns}x{args.fanout} agent, local D1 in process "
          f"(no latency), medians of {args.repeat}\n")
    print("| variant | value | values | chars stored, no key | with key | added per value |")
    print("|---|---|---|---|---|---|")
    timing = []
    for variant in VARIANTS:
        plain = measure(variant, args.turns, args.fanout, None, args.repeat)
        keyed = measure(variant, args.turns, args.fanout, KEYS, args.repeat)
        for kind in STORED:
            (n, a), (_, b) = plain[kind], keyed[kind]
            print(f"| {variant} | {kind} | {n} | {a:,} | {b:,} | {(b - a) / n:.1f} |")
        timing.append((variant, plain, keyed))
    print("\n| variant | operation | ms, no key | ms, with key |")
    print("|---|---|---|---|")
    for variant, plain, keyed in timing:
        for op in ("codec_ms", "put_ms", "get_tuple_ms", "list_ms", "run_ms"):
            name = {"run_ms": f"whole run ({args.turns} turns)", "put_ms": "put (head)",
                    "get_tuple_ms": "get_tuple (head)", "list_ms": "list (thread)",
                    "codec_ms": f"head value to text and back ({plain['bytes']:,} bytes)"}[op]
            print(f"| {variant} | {name} | {plain[op]:.2f} | {keyed[op]:.2f} |")
