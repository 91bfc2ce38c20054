"""Bad input gets a clear typed error before anything is sent: an unknown prune strategy or
rekey table, a thread id that is not valid Unicode, a tag of a checkpoint that does not exist
(that one after its one request: only D1 knows)."""

from __future__ import annotations

import pytest

from d1saver import ConfigError, NotFoundError, SerializationError
from d1saver.ops import statements as st
from d1saver.sql.catalogue import SCHEMA_VERSION
from tests.compaction import cfg, checkpoint_id
from tests.conftest import Backend

K1 = bytes([31]) * 32


def test_an_unknown_prune_strategy_is_refused_before_sending(local: Backend) -> None:
    saver = local.saver()
    saver.setup()
    before = len(local.events)
    with pytest.raises(ConfigError, match="unknown prune strategy 'oldest'"):
        saver.prune(["t"], strategy="oldest")
    assert len(local.events) == before


def test_an_unknown_rekey_table_is_refused_before_sending(local: Backend) -> None:
    saver = local.saver(encryption_keys=[K1])
    saver.setup()
    before = len(local.events)
    with pytest.raises(ConfigError, match="unknown table 'checkpoint'"):
        saver.rekey("checkpoint")
    assert len(local.events) == before


def test_a_thread_id_that_is_not_unicode_is_refused_before_sending(local: Backend) -> None:
    saver = local.saver()
    saver.setup()
    before = len(local.events)
    with pytest.raises(SerializationError, match="not valid Unicode"):
        saver.prune(["ok", "bad\ud800"], strategy="delete")
    assert len(local.events) == before


def test_tagging_a_checkpoint_that_does_not_exist_is_not_found(local: Backend) -> None:
    saver = local.saver()
    with pytest.raises(NotFoundError, match="to tag"):
        saver.tag(cfg("t", checkpoint_id=checkpoint_id(1)), "kept")
    assert saver.tags(cfg("t")) == {}


@pytest.mark.parametrize("version", [0, 1, SCHEMA_VERSION + 1])
def test_there_is_no_migration_outside_2_to_the_schema_version(version: int) -> None:
    """Version 1 is schema.sql's first form: a database reaches it by setup, not a step."""
    with pytest.raises(ValueError, match=f"no migration to version {version}"):
        st.migration_statements(version)
