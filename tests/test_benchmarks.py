"""The benchmarks still run: each on the smallest workload it takes (their figures come from
full runs, README: Figures; these only catch a benchmark broken by a change of the code)."""

from __future__ import annotations

import pytest

from benchmarks import (agent_bench, compaction_bench, cpu_bench, floor_bench, otel_bench,
                        scaling_bench, store_bench, ui_bench)


def test_compaction_benchmark_runs() -> None:
    figures = compaction_bench.main(["--threads", "5", "--checkpoints", "8", "--keep", "2"])
    assert figures["checkpoints_deleted"] == 5 * (8 - 2)


@pytest.mark.parametrize("variant", ["plain", "delta"])
def test_agent_benchmark_runs(variant: str) -> None:
    rows = agent_bench.main(["--quick", "--savers", "d1saver", "--variants", variant,
                             "--latency-ms", "0"])
    assert rows and all(not row.errors and row.state_ok for row in rows), rows


def test_scaling_benchmark_runs() -> None:
    rows = scaling_bench.main(["--threads", "4", "--turns", "1", "--service-ms", "0",
                               "--latency-ms", "0", "--fleets", "1,2", "--storage-turns", "2"])
    assert [(r.databases, r.checkpoints) for r in rows] == [(1, 12), (2, 12)]  # 3 per thread


def test_store_benchmark_runs() -> None:
    rows = store_bench.main(["--quick"])
    d1 = [r for r in rows if r.store in ("D1Store", "D1Cache")]
    assert d1 and all(r.requests == r.calls for r in d1), rows  # one request per call


def test_search_benchmark_runs() -> None:
    from benchmarks import search_bench

    from d1saver.memory import plan as _plan

    rows = search_bench.main(["--quick"])  # 60 and 1,100 items of 16 dimensions, one field
    assert {r[0] for r in rows} == {"InMemoryStore", "D1Store exact", "D1Store prefilter"}
    for name, n, _, _, requests, _, recall in rows:
        assert recall == 1.0  # the prefilter is exact by construction
        if name == "D1Store prefilter":
            assert requests == (1 if n <= _plan.whole_items(16, 1) else 2)
    assert {n for _, n, *_ in rows} == {60, 1100} and _plan.whole_items(16, 1) == 1000


def test_ui_benchmark_runs() -> None:
    rows = ui_bench.main(["--threads", "30", "--checkpoints", "2", "--page", "5",
                          "--latency-ms", "0"])
    paged = [r for r in rows if r["way"].startswith("page")]
    assert paged and all(r["requests"] == 1 and r["rows"] == 5 for r in paged), rows


def test_cli_benchmark_runs() -> None:
    from benchmarks import cli_bench

    rows = cli_bench.main(["--runs", "1"])
    by_command = {r["command"]: r for r in rows}
    assert by_command["d1saver --version"]["heavy"] == "-", rows
    assert all(r["cpu_median_s"] > 0 for r in rows)


def test_floor_benchmark_runs() -> None:
    cases = floor_bench.main(["--turns", "1", "--repeat", "1", "--latency-ms", "0",
                              "--cpu-turns", "1"])
    assert [(c.api, c.durability) for c in cases] == list(floor_bench.CASES)
    assert all(c.checkpoints == 3 and min(c.requests) >= c.floor for c in cases), cases


def test_cpu_benchmark_runs() -> None:
    rows = cpu_bench.main(["--turns", "2", "--repeats", "2"])
    assert [(r["variant"], r["messages"]) for r in rows] == [("plain", 6), ("delta", 6)]  # 1 + 2 + 1 x 3
    assert all(r["read_ms"] > 0 and r["put_ms"] > 0 for r in rows), rows


def test_otel_benchmark_runs() -> None:
    rows = otel_bench.main(["--puts", "3", "--runs", "1", "--rounds", "1",
                            "--transports", "canned"])
    loaded = {r["way"]: r["opentelemetry_loaded"] for r in rows}
    assert loaded == {"without": False, "api-only": True, "sdk": True}


def test_coalesce_benchmark_runs() -> None:
    from benchmarks import coalesce_bench

    rows = coalesce_bench.main(["--quick"])
    gathered = [r for r in rows if r[1].endswith("gathered")]
    assert gathered and all(r[2] == 1 for r in gathered), rows  # one request for all calls
