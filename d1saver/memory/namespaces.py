"""Namespaces as stored: the compact ASCII JSON array of their labels, and the text ranges that
select a namespace and its descendants.

JSON strings are self-delimiting, so `["a","b"]` starts with `["a",` exactly when its first
label is "a", whatever the labels hold (`%`, `_`, `*`, `?`, `[`, `+`, newlines, `:` are
data). Every descendant of ("a",) lies in [`["a","`, `["a",#`) (the character after `"` is
`#`), a range an index serves; the namespace itself is `["a"]`. No LIKE, no GLOB.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

from langgraph.store.base import InvalidNamespaceError

from d1saver.core.errors import InvalidInputError

Namespace = tuple[str, ...]


class NamespaceError(InvalidInputError, InvalidNamespaceError):
    """A namespace LangGraph's stores refuse (empty, a label not a string, empty, with a
    period or a NUL, or rooted at "langgraph"): nothing was sent."""


def encode(namespace: Sequence[str]) -> str:
    """The stored text of a namespace (remembered: a batch encodes the same few many times)."""
    try:
        return _encode(tuple(namespace))
    except TypeError:  # a label that cannot be hashed: json.dumps says what it is
        return json.dumps(list(namespace), ensure_ascii=True, separators=(",", ":"))


@functools.lru_cache(maxsize=4096)
def _encode(namespace: Namespace) -> str:
    return json.dumps(list(namespace), ensure_ascii=True, separators=(",", ":"))


def decode(text: str) -> Namespace:
    return tuple(json.loads(text))


def scope(prefix: Sequence[str]) -> tuple[str | None, str | None, str | None]:
    """(exact, low, high): a namespace is `prefix` or under it when ns = exact or
    low <= ns < high; all None for the empty prefix (every namespace)."""
    if not prefix:
        return None, None, None
    exact = encode(prefix)
    head = exact[:-1] + ","
    return exact, head + '"', head + "#"


def check_labels(namespace: Sequence[str], *, what: str = "namespace") -> None:
    """Labels as LangGraph validates them: non-empty strings without '.' or NUL."""
    if not isinstance(namespace, tuple | list):
        raise NamespaceError(f"a {what} is a tuple of strings, not {type(namespace).__name__}")
    for label in namespace:
        if not isinstance(label, str):
            raise NamespaceError(f"{what} label {label!r} in {tuple(namespace)!r} is not a "
                                 f"string ({type(label).__name__})")
        if not label:
            raise NamespaceError(f"{what} labels cannot be empty: {tuple(namespace)!r}")
        if "." in label:
            raise NamespaceError(f"{what} label {label!r} contains a period ('.')")
        if "\x00" in label:
            raise NamespaceError(f"{what} label {label!r} contains a NUL character")


def check_item_namespace(namespace: Sequence[str]) -> None:
    """A namespace an item can be put in: labels as above, at least one. A "langgraph" root
    label is refused by BaseStore.put/aput and allowed through batch(), as LangGraph's stores do."""
    check_labels(namespace)
    if not namespace:
        raise NamespaceError("a namespace cannot be empty")


def matches(condition_type: str, path: Sequence[str], namespace: Namespace) -> bool:
    """A list_namespaces match condition ("*" matches any one label), as InMemoryStore."""
    if len(namespace) < len(path):
        return False
    if condition_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise InvalidInputError(f"unknown namespace match type {condition_type!r}: "
                                "use 'prefix' or 'suffix'")
    return all(p == "*" or k == p for k, p in pairs)


def literal_head(path: Sequence[str]) -> Namespace:
    """The labels of a prefix condition before its first wildcard: what SQL can narrow on."""
    out: list[str] = []
    for label in path:
        if label == "*":
            break
        out.append(label)
    return tuple(out)


def parse_cli(text: str, *, cache: bool = False) -> Namespace:
    """A namespace typed on a command line: a JSON array (`["a","b/c"]`) or labels
    separated by '/' (`a/b`); the empty text is the empty prefix. `cache`: a cache namespace,
    whose labels may hold a period (LangGraph's node cache names a node by its module path:
    ("__pregel_ns_writes", "__main__.double", "double"))."""
    text = text.strip()
    if text.startswith("["):
        try:
            labels = json.loads(text)
        except json.JSONDecodeError as exc:
            raise NamespaceError(f"not a JSON array of labels: {text!r} ({exc})") from None
        if not isinstance(labels, list):
            raise NamespaceError(f"not a JSON array of labels: {text!r}")
        out = tuple(labels)
    else:
        out = tuple(label for label in text.split("/") if label) if text else ()
    if not cache:
        check_labels(out)
    elif not all(isinstance(label, str) for label in out):
        raise NamespaceError(f"a cache namespace is an array of strings: {text!r}")
    return out


__all__ = ["Namespace", "NamespaceError", "check_item_namespace", "check_labels", "decode",
           "encode", "literal_head", "matches", "parse_cli", "scope"]
