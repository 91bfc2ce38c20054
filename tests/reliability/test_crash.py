"""Crash test: SIGKILL a process running a graph with D1Saver at random times, resume, compare.

The local D1 server runs in this (the parent) process, so the database outlives every child. A
child (tests/reliability/crash_child.py) runs the scripted agent graph (4 turns x 3 parallel
tools: 7 super-steps, 13 node runs, ~0.5 s at 5 ms per request) on one thread; each node logs
`start`/`end` lines with its LangGraph task id, fsynced. The parent kills the child with SIGKILL
at a seeded random time, reads what the database holds (the newest checkpoint, its next tasks and
the tasks that already have stored writes), starts a child with --resume, maybe kills that one too,
and so on until a child finishes. Then, per trial:

(a) the final state equals the state of a run without crashes;
(b) no task whose writes were stored when a child died runs again after the resume (by task id);
(c) every node run of the crash-free run (agent turn, tool call) ended at least once, and every
    write in the final history comes from a node run that ended.

It also checks that the task ids are meaningful (the parent's view of the next tasks is what the
resumed child runs first), and collects figures, printed as one `crash summary:` line.
"""

from __future__ import annotations

import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from benchmarks.workload import VARIANTS, build_graph, first_input, node_runs
from d1saver import D1Saver
from d1saver.local import make_server
from tests.reliability.crash_child import FANOUT, TURNS
from tests.servers import serving

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("crash_child.py")
LATENCY_MS = 5
ACCOUNT = "acc"
TOKEN = "crash-token"
MAX_KILLS = 4  # kills per trial at most; the child after the last one runs to the end
CHAIN_P = 0.6  # chance that a resumed child is killed again
WORKERS = 3  # trials run side by side (on their own thread and database each)
NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"  # langgraph's id for writes of no task
ERROR = "__error__"  # a failed task's write: such a task runs again, by design
CHILD_TIMEOUT = 60.0  # seconds any one child may take, at most
DURABILITY: str | None = None  # LangGraph's durability mode for the children (None: its default)
NODES = ("agent", "tool")  # the graph's nodes, the ones that log

_DB_OF_PATH = re.compile(r"/database/([^/]+)/")


# --- the server, with a tracker of in-flight requests and committed writes per database ----------


class Tracker:
    """Counts requests in flight per database, and when writes committed (the server's view)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inflight: Counter[str] = Counter()
        self.writes: dict[str, list[float]] = {}

    def enter(self, db: str) -> None:
        with self.lock:
            self.inflight[db] += 1

    def leave(self, db: str) -> None:
        with self.lock:
            self.inflight[db] -= 1

    def committed(self, db: str) -> None:
        with self.lock:
            self.writes.setdefault(db, []).append(time.monotonic())

    def busy(self, db: str) -> int:
        with self.lock:
            return self.inflight[db]

    def writes_since(self, db: str, t: float) -> int:
        with self.lock:
            return sum(1 for w in self.writes.get(db, ()) if w >= t)

    def quiesce(self, db: str, timeout: float = 10.0) -> None:
        """Wait until the dead child's last requests (sent before it died) have been answered."""
        time.sleep(4 * LATENCY_MS / 1000)
        deadline = time.monotonic() + timeout
        quiet_since = None
        while time.monotonic() < deadline:
            if self.busy(db) == 0:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= 0.02:
                    return
            else:
                quiet_since = None
            time.sleep(0.002)
        raise AssertionError(f"requests for {db} still in flight {timeout} s after the child died")


@dataclass
class Server:
    url: str
    tracker: Tracker
    engine: Any

    def saver(self, db: str) -> D1Saver:
        return D1Saver(account_id=ACCOUNT, database_id=db, api_token=TOKEN, api_base_url=self.url)

    def sql(self, db: str, query: str, params: list[Any]) -> list[dict[str, Any]]:
        """One statement straight on the engine (no HTTP), for checks the saver has no method for."""
        answer = self.engine.handle(
            "POST", f"/client/v4/accounts/{ACCOUNT}/d1/database/{db}/query",
            {"Authorization": f"Bearer {TOKEN}"}, json.dumps({"sql": query, "params": params}).encode())
        body = json.loads(answer.body)
        assert body["success"], body
        return body["result"][0]["results"]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    srv = make_server("127.0.0.1", 0, None, latency_ms=LATENCY_MS)
    tracker = Tracker()
    base = srv.RequestHandlerClass

    class Tracked(base):  # type: ignore[misc, valid-type]
        def do_POST(self) -> None:
            match = _DB_OF_PATH.search(self.path)
            db = match.group(1) if match else ""
            tracker.enter(db)
            try:
                base.do_POST(self)
            finally:
                tracker.leave(db)

    srv.RequestHandlerClass = Tracked
    handle = srv.engine.handle

    def tracked_handle(method: str, path: str, headers: Any, body: bytes) -> Any:
        answer = handle(method, path, headers, body)
        if answer.status == 200:
            results = json.loads(answer.body).get("result") or []
            if sum(r.get("meta", {}).get("rows_written", 0) for r in results) > 0:
                match = _DB_OF_PATH.search(path)
                tracker.committed(match.group(1) if match else "")
        return answer

    srv.engine.handle = tracked_handle
    handle_error = srv.handle_error

    def quiet_handle_error(request: Any, client_address: Any) -> None:
        # Answering a killed child fails with a reset or broken pipe: expected here, not noise.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            handle_error(request, client_address)

    srv.handle_error = quiet_handle_error
    with serving(srv) as url:
        yield Server(url, tracker, srv.engine)


# --- children -------------------------------------------------------------------------------


class Child:
    """One crash_child.py process; stdout lines arrive on a queue, stderr goes to a file."""

    live: set[subprocess.Popen] = set()
    live_lock = threading.Lock()

    def __init__(self, url: str, db: str, thread: str, log: Path, variant: str, resume: bool,
                 stderr: Path) -> None:
        cmd = [sys.executable, str(CHILD), "--url", url, "--thread", thread, "--log", str(log),
               "--variant", variant, "--database", db]
        if resume:
            cmd.append("--resume")
        if DURABILITY:
            cmd += ["--durability", DURABILITY]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.stderr_path = stderr
        with open(stderr, "ab") as err:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=err, text=True)
        with Child.live_lock:
            Child.live.add(self.proc)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.done_seconds: float | None = None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def wait_go(self, timeout: float = CHILD_TIMEOUT) -> None:
        line = self.lines.get(timeout=timeout)
        if line is None or not line.startswith("go "):
            self.proc.wait(timeout)
            raise AssertionError(f"child did not start (rc {self.proc.returncode}): {self.stderr()}")

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` s for the child to exit; True if it did."""
        try:
            self.proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=CHILD_TIMEOUT)

    def finished_ok(self) -> bool:
        """Whether it exited 0 after printing `done`."""
        if self.proc.returncode != 0:
            return False
        while True:
            try:
                line = self.lines.get(timeout=5)
            except queue.Empty:
                return False
            if line is None:
                return self.done_seconds is not None
            if line.startswith("done "):
                self.done_seconds = float(line.split()[1])

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-3000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=CHILD_TIMEOUT)
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            with Child.live_lock:
                Child.live.discard(self.proc)


def kill_leftovers() -> None:
    with Child.live_lock:
        procs = list(Child.live)
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


# --- the log ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    event: str  # "start" or "end"
    node: str
    task_id: str
    logical: str  # agent-<turn> or tool-call-<turn>-<i>
    pid: int


def read_log(path: Path) -> list[Entry]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        event, node, task_id, logical, pid = line.split()
        out.append(Entry(event, node, task_id, logical, int(pid)))
    return out


# --- the crash-free runs ---------------------------------------------------------------------


@dataclass
class Baseline:
    variant: str
    messages: list[Any]
    seconds: float  # the invoke's wall time
    final_step: int
    logical: set[str]  # node runs: agent-<turn>, tool-call-<turn>-<i>


def stored_task_ids(saver: D1Saver, config: dict) -> dict[str, str]:
    """Task id -> checkpoint id of every task that has (non-error) writes in the thread's history."""
    out: dict[str, str] = {}
    for tup in saver.list(config):
        for task_id, channel, _ in tup.pending_writes or ():
            if task_id != NULL_TASK_ID and channel != ERROR:
                out[task_id] = tup.config["configurable"]["checkpoint_id"]
    return out


def run_baseline(server: Server, variant: str, tmp: Path) -> Baseline:
    db, thread, log = "crash-baseline", f"baseline-{variant}", tmp / f"baseline-{variant}.log"
    child = Child(server.url, db, thread, log, variant, False, tmp / f"baseline-{variant}.err")
    try:
        child.wait_go()
        assert child.wait(CHILD_TIMEOUT), "the crash-free run did not finish"
        assert child.finished_ok(), child.stderr()
    finally:
        child.close()
    config = {"configurable": {"thread_id": thread}}
    saver = server.saver(db)
    state = build_graph(saver, variant=variant, turns=TURNS, fanout=FANOUT).get_state(config)
    assert state.next == ()
    entries = read_log(log)
    runs = node_runs(TURNS, FANOUT)
    assert len(entries) == 2 * len(runs) and len({e.task_id for e in entries}) == len(runs)
    assert {e.logical for e in entries} == set(runs)
    # The ids the nodes log are the ids their writes are stored under (less the input's task).
    stored = stored_task_ids(saver, config)
    assert {e.task_id for e in entries} == set(stored) - {
        tid for tid, cid in stored.items() if cid == _first_checkpoint_id(saver, config)}
    # The child's hook changes nothing the graph writes: the same final messages as without it.
    expected = build_graph(None, variant=variant, turns=TURNS, fanout=FANOUT).invoke(first_input())
    assert state.values["messages"] == expected["messages"]
    assert child.done_seconds is not None
    tup = saver.get_tuple(config)
    assert tup is not None
    saver.close()
    return Baseline(variant, state.values["messages"], child.done_seconds, tup.metadata["step"],
                    {e.logical for e in entries})


def _first_checkpoint_id(saver: D1Saver, config: dict) -> str:
    return list(saver.list(config))[-1].config["configurable"]["checkpoint_id"]


@pytest.fixture(scope="module")
def baselines(server: Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Baseline]:
    tmp = tmp_path_factory.mktemp("crash-baseline")
    try:
        return {v: run_baseline(server, v, tmp) for v in VARIANTS}
    finally:
        kill_leftovers()


# --- one trial -------------------------------------------------------------------------------


@dataclass
class Resume:
    """What the database held after a kill, so what the next child may and may not run."""

    log_index: int  # entries logged before the resumed child started
    step: int | None  # the newest checkpoint's step (None: no checkpoint)
    next_tasks: dict[str, str]  # its next tasks: id -> node
    stored: set[str]  # task ids with stored writes on it: must not run again


@dataclass
class Trial:
    seed: int
    variant: str
    children: int = 0
    kills: int = 0
    missed: int = 0  # kill times that came after the child had finished
    resumes: int = 0
    db_state: Counter[str] = field(default_factory=Counter)  # where kills landed, by stored state
    io_state: Counter[str] = field(default_factory=Counter)  # ... by requests at the server
    stored_at_kill: int = 0  # tasks with stored writes when a child died (candidates for (b))
    forbidden_reruns: int = 0
    allowed_reruns: int = 0  # same task id again; it had no stored writes
    allowed_after_end: int = 0  # ... of which the node had ended (killed before its writes landed)
    new_id_reruns: int = 0  # same node run again under a new task id (its step started over)
    orphan_writes: int = 0  # tasks with stored writes whose checkpoint was never stored
    kills_leaving_orphans: int = 0
    violations: list[str] = field(default_factory=list)


def classify(resume: Resume) -> str:
    if resume.step is None:
        return "no-checkpoint"
    if not resume.next_tasks:
        return "finished"
    if not resume.stored:
        return "step-start"  # between steps: the newest checkpoint has no writes yet
    if resume.stored >= set(resume.next_tasks):
        return "step-complete"  # all writes stored, the next checkpoint not yet
    return "mid-step"


def run_trial(server: Server, baselines: dict[str, Baseline], seed: int, tmp: Path) -> Trial:
    rng = random.Random(seed)
    variant = VARIANTS[seed % len(VARIANTS)]
    base = baselines[variant]
    trial = Trial(seed, variant)
    db, thread, log = f"crash-{seed}", f"thread-{seed}", tmp / f"trial-{seed}.log"
    config = {"configurable": {"thread_id": thread}}
    saver = server.saver(db)
    graph = build_graph(saver, variant=variant, turns=TURNS, fanout=FANOUT)
    resumes: list[Resume] = []
    step: int | None = None
    try:
        while True:
            kill = trial.children == 0 or (trial.kills < MAX_KILLS and rng.random() < CHAIN_P)
            # Uniform over the (estimated) rest of the run.
            left = (base.final_step - (-1 if step is None else step)) / (base.final_step + 1)
            delay = rng.uniform(0, base.seconds * max(left, 0.1))
            child = Child(server.url, db, thread, log, variant, trial.children > 0,
                          tmp / f"trial-{seed}.err")
            trial.children += 1
            trial.resumes += trial.children > 1
            try:
                child.wait_go()
                if kill and not child.wait(delay):
                    busy = server.tracker.busy(db)
                    killed_at = time.monotonic()
                    child.kill()
                    trial.kills += 1
                else:
                    trial.missed += kill
                    if not child.wait(CHILD_TIMEOUT):
                        trial.violations.append(f"child {trial.children} ran over {CHILD_TIMEOUT} s")
                        return trial
                    if not child.finished_ok():
                        trial.violations.append(
                            f"child {trial.children} (resume={trial.children > 1}) failed, rc "
                            f"{child.proc.returncode}: {child.stderr()}")
                        return trial
                    break
            finally:
                child.close()
            server.tracker.quiesce(db)
            after = server.tracker.writes_since(db, killed_at)
            if after:
                trial.io_state["mid-write"] += 1  # a write in flight at the kill committed after it
            elif busy:
                trial.io_state["mid-request"] += 1
            else:
                trial.io_state["no-request"] += 1
            tup = saver.get_tuple(config)
            if tup is None:
                resume = Resume(len(read_log(log)), None, {}, set())
            else:
                snap = graph.get_state(config)
                next_tasks = {t.id: t.name for t in snap.tasks}
                stored = {tid for tid, ch, _ in tup.pending_writes or ()
                          if tid != NULL_TASK_ID and ch != ERROR}
                if not stored <= set(next_tasks):
                    trial.violations.append(
                        f"kill {trial.kills}: writes stored for tasks that are not the newest "
                        f"checkpoint's next tasks: {sorted(stored - set(next_tasks))}")
                resume = Resume(len(read_log(log)), tup.metadata.get("step"), next_tasks, stored)
            orphans = count_orphan_writes(server, db, thread)
            trial.kills_leaving_orphans += orphans > trial.orphan_writes
            trial.orphan_writes = orphans
            step = resume.step
            resumes.append(resume)
            trial.db_state[classify(resume)] += 1
            trial.stored_at_kill += sum(resume.next_tasks.get(t) in NODES for t in resume.stored)
        check_trial(trial, server, saver, graph, config, base, read_log(log), resumes, db, thread)
        return trial
    finally:
        saver.close()


def check_trial(trial: Trial, server: Server, saver: D1Saver, graph: Any, config: dict,
                base: Baseline, entries: list[Entry], resumes: list[Resume], db: str,
                thread: str) -> None:
    v = trial.violations
    # (a) the final state is the crash-free run's.
    state = graph.get_state(config)
    if state.next != ():
        v.append(f"the thread did not finish: next {state.next}")
    messages = state.values.get("messages", [])
    if messages != base.messages:
        v.append("final state differs from the crash-free run: message ids "
                 f"{[m.id for m in messages]} != {[m.id for m in base.messages]}")
    # (b) a task with stored writes at a kill never starts again after that resume.
    for n, resume in enumerate(resumes, 1):
        later = entries[resume.log_index:]
        again = sorted({e.task_id for e in later if e.event == "start" and e.task_id in resume.stored})
        if again:
            trial.forbidden_reruns += len(again)
            v.append(f"after kill {n} ({sorted(resume.stored)} stored) these ran again: {again}")
        # The ids are the ones LangGraph resumes with: the resumed child first runs the newest
        # checkpoint's next tasks that had no writes (if it lived long enough to start one).
        # (`__start__`, the input's task, is LangGraph's, not a logged node.)
        todo = {tid for tid, node in resume.next_tasks.items() if node in NODES} - resume.stored
        firsts = [e for e in later if e.event == "start"]
        if todo and firsts and firsts[0].task_id not in todo:
            v.append(f"after kill {n} the first task run was {firsts[0]} instead of one of {todo}")
    # Re-runs that were allowed: same id (no stored writes), or a new id (the step started over).
    ids_by_logical: dict[str, list[str]] = {}
    starts = Counter(e.task_id for e in entries if e.event == "start")
    ended_before_kill: set[str] = set()
    for n, resume in enumerate(resumes):
        previous = entries[resumes[n - 1].log_index if n else 0: resume.log_index]
        ended_before_kill |= {e.task_id for e in previous if e.event == "end"}
    for e in entries:
        if e.event == "start":
            ids = ids_by_logical.setdefault(e.logical, [])
            if e.task_id not in ids:
                ids.append(e.task_id)
    forbidden_ids = set().union(*(r.stored for r in resumes)) if resumes else set()
    for task_id, count in starts.items():
        if count > 1 and task_id not in forbidden_ids:
            trial.allowed_reruns += count - 1
            trial.allowed_after_end += (count - 1) * (task_id in ended_before_kill)
    trial.new_id_reruns = sum(len(ids) - 1 for ids in ids_by_logical.values())
    # (c) every node run of the crash-free run ended at least once; every stored write has a run.
    ended = {e.logical for e in entries if e.event == "end"}
    if missing := base.logical - ended:
        v.append(f"node runs that never ended: {sorted(missing)}")
    ended_ids = {e.task_id for e in entries if e.event == "end"}
    stored = stored_task_ids(saver, config)
    first = _first_checkpoint_id(saver, config)
    if unlogged := {tid for tid, cid in stored.items() if cid != first} - ended_ids:
        v.append(f"stored writes of tasks that never ended: {sorted(unlogged)}")
    trial.orphan_writes = count_orphan_writes(server, db, thread)


def count_orphan_writes(server: Server, db: str, thread: str) -> int:
    """Stored writes whose checkpoint is not stored.

    With LangGraph's default durability ("async") a task's writes are saved without waiting for
    the save of the checkpoint the task ran from; a crash between the two leaves such writes.
    They are ignored on resume (the step runs again from the parent checkpoint, under new task ids).
    """
    return server.sql(
        db, "SELECT COUNT(DISTINCT w.task_id) AS n FROM writes w WHERE w.thread_id = ? AND NOT "
            "EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = w.thread_id AND "
            "c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)",
        [thread])[0]["n"]


# --- the tests -------------------------------------------------------------------------------


def guarded_trial(server: Server, baselines: dict[str, Baseline], seed: int, tmp: Path) -> Trial:
    """run_trial, with an exception (a timeout, a child that never started) as a violation."""
    try:
        return run_trial(server, baselines, seed, tmp)
    except Exception:  # noqa: BLE001 - recorded as the trial's violation, with its traceback
        trial = Trial(seed, VARIANTS[seed % len(VARIANTS)])
        trial.violations.append(traceback.format_exc())
        return trial


def run_trials(server: Server, baselines: dict[str, Baseline], tmp: Path, n: int,
               first_seed: int = 1000) -> None:
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            trials = list(pool.map(lambda s: guarded_trial(server, baselines, s, tmp),
                                   range(first_seed, first_seed + n)))
    finally:
        kill_leftovers()
    total = Counter[str]()
    db_state, io_state = Counter[str](), Counter[str]()
    for t in trials:
        for name in ("children", "kills", "missed", "resumes", "stored_at_kill", "forbidden_reruns",
                     "allowed_reruns", "allowed_after_end", "new_id_reruns", "orphan_writes",
                     "kills_leaving_orphans"):
            total[name] += getattr(t, name)
        db_state.update(t.db_state)
        io_state.update(t.io_state)
    chains = Counter(t.kills for t in trials)
    print(
        f"\ncrash summary: trials={n} ({', '.join(f'{v}={sum(t.variant == v for t in trials)}' for v in VARIANTS)}) "
        f"children={total['children']} kills={total['kills']} kills_missed={total['missed']} "
        f"resumes={total['resumes']} kills_per_trial={dict(sorted(chains.items()))} "
        f"kill_points_db={dict(db_state)} kill_points_io={dict(io_state)} "
        f"tasks_stored_at_kill={total['stored_at_kill']} forbidden_reruns={total['forbidden_reruns']} "
        f"allowed_reruns_same_id={total['allowed_reruns']} (node had ended: {total['allowed_after_end']}) "
        f"reruns_new_id={total['new_id_reruns']} orphan_write_tasks={total['orphan_writes']} "
        f"(kills leaving them: {total['kills_leaving_orphans']}) "
        f"baseline_s={ {v: round(b.seconds, 3) for v, b in baselines.items()} } "
        f"wall_s={time.monotonic() - started:.1f}")
    bad = [f"seed {t.seed} ({t.variant}): {msg}" for t in trials for msg in t.violations]
    assert not bad, "\n".join(bad)
    # The trials did exercise resuming with stored writes, or (b) proved nothing.
    assert total["kills"] >= n // 2 and total["stored_at_kill"] > 0


def test_crash_resume(server: Server, baselines: dict[str, Baseline], tmp_path: Path) -> None:
    """20 seeded trials of kill (SIGKILL) and resume, each ending like the crash-free run."""
    run_trials(server, baselines, tmp_path, 20)


@pytest.mark.soak
def test_crash_resume_soak(server: Server, baselines: dict[str, Baseline], tmp_path: Path) -> None:
    """The same, 200 trials."""
    run_trials(server, baselines, tmp_path, 200, first_seed=5000)
