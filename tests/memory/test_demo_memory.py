"""`d1saver demo`'s memory step: the second conversation recalls the first's fact by meaning
through D1Store, a D1Cache hit skips the slow tool, and the step prints the same every run."""

from __future__ import annotations

import re

from d1saver.demo import embed, run


def _step7(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if "7. Long-term memory" in line)
    return [re.sub(r"ana-[0-9a-f]{8}", "ana-*", line) for line in lines[start:]]


def test_the_demo_recalls_across_conversations_and_hits_the_cache() -> None:
    runs = []
    for _ in range(2):
        lines: list[str] = []
        out = run(echo=lines.append)
        runs.append((_step7(lines), out["memory"]))
    (lines, memory), (again, memory2) = runs
    assert memory["answers"] == ["Noted. (Lisbon: 22°C and sunny)",
                                 "Booked a window seat to Lisbon. (Lisbon: 22°C and sunny)"]
    assert memory["forecast_runs"] == 1  # the second conversation's call was a cache hit
    assert any("recalled by meaning from conversation 1: I always want a window seat" in line
               for line in lines)
    assert sum("cache hit, skipped" in line for line in lines) == 1
    assert lines == again and memory["requests"] == memory2["requests"]  # stable output


def test_the_demo_embedding_is_deterministic_and_by_words() -> None:
    a, b, c = embed(["window seats on flights", "which seat on the flight", "Lisbon weather"])
    assert embed(["window seats on flights"])[0] == a
    dot = lambda x, y: sum(p * q for p, q in zip(x, y, strict=True))  # noqa: E731
    assert dot(a, b) > dot(a, c)


def test_the_demo_prints_the_same_counts_on_every_run() -> None:
    """Requests, rows and (rounded) bytes do not vary between runs; only ids and keys do."""
    import re

    from d1saver.demo import run

    def counts() -> list[str]:
        lines: list[str] = []
        run(echo=lambda *a: lines.append(" ".join(map(str, a))))
        varying = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}|key id|stored checkpoint: e:|holds ")
        return [line for line in lines if not varying.search(line)]

    assert counts() == counts()
