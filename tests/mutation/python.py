"""Python mutants of d1saver/ops/ and d1saver/storage/: one branch or statement changed.

Made from each module's syntax tree, inside its functions and methods only (not module or class
constants), with these operators (the `kind` of a mutant):
- flip-cmp: < and <=, > and >=, == and !=, in and not in, is and is not swapped;
- negate: the condition of an if, a while, a conditional expression or a comprehension's if
  negated;
- and-or: `and` and `or` swapped;
- drop-if: an if's body replaced by `pass`; drop-else: its else dropped;
- drop-stmt: a call, an augmented assignment, an assignment to an attribute or an item, a
  raise, a continue or a break replaced by `pass`;
- off-by-one: an integer literal n made n + 1 (off by default: OFF_BY_ONE).
A mutant is applied in the test process, in memory: the module's source is parsed, the one
node changed, the module compiled again, and the code of the function that holds the node set
as that function's `__code__` (every reference to the function sees it; nothing is written).
The results the mutated modules' functions cached (functools.cache, lru_cache) are dropped with
it: a cached function must run its new code, not answer from results of the old.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import CodeType, FunctionType
from typing import Any

# The modules mutated: the operations and the stored format.
MODULES = {
    "ops": ["d1saver.ops.operations", "d1saver.ops.statements", "d1saver.ops.rows",
            "d1saver.ops.delta_cache", "d1saver.ops.held", "d1saver.ops.rewrites",
            "d1saver.ops.reseal", "d1saver.ops.transfer"],
    "storage": ["d1saver.storage.values", "d1saver.storage.codec", "d1saver.storage.manifest",
                "d1saver.storage.chunking", "d1saver.storage.crypto", "d1saver.storage.serde"],
}
# Off by default (the operator set is kept free of redundant mutants, docs/RELIABILITY.md): an
# integer literal made n + 1 (indexes into rows, sizes: nearly all killed at once, and the
# comparisons' boundaries are flipped anyway); `==`/`!=`, `in`/`not in`, `is`/`is not`
# swapped where the comparison is a whole condition (the same code as the condition negated);
# an if's body dropped where it is one statement that drop-stmt drops.
OFF_BY_ONE = False
REDUNDANT = False
_NEGATIONS = {ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot}
# Functions left alone: text for people (representations, descriptions), no branch of the
# protocol or the format.
SKIP = {"__repr__", "describe", "__all__"}

_CMP: dict[type, type] = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
                          ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn,
                          ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_CMP_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
             ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in", ast.Is: "is",
             ast.IsNot: "is not"}


@dataclass(frozen=True)
class Mutant:
    module: str
    function: str  # qualified name of the module-level function or method that holds it
    index: int  # among the module's mutants, in order
    kind: str
    line: int
    end_line: int
    where: str
    digest: str  # of the function's text and the place: the id stays while the function does

    @property
    def id(self) -> str:
        """`py:MODULE:FUNCTION:INDEX:DIGEST`: the index finds it at once, the digest checks it."""
        return f"py:{self.module}:{self.function}:{self.index}:{self.digest}"

    @property
    def stable(self) -> str:
        """The id without the index: it names the same mutant while the function is the same."""
        return f"py:{self.module}:{self.function}:{self.digest}"

    @property
    def area(self) -> str:
        return self.module.split(".")[1]


@dataclass
class _Site:
    function: str
    fnode: ast.AST
    kind: str
    node: ast.AST
    line: int
    end_line: int
    change: Callable[[], None]
    where: str


def module_path(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    return Path(spec.origin)


def _pass(node: ast.AST) -> ast.Pass:
    return ast.copy_location(ast.Pass(), node)


def _sites(tree: ast.Module) -> list[_Site]:
    """Every mutation site of a module, in a fixed order."""
    out: list[_Site] = []

    def functions() -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield node.name, node
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        yield f"{node.name}.{item.name}", item

    for qualname, fnode in functions():
        if fnode.name in SKIP:
            continue
        tests: set[int] = set()  # the conditions of ifs, whiles and comprehensions
        for node in ast.walk(fnode):
            if isinstance(node, (ast.If, ast.While, ast.IfExp)):
                tests.add(id(node.test))
            elif isinstance(node, ast.comprehension):
                tests.update(id(c) for c in node.ifs)
        for node in ast.walk(fnode):
            _node_sites(qualname, fnode, node, out, tests)
    return out


def _node_sites(qualname: str, fnode: ast.AST, node: ast.AST, out: list[_Site],
                tests: set[int]) -> None:
    def add(kind: str, target: ast.AST, change: Callable[[], None], where: str) -> None:
        out.append(_Site(qualname, fnode, kind, target, getattr(target, "lineno", 0),
                         getattr(target, "end_lineno", 0) or getattr(target, "lineno", 0),
                         change, where))

    if isinstance(node, ast.Compare):
        for k, op in enumerate(node.ops):
            new = _CMP.get(type(op))
            if (not REDUNDANT and type(op) in _NEGATIONS and len(node.ops) == 1
                    and id(node) in tests):
                continue  # the condition negated is this very mutant
            if new is not None:
                def change(node: ast.Compare = node, k: int = k, new: type = new) -> None:
                    node.ops[k] = new()
                add("flip-cmp", node, change, f"{_CMP_TEXT[type(op)]} -> {_CMP_TEXT[new]}")
    elif isinstance(node, ast.BoolOp):
        def swap(node: ast.BoolOp = node) -> None:
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        add("and-or", node, swap, "and -> or" if isinstance(node.op, ast.And) else "or -> and")
    elif isinstance(node, ast.Constant) and type(node.value) is int and OFF_BY_ONE:
        def bump(node: ast.Constant = node) -> None:
            node.value = node.value + 1
        add("off-by-one", node, bump, f"{node.value} -> {node.value + 1}")
    if isinstance(node, (ast.If, ast.While, ast.IfExp)):
        def negate(node: Any = node) -> None:
            node.test = ast.copy_location(ast.UnaryOp(ast.Not(), node.test), node.test)
        add("negate", node.test, negate, "not (" + _short(ast.unparse(node.test)) + ")")
    if isinstance(node, ast.comprehension):
        for k, cond in enumerate(node.ifs):
            def negate_if(node: ast.comprehension = node, k: int = k) -> None:
                node.ifs[k] = ast.copy_location(ast.UnaryOp(ast.Not(), node.ifs[k]),
                                                node.ifs[k])
            add("negate", cond, negate_if, "not (" + _short(ast.unparse(cond)) + ")")
    if isinstance(node, ast.If):
        alone = len(node.body) == 1 and (isinstance(node.body[0], ast.Pass) or (
            not REDUNDANT and _droppable(node.body[0])))  # drop-stmt stands for it
        if not alone:
            def drop_body(node: ast.If = node) -> None:
                node.body = [_pass(node.body[0])]
            add("drop-if", node.body[0], drop_body, "if " + _short(ast.unparse(node.test))
                + ": pass")
        if node.orelse:
            def drop_else(node: ast.If = node) -> None:
                node.orelse = []
            add("drop-else", node.orelse[0], drop_else, "else dropped after if "
                + _short(ast.unparse(node.test)))
    for field in ("body", "orelse", "finalbody"):
        stmts = getattr(node, field, None)
        if not isinstance(stmts, list):
            continue
        for k, stmt in enumerate(stmts):
            if _droppable(stmt):
                def drop(stmts: list = stmts, k: int = k) -> None:
                    stmts[k] = _pass(stmts[k])
                add("drop-stmt", stmt, drop, _short(ast.unparse(stmt)))


def _droppable(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Expr):
        return isinstance(stmt.value, (ast.Call, ast.Await))
    if isinstance(stmt, (ast.AugAssign, ast.Raise, ast.Continue, ast.Break)):
        return True
    if isinstance(stmt, ast.Assign):
        return all(isinstance(t, (ast.Attribute, ast.Subscript)) for t in stmt.targets)
    return False


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


@cache
def _source(module: str) -> str:
    return module_path(module).read_text(encoding="utf-8")


def _digest(source: str, site: _Site) -> str:
    """Of the function's text and the site's place in it: the id stays while the function
    does, whatever changes around it."""
    fnode = site.fnode
    text = ast.get_source_segment(source, fnode) or ""
    place = (site.kind, site.line - fnode.lineno, getattr(site.node, "col_offset", 0),
             site.where)
    return hashlib.sha1(f"{text}\n{place}".encode()).hexdigest()[:10]


@cache
def mutants_of(module: str) -> list[Mutant]:
    """Every mutant of one module, in a fixed order."""
    source = _source(module)
    out: list[Mutant] = []
    seen: set[str] = set()
    for index, site in enumerate(_sites(ast.parse(source))):
        digest, n = _digest(source, site), 1
        while digest in seen:  # two sites alike at one place (`a < b < c`)
            digest, n = hashlib.sha1(f"{digest}{n}".encode()).hexdigest()[:10], n + 1
        seen.add(digest)
        out.append(Mutant(module, site.function, index, site.kind, site.line, site.end_line,
                          site.where, digest))
    return out


def generate(areas: list[str], modules: list[str] | None = None) -> list[Mutant]:
    out: list[Mutant] = []
    for area in areas:
        for module in MODULES.get(area, []):
            if modules is None or module in modules or module.rsplit(".", 1)[1] in modules:
                out += mutants_of(module)
    return out


def _mutant(module: str, index: int) -> Mutant | None:
    mutants = mutants_of(module)
    return mutants[index] if 0 <= index < len(mutants) else None


def find(mutant_id: str) -> Mutant:
    """The mutant of an id (`py:MODULE:FUNCTION:INDEX:DIGEST`, or without the index)."""
    parts = mutant_id.split(":")
    module, function, digest = parts[1], parts[2], parts[-1]
    if len(parts) == 5:
        m = _mutant(module, int(parts[3]))
        if m is not None and m.function == function and m.digest == digest:
            return m
    for m in mutants_of(module):
        if m.function == function and m.digest == digest:
            return m
    raise KeyError(f"no mutant {mutant_id} (has the function changed?)")


def placeable(mutant: Mutant) -> bool:
    """Whether the mutant's code can replace its function's (the same free variables)."""
    try:
        _compiled(mutant)
        return True
    except (LookupError, ValueError):
        return False


def _functions(module: Any) -> Iterator[FunctionType]:
    """Every function object of a module's own functions and methods."""
    def unwrap(obj: Any) -> Iterator[FunctionType]:
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        if isinstance(obj, property):
            for f in (obj.fget, obj.fset, obj.fdel):
                if f is not None:
                    yield from unwrap(f)
            return
        while hasattr(obj, "__wrapped__") and not isinstance(obj, FunctionType):
            obj = obj.__wrapped__
        if isinstance(obj, FunctionType):
            yield obj
            if hasattr(obj, "__wrapped__"):
                yield from unwrap(obj.__wrapped__)

    for value in vars(module).values():
        if inspect.isclass(value) and value.__module__ == module.__name__:
            for item in vars(value).values():
                yield from unwrap(item)
        else:
            yield from unwrap(value)


def _codes(code: CodeType) -> Iterator[CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _codes(const)


def _compiled(mutant: Mutant) -> tuple[CodeType, list[FunctionType]]:
    """The mutated code of the mutant's function, and the function objects it replaces."""
    module = importlib.import_module(mutant.module)
    tree = ast.parse(_source(mutant.module))
    site = _sites(tree)[mutant.index]
    site.change()
    ast.fix_missing_locations(tree)
    code = compile(tree, str(module_path(mutant.module)), "exec")
    first = min([site.fnode.lineno, *(d.lineno for d in getattr(site.fnode, "decorator_list", []))])
    new = [c for c in _codes(code) if c.co_qualname == mutant.function
           and c.co_firstlineno == first]
    targets = [f for f in _functions(module) if f.__code__.co_qualname == mutant.function
               and f.__code__.co_firstlineno == first]
    if len(new) != 1 or not targets:
        raise LookupError(f"cannot place mutant {mutant.id} ({len(new)} codes, "
                          f"{len(targets)} functions)")
    for f in targets:
        if len(f.__code__.co_freevars) != len(new[0].co_freevars):
            raise ValueError(f"mutant {mutant.id} changes the function's free variables")
    return new[0], targets


def apply(mutant: Mutant) -> None:
    """Give the function that holds the mutant the mutated code (in this process only)."""
    code, targets = _compiled(mutant)
    for f in targets:
        f.__code__ = code
    clear_caches()


def clear_caches() -> None:
    """Drop what the mutated modules' cached functions remember (functools.cache, lru_cache):
    a call answered from a cache runs no line, so neither a mutant of the function nor the map
    of the tests that run it (tests/mutation/plugin.py) would see it."""
    import sys

    for name in [m for area in MODULES.values() for m in area]:
        module = sys.modules.get(name)
        if module is None:
            continue
        for value in vars(module).values():
            items = vars(value).values() if inspect.isclass(value) else [value]
            for item in items:
                clear = getattr(item, "cache_clear", None)
                if callable(clear):
                    clear()


__all__ = ["MODULES", "Mutant", "apply", "clear_caches", "find", "generate", "mutants_of"]
