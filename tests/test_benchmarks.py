"""The benchmarks still run: each on the smallest workload it takes (their figures come from
full runs, README: Figures; these only catch a benchmark broken by a change of the code)."""

from __future__ import annotations

import pytest

from benchmarks import agent_bench, compaction_bench, scaling_bench, store_bench


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

    rows = search_bench.main(["--quick"])
    assert {r[0] for r in rows} == {"InMemoryStore", "D1Store exact", "D1Store prefilter"}
    for name, n, _, _, requests, _, recall in rows:
        assert recall == 1.0  # the prefilter is exact by construction
        if name == "D1Store prefilter":
            assert requests == (1 if n <= 500 else 2)
