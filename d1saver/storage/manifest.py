"""Content-addressed values: a serialized value as an "m:" manifest of inline parts and chunk ids.

Pure: bytes in, text out; no I/O. `pack` cuts a value with `_chunking.split` (every message of a
conversation is a piece of its own) and lists, in order, the inline parts (codec text, "r:..."
or "b:...") and the ids of its stored pieces. A run of consecutive ids is folded into a
content-defined tree ("^" + id names a node: a stored chunk whose data lists its children), so
a row lists about ten ids at any length of conversation, and the nodes over an
unchanged prefix of a list are the same in every checkpoint (docs/STORAGE_DESIGN.md).

A manifest is "m:" and its entries joined by ',' (a node's data is its children joined the same
way): no entry can hold ',', '"' or '\\' (codec text is base64 or base85, ids base85), so a
manifest needs no escaping inside the JSON that carries it, and SQL reads it as a JSON array by
wrapping (see d1saver/sql/catalogue.py, _LIST). Entries are told apart by their first characters: codec
text has ':' second, ids never contain ':' nor '^' (written "." in them). Boundaries and ids are stored
forever; tests/storage/test_manifest.py pins them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field

from d1saver.storage.chunking import LEAF, NODE as NODE_DOMAIN, id_prefix, names, node_id, split

MARKER = "m:"
NODE = "^"
SEP = ","
# A node closes after a child whose id, read as an integer from its first 4 bytes, is a
# multiple of FANOUT. A manifest lists the open tail of each level (about FANOUT - 1 refs):
# a smaller fanout lists fewer ids per checkpoint for a few more node rows, fewer bytes in all
# (docs/STORAGE_DESIGN.md; benchmarks/RESULTS.md, "Design figures").
FANOUT = 4

__all__ = ["FANOUT", "MARKER", "NODE", "SEP", "Chunk", "Chunks", "Packed", "is_manifest", "pack",
           "unpack"]


@dataclass(frozen=True, slots=True)
class Chunk:
    """A stored chunk: level 0 holds codec text of bytes, level n > 0 its children's refs."""

    id: str
    level: int
    data: str


@dataclass(slots=True)
class Packed:
    """A value as a manifest: the row's text, the chunks the thread may not hold yet (children
    before their nodes), and every id the manifest reaches (to remember once stored)."""

    text: str
    new: list[Chunk] = field(default_factory=list)
    reached: set[str] = field(default_factory=set)


class Chunks(dict[str, str]):
    """A read's chunks of one thread (id -> stored text) that decode and check each chunk once,
    however many of the read's values list it (a page of checkpoints lists each message once
    per checkpoint that holds it)."""

    __slots__ = ("decoded",)

    def __init__(self) -> None:
        super().__init__()
        self.decoded: dict[str, bytes | list[str]] = {}  # checked: leaf bytes, node children


def is_manifest(text: str | None) -> bool:
    return text is not None and text.startswith(MARKER)


@functools.lru_cache(maxsize=1 << 16)
def _closes(ref: str) -> bool:
    """Whether a node closes after the child `ref` (content-defined, pinned)."""
    return id_prefix(ref.lstrip(NODE)) % FANOUT == 0


def pack(data: bytes, held: Container[str], encode: Callable[[bytes], str]) -> Packed | None:
    """`data` as a manifest, or None when no part of it is worth storing apart (then the row
    holds the value's codec text, as before). Chunks in `held` are listed, not sent."""
    pieces = split(data)
    if not any(p.id for p in pieces):
        return None
    out = Packed("")
    entries: list[str] = []
    run: list[str] = []
    for piece in pieces:
        if piece.id is None:
            entries += _fold(run, held, out)
            run = []
            entries.append(encode(piece.data))
            continue
        run.append(piece.id)
        if piece.id not in held and piece.id not in out.reached:
            out.new.append(Chunk(piece.id, 0, encode(piece.data)))
        out.reached.add(piece.id)
    entries += _fold(run, held, out)
    out.text = MARKER + SEP.join(entries)
    return out


def _fold(run: list[str], held: Container[str], out: Packed) -> list[str]:
    """A run of consecutive refs as the manifest lists it: the top nodes, then the open
    (unclosed) tail of each level below, highest first. A run of one ref is listed as is: a
    node over it alone would be a row that no other value lists (a write of one message whose
    id closes a node)."""
    if len(run) < 2:
        return list(run)
    level, depth = list(run), 0
    tails: list[list[str]] = []
    while True:
        groups, current = [], []
        for ref in level:
            current.append(ref)
            if _closes(ref):
                groups.append(current)
                current = []
        if not groups:
            break
        depth += 1
        nodes = []
        for group in groups:
            text = SEP.join(group)
            # Named apart from leaves (chunking.NODE: a leaf cut from a value could be the
            # very text of a node; under one id, one of them would read as the other).
            nid = node_id(text)
            if nid not in held and nid not in out.reached:
                out.new.append(Chunk(nid, depth, text))
            out.reached.add(nid)
            nodes.append(NODE + nid)
        tails.insert(0, current)
        level = nodes
    return level + [ref for tail in tails for ref in tail]


def _check(chunk: str, content: bytes, domain: bytes = LEAF) -> None:
    if not names(chunk, content, domain):
        raise ValueError(f"chunk {chunk!r} does not hold what its id names: damaged")


def unpack(text: str, chunks: Mapping[str, str], decode: Callable[[str], bytes]) -> bytes:
    """The bytes a manifest lists, chunks looked up in `chunks` (id -> data). A missing chunk
    raises KeyError naming it; a chunk or node whose content is not what its id names (damaged
    in storage: "r:" and "s:" have no checksum) raises ValueError."""
    out = bytearray()
    extend = out.extend
    # Per entry, once checked: a leaf's bytes, a node's children. Kept per read with `Chunks`
    # (a page lists each message once per checkpoint that holds it).
    memo = chunks.decoded if isinstance(chunks, Chunks) else {}

    def load(entry: str) -> bytes | list[str]:
        if entry[:1] == NODE:
            data = chunks[entry[1:]]
            _check(entry[1:], data.encode("ascii"), NODE_DOMAIN)
            return data.split(SEP)
        content = decode(chunks[entry])
        _check(entry, content)
        return content

    def walk(entries: list[str], depth: int) -> None:
        for entry in entries:
            if entry[1:2] == ":":  # inline codec text
                extend(decode(entry))
                continue
            got = memo.get(entry)
            if got is None:
                got = memo[entry] = load(entry)
            if isinstance(got, bytes):
                extend(got)
                continue
            if depth > 64:
                raise ValueError("manifest tree too deep")
            walk(got, depth + 1)

    walk(text[len(MARKER):].split(SEP), 0)
    return bytes(out)
