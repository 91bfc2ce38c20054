"""worker/compaction.generated.js is what `d1saver gateway build` makes of d1saver's catalogue:
the Worker's scheduled compaction sends the CLI's statements, written once."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from d1saver.compaction import gateway
from d1saver import Result, admin
from d1saver.cli.commands import app
from d1saver.sql import catalogue as _sql
from d1saver.sql.query import q
from tests.realengine import ROOT

GENERATED = ROOT / gateway.GENERATED_PATH


def _generated() -> dict:
    text = GENERATED.read_text(encoding="utf-8")
    return json.loads(text.split("export default ", 1)[1].rstrip().rstrip(";"))


def test_the_committed_file_is_what_the_catalogue_generates():
    assert GENERATED.read_text(encoding="utf-8") == gateway.render(), (
        "worker/compaction.generated.js differs from d1saver's catalogue: run `d1saver gateway build`")


def test_a_changed_statement_is_caught(monkeypatch: pytest.MonkeyPatch):
    """The check is not vacuous: a catalogue edit (here, the lease's) changes the render."""
    before = gateway.render()
    monkeypatch.setattr(_sql, "ACQUIRE_LEASE", q(_sql.ACQUIRE_LEASE.text + " AND 1",
                                                 name="ACQUIRE_LEASE"))
    assert gateway.render() != before
    monkeypatch.setattr(admin, "retention_summary",
                        lambda stmts, results: results[0])  # a different summary statement
    assert json.loads(gateway.render().split("export default ", 1)[1].rstrip()[:-1])[
        "summary_index"] == 0


def test_build_command_and_its_check(tmp_path, monkeypatch: pytest.MonkeyPatch):
    out = tmp_path / "compaction.generated.js"
    runner = CliRunner()
    assert runner.invoke(app, ["gateway", "build", "--check", "--out", str(out)]).exit_code == 1
    done = runner.invoke(app, ["gateway", "build", "--out", str(out)])
    assert done.exit_code == 0 and "wrote" in done.output
    assert out.read_text(encoding="utf-8") == GENERATED.read_text(encoding="utf-8")
    assert runner.invoke(app, ["gateway", "build", "--check", "--out", str(out)]).exit_code == 0
    out.write_text(out.read_text(encoding="utf-8").replace("d1saver_scope", "d1saver_scop"))
    checked = runner.invoke(app, ["gateway", "build", "--check", "--out", str(out)])
    assert checked.exit_code == 1 and "gateway build" in checked.output


def test_every_statement_is_the_catalogues_and_every_parameter_traced():
    doc = _generated()
    sent = [s for group in doc["statements"].values() for s in group]
    sent += [s for group in doc["migrations"].values() for s in group]
    catalogue = {query.name: query.sql for query in _sql.STATEMENTS}
    assert all(catalogue[s["name"]] == s["sql"] for s in sent)  # no SQL of the Worker's own
    assert doc["schema_version"] == _sql.SCHEMA_VERSION
    # Retention as `d1saver compact` sends it (job._run_batch): the CLI's statements, in order.
    assert [s["sql"] for s in doc["statements"]["retention"]] == [
        s.sql for s in admin.retention(["t"], 3, summarize=True, delete=True)]
    # Numbers travel as numbers, where the CLI's JSON carries ints: each CAST stays as it is.
    assert doc["slots"]["keep"] == doc["slots"]["ttl"] == doc["slots"]["size"] == "number"
    assert doc["slots"]["thread_ids"] == "hex_json_list"


def test_the_worker_writes_no_sql_of_its_own():
    source = (ROOT / "worker" / "compaction.js").read_text(encoding="utf-8")
    assert not re.search(r"\b(SELECT|INSERT|UPDATE|DELETE)\b", source.replace("DELETE_", ""))


def test_the_plan_and_the_end_of_a_run_are_the_clis():
    """One policy (issue 30, fact 13): the Worker plans each page with the statement the CLI
    plans with, ends a run with the batch the CLI ends with (leftovers, the memory and cache
    sweep, the lease's release), and reads its figures where `admin.finished` reads them."""
    doc = _generated()
    plan = admin.retention_plan("", 1000, 2, None, batch_checkpoints=2000, batch_threads=100)
    assert [s["sql"] for s in doc["statements"]["plan_page"]] == [plan.sql]
    finish = admin.finish("compaction", "holder")
    assert [s["sql"] for s in doc["statements"]["finish"]] == [s.sql for s in finish]
    marked = [Result(list(_sql.SCOPED_COLUMNS), [[100 + i]], {"changes": i})
              for i in range(len(finish))]
    figures = admin.finished(finish, marked)
    for name, at in doc["finish_figures"].items():
        value = (marked[at["statement"]].rows[0][0] if at["read"] == "row"
                 else marked[at["statement"]].changes)
        assert getattr(figures, name) == value, name
    assert doc["page_size"] == 1000 and doc["sweep_margin"] == admin.SWEEP_MARGIN


def test_the_worker_batches_nothing_itself():
    """How threads group into batches is the plan's (SQL): the Worker only follows it."""
    source = (ROOT / "worker" / "compaction.js").read_text(encoding="utf-8")
    assert "plan_page" in source and "S.finish" in source
    assert not re.search(r"weight|\bload\b|count <= |checkpoints\) - ", source)
