"""The official langgraph-checkpoint-conformance suite, base and extended: 81 of 81, without
and with encryption keys (every value sealed and bound to its row)."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate

from tests.conftest import Backend

KEYS = [bytes([7]) * 32, bytes([8]) * 32]  # newest first: rows are sealed under the first


@pytest.mark.anyio
@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keys"])
async def test_conformance_81_of_81(backend: Backend, keyed: bool) -> None:
    @checkpointer_test(name=f"D1Saver[{backend.name}{', keys' if keyed else ''}]")
    async def factory():
        saver = backend.saver(**({"encryption_keys": KEYS} if keyed else {}))
        await saver.asetup()
        yield saver
        await saver.aclose()

    report = await validate(factory)
    summary = {cap: (r.detected, r.tests_passed, r.tests_failed, r.failures)
               for cap, r in report.results.items()}
    failures = [f for r in report.results.values() for f in r.failures]
    assert not failures, "\n".join(failures)
    assert all(detected for detected, *_ in summary.values()), summary
    passed = sum(r.tests_passed for r in report.results.values())
    assert passed == 81, summary
