"""Long-term memory and a node cache in D1: `D1Store` (LangGraph's BaseStore) and `D1Cache`
(BaseCache), on the databases D1Saver uses (docs/STORE.md)."""

from d1saver.memory.cache import D1Cache
from d1saver.memory.store import D1Store

__all__ = ["D1Cache", "D1Store"]
