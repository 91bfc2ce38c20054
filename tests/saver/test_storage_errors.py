"""Paths of storage/ that only bad input or damaged data reach: each ends in its typed error
(and a put in one before anything is sent), and the associated data of two places never
encodes alike."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from d1saver import Statement
from d1saver.core.errors import ConfigError, SerializationError, StoredValueError
from d1saver.storage import codec
from d1saver.storage.crypto import Binding, Sealer, checkpoint_binder
from d1saver.storage.values import Values, bound_columns
from tests.conftest import Backend


def test_bindings_with_a_missing_field_in_different_places_encode_apart() -> None:
    """(None, "a") and ("a", None): a sealed value opens only where it was sealed."""
    assert bytes(Binding("write", (None, "a"))) != bytes(Binding("write", ("a", None)))
    assert bytes(Binding("write", (None,))) != bytes(Binding("write", ("",)))


def test_a_damaged_raw_deflate_value_is_a_value_error() -> None:
    good = codec._raw_deflate(b"some text " * 20)
    assert codec._raw_inflate(good) == b"some text " * 20
    with pytest.raises(ValueError, match="damaged"):
        codec._raw_inflate(b"\xff" * 16)


def test_oversized_metadata_that_is_not_unicode_fails_before_anything_is_sent(
        local: Backend) -> None:
    saver = local.saver()
    saver.setup()
    config = {"configurable": {"thread_id": f"md-{uuid.uuid4().hex[:8]}", "checkpoint_ns": ""}}
    metadata = {"step": 0, "note": "\ud800" + "a" * 2_100_000}  # a lone surrogate, over 2 MB
    _, requests = local.count(lambda: pytest.raises(
        SerializationError, saver.put, config, empty_checkpoint(), metadata, {}))
    assert requests == 0


def test_keyed_metadata_that_is_not_unicode_fails_before_anything_is_sent(
        local: Backend) -> None:
    """With keys, metadata beyond LangGraph's own fields is sealed inside the value: a lone
    surrogate there is refused as it is without keys, before any request."""
    saver = local.saver(encryption_keys=[bytes([7]) * 32])
    saver.setup()
    config = {"configurable": {"thread_id": f"md-{uuid.uuid4().hex[:8]}", "checkpoint_ns": ""}}
    _, requests = local.count(lambda: pytest.raises(
        SerializationError, saver.put, config, empty_checkpoint(), {"step": 0, "note": "\ud800"}, {}))
    assert requests == 0


def test_sealed_metadata_that_is_authentic_but_not_json_is_a_stored_value_error() -> None:
    """With keys, the metadata beyond LangGraph's fields is sealed with the checkpoint: sealed
    under the right key and binding (a newer d1saver's framing, say) but not JSON, the read
    fails with StoredValueError, never with the checkpoint and other metadata."""
    values = Values(JsonPlusSerializer(), Sealer([bytes([7]) * 32]))
    type_, data = values.serialize(empty_checkpoint())
    bind, plain = checkpoint_binder("t", "", "c1"), {"step": 1}
    assert values.sealer is not None
    text = values.sealer.seal_text(b"{not json\x00" + data,
                                   bind(type_, bound_columns(plain, None)), flag=True)
    with pytest.raises(StoredValueError, match="stored metadata cannot be read"):
        values.load_checkpoint(type_, text, None, json.dumps(plain), None, bind)


def test_metadata_whose_chunks_are_damaged_is_a_stored_value_error(local: Backend) -> None:
    """Metadata over a row's room lives in chunks of owner ':metadata'; a damaged chunk makes
    the read fail with StoredValueError, never return the checkpoint without its metadata."""
    saver = local.saver()
    thread = f"md-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    stored = saver.put(config, empty_checkpoint(), {"step": 0, "big": "b" * 2_100_000}, {})
    saver.client.execute([Statement(
        "UPDATE chunks SET data = 'b:bm90IGpzb24' WHERE thread_id = ?1 AND owner = ':metadata'",
        (thread,))])
    for read in (lambda: saver.get_tuple(stored), lambda: list(saver.list(config))):
        with pytest.raises(StoredValueError, match="stored metadata cannot be read"):
            read()


def test_re_sealing_without_keys_is_a_config_error() -> None:
    """Copies and rekeying re-seal stored values: without keys that is a ConfigError naming
    the setting, not a failure half way."""
    values = Values(JsonPlusSerializer())
    old, new = Binding("write", ("a",)), Binding("write", ("b",))
    text = codec.encode(b"\x92\x01\x02")
    with pytest.raises(ConfigError, match="encryption_keys"):
        values.reseal(text, None, "", old, new, plaintext=True)
    with pytest.raises(ConfigError, match="encryption_keys"):
        values.reseal_checkpoint("msgpack", text, None, "{}", None, lambda *_: old,
                                 lambda *_: new, plaintext=True)


class _Refusing(JsonPlusSerializer):
    """A serde with its own policy, refusing to load with a d1saver error of its choice."""

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        raise ConfigError("this serde loads nothing today")


def test_a_serdes_own_d1_error_reaches_the_caller_unchanged(local: Backend) -> None:
    """A serde that refuses with a d1saver error (its own policy: a setting, a key) is heard
    as it said it, not wrapped as a StoredValueError."""
    saver = local.saver(serde=_Refusing())
    config = {"configurable": {"thread_id": f"serde-{uuid.uuid4().hex[:8]}", "checkpoint_ns": ""}}
    stored = saver.put(config, empty_checkpoint(), {"step": 0}, {})
    with pytest.raises(ConfigError, match="loads nothing today") as info:
        saver.get_tuple(stored)
    assert not isinstance(info.value, StoredValueError)
