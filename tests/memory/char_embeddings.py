"""A deterministic embedding for the memory tests, the demo-free kind LangGraph's own store tests use:
each text is the frequency of its characters, projected to `dims` dimensions and normalised.

Every character gets a fixed Gaussian projection seeded by the character itself, so two instances
(one per store compared) embed every text identically whatever order they see texts in.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import Counter

from langchain_core.embeddings import Embeddings


class CharEmbeddings(Embeddings):
    """Character frequencies x a fixed random projection, unit length (all zeros for "")."""

    def __init__(self, dims: int = 64, seed: int = 7) -> None:
        self.dims = dims
        self.seed = seed
        self._proj: dict[str, list[float]] = {}
        self.calls = 0  # texts embedded, documents and queries together

    def _projection(self, ch: str) -> list[float]:
        vec = self._proj.get(ch)
        if vec is None:
            digest = hashlib.sha256(f"{self.seed}:{ord(ch)}".encode()).digest()
            rng = random.Random(int.from_bytes(digest[:8], "big"))
            vec = self._proj[ch] = [rng.gauss(0.0, 1.0) for _ in range(self.dims)]
        return vec

    def embed_one(self, text: str) -> list[float]:
        self.calls += 1
        counts = Counter(text)
        total = sum(counts.values())
        out = [0.0] * self.dims
        for ch, n in counts.items():
            w = n / total
            for i, p in enumerate(self._projection(ch)):
                out[i] += w * p
        norm = math.sqrt(sum(x * x for x in out))
        return [x / norm for x in out] if norm else out

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_one(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        return self.embed_query(text)


def cosine(a: list[float], b: list[float]) -> float:
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(x * x for x in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb) if na and nb else 0.0
