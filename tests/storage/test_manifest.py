"""Manifests of content-addressed values (d1saver/storage/manifest.py): round trips, what is sent, and
the stored format pinned (a manifest names its chunks forever)."""

from __future__ import annotations

import hashlib

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from d1saver.storage import chunking as _chunking
from d1saver.storage import codec as _codec
from d1saver.storage import manifest as _manifest
from d1saver.storage import values as _values
from d1saver.storage.chunking import chunk_id
from d1saver.core.errors import StoredValueError

SERDE = JsonPlusSerializer()


def state(n: int, *, human: bool = True) -> bytes:
    msgs = [HumanMessage(content="hello", id="h")] if human else []
    msgs += [AIMessage(content=f"message {i} " + "x" * 300, id=f"m{i}") for i in range(n)]
    return SERDE.dumps_typed({"v": 4, "id": "c", "channel_values": {"messages": msgs}})[1]


def store(packed: _manifest.Packed, chunks: dict[str, str]) -> None:
    for c in packed.new:
        chunks.setdefault(c.id, c.data)


def test_round_trip_and_only_new_chunks_are_sent() -> None:
    chunks: dict[str, str] = {}
    first = _manifest.pack(state(100), set(), _codec.encode)
    assert first is not None
    store(first, chunks)
    assert _manifest.unpack(first.text, chunks, _codec.decode) == state(100)
    second = _manifest.pack(state(101), first.reached, _codec.encode)
    assert second is not None
    # One new message; at most the tree nodes over it besides.
    assert [c.level for c in second.new][:1] == [0] and len(second.new) <= 4
    store(second, chunks)
    assert _manifest.unpack(second.text, chunks, _codec.decode) == state(101)


def test_the_row_lists_few_entries_at_any_length() -> None:
    for n in (50, 200, 800):
        packed = _manifest.pack(state(n), set(), _codec.encode)
        assert packed is not None and len(packed.text.split(",")) < 40


def test_children_come_before_their_nodes() -> None:
    packed = _manifest.pack(state(300), set(), _codec.encode)
    assert packed is not None
    seen: set[str] = set()
    for c in packed.new:
        if c.level:
            assert all(ref.lstrip("^") in seen for ref in c.data.split(","))
        seen.add(c.id)


def test_a_short_message_in_a_long_conversation_is_a_chunk() -> None:
    """In a list of 8 elements or more, elements from 128 bytes are stored apart: the first
    user message is not sent again inline with every checkpoint."""
    packed = _manifest.pack(state(20), set(), _codec.encode)
    assert packed is not None
    human = SERDE.dumps_typed(HumanMessage(content="hello", id="h"))[1]
    assert 128 <= len(human) < 256
    assert chunk_id(human) in packed.reached


def test_no_stored_piece_means_no_manifest() -> None:
    assert _manifest.pack(SERDE.dumps_typed({"a": 1})[1], set(), _codec.encode) is None


def test_entries_need_no_escaping() -> None:
    packed = _manifest.pack(state(60), set(), _codec.encode)
    assert packed is not None
    for text in [packed.text, *(c.data for c in packed.new)]:
        assert '"' not in text and "\\" not in text
    assert all("," not in e for c in packed.new if not c.level for e in [c.data])


def test_a_missing_chunk_is_a_key_error() -> None:
    packed = _manifest.pack(state(30), set(), _codec.encode)
    assert packed is not None
    chunks = {c.id: c.data for c in packed.new[1:]}
    with pytest.raises(KeyError):
        _manifest.unpack(packed.text, chunks, _codec.decode)


def test_format_is_pinned() -> None:
    """Changing the cut rules, the tree's boundaries or the entry syntax changes this digest:
    rows already stored keep their manifests, but new ones would stop sharing chunks with
    them. Change it only with a new marker (docs/STORAGE_DESIGN.md)."""
    packed = _manifest.pack(state(120), set(), lambda b: "b:" + hashlib.sha256(b).hexdigest())
    assert packed is not None
    digest = hashlib.sha256("\n".join(
        [packed.text, *(f"{c.id} {c.level} {c.data}" for c in packed.new)]).encode()).hexdigest()
    assert (len(packed.new), sum(c.level > 0 for c in packed.new)) == PINNED_COUNTS
    assert digest == PINNED_DIGEST


# Schema v9's format: ids in base85, domain-separated (leaf and node tags), nodes of about 4
# children. (Schema v8 hashed leaves bare and nodes as "^" + text: (161, 40), 150f8b2b...;
# schema v7 wrote base64url ids and nodes of about 8: (139, 18), c58bf793...; neither was
# released, and the rows of both still read.)
PINNED_COUNTS = (160, 39)
PINNED_DIGEST = "3fcd048bee5b0a9c2c5434e7f1f315c7e364532ad91a52cad8fb76625ac463e6"


def test_a_lone_chunk_gets_no_node() -> None:
    """A write of one message lists its chunk, never a node over it alone: such a node would
    be a row (and an id) no checkpoint ever lists, since a checkpoint groups the message with
    its neighbours."""
    for i in range(200):
        value = SERDE.dumps_typed([AIMessage(content=f"reply {i} " + "y" * 300, id=f"a{i}")])[1]
        packed = _manifest.pack(value, set(), _codec.encode)
        assert packed is not None
        (leaf,) = [c.id for c in packed.new if c.level == 0]
        if _manifest._closes(leaf):  # the case a fold would close a node over
            break
    else:
        pytest.fail("no message of 200 has an id that closes a node")
    assert [c.level for c in packed.new] == [0]
    assert "^" not in packed.text


def test_two_chunks_whose_first_closes_a_node_are_folded() -> None:
    """A write of two messages whose first id closes a node lists that node and the second
    message: from two refs on, a run is folded as in a checkpoint (the node is the one a
    longer list starting with these messages lists too)."""
    for i in range(200):
        msgs = [AIMessage(content=f"reply {i}.{k} " + "y" * 300, id=f"a{i}.{k}") for k in (0, 1)]
        value = SERDE.dumps_typed(msgs)[1]
        packed = _manifest.pack(value, set(), _codec.encode)
        assert packed is not None
        leaves = [c.id for c in packed.new if c.level == 0]
        if _manifest._closes(leaves[0]):
            break
    else:
        pytest.fail("no pair of 200 has a first id that closes a node")
    assert [c.level for c in packed.new][:3] == [0, 0, 1] and "^" in packed.text
    chunks: dict[str, str] = {}
    store(packed, chunks)
    assert _manifest.unpack(packed.text, chunks, _codec.decode) == value


def test_a_damaged_chunk_is_refused_not_read_as_other_bytes() -> None:
    """"r:" has no checksum: a chunk whose stored text decodes to other bytes (or to nothing) is
    a typed error when read, never a value that silently differs."""
    packed = _manifest.pack(state(12), set(), _codec.encode)
    assert packed is not None
    chunks = {c.id: c.data for c in packed.new}
    leaf = next(c for c in packed.new if c.level == 0)
    node = next(c for c in packed.new if c.level > 0)
    other = _codec.encode(SERDE.dumps_typed(AIMessage(content="not this", id="x"))[1])
    for chunk, text in ((leaf.id, other), (leaf.id, "r:" + "A" * 40),
                        (node.id, node.data.split(",")[0])):
        with pytest.raises(StoredValueError):
            _values.unpack(packed.text, {**chunks, chunk: text})
    assert _values.unpack(packed.text, chunks) == state(12)


def test_ids_of_schema_v8_are_checked_too() -> None:
    """Schema v8 (never released) hashed a leaf bare and a node as "^" + its text: its rows
    still read and are still checked; new ids are the domain-separated ones."""
    def v8(data: bytes) -> str:
        return _chunking._id_text(hashlib.sha256(data).digest()[:20])

    a, b = (SERDE.dumps_typed(AIMessage(content=f"v8 {i} " + "z" * 300, id=f"v8-{i}"))[1]
            for i in range(2))
    text = f"{v8(a)},{v8(b)}"
    node = v8(b"^" + text.encode())
    chunks = {v8(a): _codec.encode(a), v8(b): _codec.encode(b), node: text}
    assert _values.unpack("m:^" + node, chunks) == a + b
    assert _chunking.names(node, text.encode(), _chunking.NODE)
    assert not _chunking.names(node, text.encode())  # a node's id never names a leaf
    assert _chunking.chunk_id(a) != v8(a)


def _nested(levels: int) -> tuple[str, dict[str, str]]:
    """A manifest over `levels` nodes, each the only child of the one above, over one leaf."""
    leaf = b"the leaf's bytes"
    ref = chunk_id(leaf)
    chunks = {ref: _codec.encode(leaf)}
    for _ in range(levels):
        nid = _chunking.node_id(ref)
        chunks[nid] = ref
        ref = _manifest.NODE + nid
    return _manifest.MARKER + ref, chunks


def test_a_tree_deeper_than_65_nodes_is_refused() -> None:
    """A real tree is a few levels deep (FANOUT children a node); the reader follows 65 nested
    nodes and refuses a 66th as damaged, never recursing without end."""
    text, chunks = _nested(65)
    assert _manifest.unpack(text, chunks, _codec.decode) == b"the leaf's bytes"
    text, chunks = _nested(66)
    with pytest.raises(ValueError, match="too deep"):
        _manifest.unpack(text, chunks, _codec.decode)
