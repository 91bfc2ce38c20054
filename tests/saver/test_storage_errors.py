"""Paths of storage/ that only bad input or damaged data reach: each ends in its typed error
(and a put in one before anything is sent), and the associated data of two places never
encodes alike."""

from __future__ import annotations

import uuid

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from d1saver.core.errors import SerializationError
from d1saver.storage import codec
from d1saver.storage.crypto import Binding
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
