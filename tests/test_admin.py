"""d1saver.admin is a deliberate API: every name in __all__ is its own (defined there, with a
docstring, or a constant its docstring describes), and it re-exports nothing of d1saver's
internals (an internal module's function, class or type under a public name)."""

from __future__ import annotations

import inspect
import types

import pytest

import d1saver
from d1saver import admin


def _own(module: types.ModuleType) -> dict[str, object]:
    """The module's public names bound to something a d1saver module defines."""
    return {name: value for name, value in vars(module).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)
            and (getattr(value, "__module__", None) or "").startswith("d1saver")}


def _problems(module: types.ModuleType) -> list[str]:
    doc = module.__doc__ or ""
    out = [] if "Stability:" in doc else ["no stability note in the module docstring"]
    names = list(module.__all__)
    out += [f"{n} listed twice in __all__" for n in names if names.count(n) > 1][:1]
    for name in names:
        value = getattr(module, name, None)
        if inspect.isclass(value) or inspect.isfunction(value):
            if value.__module__ != module.__name__:
                out.append(f"{name} is {value.__module__}.{value.__qualname__}, not defined here")
            elif not (value.__doc__ or "").strip():
                out.append(f"{name} has no docstring")
        elif f"`{name}`" not in doc:
            out.append(f"the constant {name} is not described in the module docstring")
    public = set(d1saver.__all__)
    for name, value in _own(module).items():
        if name in names or value.__module__ == module.__name__:  # type: ignore[attr-defined]
            continue
        if name not in public:
            out.append(f"{name} aliases {value.__module__}'s internals")  # type: ignore[attr-defined]
    defined = {n for n, v in _own(module).items() if v.__module__ == module.__name__}  # type: ignore[attr-defined]
    out += [f"{n} is public but not in __all__" for n in sorted(defined - set(names))]
    return out


def test_the_maintenance_api_is_deliberate() -> None:
    assert _problems(admin) == []


def test_the_check_finds_an_alias_of_an_internal() -> None:
    """The check itself: 0.2.0's admin re-exported internals (Router, ThreadRows, add_census...)."""
    from d1saver.fleet import routing
    from d1saver.ops import transfer

    planted = types.ModuleType("d1saver.admin", "Stability: ...")
    planted.__all__ = ["ThreadRows", "undocumented"]  # type: ignore[attr-defined]
    planted.ThreadRows = transfer.ThreadRows  # type: ignore[attr-defined]
    planted.Router = routing.Router  # type: ignore[attr-defined]

    def undocumented() -> None:
        pass
    undocumented.__module__ = "d1saver.admin"
    planted.undocumented = undocumented  # type: ignore[attr-defined]
    found = _problems(planted)
    assert any("ThreadRows is d1saver.ops.transfer" in p for p in found), found
    assert any("Router aliases" in p for p in found), found
    assert any("undocumented has no docstring" in p for p in found), found


@pytest.mark.parametrize("name", ["ThreadRows", "MemoryKey", "MemoryRows", "MemoryLayout"])
def test_the_types_of_the_api_are_its_own(name: str) -> None:
    assert getattr(admin, name).__module__ == "d1saver.admin"
