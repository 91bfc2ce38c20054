"""A named SQL statement: the text as written (named parameters, comments, laid out for
reading) and, made once at import, the text as sent with its parameters in position order.

D1's REST API binds parameters by position only (`?NNN`), and carries every statement's text
in every request body. So each statement is written with `:name` parameters, and `minify`
turns it, deterministically, into what D1 receives: comments dropped, white space folded (none
beside `, ( ) = < > |`), `AS` dropped before a lower-case alias (not in CAST), and each
`:name` replaced by its number (a bare `?` where SQLite's own numbering gives the same one).
Pure text; imports nothing else of d1saver.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# D1 refuses a statement with more than 100 bound parameters.
MAX_PARAMS = 100

_TOKEN = re.compile(r"""
      (?P<literal>'(?:[^']|'')*')
    | (?P<quoted>"(?:[^"]|"")*")
    | (?P<comment>--[^\n]*|/\*.*?\*/)
    | (?P<space>\s+)
    | (?P<param>:[A-Za-z_][A-Za-z0-9_]*)
    | (?P<bad>\?\d*|[@$][A-Za-z_]\w*)
    | (?P<word>[A-Za-z_][A-Za-z0-9_$]*|\d+(?:\.\d+)?)
    | (?P<punct>.)
""", re.VERBOSE | re.DOTALL)
# No white space is needed beside these (|| is SQLite's only operator made of them twice).
_TIGHT = set(",()=<>|")


@dataclass(frozen=True, eq=False)
class Query:
    """One statement: `sql` as sent, `params` its parameter names (params[i] binds ?{i+1}),
    `text` as written, `name` its identifier in the catalogue."""

    text: str = field(repr=False)
    sql: str = field(repr=False)
    params: tuple[str, ...]
    name: str = ""


def minify(text: str) -> tuple[str, tuple[str, ...]]:
    """`text` as sent and its parameter names in position order (see the module docstring)."""
    tokens: list[tuple[str, str]] = []
    pos = 0
    for m in _TOKEN.finditer(text):
        if m.start() != pos:
            raise ValueError(f"cannot read SQL at {text[pos:pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup or ""
        if kind == "bad":
            raise ValueError(f"{m.group()!r} in a statement: name every parameter (:name)")
        tokens.append(("space" if kind == "comment" else kind, m.group()))
    if pos != len(text):
        raise ValueError(f"cannot read SQL at {text[pos:pos + 20]!r}")

    names: list[str] = []
    out: list[str] = []
    pending_space = False
    cast_depth: list[bool] = []  # per open parenthesis: is it CAST's?
    prev_word = ""
    highest = 0
    for i, (kind, value) in enumerate(tokens):
        if kind == "space":
            pending_space = bool(out)
            continue
        if (kind == "word" and value == "AS" and not (cast_depth and cast_depth[-1])
                and not _alias_needs_as(out)):
            nxt = next(((k, v) for k, v in tokens[i + 1:] if k != "space"), ("", ""))
            if nxt[0] == "word" and nxt[1][:1].islower():
                continue  # `x AS alias` is `x alias`; the space before stays pending
        if kind == "param":
            name = value[1:]
            if name not in names:
                names.append(name)
            number = names.index(name) + 1
            value = "?" if number == highest + 1 else f"?{number}"
            highest = max(highest, number)
        if kind == "punct" and value == "(":
            cast_depth.append(prev_word.upper() == "CAST")
        elif kind == "punct" and value == ")" and cast_depth:
            cast_depth.pop()
        if pending_space and value[0] not in _TIGHT and out[-1][-1] not in _TIGHT:
            out.append(" ")
        pending_space = False
        out.append(value)
        prev_word = value if kind == "word" else ""
    if len(names) > MAX_PARAMS:
        raise ValueError(f"{len(names)} parameters: D1 binds at most {MAX_PARAMS}")
    return "".join(out), tuple(names)


def _alias_needs_as(out: list[str]) -> bool:
    """Whether the table just written is the target of DELETE, UPDATE or INSERT, whose alias
    SQLite's grammar reads only after AS."""
    words = [w.upper() for w in out if w != " "][-4:-1]  # the words before the table name
    return (words[-1:] in (["UPDATE"], ["INTO"]) or words[-2:] == ["DELETE", "FROM"]
            or (len(words) == 3 and words[0] == "UPDATE" and words[1] == "OR"))


def q(text: str, name: str = "") -> Query:
    """A statement written with :name parameters, made ready to send (`name`: given by
    name_queries when it is a module's constant)."""
    sql, params = minify(text)
    return Query(text=text, sql=sql, params=params, name=name)


def name_queries(namespace: dict[str, object]) -> list[Query]:
    """Give each Query constant of a module's namespace its identifier as name (in place), and
    check that every Query its lists and dicts hold has a name too: every statement sent is
    named. Returns them all, each once, in definition order."""
    out: dict[int, Query] = {}
    for key, value in namespace.items():
        if isinstance(value, Query) and not key.startswith("_") and not value.name:
            object.__setattr__(value, "name", key)
        for query in _nested([value]):
            if not query.name:
                raise ValueError(f"{key} holds a statement with no name of its own")
            out.setdefault(id(query), query)
    return list(out.values())


def snapshot(queries: Iterable[Query]) -> str:
    """Every statement as sent, one a line under a `-- name:` header and its parameters, for
    the reviewed snapshot (tests/sql/statements.snapshot.sql)."""
    out = ["-- Every SQL statement d1saver sends, exactly as sent (d1saver/sql/catalogue.py,",
           "-- made ready by d1saver/sql/query.py). Generated: do not edit; regenerate with",
           "--     PYTHONPATH=$PWD python -m tests.sql.test_statements --update",
           "-- and review the difference with the change that caused it.", ""]
    for query in queries:
        out.append(f"-- name: {query.name}")
        if query.params:
            out.append("-- params: " + ", ".join(f"?{i} {n}"
                                                 for i, n in enumerate(query.params, 1)))
        out += [query.sql, ""]
    return "\n".join(out)


def _nested(value: object) -> Iterable[Query]:
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, Query):
                yield item
            else:
                yield from _nested(item)


__all__ = ["MAX_PARAMS", "Query", "minify", "name_queries", "q", "snapshot"]
