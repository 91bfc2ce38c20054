"""rekey's figures per table (`summary.tables`, in `d1saver rekey --json`) say what the census
after it says: the plaintext rows each table still holds, the rows it re-sealed. A plaintext
pack (one put_writes call's writes in one row, written before keys were set) is one row left."""

from __future__ import annotations

from d1saver.compaction.rekey import rekey
from tests.compaction import put_chain
from tests.compaction.test_rekey import K1, K2
from tests.conftest import Backend


def test_the_per_table_figures_add_up_to_the_census(local: Backend) -> None:
    put_chain(local.saver(), "plain", 2, writes=2)  # before any key: left as plaintext, packed
    put_chain(local.saver(encryption_keys=[K1]), "old", 1)  # re-sealed under K2
    done = rekey(local.saver(encryption_keys=[K2, K1]))
    assert done.tables == {
        "checkpoints": {"rewritten": 1, "plaintext_left": 2, "pages": 1},
        "writes": {"rewritten": 1, "plaintext_left": 2, "pages": 1}}
    for table, figures in done.tables.items():
        assert figures["plaintext_left"] == done.after[table].get("plaintext", 0)
    assert sum(f["plaintext_left"] for f in done.tables.values()) == done.plaintext_left == 4
