"""Immutable containers and the typed JSON codec the request model uses.

Every value a :class:`~compute_plugins.request_spec.RequestSpec` holds is
immutable and hashable: dataclasses are frozen, sequences are tuples, sets are
frozensets and mappings are :class:`FrozenMap`. That makes a spec safe to
share between threads without locks and lets copy-on-write helpers
(``dataclasses.replace``) share everything they do not change.

:func:`encode` / :func:`decode` turn such values into JSON documents and back,
driven by the dataclasses' type hints, so ``decode(T, encode(x)) == x``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")


class FrozenMap(Mapping[K, V]):
    """A read-only, hashable mapping that keeps insertion order.

    :param data: a mapping or an iterable of ``(key, value)`` pairs.
    """

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Any = ()) -> None:
        self._data: dict[K, V] = dict(data)
        self._hash: int | None = None

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self._data == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return "FrozenMap(%r)" % (self._data,)

    def __str__(self) -> str:
        # NOTE: what a rule text shows of an object value: the object as it
        # was given (``{'a': 1}``), not this class.
        return repr(thaw_json(self))


def freeze_json(value: Any) -> Any:
    """A JSON-like value with lists as tuples and objects as FrozenMaps."""
    if isinstance(value, Mapping):
        return FrozenMap((str(k), freeze_json(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(freeze_json(v) for v in value)
    return value


def thaw_json(value: Any) -> Any:
    """Inverse of :func:`freeze_json`: plain dicts and lists."""
    if isinstance(value, Mapping):
        return {k: thaw_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw_json(v) for v in value]
    return value


#: Marker type for "any JSON value, frozen" in type hints.
JSONValue = Any


class CodecError(ValueError):
    """A document does not have the shape its type hints require."""


#: The largest integer of the model (Placement's ``MAX_INT``). Every integer
#: the model holds is a count, a size or an id: 0..MAX_INT.
MAX_INT = 0x7FFFFFFF


def enum_field(allowed: tuple[str, ...], default: Any = None) -> Any:
    """A ``str`` field that :func:`decode` accepts only from ``allowed``
    (or None): a payload cannot smuggle in a policy no parser produces."""
    return dataclasses.field(default=default, metadata={"enum": allowed})


def min_field(minimum: int, **kwargs: Any) -> Any:
    """An ``int`` field that :func:`decode` accepts only from ``minimum``."""
    return dataclasses.field(metadata={"minimum": minimum}, **kwargs)


def _check_field(f: dataclasses.Field, value: Any, where: str) -> None:
    allowed = f.metadata.get("enum")
    if allowed is not None and value is not None and value not in allowed:
        raise CodecError("%s: %r is not one of %s" % (where, value, ", ".join(allowed)))
    minimum = f.metadata.get("minimum")
    if minimum is not None and value < minimum:
        raise CodecError("%s: %r is below %d" % (where, value, minimum))


def encode(value: Any) -> Any:
    """A JSON-serialisable document for a frozen value (see module doc)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name))
                for f in dataclasses.fields(value) if f.metadata.get("json", True)}
    if isinstance(value, Mapping):
        return {_encode_key(k): encode(v) for k, v in value.items()}
    if isinstance(value, frozenset):
        items = [encode(v) for v in value]
        return sorted(items, key=lambda x: (str(type(x)), x))
    if isinstance(value, (tuple, list)):
        return [encode(v) for v in value]
    return value


def _encode_key(key: Any) -> str:
    if isinstance(key, bool) or not isinstance(key, (str, int)):
        raise CodecError("mapping keys must be str or int, not %r" % (key,))
    return str(key)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = typing.get_type_hints(cls)
        _HINTS[cls] = hints
    return hints


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
        return FrozenMap(
            (_decode_key(key_hint, k, where),
             decode(value_hint, v, "%s.%s" % (where, k)))
            for k, v in doc.items())
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
        if isinstance(doc, bool) or not isinstance(doc, (int, float)):
            raise CodecError("%s: expected a number, got %r" % (where, doc))
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
