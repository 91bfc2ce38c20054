"""Values stored over several rows: one whose pieces are not all returned (a row lost, D1's
answer cut short) is a typed ResponseError naming what is missing, never a value read from
what is left; metadata in pieces keeps a bounded filterable part in its column."""

from __future__ import annotations

import base64
import os

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from d1saver import Statement
from d1saver.core.errors import ResponseError
from tests.compaction import cfg, checkpoint_id, query
from tests.conftest import Backend


def test_metadata_with_a_lost_piece_is_a_response_error(local: Backend) -> None:
    saver = local.saver()
    cp = empty_checkpoint()
    cp.update(id=checkpoint_id(0))
    saver.put(cfg("t"), cp, {"note": base64.b64encode(os.urandom(1_600_000)).decode()}, {})
    assert saver.get_tuple(cfg("t")) is not None
    saver.execute([Statement("DELETE FROM chunks WHERE thread_id = 't' AND owner = ':metadata'")])
    with pytest.raises(ResponseError, match=r"stored in \d+ chunks, 0 found"):
        saver.get_tuple(cfg("t"))


def test_a_value_stored_by_content_with_a_lost_chunk_is_a_response_error(local: Backend
                                                                         ) -> None:
    saver = local.saver()
    cp = empty_checkpoint()
    cp.update(id=checkpoint_id(0), channel_values={"x": os.urandom(50_000)},
              channel_versions={"x": "1"})
    saver.put(cfg("t"), cp, {}, {"x": "1"})
    assert saver.get_tuple(cfg("t")) is not None
    (lost,) = query(saver, "SELECT id FROM d1saver_chunks WHERE thread_id = 't' LIMIT 1")[0]
    saver.execute([Statement("DELETE FROM d1saver_chunks WHERE thread_id = 't' AND id = ?1",
                             (lost,))])
    with pytest.raises(ResponseError, match="value lists chunk"):
        saver.get_tuple(cfg("t"))


def test_metadata_in_pieces_keeps_at_most_64_kb_of_keys_in_its_column(local: Backend) -> None:
    """Metadata over the row limit keeps in its column only as many small keys as fit 64 KB
    (the rest are filtered in Python, from the pieces); every key still filters and reads
    back."""
    saver = local.saver()
    cp = empty_checkpoint()
    cp.update(id=checkpoint_id(0))
    small = {f"k{i:03}": "v" * 3_000 for i in range(40)}  # 40 keys of 3 KB: 120 KB
    saver.put(cfg("t"), cp, {"note": base64.b64encode(os.urandom(1_600_000)).decode(), **small},
              {})
    ((column,),) = query(saver, "SELECT LENGTH(metadata) FROM checkpoints WHERE thread_id = 't'")
    assert 30_000 < column <= 65_536
    tup = saver.get_tuple(cfg("t"))
    assert tup is not None and {k: tup.metadata[k] for k in small} == small
    assert [len(list(saver.list(cfg("t"), filter={k: v}))) for k, v in small.items()] == [1] * 40
