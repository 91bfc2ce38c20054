"""`python -m benchmarks [agent options]` runs the agent benchmark; `python -m benchmarks compaction ...` the
compaction one; `python -m benchmarks growth ...` the growth one (bytes, rows and CPU against turns); `python -m benchmarks keys` what encryption keys cost; `python -m benchmarks chunking ...` compares ways
to cut values into chunks; `python -m benchmarks scaling ...` runs agents over 1, 2 and 4 databases; `python -m benchmarks
bytes ...` breaks one conversation's request bodies down by statement and parameter; `python -m benchmarks
store ...` D1Store and D1Cache beside SqliteStore and SqliteCache; `python -m benchmarks search ...`
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
