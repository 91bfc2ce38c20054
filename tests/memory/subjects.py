"""Subjects for the memory contract tests: D1Store / D1Cache on the local D1 (one database, with keys, a fleet
of four with keys) and on the real engine (Wrangler), with every HTTP attempt recorded.

On the real engine the gateway's databases are shared by the whole session, so a subject there
carries a `root`: a label unique to the test that the facade (tests/memory/facade.py) puts in
front of every namespace and strips from every answer. Local subjects get fresh databases and
no root, so they run LangGraph's cases exactly as written.
"""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

import d1saver
from tests.support import LOCAL_BASE_URL, Clock, Recorded, fresh_ids, local_engine

KEYS = [bytes([11]) * 32, bytes([12]) * 32]  # newest first

LOCAL_SUBJECTS = ["local", "local-keys", "local-fleet4-keys"]
REAL_SUBJECTS = ["wrangler", "wrangler-fleet4-keys"]


def implementation(name: str) -> Any:
    """d1saver.D1Store / D1Cache, or a skip while the implementation is not on this branch."""
    cls = getattr(d1saver, name, None)
    if cls is None:
        pytest.skip(f"d1saver.{name} is not built on this branch yet")
    return cls


@dataclass
class D1Subject(Recorded):
    """Makes D1Store / D1Cache objects over one engine's databases; records every HTTP attempt."""

    name: str
    base_url: str
    api_token: str
    account_id: str
    database_ids: list[str]
    keys: list[bytes] | None = None
    root: tuple[str, ...] = ()
    made: list[Any] = field(default_factory=list)
    clock: Clock = field(default_factory=lambda: Clock(time.time()))

    @property
    def real(self) -> bool:
        return self.engine is None

    def _kwargs(self, cls: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        if any("clock" in inspect.signature(k.__init__).parameters
               for k in cls.__mro__ if "__init__" in vars(k)):
            kwargs.setdefault("clock", self.clock)
        self.wired(kwargs)
        if self.keys is not None:
            kwargs.setdefault("encryption_keys", self.keys)
        if len(self.database_ids) == 1:
            kwargs.setdefault("database_id", self.database_ids[0])
        else:
            kwargs.setdefault("database_ids", list(self.database_ids))
        return dict(account_id=self.account_id, api_token=self.api_token,
                    api_base_url=self.base_url, **kwargs)

    def store(self, **kwargs: Any) -> Any:
        cls = implementation("D1Store")
        store = cls(**self._kwargs(cls, kwargs))
        self.made.append(store)
        return store

    def cache(self, **kwargs: Any) -> Any:
        cls = implementation("D1Cache")
        cache = cls(**self._kwargs(cls, kwargs))
        self.made.append(cache)
        return cache

    def count(self, fn: Callable[[], Any]) -> tuple[Any, int]:
        """Run fn; return its result and the HTTP attempts it made."""
        out, attempts = self.attempts(fn)
        return out, len(attempts)

    def close(self) -> None:
        for obj in self.made:
            close = getattr(obj, "close", None)
            if close is not None:
                close()
        self.close_engine()


def local_subject(name: str) -> D1Subject:
    ids = fresh_ids(4 if "fleet4" in name else 1, prefix="mem")
    return D1Subject(name, LOCAL_BASE_URL, "test-token", "acc", ids,
                     keys=KEYS if "keys" in name else None, **local_engine())


def make_subject(name: str, request: pytest.FixtureRequest, needs: str = "D1Store") -> D1Subject:
    implementation(needs)  # skip before starting any engine
    if name.startswith("local"):
        return local_subject(name)
    real = request.getfixturevalue("wrangler_d1")
    ids = list(real.databases.values())
    if "fleet4" not in name:
        ids = ids[:1]
    return D1Subject(name, real.base_url, real.api_token, real.account_id, ids,
                     keys=KEYS if "keys" in name else None,
                     root=(f"t{uuid.uuid4().hex[:12]}",))


def subject_params(real: bool) -> list[Any]:
    out = [pytest.param(n, id=n) for n in LOCAL_SUBJECTS]
    if real:
        out += [pytest.param(n, id=n, marks=pytest.mark.realengine) for n in REAL_SUBJECTS]
    return out
