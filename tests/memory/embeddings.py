"""A deterministic embedding with no network: hashed character trigrams, so texts sharing
words score close (tests and examples of search by meaning)."""

from __future__ import annotations

import hashlib
import math

from langchain_core.embeddings import Embeddings


def embed_text(text: str, dims: int = 64) -> list[float]:
    vector = [0.0] * dims
    padded = f"  {text.lower()}  "
    for i in range(len(padded) - 2):
        h = hashlib.blake2b(padded[i:i + 3].encode(), digest_size=4).digest()
        n = int.from_bytes(h, "little")
        vector[n % dims] += 1.0 if n & (1 << 31) else -1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


class TrigramEmbeddings(Embeddings):
    def __init__(self, dims: int = 64) -> None:
        self.dims = dims
        self.calls = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [embed_text(t, self.dims) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.calls += 1
        return embed_text(text, self.dims)
