"""The official langgraph-checkpoint-conformance suite, base and extended: 81 of 81."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate

from tests.conftest import Backend


@pytest.mark.anyio
async def test_conformance_81_of_81(backend: Backend) -> None:
    @checkpointer_test(name=f"D1Saver[{backend.name}]")
    async def factory():
        saver = backend.saver()
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
