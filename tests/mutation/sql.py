"""SQL mutants: each statement of the catalogue as sent, with one clause dropped or changed.

Made mechanically from the minified text (the `sql` of each named statement): the text is cut
into tokens (string and blob literals, quoted names, parameters, words, operators), parentheses
are matched, and each operator below yields one edit. Statements are looked up at run time from
the aggregate list the snapshot test reads (`statements()`), so the mutants follow the
statements wherever their module puts them. A mutant is applied in the test process by setting
the statement object's `sql` (tests/mutation/plugin.py).

Operators (the `kind` of a mutant):
- drop-and, drop-or: one operand of an AND or OR chain of a WHERE, ON, HAVING or WHEN condition,
  or of a parenthesized condition inside one;
- drop-where, drop-having, on-true: a condition with a single term dropped whole (ON becomes 1);
- drop-arm: one arm of a compound SELECT (UNION ALL, UNION, INTERSECT, EXCEPT);
- union-all: a deduplicating UNION made UNION ALL;
- flip-cmp: < and <=, > and >= swapped, = and <> swapped; IS and IS NOT, IN and NOT IN,
  EXISTS and NOT EXISTS; drop-not: a NOT dropped;
- drop-order, drop-order-term, swap-dir: ORDER BY dropped, one of its terms dropped, a term's
  direction reversed; drop-limit: LIMIT (and OFFSET) dropped;
- drop-group-term, drop-group: GROUP BY loses a term, or is dropped;
- drop-distinct: DISTINCT dropped;
- drop-using: one column of a USING join dropped;
- drop-arg: one argument of json_array or json_object (the packed rows' columns);
- null-column: one result column of a SELECT made NULL;
- drop-when: one WHEN ... THEN arm of a CASE with several;
- off-by-one: an integer literal n made n + 1; plus-minus: + and - swapped;
- conflict: INSERT OR IGNORE and INSERT OR REPLACE swapped.
Mutants whose text no longer prepares on the schema (sqlite3, as tests/sql/test_statements.py
does) are counted apart as "not parsed".
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any


def statements() -> list[Any]:
    """Every named statement sent, from the aggregate list the snapshot test reads."""
    from d1saver.sql.catalogue import STATEMENTS  # the one line to repoint when the list moves
    return list(STATEMENTS)


@dataclass(frozen=True)
class Token:
    kind: str  # literal, name, param, number, word, op, space
    text: str
    start: int
    end: int

    @property
    def up(self) -> str:
        return self.text.upper() if self.kind == "word" else self.text


@dataclass(frozen=True)
class Mutant:
    """One edit of one statement: `index` counts this statement's mutants in order."""

    statement: str
    index: int
    kind: str
    where: str  # the text edited, shortened, for the report
    sql: str
    old: str = ""  # the text replaced (or dropped), as in the numbered statement
    new: str = ""  # what replaced it

    @property
    def digest(self) -> str:
        return hashlib.sha1(self.sql.encode()).hexdigest()[:10]

    @property
    def id(self) -> str:
        """`sql:NAME:INDEX:DIGEST`: the index finds it at once, the digest checks it."""
        return f"sql:{self.statement}:{self.index}:{self.digest}"

    @property
    def stable(self) -> str:
        """The id without the index: it names the same mutant while the text is the same."""
        return f"sql:{self.statement}:{self.digest}"


_TOKEN = re.compile(r"""
      (?P<literal>[xX]'[0-9A-Fa-f]*'|'(?:[^']|'')*')
    | (?P<name>"(?:[^"]|"")*"|`[^`]*`|\[[^\]]*\])
    | (?P<space>\s+)
    | (?P<param>\?\d*)
    | (?P<number>\d+(?:\.\d+)?)
    | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
    | (?P<op>->>|->|\|\||<=|>=|<>|!=|==|<<|>>|.)
""", re.VERBOSE | re.DOTALL)

# Words that end a condition, an ORDER BY or a GROUP BY at their depth.
_ENDS = {"FROM", "WHERE", "GROUP", "HAVING", "ORDER", "LIMIT", "OFFSET", "UNION", "INTERSECT",
         "EXCEPT", "WINDOW", "RETURNING", "JOIN", "CROSS", "LEFT", "INNER", "NATURAL", "USING",
         "THEN", "ELSE", "END", "WHEN", "DO", "SET", "VALUES", "BEGIN", "SELECT", "ON"}
_CONDITION_AFTER = {"WHERE": "drop-where", "ON": "on-true", "HAVING": "drop-having",
                    "WHEN": None}
_COMPOUND = {"UNION", "INTERSECT", "EXCEPT"}
_CMP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "=": "<>", "==": "<>", "<>": "=",
        "!=": "="}


def tokenize(sql: str) -> list[Token]:
    out, pos = [], 0
    for m in _TOKEN.finditer(sql):
        if m.start() != pos:
            raise ValueError(f"cannot read SQL at {sql[pos:pos + 20]!r}")
        pos = m.end()
        out.append(Token(m.lastgroup or "op", m.group(), m.start(), m.end()))
    return [t for t in out if t.kind != "space"]


class _Text:
    """A statement's tokens with their depths and matching parentheses."""

    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.toks = tokenize(sql)
        self.depth: list[int] = []
        self.match: dict[int, int] = {}
        stack: list[int] = []
        for i, t in enumerate(self.toks):
            if t.text == "(":
                self.depth.append(len(stack))
                stack.append(i)
            elif t.text == ")":
                j = stack.pop()
                self.match[i], self.match[j] = j, i
                self.depth.append(len(stack))
            else:
                self.depth.append(len(stack))

    def up(self, i: int) -> str:
        return self.toks[i].up if 0 <= i < len(self.toks) else ""

    def span(self, i: int, j: int) -> tuple[int, int]:
        """Character span of tokens i..j inclusive."""
        return self.toks[i].start, self.toks[j].end

    def region_end(self, i: int, ends: set[str], stop_comma: bool = True) -> int:
        """The last token of the clause that starts at token i, at i's depth: it ends before a
        word of `ends` (or a comma) at that depth, or where the enclosing group closes."""
        d = self.depth[i]
        k = self.match[i] if self.toks[i].text == "(" else i
        while k + 1 < len(self.toks):
            n = k + 1
            t = self.toks[n]
            if self.depth[n] < d or t.text == ";":
                break
            if stop_comma and t.text == ",":
                break
            if t.kind == "word" and t.up in ends:
                break
            k = self.match[n] if t.text == "(" else n
        return k

    def split(self, i: int, j: int, sep: set[str]) -> list[tuple[int, int]]:
        """Tokens i..j cut at words in `sep` at i's depth (BETWEEN's AND is not a cut)."""
        d = self.depth[i]
        parts, start, k, between = [], i, i, False
        while k <= j:
            t = self.toks[k]
            if self.depth[k] == d and t.kind == "word":
                if t.up == "BETWEEN":
                    between = True
                elif t.up in sep and not (t.up == "AND" and between):
                    parts.append((start, k - 1))
                    start = k + 1
                elif t.up == "AND":
                    between = False
            if t.text == "(":
                k = self.match[k]
            k += 1
        parts.append((start, j))
        return parts

    def split_commas(self, i: int, j: int) -> list[tuple[int, int]]:
        d = self.depth[i]
        parts, start, k = [], i, i
        while k <= j:
            t = self.toks[k]
            if self.depth[k] == d and t.text == ",":
                parts.append((start, k - 1))
                start = k + 1
            if t.text == "(":
                k = self.match[k]
            k += 1
        parts.append((start, j))
        return parts


def _edit(sql: str, start: int, end: int, new: str) -> str:
    """sql with [start, end) replaced by `new`, a space kept where words would touch."""
    left, right = sql[:start], sql[end:]
    if not new:
        left, right = left.rstrip(), right.lstrip()
        glue = " " if (left and right and _wordy(left[-1]) and _wordy(right[0])) else ""
        if left and right and not glue and left[-1] not in "(," and right[0] not in "),":
            glue = " "
        return left + glue + right
    if left and _wordy(left[-1]) and _wordy(new[0]):
        new = " " + new
    if right and _wordy(new[-1]) and _wordy(right[0]):
        new = new + " "
    return left + new + right


def _wordy(ch: str) -> bool:
    return ch.isalnum() or ch in "_'\"?$`]"


def _short(text: str, limit: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


# Off by default (the operator set is kept free of redundant mutants, docs/RELIABILITY.md):
# the negation of a condition operand that is also dropped whole (`a=b` as a conjunct made
# `a<>b`), ORDER BY dropped or one of its terms dropped (each term's direction reversed stands
# for them), GROUP BY of several terms dropped whole (each term dropped stands for it).
REDUNDANT = False
_NEGATION = {"=", "==", "<>", "!="}
# Off by default: a result column made NULL and a literal made n + 1 (substr positions, mostly)
# give five times the mutants, nearly all killed at once by the column checks of the readers.
NULL_COLUMNS = False
OFF_BY_ONE = False
_KEYWORDS = {"END", "NULL", "TRUE", "FALSE", "ASC", "DESC", "AND", "OR", "NOT", "THEN",
             "ELSE", "WHEN", "CASE", "IS", "IN", "LIKE", "GLOB", "EXISTS", "BETWEEN"}


def _edits(x: _Text) -> Iterator[tuple[str, int, int, str]]:
    """(kind, start, end, replacement) for every operator at every place, in text order of
    the operator."""
    toks = x.toks
    terms = [] if REDUNDANT else _dropped_terms(x)
    for i, t in enumerate(toks):
        word = t.up if t.kind == "word" else ""
        nxt = x.up(i + 1)
        if word in _CONDITION_AFTER and not (word == "ON" and nxt == "CONFLICT"):
            end = x.region_end(i + 1, _ENDS)
            yield from _condition(x, i + 1, end, word, i)
        if word in _COMPOUND:
            yield from _compound(x, i)
        negation = (t.kind == "op" and t.text in _NEGATION) or word in ("IS", "IN", "EXISTS") \
            or (word == "NOT" and nxt in ("IN", "EXISTS"))
        if negation and _whole_term(x, i, terms):
            pass  # the operand's drop stands for it
        elif t.kind == "op" and t.text in _CMP:
            if not (t.text == "=" and _assignment(x, i)):
                yield "flip-cmp", t.start, t.end, _CMP[t.text]
        elif word == "IS":
            if nxt == "NOT":
                yield "flip-cmp", t.start, toks[i + 1].end, "IS"
            else:
                yield "flip-cmp", t.start, t.end, "IS NOT"
        elif word == "NOT" and nxt in ("IN", "EXISTS"):
            yield "flip-cmp", t.start, toks[i + 1].end, nxt
        elif word in ("IN", "EXISTS") and x.up(i - 1) != "NOT":
            yield "flip-cmp", t.start, t.end, "NOT " + word
        elif word == "NOT" and x.up(i - 1) != "IS" and nxt not in ("NULL", "EXISTS", "IN"):
            yield "drop-not", t.start, t.end, ""
        elif word == "DISTINCT":
            yield "drop-distinct", t.start, t.end, ""
        elif word == "ORDER" and nxt == "BY":
            end = x.region_end(i + 2, _ENDS, stop_comma=False)
            s, e = x.span(i, end)
            if REDUNDANT:
                yield "drop-order", s, e, ""
            keys = x.split_commas(i + 2, end)
            for a, b in keys:
                if len(keys) > 1 and REDUNDANT:
                    yield _drop_item(x, keys, (a, b), "drop-order-term")
                last = x.up(b)
                if last == "DESC":
                    yield "swap-dir", toks[b].start, toks[b].end, "ASC"
                elif last == "ASC":
                    yield "swap-dir", toks[b].start, toks[b].end, "DESC"
                else:
                    yield "swap-dir", toks[b].end, toks[b].end, " DESC"
        elif word == "GROUP" and nxt == "BY":
            end = x.region_end(i + 2, _ENDS, stop_comma=False)
            keys = x.split_commas(i + 2, end)
            if len(keys) > 1:
                for a, b in keys:
                    yield _drop_item(x, keys, (a, b), "drop-group-term")
            if len(keys) == 1 or REDUNDANT:
                s, e = x.span(i, end)
                yield "drop-group", s, e, ""
        elif word == "LIMIT":
            end = x.region_end(i + 1, _ENDS - {"OFFSET"}, stop_comma=False)
            s, e = x.span(i, end)
            yield "drop-limit", s, e, ""
        elif word == "USING" and nxt == "(":
            cols = x.split_commas(i + 2, x.match[i + 1] - 1)
            if len(cols) > 1:
                for a, b in cols:
                    yield _drop_item(x, cols, (a, b), "drop-using")
        elif word in ("JSON_ARRAY", "JSON_OBJECT") and nxt == "(":
            args = x.split_commas(i + 2, x.match[i + 1] - 1)
            step = 2 if word == "JSON_OBJECT" else 1
            group = [(args[h][0], args[min(h + step, len(args)) - 1][1])
                     for h in range(0, len(args), step)]
            if len(group) > 1:
                for item in group:
                    yield _drop_item(x, group, item, "drop-arg")
        elif word == "SELECT" and NULL_COLUMNS:
            yield from _null_columns(x, i)
        elif word == "CASE":
            yield from _case_arms(x, i)
        elif word == "OR" and nxt in ("IGNORE", "REPLACE") and x.up(i - 1) in (
                "INSERT", "UPDATE"):
            other = "REPLACE" if nxt == "IGNORE" else "IGNORE"
            yield "conflict", toks[i + 1].start, toks[i + 1].end, other
        elif (OFF_BY_ONE and t.kind == "number" and "." not in t.text
              and x.up(i - 1) != "LIMIT"):
            yield "off-by-one", t.start, t.end, str(int(t.text) + 1)
        elif t.kind == "op" and t.text in ("+", "-") and i > 0 and (
                toks[i - 1].kind in ("word", "number", "param", "name") or toks[i - 1].text == ")"):
            yield "plus-minus", t.start, t.end, "-" if t.text == "+" else "+"


def _condition(x: _Text, i: int, j: int, keyword: str | None, kw_index: int | None,
               terms: list[tuple[int, int]] | None = None
               ) -> Iterator[tuple[str, int, int, str]]:
    """Drop each operand of the condition's OR and AND chains (a single term: the clause);
    then the same inside its parenthesized conditions. `terms` gets the token span of each
    operand dropped."""
    if i > j:
        return
    spans = terms if terms is not None else []
    ors = x.split(i, j, {"OR"})
    if len(ors) > 1:
        for part in ors:
            spans.append(part)
            yield _drop_item(x, ors, part, "drop-or")
    single = len(ors) == 1
    for oi, oj in ors:
        ands = x.split(oi, oj, {"AND"})
        if len(ands) > 1:
            single = False
            for part in ands:
                spans.append(part)
                yield _drop_item(x, ands, part, "drop-and")
    if single and kw_index is not None:
        kind = _CONDITION_AFTER.get(keyword or "")
        if kind:
            spans.append((i, j))
        if kind == "on-true":
            s, e = x.span(i, j)
            yield kind, s, e, "1"
        elif kind:
            s, e = x.span(kw_index, j)
            yield kind, s, e, ""
    k = i
    while k <= j:
        if x.toks[k].text == "(":
            close = x.match[k]
            boolean = k == i or x.up(k - 1) in ("AND", "OR", "NOT", "(")
            if boolean and x.up(k + 1) not in ("SELECT", "WITH", "VALUES") and close > k + 1:
                yield from _condition(x, k + 1, close - 1, None, None, spans)
            k = close
        k += 1


def _dropped_terms(x: _Text) -> list[tuple[int, int]]:
    """The token spans of every condition operand that has a drop mutant."""
    spans: list[tuple[int, int]] = []
    for i, t in enumerate(x.toks):
        word = t.up if t.kind == "word" else ""
        if word in _CONDITION_AFTER and not (word == "ON" and x.up(i + 1) == "CONFLICT"):
            for _ in _condition(x, i + 1, x.region_end(i + 1, _ENDS), word, i, spans):
                pass
    return spans


def _whole_term(x: _Text, i: int, terms: list[tuple[int, int]]) -> bool:
    """Whether the operator at token i is the top of a condition operand that is dropped
    whole by another mutant (`a=b` as a conjunct): negating it asks nothing more of the tests
    than dropping it, so only the drop is made (REDUNDANT makes both)."""
    d = x.depth[i]
    for a, b in terms:
        if a <= i <= b and x.depth[a] == d and not any(
                x.depth[k] == d and x.up(k) in ("AND", "OR") for k in range(a, b + 1)):
            return True
    return False


def _compound(x: _Text, w: int) -> Iterator[tuple[str, int, int, str]]:
    """At compound word w: drop the arm after it (and, for the chain's first word, the arm
    before it too); a UNION made UNION ALL."""
    toks, d = x.toks, x.depth[w]
    # the arm before: back to the nearest SELECT at this depth
    a = w - 1
    while a >= 0:
        if toks[a].text == ")" and x.depth[a] == d:
            a = x.match[a] - 1
            continue
        if x.depth[a] < d or x.up(a) == "SELECT":
            break
        a -= 1
    first = True
    k = a - 1
    while k >= 0 and x.depth[k] >= d:  # another compound word just before: not the first
        if toks[k].text == ")" and x.depth[k] == d:
            k = x.match[k] - 1
            continue
        if x.depth[k] == d and x.up(k) in _COMPOUND:
            first = False
            break
        if x.depth[k] == d and (toks[k].text in (",", ";") or x.up(k) in ("AS", "BEGIN")):
            break
        if x.depth[k] == d and toks[k].text == ")":
            break
        k -= 1
    # the arm after: to the next compound word, a trailing ORDER BY/LIMIT, or the group's end
    b_start = w + 2 if x.up(w + 1) == "ALL" else w + 1
    b = b_start
    while b + 1 < len(toks):
        n = b + 1
        if x.depth[n] < d or toks[n].text == ";" or (x.depth[n] == d and (
                x.up(n) in _COMPOUND or x.up(n) in ("ORDER", "LIMIT", "END"))):
            break
        b = x.match[n] if toks[n].text == "(" else n
    if first and a >= 0 and x.up(a) == "SELECT":
        yield "drop-arm", toks[a].start, toks[b_start].start, ""
    yield "drop-arm", toks[w - 1].end, toks[b].end, ""
    if x.up(w) == "UNION" and x.up(w + 1) != "ALL":
        yield "union-all", toks[w].start, toks[w].end, "UNION ALL"


def _assignment(x: _Text, i: int) -> bool:
    """An `=` of SET col=..., not a comparison."""
    if i < 2 or x.toks[i - 1].kind not in ("word", "name"):
        return False
    d = x.depth[i]
    for k in range(i - 2, -1, -1):
        if x.depth[k] < d:
            return False
        if x.depth[k] == d and x.toks[k].kind == "word" and x.up(k) in _ENDS | {"UPDATE"}:
            return x.up(k) == "SET" and (k == i - 2 or x.up(i - 2) == ",")
    return False


def _drop_item(x: _Text, items: Sequence[tuple[int, int]], item: tuple[int, int], kind: str
               ) -> tuple[str, int, int, str]:
    """Drop one item of a list or chain with the separator next to it."""
    idx = list(items).index(item)
    a, b = item
    if idx == 0:
        return kind, x.toks[a].start, x.toks[items[1][0]].start, ""
    return kind, x.toks[items[idx - 1][1]].end, x.toks[b].end, ""


def _null_columns(x: _Text, i: int) -> Iterator[tuple[str, int, int, str]]:
    """Each result column of the SELECT at token i made NULL (not `*`, not a literal)."""
    start = i + 1
    if x.up(start) in ("DISTINCT", "ALL"):
        start += 1
    end = x.region_end(start, _ENDS, stop_comma=False)
    for a, b in x.split_commas(start, end):
        last = b
        if (b > a and x.toks[b].kind in ("word", "name") and x.up(b) not in _KEYWORDS
                and (x.toks[b - 1].kind != "op" or x.toks[b - 1].text == ")")):
            last = b - 1  # `expr alias`: the alias stays
            if x.up(last) == "AS":
                last -= 1
        if a > last:
            continue
        expr = x.sql[x.toks[a].start:x.toks[last].end]
        if (expr == "*" or expr.endswith(".*") or expr.upper() == "NULL"
                or (a == last and x.toks[a].kind in ("literal", "number", "param"))):
            continue
        yield "null-column", x.toks[a].start, x.toks[last].end, "NULL"


def _case_arms(x: _Text, i: int) -> Iterator[tuple[str, int, int, str]]:
    """Drop one WHEN ... THEN arm of a CASE that has several."""
    d = x.depth[i]
    arms: list[int] = []
    k, level = i + 1, 0
    while k < len(x.toks):
        t = x.toks[k]
        if t.text == "(":
            k = x.match[k] + 1
            continue
        if x.depth[k] < d:
            return
        word = x.up(k) if t.kind == "word" else ""
        if word == "CASE":
            level += 1
        elif word == "END" and level:
            level -= 1
        elif word == "WHEN" and not level:
            arms.append(k)
        elif word in ("ELSE", "END") and not level:
            break
        k += 1
    else:
        return
    if len(arms) < 2:
        return
    bounds = [*arms, k]
    for a in range(len(arms)):
        yield "drop-when", x.toks[bounds[a]].start, x.toks[bounds[a + 1]].start, ""


def numbered(sql: str) -> str:
    """`sql` with every parameter numbered (`?` is SQLite's next number after the largest so
    far): a clause dropped then leaves the others bound to the same values."""
    out, pos, highest = [], 0, 0
    for t in tokenize(sql):
        if t.kind != "param":
            continue
        n = int(t.text[1:]) if len(t.text) > 1 else highest + 1
        highest = max(highest, n)
        out += [sql[pos:t.start], f"?{n}"]
        pos = t.end
    return "".join(out) + sql[pos:]


def _numbers(sql: str) -> set[int]:
    return {int(t.text[1:]) for t in tokenize(sql) if t.kind == "param"}


# A clause dropped with the statement's last parameter in it leaves D1 one value too many: the
# clause is replaced by its neutral instead (true for AND, false for OR), which still names it.
_NEUTRAL = {"drop-and": "AND", "drop-or": "OR", "drop-where": "WHERE", "drop-having": "HAVING",
            "on-true": "ON", "drop-limit": "LIMIT"}


def _keep_numbers(kind: str, text: str, s: int, e: int, lost: list[int]) -> str | None:
    """The mutant of dropping text[s:e] with parameters `lost` still named, or None."""
    if kind not in _NEUTRAL:
        return None
    same = " AND ".join(f"?{n} IS ?{n}" for n in lost)
    if kind == "drop-limit":
        return _edit(text, s, e, "LIMIT COALESCE(-1," + ",".join(f"?{n}" for n in lost) + ")")
    if kind == "on-true":
        return _edit(text, s, e, f"({same})")
    if kind in ("drop-where", "drop-having"):
        return _edit(text, s, e, f"{_NEUTRAL[kind]} ({same})")
    neutral = f"({same})" if kind == "drop-and" else "(" + " AND ".join(
        f"?{n} IS NOT ?{n}" for n in lost) + ")"
    dropped = text[s:e].strip()
    sep = _NEUTRAL[kind]
    if dropped.upper().endswith(sep):  # the first operand and the separator after it
        return _edit(text, s, e, f"{neutral} {sep} ")
    return _edit(text, s, e, f" {sep} {neutral}")


def mutants_of(query: Any) -> list[Mutant]:
    """Every mutant of one statement (its `sql` as sent), in a fixed order, distinct texts;
    a mutant that loses the largest parameter number and cannot keep it is left out."""
    text = numbered(query.sql)
    x = _Text(text)
    wanted = max(_numbers(text), default=0)
    out: list[Mutant] = []
    seen = {text}
    for kind, s, e, new in _edits(x):
        sql: str | None = _edit(text, s, e, new)
        assert sql is not None
        if max(_numbers(sql), default=0) < wanted:
            lost = sorted(n for n in _numbers(text) if n not in _numbers(sql))
            sql = _keep_numbers(kind, text, s, e, lost)
        if sql is None or sql in seen:
            continue
        seen.add(sql)
        where = (text[max(0, s - 25):s] + "[-" + text[s:e] + "-]" + text[e:e + 25]
                 if new == "" else text[max(0, s - 20):s] + "[" + text[s:e] + "->" + new + "]"
                 + text[e:e + 20])
        out.append(Mutant(query.name, len(out), kind, _short(where, 110), sql, text[s:e], new))
    return out


def mutable(query: Any) -> bool:
    """Statements mutated: every statement sent but the tables and indexes of the schema and
    the released migration steps (rebuilt at each call, and frozen once released). The
    schema's triggers and views are mutated: the put views' triggers store every write."""
    if query.name.startswith("MIGRATIONS["):
        return False
    if query.name.startswith("SCHEMA["):
        return query.sql.upper().startswith(("CREATE TRIGGER", "CREATE VIEW"))
    return True


@cache
def _schema_connection() -> tuple[sqlite3.Connection, tuple[str, ...]]:
    schema = tuple(q.sql for q in statements() if q.name.startswith("SCHEMA["))
    conn = sqlite3.connect(":memory:")
    conn.create_function("unhex", 1, lambda _: None)  # D1 has it; older SQLite lacks it
    for s in schema:
        conn.execute(s)
    return conn, schema


def prepares(query: Any, sql: str) -> bool:
    """Whether the mutated text of `query` still prepares on the schema."""
    conn, schema = _schema_connection()
    if query.name.startswith("SCHEMA["):
        fresh = sqlite3.connect(":memory:")
        fresh.create_function("unhex", 1, lambda _: None)
        try:
            for s in schema:
                fresh.execute(sql if s == query.sql else s)
            return True
        except sqlite3.Error:
            return False
        finally:
            fresh.close()
    conn.execute("SAVEPOINT p")
    try:
        conn.execute("EXPLAIN " + sql, [None] * len(query.params))
        return True
    except (sqlite3.Error, sqlite3.Warning):
        return False
    finally:
        conn.execute("ROLLBACK TO p")
        conn.execute("RELEASE p")


def by_name() -> dict[str, Any]:
    return {q.name: q for q in statements()}


def generate(names: Sequence[str] | None = None) -> tuple[list[Mutant], list[Mutant]]:
    """(mutants that prepare, mutants that do not) of the statements named (None: all)."""
    ok, bad = [], []
    for query in statements():
        if names is not None and query.name not in names:
            continue
        if not mutable(query):
            continue
        for m in mutants_of(query):
            (ok if prepares(query, m.sql) else bad).append(m)
    return ok, bad


def find(mutant_id: str) -> Mutant:
    """The mutant of an id (`sql:NAME:INDEX:DIGEST`, or `sql:NAME:DIGEST`)."""
    parts = mutant_id.split(":")
    name, digest = parts[1], parts[-1]
    for m in mutants_of(by_name()[name]):
        if m.digest == digest:
            return m
    raise KeyError(f"no mutant {mutant_id} (has the statement changed?)")


def apply(mutant: Mutant) -> None:
    """Make the statement object send the mutant's text (in this process only)."""
    query = by_name()[mutant.statement]
    object.__setattr__(query, "sql", mutant.sql)


__all__ = ["Mutant", "apply", "find", "generate", "mutants_of", "prepares", "statements"]
