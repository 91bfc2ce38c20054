"""The serializer policy (d1saver/storage/serde.py): LangGraph's own default without a key; any type
from an authenticated row with one."""

from __future__ import annotations

import sqlite3

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

from d1saver.storage.serde import default_serde, trusted_serde
from tests.saver.test_state_types import Answer, Question

STRICT = JsonPlusSerializer(allowed_msgpack_modules=None)


def policy(serde: SerializerProtocol) -> tuple:
    assert isinstance(serde, JsonPlusSerializer)
    return (type(serde), serde.pickle_fallback, serde._allowed_json_modules,
            serde._allowed_msgpack_modules)


def test_default_serde_is_what_langgraphs_savers_use() -> None:
    conn = sqlite3.connect(":memory:")
    try:
        assert policy(default_serde()) == policy(SqliteSaver(conn).serde)
    finally:
        conn.close()
    assert policy(default_serde()) == policy(InMemorySaver().serde)


@pytest.mark.parametrize("value", [Question("which?", ["a"]), Answer(choice="a", confidence=1.0)])
def test_trusted_serde_constructs_what_strict_refuses(value: object) -> None:
    stored = STRICT.dumps_typed(value)
    assert isinstance(STRICT.loads_typed(stored), dict)  # blocked: the raw arguments
    assert trusted_serde(STRICT).loads_typed(stored) == value
    assert trusted_serde().loads_typed(stored) == value


def test_trusted_serde_keeps_the_bases_json_and_pickle_policy() -> None:
    base = JsonPlusSerializer(pickle_fallback=True, allowed_json_modules=[("a", "B")],
                              allowed_msgpack_modules=None)
    assert policy(trusted_serde(base)) == (JsonPlusSerializer, True, {("a", "B")}, True)


def test_a_compiled_graphs_allowlist_cannot_narrow_the_trusted_serde() -> None:
    # What compile() does under LANGGRAPH_STRICT_MSGPACK (BaseCheckpointSaver.with_allowlist).
    trusted = trusted_serde(STRICT)
    assert trusted.with_msgpack_allowlist([("x", "Y")]) is trusted


def test_a_serializer_d1saver_cannot_rebuild_is_kept() -> None:
    class Custom(JsonPlusSerializer):
        pass

    custom = Custom(allowed_msgpack_modules=None)
    hooked = JsonPlusSerializer(__unpack_ext_hook__=lambda code, data: None)
    assert trusted_serde(custom) is custom
    assert trusted_serde(hooked) is hooked
