"""`python -m benchmarks [agent options]` runs the agent benchmark; `python -m benchmarks
compaction ...` the compaction one; `python -m benchmarks scaling ...` the one over 1, 2 and 4
databases."""

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
    if argv and argv[0] == "agent":
        argv = argv[1:]
    from benchmarks import agent_bench

    agent_bench.main(argv)


if __name__ == "__main__":
    main()
