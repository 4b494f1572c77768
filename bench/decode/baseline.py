"""The generic decoder :func:`compute_plugins.request.types.decode` was
before it was compiled per type (issue 19): every call dispatches on
``typing.get_origin``/``get_args`` and recurses per field and item.

Kept only as the baseline of ``bench.decode`` and of the test that compares
both decoders' results and errors (``tests/unit/request/test_decode_compiled.py``).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

from compute_plugins.request.types import (
    MAX_INT,
    CodecError,
    FrozenMap,
    _check_field,
    _check_float,
    _hints,
    _repeated_key,
    freeze_json,
)


def decode(hint: Any, doc: Any, where: str = "$") -> Any:
    """Build a value of type ``hint`` from the JSON document ``doc``.

    :raises CodecError: ``doc`` does not match ``hint`` (names the path).
    """
    if hint is Any:
        return freeze_json(doc)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if doc is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        errors = []
        for option in options:
            try:
                return decode(option, doc, where)
            except CodecError as err:
                errors.append(str(err))
        raise CodecError("; ".join(errors))
    if origin in (frozenset, set):
        _expect(doc, list, where)
        items = frozenset(decode(args[0], v, "%s[%d]" % (where, i))
                          for i, v in enumerate(doc))
        if len(items) != len(doc):
            raise CodecError("%s: duplicate items" % where)
        return items
    if origin is tuple:
        _expect(doc, list, where)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(decode(args[0], v, "%s[%d]" % (where, i))
                         for i, v in enumerate(doc))
        if len(args) != len(doc):
            raise CodecError("%s: expected %d items" % (where, len(args)))
        return tuple(decode(a, v, "%s[%d]" % (where, i))
                     for i, (a, v) in enumerate(zip(args, doc, strict=True)))
    if origin in (FrozenMap, Mapping, dict) or hint is FrozenMap:
        _expect(doc, dict, where)
        key_hint, value_hint = args or (str, Any)
        built: FrozenMap[Any, Any] = FrozenMap(
            (_decode_key(key_hint, k, where),
             decode(value_hint, v, "%s.%s" % (where, k)))
            for k, v in doc.items())
        if len(built) != len(doc):
            raise CodecError("%s: %s" % (where, _repeated_key(doc)))
        return built
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        _expect(doc, dict, where)
        hints = _hints(hint)
        kwargs = {}
        known = set()
        for f in dataclasses.fields(hint):
            if not f.metadata.get("json", True):
                continue
            known.add(f.name)
            if f.name not in doc:
                if (f.default is dataclasses.MISSING
                        and f.default_factory is dataclasses.MISSING):
                    raise CodecError("%s: missing field %r" % (where, f.name))
                continue
            kwargs[f.name] = decode(hints[f.name], doc[f.name],
                                    "%s.%s" % (where, f.name))
            _check_field(f, kwargs[f.name], "%s.%s" % (where, f.name))
        unknown = set(doc) - known
        if unknown:
            raise CodecError("%s: unknown field(s) %s"
                             % (where, ", ".join(sorted(unknown))))
        try:
            return hint(**kwargs)
        except (TypeError, ValueError) as err:
            raise CodecError("%s: %s" % (where, err)) from None
    if hint is bool:
        _expect(doc, bool, where)
        return doc
    if hint is int:
        if isinstance(doc, bool) or not isinstance(doc, int) or not 0 <= doc <= MAX_INT:
            raise CodecError("%s: expected an integer from 0 to %d, got %r"
                             % (where, MAX_INT, doc))
        return doc
    if hint is float:
        _check_float(doc, where)
        return float(doc)
    if hint is str:
        _expect(doc, str, where)
        return doc
    if hint is type(None):
        if doc is not None:
            raise CodecError("%s: expected null" % where)
        return None
    raise CodecError("%s: cannot decode type %r" % (where, hint))


def _decode_key(hint: Any, key: str, where: str) -> Any:
    if hint is int:
        if not (key.isascii() and key.isdigit() and len(key) <= 10):
            raise CodecError("%s: key %r is not an integer" % (where, key))
        return decode(int, int(key), where)
    return key


def _expect(doc: Any, kind: type, where: str) -> None:
    if not isinstance(doc, kind) or (kind is not bool and isinstance(doc, bool)
                                     and kind is not int):
        raise CodecError("%s: expected %s, got %r"
                         % (where, kind.__name__, type(doc).__name__))
