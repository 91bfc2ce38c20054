"""Search filters: checked before anything is sent, decided exactly as InMemoryStore decides
them, and compiled into conditions SQL answers with "yes", "no" or "cannot tell".

The semantics are InMemoryStore's (`langgraph.store.memory._compare_values`): a filter key is a
field name (a dotted key is one literal key, as InMemoryStore and PostgresStore read it); a
plain value matches by ==, a dict of operators ($eq $ne $gt $gte $lt $lte) compares, a dict
without operators matches a nested object by its keys, a list matches element by element.
One difference: a comparison InMemoryStore cannot make (`float()` of None, a dict, a string
that is not a number) is no match here, where InMemoryStore fails the whole search.

`compile_filter` turns a filter into conditions that each answer, for a stored row, 2 (holds),
0 (does not hold) or 1 (SQL cannot tell: Python decides). SQL keeps a row unless some
condition says 0, and counts the rows every condition says 2 toward the page: so the rows SQL
returns always hold the page that InMemoryStore would fill (docs/STORE.md). A condition says
2 or 0 only where SQL's reading of the stored JSON is exactly Python's: numbers are compared
by their JSON text where == is asked, and with a margin of error where SQLite's reading of a
number's text may be one unit in the last place off Python's.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from d1saver.core.errors import InvalidInputError

OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
_RANGE = {"$gt": "gt", "$gte": "gte", "$lt": "lt", "$lte": "lte"}

# A longer string operand is left to Python: the parameter stays far below D1's 2 MB.
_OPERAND_MAX = 10_000
# Keys SQLite's JSON path reads exactly when quoted ($."key"): no quote, backslash, control
# character or lone surrogate (the stored JSON escapes those, and SQLite compares a path's key
# with the key's stored text).
_PATH_KEY = re.compile(r'^[^"\\\x00-\x1f\x7f\ud800-\udfff]{1,200}$')
# An operand equal to an integer below this is sent as one, which SQLite reads exactly (an
# INTEGER of 64 bits) and compares with a REAL exactly, as Python compares floats.
_SAFE_INT = 2 ** 63


def check_filter(filter: Mapping[str, Any] | None) -> None:
    """Refuse (InvalidInputError) what InMemoryStore would fail on while matching: a filter
    that is not a dict, an operator outside OPERATORS, or a dict mixing operators with plain
    keys, at any depth. Top-level keys are field names, and $eq/$ne operands are literal
    values: neither is read as an operator."""
    if filter is None:
        return
    if not isinstance(filter, Mapping):
        raise InvalidInputError(f"a filter is a dict, not {type(filter).__name__}")
    for value in filter.values():
        _check(value)


def _check(node: Any) -> None:
    if isinstance(node, Mapping):
        ops = [k for k in node if isinstance(k, str) and k.startswith("$")]
        if not ops:
            for value in node.values():
                _check(value)
            return
        plain = [k for k in node if k not in ops]
        if plain:
            raise InvalidInputError(
                f"a filter dict mixes operators {ops} with plain keys {plain}: use "
                f"{{'key': {{'$op': value}}}} for one and {{'key': value}} for the other")
        for op in ops:
            if op not in OPERATORS:
                raise InvalidInputError(
                    f"unknown filter operator {op!r}: use one of {', '.join(OPERATORS)}")
    elif isinstance(node, list | tuple):
        for value in node:
            _check(value)


# --- deciding in Python -----------------------------------------------------------------------


def matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether an item's value passes a (checked) filter, as InMemoryStore decides it."""
    if not filter:
        return True
    return all(_compare(value.get(k), f) for k, f in filter.items())


def _compare(item: Any, want: Any) -> bool:
    if isinstance(want, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in want):
            return all(_apply(item, op, arg) for op, arg in want.items())
        if not isinstance(item, Mapping):
            return False
        return all(_compare(item.get(k), v) for k, v in want.items())
    if isinstance(want, list | tuple):
        return (isinstance(item, list | tuple) and len(item) == len(want)
                and all(_compare(i, w) for i, w in zip(item, want, strict=True)))
    return bool(item == want)


def _apply(item: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(item == arg)
    if op == "$ne":
        return bool(item != arg)
    try:
        a, b = float(item), float(arg)
    except (TypeError, ValueError, OverflowError):
        return False
    if op == "$gt":
        return a > b
    if op == "$gte":
        return a >= b
    if op == "$lt":
        return a < b
    if op == "$lte":
        return a <= b
    raise InvalidInputError(f"unknown filter operator {op!r}")


# --- compiling for SQL --------------------------------------------------------------------------
#
# A condition is a JSON object {"k": kind, "p": path, "n": 1 to negate, "a": operand, ...}; the
# search statements (d1saver/sql/memory.py, _VERDICT) read the kinds:
#   unknown        1 for every row
#   true, false    2, 0 for every row
#   object         the path holds an object
#   array          the path holds an array of "a" elements
#   keys           the path holds an object of exactly "a" keys
#   none           the path is absent or null (Python's None); "n": present and not null
#   null           the path is present and null
#   text           the path holds the string "a"
#   text?          2 is never said: 1 where the path holds a string, else 0 (negated: 1 or 2)
#   num            the path holds a number or bool whose JSON text is in "a" ("|1|1.0|true|"),
#                  1 where it holds a real within a margin of the value "v"
#   cmp            float(item) "o" (gt gte lt lte) "v": exact for booleans and integers of
#                  SQLite's 64 bits when "safe" ("v" read exactly), a string is 1; a real
#                  whose JSON text is in "a" equals "v"; else 1 within the margin
#   numtype        "a" where the path holds a number or bool float() takes, 1 for a string
#                  or an integer beyond 64 bits, 0 otherwise (a comparison with infinity)
#   notcontainer   1 where the path holds an "a" ("object"/"array"), else 2 ($ne of a dict/list)


def compile_filter(filter: Mapping[str, Any] | None) -> str | None:
    """The filter as the JSON parameter of the search statements, or None without a filter."""
    if not filter:
        return None
    out: list[dict[str, Any]] = []
    for key, want in filter.items():
        if not _path_key(key):
            out.append({"k": "unknown"})
            continue
        _plain(out, _join("$", key), want)
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"))


def _path_key(key: Any) -> bool:
    return isinstance(key, str) and bool(_PATH_KEY.match(key))


def _join(path: str, key: str) -> str:
    return f'{path}."{key}"'


def _plain(out: list[dict[str, Any]], path: str, want: Any) -> None:
    """_compare(item at path, want)."""
    if isinstance(want, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in want):
            for op, arg in want.items():
                _operator(out, path, op, arg)
            return
        out.append({"k": "object", "p": path})
        for k, v in want.items():
            if _path_key(k):
                _plain(out, _join(path, k), v)
            else:
                out.append({"k": "unknown"})
        return
    if isinstance(want, list | tuple):
        out.append({"k": "array", "p": path, "a": len(want)})
        for i, v in enumerate(want):
            _plain(out, f"{path}[{i}]", v)
        return
    _equal(out, path, want, member=False, negate=False)


def _operator(out: list[dict[str, Any]], path: str, op: str, arg: Any) -> None:
    if op == "$eq":
        _strict(out, path, arg, member=False)
    elif op == "$ne":
        if isinstance(arg, Mapping):
            out.append({"k": "notcontainer", "p": path, "a": "object"})
        elif isinstance(arg, list):
            out.append({"k": "notcontainer", "p": path, "a": "array"})
        else:
            _equal(out, path, arg, member=False, negate=True)
    elif op in _RANGE:
        _range(out, path, _RANGE[op], arg)
    else:  # refused by check_filter before anything is built
        raise InvalidInputError(f"unknown filter operator {op!r}")


def _strict(out: list[dict[str, Any]], path: str, want: Any, *, member: bool) -> None:
    """item == want (Python's ==: a dict equals a dict of the same keys, a list a list)."""
    if isinstance(want, Mapping):
        if not all(_path_key(k) for k in want):
            out += [{"k": "object", "p": path}, {"k": "unknown"}]
            return
        out.append({"k": "keys", "p": path, "a": len(want)})
        for k, v in want.items():
            _strict(out, _join(path, k), v, member=True)
        return
    if isinstance(want, list):
        out.append({"k": "array", "p": path, "a": len(want)})
        for i, v in enumerate(want):
            _strict(out, f"{path}[{i}]", v, member=False)
        return
    _equal(out, path, want, member=member, negate=False)


def _equal(out: list[dict[str, Any]], path: str, want: Any, *, member: bool,
           negate: bool) -> None:
    """item == want for a value that is not a dict or list; `member`: the item is a key of an
    object compared whole (present, not merely None when absent)."""
    cond: dict[str, Any]
    if want is None:
        cond = {"k": "null" if member and not negate else "none", "p": path}
    elif type(want) is str:
        if len(want) > _OPERAND_MAX or not _sql_text(want):
            cond = {"k": "text?", "p": path}
        else:
            cond = {"k": "text", "p": path, "a": want}
    elif type(want) in (bool, int, float):
        texts, value = _number_texts(want)
        if not texts:  # nan: == never holds, != always does
            out.append({"k": "true" if negate else "false"})
            return
        cond = {"k": "num", "p": path, "a": "|" + "|".join(texts) + "|", "v": value}
    elif isinstance(want, tuple):  # a JSON item is never a tuple: == never holds
        out.append({"k": "true" if negate else "false"})
        return
    else:  # another type: its own __eq__ decides, in Python
        out.append({"k": "unknown"})
        return
    if negate:
        cond["n"] = 1
    out.append(cond)


def _sql_text(text: str) -> bool:
    """A string SQLite compares exactly once read out of JSON (no NUL, no lone surrogate)."""
    return "\x00" not in text and not any("\ud800" <= ch <= "\udfff" for ch in text)


def _number_texts(want: bool | int | float) -> tuple[list[str], float | int | None]:
    """The JSON texts of every stored number or bool equal to `want` (json.dumps writes each
    value one way: ints in decimal, floats by repr, true/false), and the value SQL may compare
    within a margin (None when it has no finite float)."""
    texts: list[str] = []
    if isinstance(want, bool) or want in (0, 1):
        n = int(want)
        texts += ["true" if n else "false", str(n), repr(float(n))]
        if n == 0:
            texts.append("-0.0")
        return texts, n
    if isinstance(want, int):
        texts.append(str(want))
        try:
            f = float(want)
        except OverflowError:
            return texts, None
        if f == want:
            texts.append(repr(f))
        return texts, (want if abs(want) < 2 ** 53 else f)
    if not math.isfinite(want):
        return [], None
    texts.append(repr(want))
    if want.is_integer():
        texts.append(str(int(want)))
    return texts, want


def _range(out: list[dict[str, Any]], path: str, op: str, arg: Any) -> None:
    try:
        b = float(arg)
    except (TypeError, ValueError, OverflowError):
        out.append({"k": "false"})  # no item compares with it
        return
    if math.isnan(b):
        out.append({"k": "false"})
        return
    if math.isinf(b):
        holds = (b > 0) == (op in ("lt", "lte"))
        out.append({"k": "numtype", "p": path, "a": 2 if holds else 0})
        return
    safe = b.is_integer() and abs(b) < _SAFE_INT
    texts = [repr(b)] + (["-0.0", "0.0"] if b == 0 else [])
    out.append({"k": "cmp", "p": path, "o": op, "v": int(b) if safe else b,
                "a": "|" + "|".join(texts) + "|", "s": 1 if safe else 0})


__all__ = ["OPERATORS", "check_filter", "compile_filter", "matches"]
