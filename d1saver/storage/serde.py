"""Which types a stored value may construct when it is read back: the serializer policy.

Without a key, `default_serde()` is exactly what LangGraph's own savers (SqliteSaver,
InMemorySaver, PostgresSaver) use when given no serde: `BaseCheckpointSaver.serde` is a
`JsonPlusSerializer()` (langgraph/checkpoint/base/__init__.py:232), whose msgpack policy
follows LANGGRAPH_STRICT_MSGPACK (read once, at import, in
langgraph/checkpoint/serde/_msgpack.py:12):
  * unset or false: every type a row names is imported and constructed (with a warning
    once per type), so pydantic models, dataclasses, enums and NamedTuples come back as
    themselves (jsonplus.py:129-136, :588-609);
  * true: only SAFE_MSGPACK_TYPES, plus the types LangGraph finds in each compiled graph's
    schemas and channels, which `compile()` hands to the saver through
    `BaseCheckpointSaver.with_allowlist` (graph/state.py:1234-1254, func/__init__.py:610-619,
    pregel/main.py:916-921); that merge works only on a JsonPlusSerializer, so the default
    must stay one.
Threat model: anyone who can write the database can plant a row that constructs a type on
read, as with every LangGraph saver. With encryption keys every row is authenticated, so
only a key holder can produce a row that is read at all; `trusted_serde` then constructs
any type, with no allowlist.
"""

from __future__ import annotations

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer


def default_serde() -> JsonPlusSerializer:
    """LangGraph's default serializer, as its own savers build it (honours
    LANGGRAPH_STRICT_MSGPACK exactly as LangGraph does, since LangGraph reads it)."""
    return JsonPlusSerializer()


def trusted_serde(base: SerializerProtocol | None = None) -> SerializerProtocol:
    """`base` (default: `default_serde()`) allowed to construct any msgpack type, for rows
    that passed authentication. JSON and pickle policies are kept as `base` has them; a
    serializer d1saver cannot rebuild (another class, a subclass, a custom ext hook) is
    returned unchanged, its own policy in force."""
    if base is None:
        base = default_serde()
    if type(base) is not JsonPlusSerializer or base._custom_unpack_ext_hook:
        return base
    if base._allowed_msgpack_modules is True:
        return base
    return JsonPlusSerializer(pickle_fallback=base.pickle_fallback,
                              allowed_json_modules=base._allowed_json_modules,
                              allowed_msgpack_modules=True)
