"""Deserialization: a stored row that names a type outside LangGraph's allowlist must not run code.

Rows are planted directly in the `checkpoints` and `writes` tables (as an attacker with write
access to the database would), encoded with d1saver's own codec, then read with get_tuple/list.
Each payload would create a marker file if executed: `os.system("touch ...")`, `builtins.exec`,
or `Gadget` below, whose constructor writes the marker.

What LangGraph's JsonPlusSerializer (langgraph-checkpoint 4.x) does with such a row:
  * msgpack, strict (LANGGRAPH_STRICT_MSGPACK=true, or allowed_msgpack_modules=None): a type
    outside SAFE_MSGPACK_TYPES is not imported; the raw arguments come back in its place, and a
    warning "Blocked deserialization of ..." is logged. Nothing runs.
  * msgpack, method calls (EXT_METHOD_SINGLE_ARG): only SAFE_MSGPACK_METHODS, in every mode.
  * msgpack, LangGraph's default (the env variable unset): the type IS imported and called,
    with a warning "Deserializing unregistered type ...". D1Saver therefore defaults to the
    strict serializer (test_default_saver_does_not_execute_a_stored_constructor).
  * json (type='json'): lc=2 constructors outside the allowlist come back as the raw dict;
    lc=1 constructors outside langchain-core's allowlist raise ValueError. Nothing runs.
  * pickle: refused (pickle_fallback=False): NotImplementedError. Nothing runs.
d1saver raises every such refusal as StoredValueError (a D1Error and a ValueError), the
serializer's own exception as its cause.

With encryption keys none of this is reached: a planted row is not sealed under the saver's
key, so it is refused as PlaintextValueError before any serializer sees it, whatever the
serializer's policy (with keys it is LangGraph's, allowing every type: only rows a key
holder wrote are ever deserialized). The `keyed` tests below plant every payload again.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde import jsonplus
from langgraph.checkpoint.serde.jsonplus import (
    EXT_CONSTRUCTOR_KW_ARGS,
    EXT_CONSTRUCTOR_POS_ARGS,
    EXT_CONSTRUCTOR_SINGLE_ARG,
    EXT_METHOD_SINGLE_ARG,
    EXT_PYDANTIC_V1,
    EXT_PYDANTIC_V2,
    JsonPlusSerializer,
)

from d1saver import D1Saver, PlaintextValueError, Statement, StoredValueError
from d1saver.storage import codec as _codec
from d1saver.local import LocalD1, LocalD1Transport

HERE = __name__  # "tests.reliability.test_deserialization"
ROOT = Path(__file__).resolve().parents[2]


class Gadget:
    """Writes a marker file when constructed or asked to: proof that a stored row ran code."""

    def __init__(self, path: str = "", **kwargs: Any) -> None:
        Path(path or kwargs["path"]).write_text("executed")

    @classmethod
    def create(cls, path: str) -> Gadget:
        return cls(path)


# --- payloads ---------------------------------------------------------------------------------


def _ext(code: int, *fields: Any) -> ormsgpack.Ext:
    return ormsgpack.Ext(code, ormsgpack.packb(tuple(fields)))


def payloads(marker: Path) -> dict[str, Any]:
    """Channel values that would write `marker` if a loader constructed what they name."""
    m = str(marker)
    return {
        "os.system": _ext(EXT_CONSTRUCTOR_POS_ARGS, "os", "system", (f"touch {m}",)),
        "builtins.exec": _ext(EXT_CONSTRUCTOR_SINGLE_ARG, "builtins", "exec",
                              f"open({m!r}, 'w').write('x')"),
        "subprocess.call": _ext(EXT_CONSTRUCTOR_POS_ARGS, "subprocess", "call", (["touch", m],)),
        "gadget-single": _ext(EXT_CONSTRUCTOR_SINGLE_ARG, HERE, "Gadget", m),
        "gadget-kwargs": _ext(EXT_CONSTRUCTOR_KW_ARGS, HERE, "Gadget", {"path": m}),
        "gadget-pydantic-v2": _ext(EXT_PYDANTIC_V2, HERE, "Gadget", {"path": m},
                                   "model_validate_json"),
        "gadget-pydantic-v1": _ext(EXT_PYDANTIC_V1, HERE, "Gadget", {"path": m}),
        "gadget-nested": {"ok": [1, {"deep": _ext(EXT_CONSTRUCTOR_SINGLE_ARG, HERE, "Gadget", m)}]},
    }


METHOD_PAYLOAD = "gadget-method"  # EXT_METHOD_SINGLE_ARG: blocked in every mode


def method_payload(marker: Path) -> ormsgpack.Ext:
    return _ext(EXT_METHOD_SINGLE_ARG, HERE, "Gadget", str(marker), "create")


def checkpoint_bytes(value: Any) -> bytes:
    """A well-formed checkpoint whose channel 'x' holds `value`, as LangGraph's msgpack."""
    ck = empty_checkpoint()
    ck["channel_values"] = {"x": value}
    return ormsgpack.packb(ck)


# --- planting rows ------------------------------------------------------------------------------


def new_saver(engine: LocalD1, **kwargs: Any) -> D1Saver:
    return D1Saver(account_id="acc", database_id="db", api_token="t",
                   api_base_url="http://d1.local/client/v4", transport=LocalD1Transport(engine),
                   **kwargs)


def plant(saver: D1Saver, thread_id: str, type_: str, data: bytes) -> dict:
    """A checkpoint and one pending write on it, then both rows overwritten with `data`."""
    conf = saver.put({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}},
                     empty_checkpoint(), {"step": 0}, {})
    saver.put_writes(conf, [("x", "harmless")], "task-1")
    text = _codec.encode(data)
    saver.client.execute([
        Statement("UPDATE checkpoints SET type = ?2, checkpoint = ?3 WHERE thread_id = ?1",
                  (thread_id, type_, text)),
        Statement("UPDATE writes SET type = ?2, value = ?3 WHERE thread_id = ?1",
                  (thread_id, type_, text))])
    return conf


def plant_write(saver: D1Saver, thread_id: str, value: Any) -> dict:
    """Only the write row carries the payload (msgpack of the bare value)."""
    conf = saver.put({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}},
                     empty_checkpoint(), {"step": 0}, {})
    saver.put_writes(conf, [("x", "harmless")], "task-1")
    saver.client.execute([Statement(
        "UPDATE writes SET type = 'msgpack', value = ?2 WHERE thread_id = ?1",
        (thread_id, _codec.encode(ormsgpack.packb(value))))])
    return conf


def reads(saver: D1Saver, conf: dict) -> list[Any]:
    """Every way d1saver decodes a row: get_tuple (head and by id) and list (thread and all)."""
    thread = conf["configurable"]["thread_id"]
    return [lambda: [saver.get_tuple({"configurable": {"thread_id": thread,
                                                       "checkpoint_ns": ""}})],
            lambda: [saver.get_tuple(conf)],
            lambda: list(saver.list({"configurable": {"thread_id": thread}})),
            lambda: list(saver.list(None))]


def read_everything(saver: D1Saver, conf: dict) -> list[Any]:
    return [tup for read in reads(saver, conf) for tup in read()]


KEY = bytes([41]) * 32


def saver_fixture(strict: bool) -> Iterator[D1Saver]:
    """A saver on a fresh local D1, with LangGraph's default serializer or the strict one
    (an empty msgpack allow-list); the engine closes after the test."""
    engine = LocalD1()
    yield new_saver(engine, **({"serde": JsonPlusSerializer(allowed_msgpack_modules=None)}
                               if strict else {}))
    engine.close()


@pytest.fixture
def strict_saver() -> Iterator[D1Saver]:
    yield from saver_fixture(strict=True)


@pytest.fixture
def keyed_saver() -> Iterator[D1Saver]:
    """A saver with encryption keys (and so LangGraph's serializer allowing every type)."""
    engine = LocalD1()
    yield new_saver(engine, encryption_keys=[KEY])
    engine.close()


def assert_refused_as_plaintext(saver: D1Saver, conf: dict) -> None:
    for read in reads(saver, conf):
        with pytest.raises(PlaintextValueError) as info:
            read()
        assert info.value.thread_id == conf["configurable"]["thread_id"]


@pytest.fixture(params=["default", "strict"])
def each_serde_saver(request: pytest.FixtureRequest) -> Iterator[D1Saver]:
    """The test twice: with the default serializer, then with the strict one."""
    yield from saver_fixture(strict=request.param == "strict")


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    # LangGraph warns once per type per process; reset so each test sees its own warnings.
    monkeypatch.setattr(jsonplus, "_warned_blocked_types", set())
    monkeypatch.setattr(jsonplus, "_warned_unregistered_types", set())


# --- defaults ------------------------------------------------------------------------------------


def test_d1saver_keeps_langgraphs_serializer_defaults() -> None:
    saver = new_saver(LocalD1())
    assert isinstance(saver.serde, JsonPlusSerializer)
    assert saver.serde.pickle_fallback is False
    assert saver.serde._allowed_json_modules is None  # lc=2 JSON constructors: safe types only


# --- msgpack, strict ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(payloads(Path("x"))))
def test_strict_serde_does_not_construct_a_stored_type(
        strict_saver: D1Saver, tmp_path: Path, name: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    marker = tmp_path / "marker"
    value = payloads(marker)[name]
    conf = plant(strict_saver, f"strict-{name}", "msgpack", checkpoint_bytes(value))
    for tup in read_everything(strict_saver, conf):
        assert tup is not None
        x = tup.checkpoint["channel_values"]["x"]
        assert not isinstance(x, Gadget)
    assert not marker.exists(), "a stored row ran code"
    # What comes back instead: the raw arguments the row carried, and a warning.
    x = strict_saver.get_tuple(conf).checkpoint["channel_values"]["x"]
    if name == "os.system":
        assert x == [f"touch {marker}"]
    elif name == "gadget-kwargs":
        assert x == {"path": str(marker)}
    assert "Blocked deserialization" in caplog.text


@pytest.mark.parametrize("name", list(payloads(Path("x"))))
def test_strict_serde_does_not_construct_a_stored_write(
        strict_saver: D1Saver, tmp_path: Path, name: str) -> None:
    marker = tmp_path / "marker"
    conf = plant_write(strict_saver, f"w-{name}", payloads(marker)[name])
    for tup in read_everything(strict_saver, conf):
        assert [w[1] for w in tup.pending_writes] == ["x"]
        assert not isinstance(tup.pending_writes[0][2], Gadget)
    assert not marker.exists(), "a stored write ran code"


@pytest.mark.anyio
async def test_strict_serde_async_reads(strict_saver: D1Saver, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    conf = plant(strict_saver, "async", "msgpack", checkpoint_bytes(payloads(marker)["os.system"]))
    assert await strict_saver.aget_tuple(conf) is not None
    assert [t async for t in strict_saver.alist(None)]
    assert not marker.exists()


def test_method_calls_are_blocked_in_every_mode(tmp_path: Path, each_serde_saver: D1Saver) -> None:
    marker = tmp_path / "marker"
    saver = each_serde_saver
    conf = plant(saver, "m", "msgpack", checkpoint_bytes(method_payload(marker)))
    x = saver.get_tuple(conf).checkpoint["channel_values"]["x"]
    assert x == str(marker)  # the raw argument, not Gadget.create(...)
    assert not marker.exists()


# --- with keys: every planted row refused before a serializer sees it ------------------------


@pytest.mark.parametrize("name", [*payloads(Path("x")), METHOD_PAYLOAD])
def test_with_keys_a_planted_checkpoint_constructs_nothing(
        keyed_saver: D1Saver, tmp_path: Path, name: str) -> None:
    marker = tmp_path / "marker"
    value = method_payload(marker) if name == METHOD_PAYLOAD else payloads(marker)[name]
    conf = plant(keyed_saver, f"keyed-{name}", "msgpack", checkpoint_bytes(value))
    assert_refused_as_plaintext(keyed_saver, conf)
    assert not marker.exists(), "a planted row ran code"


@pytest.mark.parametrize("name", list(payloads(Path("x"))))
def test_with_keys_a_planted_write_constructs_nothing(
        keyed_saver: D1Saver, tmp_path: Path, name: str) -> None:
    marker = tmp_path / "marker"
    conf = plant_write(keyed_saver, f"keyed-w-{name}", payloads(marker)[name])
    assert_refused_as_plaintext(keyed_saver, conf)
    assert not marker.exists(), "a planted write ran code"


def test_with_keys_planted_json_and_pickle_rows_construct_nothing(
        keyed_saver: D1Saver, tmp_path: Path) -> None:
    marker = tmp_path / "marker"

    class Boom:
        def __reduce__(self) -> Any:
            return (os.system, (f"touch {marker}",))

    obj = {"lc": 1, "type": "constructor", "id": ["os", "system"],
           "kwargs": {"command": f"touch {marker}"}}
    for i, (type_, data) in enumerate((("json", json_checkpoint(obj)),
                                       ("pickle", pickle.dumps(Boom())))):
        assert_refused_as_plaintext(keyed_saver, plant(keyed_saver, f"k{i}", type_, data))
    assert not marker.exists()


# --- msgpack, through the environment variable, in a fresh process -----------------------------

CHILD = """
import json, sys
from pathlib import Path
from d1saver.local import LocalD1
from tests.reliability import test_deserialization as t
marker_dir = Path(sys.argv[1])
keys = [t.KEY] if sys.argv[2] == "keys" else None
saver = t.new_saver(LocalD1(), encryption_keys=keys)
ran = {}
for name, value in t.payloads(marker_dir / "m").items():
    marker = marker_dir / name
    value = t.payloads(marker)[name]
    conf = t.plant(saver, name, "msgpack", t.checkpoint_bytes(value))
    for read in t.reads(saver, conf):
        try:
            read()
        except t.PlaintextValueError:
            assert keys
    ran[name] = marker.exists()
print(json.dumps(ran))
"""


def run_child(tmp_path: Path, strict: bool | None, keys: bool = False) -> dict[str, bool]:
    env = {k: v for k, v in os.environ.items() if k != "LANGGRAPH_STRICT_MSGPACK"}
    if strict is not None:
        env["LANGGRAPH_STRICT_MSGPACK"] = "true" if strict else "false"
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), "keys" if keys else "-"],
                          env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_strict_env_variable_blocks_every_payload(tmp_path: Path) -> None:
    ran = run_child(tmp_path, strict=True)
    assert ran and not any(ran.values()), ran


def test_default_saver_has_langgraphs_threat_model(tmp_path: Path) -> None:
    """Without a key the default is LangGraph's own (as SqliteSaver): a planted row that names
    a type constructs it on read. This is the documented threat model (README, Deserialization);
    encryption keys close it (tests/reliability/test_tamper.py)."""
    ran = run_child(tmp_path, strict=None)
    assert any(ran.values()), "the default no longer matches LangGraph's: update the docs"


def test_with_keys_the_default_serializer_runs_no_planted_row(tmp_path: Path) -> None:
    """The same planted rows, LANGGRAPH_STRICT_MSGPACK unset, with a key: none runs."""
    ran = run_child(tmp_path, strict=None, keys=True)
    assert ran and not any(ran.values()), ran


# --- json and pickle rows ---------------------------------------------------------------------------


def json_checkpoint(value: Any) -> bytes:
    ck = empty_checkpoint()
    ck["channel_values"] = {"x": value}
    return json.dumps(ck).encode()


def test_json_lc2_constructor_is_returned_as_data(tmp_path: Path, each_serde_saver: D1Saver) -> None:
    marker = tmp_path / "marker"
    saver = each_serde_saver
    for ident, args in ((["os", "system"], [f"touch {marker}"]),
                        ([*HERE.split("."), "Gadget"], [str(marker)])):
        obj = {"lc": 2, "type": "constructor", "id": ident, "args": args}
        conf = plant(saver, f"json-{ident[-1]}", "json", json_checkpoint(obj))
        for tup in read_everything(saver, conf):
            if tup.config["configurable"]["thread_id"] == conf["configurable"]["thread_id"]:
                assert tup.checkpoint["channel_values"]["x"] == obj  # the envelope, unrevived
    assert not marker.exists()


def test_json_lc1_constructor_outside_langchain_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    saver = new_saver(LocalD1())
    obj = {"lc": 1, "type": "constructor", "id": ["os", "system"],
           "kwargs": {"command": f"touch {marker}"}}
    conf = plant(saver, "json-lc1", "json", json_checkpoint(obj))
    # LangChain's reviver refuses it; the error is LangChain's ValueError, not a D1Error.
    with pytest.raises(ValueError, match="not allowed"):
        saver.get_tuple(conf)
    with pytest.raises(ValueError):
        list(saver.list(None))
    assert not marker.exists()


def test_pickle_row_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "marker"

    class Boom:
        def __reduce__(self) -> Any:
            return (os.system, (f"touch {marker}",))

    saver = new_saver(LocalD1())
    conf = plant(saver, "pickle", "pickle", pickle.dumps(Boom()))
    with pytest.raises(StoredValueError, match="pickle") as info:
        saver.get_tuple(conf)
    assert isinstance(info.value.__cause__, NotImplementedError)
    with pytest.raises(StoredValueError):
        list(saver.list(None))
    assert not marker.exists()


def test_unknown_codec_in_a_row_is_refused() -> None:
    saver = new_saver(LocalD1())
    conf = plant(saver, "codec", "msgpack", b"")
    saver.client.execute([Statement("UPDATE checkpoints SET checkpoint = 'x:AAAA'")])
    with pytest.raises(ValueError, match="unknown value codec"):
        saver.get_tuple(conf)
