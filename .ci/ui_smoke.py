"""Smoke test of the web inspector in an installed wheel with the `ui` extra, run by
.ci/wheel-check from an empty folder: its templates and stylesheet came with the wheel, and a
page renders a thread stored on the embedded local D1 (in-process, through httpx's WSGI
transport), read-only."""

import sys
from pathlib import Path

import httpx
from langgraph.checkpoint.base import empty_checkpoint

import d1saver
from d1saver import D1Saver
from d1saver.local import LocalD1, LocalD1Transport
from d1saver.ui.app import Inspector

installed = Path(d1saver.__file__).resolve()
assert installed.is_relative_to(Path(sys.prefix).resolve()), f"imported from {installed}"
where = dict(account_id="smoke", database_id="smoke", api_token="local",
             api_base_url="http://d1.local/client/v4", transport=LocalD1Transport(LocalD1()))
with D1Saver(**where) as saver:
    saver.put({"configurable": {"thread_id": "smoke-thread", "checkpoint_ns": ""}},
              empty_checkpoint(), {"source": "input", "step": -1}, {})
with D1Saver(**where, auto_setup=False) as reader:
    client = httpx.Client(transport=httpx.WSGITransport(app=Inspector(reader)), base_url="http://ui")
    page = client.get("/")
    assert page.status_code == 200 and "smoke-thread" in page.text, page.text[:500]
    css = client.get("/static/style.css")
    assert css.status_code == 200 and "font" in css.text, css.status_code
    assert client.get("/api/threads").json()[0]["thread_id"] == "smoke-thread"
print(f"ui smoke test: ok (templates from {installed.parent / 'ui'})")
