"""The public exception classes: none named like a built-in, the 0.1.0 names still importable
with a DeprecationWarning, the transport errors also the built-ins they stand for."""

from __future__ import annotations

import builtins
import inspect
import warnings

import pytest

import d1saver
from d1saver.core import errors


def _public_classes() -> dict[str, type]:
    """Every class d1saver exports or defines in its error tree, by the name it is found under."""
    found: dict[str, type] = {}
    for module in (d1saver, d1saver.admin, errors):
        names = getattr(module, "__all__", None) or dir(module)
        for name in set(names) | set(dir(module)):
            if name.startswith("_"):
                continue
            obj = getattr(module, name)
            if inspect.isclass(obj) and obj.__module__.startswith("d1saver"):
                found[f"{module.__name__}.{name}"] = obj
    return found


def test_no_public_class_is_named_like_a_builtin() -> None:
    builtin_names = set(dir(builtins))
    clashes = {where: cls.__name__ for where, cls in _public_classes().items()
               if where.rsplit(".", 1)[1] in builtin_names or cls.__name__ in builtin_names}
    assert clashes == {}


def test_old_names_warn_and_resolve_to_the_new_classes() -> None:
    for old, new in (("TimeoutError", d1saver.D1TimeoutError),
                     ("ConnectionError", d1saver.D1ConnectionError)):
        assert old not in d1saver.__all__ and old not in dir(d1saver)
        with pytest.warns(DeprecationWarning, match=f"d1saver.{old} is deprecated.*{new.__name__}"):
            assert getattr(d1saver, old) is new
        with pytest.warns(DeprecationWarning):
            exec(f"from d1saver import {old} as got", namespace := {})
        assert namespace["got"] is new


def test_unknown_attribute_is_still_an_attribute_error() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no attribute 'Nope'"):
            d1saver.Nope  # noqa: B018


def test_transport_errors_are_also_the_builtins() -> None:
    """`except TimeoutError` means one thing in user code, whatever it imported."""
    assert issubclass(d1saver.D1TimeoutError, d1saver.TransportError)
    assert issubclass(d1saver.D1TimeoutError, builtins.TimeoutError)
    assert issubclass(d1saver.D1ConnectionError, d1saver.TransportError)
    assert issubclass(d1saver.D1ConnectionError, builtins.ConnectionError)
    err = d1saver.D1TimeoutError("D1 request timed out (ReadTimeout)")
    assert str(err) == "D1 request timed out (ReadTimeout)"
    with pytest.raises(TimeoutError):
        raise err
