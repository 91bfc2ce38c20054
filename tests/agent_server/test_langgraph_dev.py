"""`langgraph dev` (LangGraph's Agent Server, from langgraph-cli[inmem]) on d1saver's factories,
offline and end to end, driven through langgraph_sdk as a client would.

The project is docs/guide/agent-server.md's own: its langgraph.json and .env (pointed at a local
D1 served over HTTP from this process) and, after a restart that lost `.langgraph_api/`, its
recovery recipe, run as printed. Two server starts, each waited for with a deadline; the
process group is stopped on teardown, and the server's log is printed when the test fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from d1saver import D1Saver, D1Store
from d1saver.cli import app
from d1saver.local import make_server
from tests.servers import serving

pytestmark = pytest.mark.agentserver

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide" / "agent-server.md"
START_TIMEOUT_S = 120.0  # a cold import of langgraph_api on a busy 2-core machine
STOP_TIMEOUT_S = 30.0

# A graph with an interrupt, and a node that writes to the store the server hands it.
AGENT = '''
from typing import TypedDict

from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class State(TypedDict, total=False):
    topic: str
    draft: str
    approved: str


def write(state: State) -> State:
    return {"draft": f"a post about {state['topic']}"}


def review(state: State) -> State:
    return {"approved": interrupt({"draft": state["draft"]})}


def remember(state: State) -> State:
    get_store().put(("approved",), state["topic"], {"draft": state["draft"], "by": state["approved"]})
    return {}


builder = StateGraph(State)
builder.add_node("write", write)
builder.add_node("review", review)
builder.add_node("remember", remember)
builder.add_edge(START, "write")
builder.add_edge("write", "review")
builder.add_edge("review", "remember")
builder.add_edge("remember", END)
graph = builder.compile()
'''


def fenced(lang: str, containing: str) -> str:
    """The first ```lang block of the guide whose text contains `containing`."""
    for body in re.findall(rf"^```{lang}\n(.*?)^```$", GUIDE.read_text(), re.MULTILINE | re.DOTALL):
        if containing in body:
            return body
    raise AssertionError(f"no ```{lang} block with {containing!r} in {GUIDE}")


def langgraph_command() -> Path:
    command = Path(sys.executable).parent / "langgraph"
    if command.exists():
        return command
    reason = "langgraph-cli[inmem] is not installed (the test extra installs it)"
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"{reason} [CI is set: the Agent Server test must run, not skip]", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AgentServer:
    """`langgraph dev` in its own process group, in `project`, on a loopback port."""

    def __init__(self, project: Path) -> None:
        self.project = project
        self.command = langgraph_command()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = project.parent / "langgraph-dev.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        # Only the shell's part of the offline switches: the rest is in the guide's .env.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("LANGSMITH_", "LANGCHAIN_", "D1_", "CLOUDFLARE_", "D1SAVER_"))}
        env["LANGGRAPH_CLI_NO_ANALYTICS"] = "1"
        self.starts += 1
        with self.log.open("ab") as log:
            log.write(f"\n===== start {self.starts} =====\n".encode())
            self.process = subprocess.Popen(
                [str(self.command), "dev", "--host", "127.0.0.1", "--port", str(self.port),
                 "--no-browser", "--no-reload"],
                cwd=self.project, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"langgraph dev exited with {self.process.returncode} before it was ready")
            try:
                if httpx.get(f"{self.url}/ok", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise AssertionError(f"langgraph dev was not ready after {START_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        """Ctrl-C to the whole group (the server writes its records on a clean stop); killed if
        it does not stop in time."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGINT)
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        except ProcessLookupError:
            pass

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else "(no log)"


@contextmanager
def agent_server(project: Path) -> Iterator[AgentServer]:
    server = AgentServer(project)
    try:
        yield server
    except BaseException:
        print(f"----- langgraph dev's log ({server.log}) -----\n{server.output()}")
        raise
    finally:
        server.stop()


@pytest.fixture
def d1(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A local D1 over HTTP serving one database, `agents`, as `d1saver serve --database agents`
    does (any other id gets D1's not-found error); its settings."""
    server = make_server("127.0.0.1", 0, tmp_path / "d1", create=False, databases=["agents"])
    with serving(server) as base_url:
        yield {"D1_API_BASE_URL": base_url, "D1_DATABASE_ID": "agents",
               "CLOUDFLARE_ACCOUNT_ID": "local", "CLOUDFLARE_API_TOKEN": "local"}


def write_project(project: Path, d1: dict[str, str]) -> None:
    """The guide's langgraph.json and .env, with the .env's D1 settings pointed at `d1`."""
    project.mkdir()
    (project / "agent.py").write_text(AGENT)
    (project / "langgraph.json").write_text(fenced("json", '"checkpointer"'))
    lines = []
    for line in fenced("sh", "D1_API_BASE_URL=").splitlines():
        name = line.split("=", 1)[0]
        lines.append(f"{name}={d1[name]}" if name in d1 else line)
    (project / ".env").write_text("\n".join(lines) + "\n")


def test_langgraph_dev_on_d1(tmp_path: Path, d1: dict[str, str]) -> None:
    from langgraph_sdk import get_sync_client
    from langgraph_sdk.errors import NotFoundError

    project = tmp_path / "project"
    write_project(project, d1)
    saver = D1Saver(account_id="local", database_id="agents", api_token="local",
                    api_base_url=d1["D1_API_BASE_URL"])
    store = D1Store(account_id="local", database_id="agents", api_token="local",
                    api_base_url=d1["D1_API_BASE_URL"])

    def in_d1(thread_id: str) -> list[str]:
        return [t.checkpoint["id"] for t in saver.list({"configurable": {"thread_id": thread_id}})]

    with saver, store, agent_server(project) as server:
        server.start()
        log = server.output()
        assert "Using custom checkpointer: AgentServerSaver" in log and "Using custom store: D1Store" in log
        assert "Custom checkpointer missing" not in log  # adelete_for_runs, acopy_thread, aprune...
        client = get_sync_client(url=server.url, timeout=60)  # a hung server fails the test

        # A run to an interrupt, its state, the resume, the history.
        a = client.threads.create()["thread_id"]
        paused = client.runs.wait(a, "agent", input={"topic": "tides"})
        assert paused["__interrupt__"][0]["value"] == {"draft": "a post about tides"}
        state = client.threads.get_state(a)
        assert state["next"] == ["review"]
        assert [i["value"] for t in state["tasks"] for i in t["interrupts"]] == [{"draft": "a post about tides"}]
        done = client.runs.wait(a, "agent", command={"resume": "yes"})
        assert done == {"topic": "tides", "draft": "a post about tides", "approved": "yes"}
        history = client.threads.get_history(a, limit=100)
        assert [h["checkpoint"]["checkpoint_id"] for h in history] == in_d1(a)  # read from D1
        assert len(history) == 5 and history[0]["next"] == [] and history[1]["next"] == ["remember"]

        # A second thread left waiting at its interrupt across the restart.
        b = client.threads.create()["thread_id"]
        client.runs.wait(b, "agent", input={"topic": "moss"})

        # The store: the graph's own writes and the API's, in D1.
        client.store.put_item(["users", "u1"], "prefs", {"color": "teal"})
        assert [i["value"] for i in client.store.search_items(["users"])["items"]] == [{"color": "teal"}]
        assert store.get(("users", "u1"), "prefs").value == {"color": "teal"}
        assert store.get(("approved",), "tides").value == {"draft": "a post about tides", "by": "yes"}
        values_a = client.threads.get_state(a)["values"]

        # A thread your own code started with D1Saver (its versions are d1saver's, 10 digits)
        # and the server continues with a new input: the graph runs (it ran no node before).
        c = started_in_process(saver, store)
        client.threads.create(thread_id=c, graph_id="agent")
        again = client.runs.wait(c, "agent", input={"topic": "ferns"})
        assert again["__interrupt__"][0]["value"] == {"draft": "a post about ferns"}
        assert client.runs.wait(c, "agent", command={"resume": "ok"})["approved"] == "ok"

        # Restart, and lose the server's own records on the way: what comes back is D1's.
        server.stop()
        shutil.rmtree(project / ".langgraph_api")
        server.start()
        with pytest.raises(NotFoundError):
            client.threads.get(a)
        recover(project, server.url, d1)

        assert client.threads.get_state(a)["values"] == values_a
        assert len(client.threads.get_history(a, limit=100)) == 5
        assert client.threads.get_state(b)["next"] == ["review"]
        resumed = client.runs.wait(b, "agent", command={"resume": "ok"})
        assert resumed == {"topic": "moss", "draft": "a post about moss", "approved": "ok"}
        found = client.store.search_items(["approved"])["items"]
        assert sorted(i["key"] for i in found) == ["ferns", "lichen", "moss", "tides"]
        assert [i["value"] for i in client.store.search_items(["users"])["items"]] == [{"color": "teal"}]

        # Deleting a thread through the API deletes its checkpoints in D1.
        client.threads.delete(a)
        assert in_d1(a) == [] and len(in_d1(b)) == 5
    assert server.starts == 2


def started_in_process(saver: D1Saver, store: D1Store) -> str:
    """A thread run to its end by the graph in this process, on D1Saver itself; its id."""
    from langgraph.types import Command

    namespace: dict[str, Any] = {}
    exec(compile(AGENT, "agent.py", "exec"), namespace)
    graph = namespace["builder"].compile(checkpointer=saver, store=store)
    config = {"configurable": {"thread_id": str(uuid.uuid4())}}
    graph.invoke({"topic": "lichen"}, config)
    assert graph.invoke(Command(resume="mine"), config)["approved"] == "mine"
    versions = saver.get_tuple(config).checkpoint["channel_versions"]
    assert all(len(v) == 10 for v in versions.values()), versions  # d1saver's own
    return config["configurable"]["thread_id"]


def recover(project: Path, url: str, d1: dict[str, str]) -> None:
    """The guide's recovery recipe, as printed: `d1saver threads --json`, then its script."""
    threads = CliRunner().invoke(app, ["threads", "--json"], env=d1)
    assert threads.exit_code == 0, threads.output
    (project / "threads.json").write_text(threads.stdout)
    script = project / "recover_threads.py"
    script.write_text(fenced("python", "# recover_threads.py"))
    env: dict[str, Any] = {**os.environ, **d1}
    done = subprocess.run([sys.executable, str(script), "threads.json", url], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    recovered = dict(line.split(": ") for line in done.stdout.splitlines())
    assert set(recovered.values()) == {"agent"} and len(recovered) == len(json.loads(threads.stdout)) == 3
