"""Content-addressed chunks and compaction (issue 12): the job leaves every thread's chunk
table exact (what the kept and tagged checkpoints reach, nothing else), and `d1saver check`
reports the threads that break exactness (exit 1) or none (exit 0)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import ToolMessage

from benchmarks.workload import prose
from d1saver.compaction import compact
from d1saver import D1Saver
from tests.compaction.test_cli import TOKEN, cli, env_for
from tests.conftest import Backend
from tests.saver.content import (assert_exact, chunk_ids, chunk_levels, converse, fork,
                                 inexact, new_thread, query)


def states(graph: Any, config: dict[str, Any], tagged: dict[str, Any]) -> list[Any]:
    """The graph's state at the head and at every tagged checkpoint."""
    return [graph.get_state(c).values for c in [config, *tagged.values()]]


@pytest.mark.parametrize("variant", ["plain", "delta"])
def test_compaction_keep_1_with_tags_leaves_exact_chunks(backend: Backend, variant: str) -> None:
    """Two conversations, one with a tag on an early checkpoint; `--keep 1` keeps the heads
    and the tagged one: they read as before, chunks only they reached are gone, none missing."""
    saver = backend.saver()
    tagged_tid, plain_tid = new_thread("tag"), new_thread("cmp")
    options = {"snapshot_frequency": 4} if variant == "delta" else {}
    graph, config = converse(saver, tagged_tid, turns=6, variant=variant, **options)
    converse(saver, plain_tid, turns=5, variant=variant, **options)
    for tid in (tagged_tid, plain_tid):
        fork(graph, saver, tid)
    early = list(saver.list(config))[-4]  # a few steps into the conversation
    saver.tag(early.config, "early")
    tagged = {"early": early.config}
    before = states(graph, config, tagged)
    stored = {t: chunk_ids(saver, t) for t in (tagged_tid, plain_tid)}
    # Plain: the conversation's lists are trees of nodes; DeltaChannel: its snapshots' messages.
    assert all(chunk_levels(saver, t)[1 if variant == "plain" else 0] > 0 for t in stored)
    assert_exact(saver, tagged_tid, plain_tid)

    summary = compact(saver, keep=1, threads=[tagged_tid, plain_tid])
    assert summary.checkpoints_deleted > 0
    assert states(graph, config, tagged) == before
    if variant == "plain":  # a DeltaChannel head keeps what it replays from (no re-seeding yet)
        assert len(list(saver.list(config))) == 2
        assert len(list(saver.list({"configurable": {"thread_id": plain_tid}}))) == 1
    for t in stored:
        assert chunk_ids(saver, t) < stored[t], t  # some went: the check is not vacuous
    assert_exact(saver, tagged_tid, plain_tid)
    # The threads run on.
    graph.invoke({"messages": []}, config)
    assert_exact(saver, tagged_tid)


# --- `d1saver check` ----------------------------------------------------------------------------


def test_check_command(serve: Callable[..., str]) -> None:
    """Exact: exit 0. A chunk deleted (missing) or one left unreferenced: the thread is
    printed, exit 1; --thread-id narrows; --json lists the figures; compaction repairs the
    unreferenced one."""
    env = env_for(serve())
    with D1Saver(account_id=env["CLOUDFLARE_ACCOUNT_ID"], database_id=env["D1_DATABASE_ID"],
                 api_token=TOKEN, api_base_url=env["D1_API_BASE_URL"]) as saver:
        good, bad = new_thread("good"), new_thread("bad")
        converse(saver, good, turns=3)
        converse(saver, bad, turns=3)
        result = cli(env, "check")
        assert result.exit_code == 0, result.stdout + result.stderr
        assert "every thread: chunk table exact" in result.stdout

        # One chunk of `bad` gone (its rows reach it), one orphan added.
        victim = query(saver, "SELECT MIN(id) FROM d1saver_chunks WHERE thread_id = ?1 "
                              "AND level = 0", bad)[0][0]  # a leaf: its loss orphans nothing
        query(saver, "DELETE FROM d1saver_chunks WHERE thread_id = ?1 AND id = ?2", bad, victim)
        query(saver, "INSERT INTO d1saver_chunks (thread_id, id, level, data) "
                     "VALUES (?1, 'orphan', 0, 'b:x')", good)
        result = cli(env, "check")
        assert result.exit_code == 1
        lines = result.stdout.splitlines()
        assert f"{bad}: 1 chunks missing, 0 unreferenced" in lines
        assert f"{good}: 0 chunks missing, 1 unreferenced" in lines
        assert lines[-1] == "2 threads not exact"

        result = cli(env, "check", "--thread-id", good, "--json")
        assert result.exit_code == 1
        assert json.loads(result.stdout) == [{"thread_id": good, "missing": 0, "unreferenced": 1}]

        # Several databases: each is checked, each thread names its own.
        other = f"{env['D1_DATABASE_ID']}-2"
        result = cli({**env, "D1_DATABASE_ID": f"{env['D1_DATABASE_ID']},{other}"}, "check")
        assert result.exit_code == 1
        assert f"{bad} ({env['D1_DATABASE_ID']}): 1 chunks missing, 0 unreferenced" in result.stdout

        compact(saver, keep=1, threads=[good])  # its retention batch collects the orphan
        assert inexact(saver, good) == []
        result = cli(env, "check", "--thread-id", good)
        assert result.exit_code == 0 and f"thread {good}: chunk table exact" in result.stdout
        assert_exact(saver, good)


@pytest.mark.parametrize("whole", [False, True], ids=["named", "whole database"])
def test_compaction_collects_unreferenced_chunks_of_a_thread_it_keeps_whole(
        backend: Backend, whole: bool) -> None:
    """A checkpoint put again with other content, by savers that did not know it stored (other
    processes: one that knows collects at once), leaves its first content's chunks; the next
    compaction must collect them, also where it deletes no checkpoint (the thread is marked
    when its row is replaced, and the plan includes it: schema 14)."""
    saver, tid = backend.saver(), new_thread("keep")
    graph, config = converse(saver, tid, turns=2)
    head = saver.get_tuple(config)
    assert head is not None
    other = [ToolMessage(prose("orphan"), tool_call_id="x", id="orphan")]
    backend.saver().put(head.config, {**head.checkpoint, "channel_values": {"messages": other}},
                        head.metadata, {})
    backend.saver().put(head.config, head.checkpoint, head.metadata, {})  # `other` unreferenced
    assert inexact(saver, tid)[0].unreferenced == 1
    summary = compact(saver, keep=100, threads=None if whole else [tid])
    assert summary.checkpoints_deleted == 0 and summary.batches >= 1
    assert_exact(saver, tid)
    # Collected: the next run has nothing to do there (no batch for a thread kept whole).
    assert compact(saver, keep=100, threads=[tid]).batches == 0
