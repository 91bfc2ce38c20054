"""A deterministic scheduler for interleaving operations at their requests (issue 20).

Every d1saver operation is a sans-I/O generator whose only contact with a database is an HTTP
request through the client's transport, so two operations (or whole commands: rebalance,
compaction, rekey) interleave exactly at those requests. Each actor runs in a thread of its
own, with a transport that stops each request at a gate; the scheduler lets one waiting
request through at a time, when every actor is waiting or finished, so a schedule (which
actor goes at each point where several wait) decides the whole run, and replays it.

`explore` enumerates every schedule of a set of actors by depth-first search over those
choice points (stateless model checking), or a seeded random sample of them when there are
more than a budget allows.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

Actor = Callable[[Any], Any]  # actor(transport) -> result; raises on failure


class Deadlock(Exception):
    """No actor made progress within the scheduler's timeout (one waits on another)."""


@dataclass
class Run:
    """What one schedule did: the actors' results or errors, the order requests ran in (the
    actor of each), and the choices made where several actors were waiting."""

    results: list[Any]
    errors: list[BaseException | None]
    order: list[int]
    choices: list[int]
    alternatives: list[int] = field(default_factory=list)  # waiting actors at each choice


class _Gate(httpx.BaseTransport, httpx.AsyncBaseTransport):
    def __init__(self, sched: _Scheduler, actor: int, inner: Any) -> None:
        self.sched, self.actor, self.inner = sched, actor, inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sched.arrive(self.actor)
        try:
            response = self.inner.handle_request(request)
            response.read()
            return response
        finally:
            self.sched.leave(self.actor)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise NotImplementedError("the interleaving scheduler drives sync operations")


class _Scheduler:
    def __init__(self, n: int, choose: Callable[[list[int]], int], timeout: float) -> None:
        self.cond = threading.Condition()
        self.state = ["running"] * n  # running | waiting | granted | finished
        self.choose, self.timeout = choose, timeout
        self.order: list[int] = []
        self.choices: list[int] = []
        self.alternatives: list[int] = []

    def arrive(self, actor: int) -> None:
        with self.cond:
            self.state[actor] = "waiting"
            self.cond.notify_all()
            if not self.cond.wait_for(lambda: self.state[actor] == "granted", self.timeout):
                raise Deadlock(f"actor {actor} was never let through")

    def leave(self, actor: int) -> None:
        with self.cond:
            self.state[actor] = "running"
            self.cond.notify_all()

    def finish(self, actor: int) -> None:
        with self.cond:
            self.state[actor] = "finished"
            self.cond.notify_all()

    def drive(self) -> None:
        with self.cond:
            while True:
                settled = self.cond.wait_for(
                    lambda: all(s in ("waiting", "finished") for s in self.state), self.timeout)
                if not settled:
                    raise Deadlock(f"actors never settled: {self.state}")
                waiting = [i for i, s in enumerate(self.state) if s == "waiting"]
                if not waiting:
                    return
                if len(waiting) == 1:
                    pick = waiting[0]
                else:
                    index = self.choose(waiting)
                    self.choices.append(index)
                    self.alternatives.append(len(waiting))
                    pick = waiting[index]
                self.order.append(pick)
                self.state[pick] = "granted"
                self.cond.notify_all()


def run_schedule(actors: Sequence[Actor], inner: Any, choose: Callable[[list[int]], int],
                 *, timeout: float = 120.0) -> Run:
    """Run the actors concurrently, one request at a time in the order `choose` picks (given
    the waiting actors, it returns an index into them)."""
    sched = _Scheduler(len(actors), choose, timeout)
    results: list[Any] = [None] * len(actors)
    errors: list[BaseException | None] = [None] * len(actors)

    def body(i: int) -> None:
        try:
            results[i] = actors[i](_Gate(sched, i, inner))
        except BaseException as exc:  # noqa: BLE001 - reported in the Run, judged by the caller
            errors[i] = exc
        finally:
            sched.finish(i)

    threads = [threading.Thread(target=body, args=(i,), daemon=True)
               for i in range(len(actors))]
    for t in threads:
        t.start()
    sched.drive()
    for t in threads:
        t.join(timeout)
    return Run(results, errors, sched.order, sched.choices, sched.alternatives)


def explore(make: Callable[[], tuple[Sequence[Actor], Any, Callable[[Run], None]]],
            budget: int, seed: int = 0) -> Iterator[Run]:
    """Run every schedule of the actors (depth first over the choice points), or, past
    `budget` runs, stop; then the caller can sample with `sample`. `make()` builds a fresh
    world: the actors, the transport they share, and a check run after the schedule.
    Yields each Run (checked)."""
    stack: list[list[int]] = [[]]
    runs = 0
    while stack and runs < budget:
        prefix = stack.pop()
        actors, inner, check = make()
        taken: list[int] = []

        def choose(waiting: list[int], taken: list[int] = taken,
                   prefix: list[int] = prefix) -> int:
            k = len(taken)
            c = prefix[k] if k < len(prefix) else 0
            taken.append(c)
            return c

        run = run_schedule(actors, inner, choose)
        runs += 1
        # Every choice point past the prefix where another actor could have gone: a branch.
        for k in range(len(run.choices) - 1, len(prefix) - 1, -1):
            for alt in range(run.alternatives[k] - 1, 0, -1):
                stack.append(run.choices[:k] + [alt])
        check(run)
        yield run


def sample(make: Callable[[], tuple[Sequence[Actor], Any, Callable[[Run], None]]],
           count: int, seed: int) -> Iterator[Run]:
    """`count` schedules drawn at random (seeded: the same runs every time)."""
    rng = random.Random(seed)
    for _ in range(count):
        actors, inner, check = make()
        run = run_schedule(actors, inner, lambda waiting: rng.randrange(len(waiting)))
        check(run)
        yield run


def schedules(make: Callable[[], tuple[Sequence[Actor], Any, Callable[[Run], None]]],
              budget: int, seed: int = 0) -> tuple[int, bool]:
    """Every schedule if there are at most `budget` (counted from one run's requests per
    actor), else `budget` seeded random ones. Returns (runs, exhaustive)."""
    (first,) = list(sample(make, 1, seed))
    per_actor = [first.order.count(i) for i in range(len(first.results))]
    total, ways = 0, 1
    for n in per_actor:
        total += n
        ways *= math.comb(total, n)
    if ways <= budget:
        runs = sum(1 for _ in explore(make, budget, seed))
        return 1 + runs, True
    return 1 + sum(1 for _ in sample(make, budget - 1, seed + 1)), False
