"""`python -m benchmarks [agent options]` runs the agent benchmark; `python -m benchmarks compaction ...` the
compaction one; `python -m benchmarks growth ...` the growth one (bytes, rows and CPU against turns); `python -m benchmarks keys` what encryption keys cost; `python -m benchmarks chunking ...` compares ways
to cut values into chunks; `python -m benchmarks scaling ...` runs agents over 1, 2 and 4 databases; `python -m benchmarks
bytes ...` breaks one conversation's request bodies down by statement and parameter; `python -m benchmarks
store ...` D1Store and D1Cache beside SqliteStore and SqliteCache; `python -m benchmarks ui ...` a page of
the thread list over many threads, paged in SQL beside 0.2.0's read-all; `python -m benchmarks floor
...` the agent through invoke and ainvoke under durability "sync" and "async" against LangGraph's
request floor and InMemorySaver, and the client's CPU per put; `python -m benchmarks cpu ...`
the client's CPU for one read and one step at 100 turns; `python -m benchmarks
otel` what OpenTelemetry costs a put (CPU without it, with its API alone, with its SDK); `python -m
benchmarks coalesce ...` concurrent async store and cache calls, gathered per event-loop tick; `python -m
benchmarks cli` how long `d1saver` commands take to start; `python -m benchmarks search ...`
search by meaning, InMemoryStore beside D1Store's exact scan and its prefilter."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "compaction":
        from benchmarks import compaction_bench

        compaction_bench.main(argv[1:])
        return
    if argv and argv[0] == "scaling":
        from benchmarks import scaling_bench

        scaling_bench.main(argv[1:])
        return
    if argv and argv[0] == "chunking":
        from benchmarks import chunking_eval

        chunking_eval.main(argv[1:])
        return
    if argv and argv[0] == "keys":
        from benchmarks import keys_bench

        keys_bench.main(argv[1:])
        return
    if argv and argv[0] == "bytes":
        from benchmarks import bytes_bench

        bytes_bench.main(argv[1:])
        return
    if argv and argv[0] == "store":
        from benchmarks import store_bench

        store_bench.main(argv[1:])
        return
    if argv and argv[0] == "search":
        from benchmarks import search_bench

        search_bench.main(argv[1:])
        return
    if argv and argv[0] == "ui":
        from benchmarks import ui_bench

        ui_bench.main(argv[1:])
        return
    if argv and argv[0] == "floor":
        from benchmarks import floor_bench

        floor_bench.main(argv[1:])
        return
    if argv and argv[0] == "cpu":
        from benchmarks import cpu_bench

        cpu_bench.main(argv[1:])
        return
    if argv and argv[0] == "otel":
        from benchmarks import otel_bench

        otel_bench.main(argv[1:])
        return
    if argv and argv[0] == "coalesce":
        from benchmarks import coalesce_bench

        coalesce_bench.main(argv[1:])
        return
    if argv and argv[0] == "cli":
        from benchmarks import cli_bench

        cli_bench.main(argv[1:])
        return
    if argv and argv[0] == "growth":
        from benchmarks import growth_bench

        growth_bench.main(argv[1:])
        return
    if argv and argv[0] == "agent":
        argv = argv[1:]
    from benchmarks import agent_bench

    agent_bench.main(argv)


if __name__ == "__main__":
    main()
