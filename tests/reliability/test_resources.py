"""A plain script that never closes its saver leaves no socket open: no ResourceWarning at
exit, sync or async (the HTTP clients close at exit, or with their event loop)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from d1saver.local.server import make_server

SCRIPT = """
import asyncio, sys, warnings
warnings.simplefilter("always")
from d1saver import D1Saver
from langgraph.checkpoint.base import empty_checkpoint
saver = D1Saver(account_id="a", database_id="b", api_token="t", api_base_url=sys.argv[1])
config = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {})
assert saver.get_tuple(config) is not None
async def main():
    assert await saver.aget_tuple(config) is not None
asyncio.run(main())
asyncio.run(main())  # a second loop: the first loop's client closed with it
print("done")
"""


def test_an_unclosed_saver_leaves_no_resource_warning(tmp_path: Path) -> None:
    server = make_server(port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/client/v4"
        script = tmp_path / "script.py"
        script.write_text(SCRIPT)
        done = subprocess.run([sys.executable, "-X", "dev", str(script), url], capture_output=True,
                              text=True, timeout=120)
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0 and "done" in done.stdout, done.stderr
    assert "ResourceWarning" not in done.stderr, done.stderr
