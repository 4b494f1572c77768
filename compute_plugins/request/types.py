"""Immutable containers and the typed JSON codec the request model uses.

Every value a :class:`~compute_plugins.request.spec.RequestSpec` holds is
immutable and hashable: dataclasses are frozen, sequences are tuples, sets are
frozensets and mappings are :class:`FrozenMap`. That makes a spec safe to
share between threads without locks and lets copy-on-write helpers
(``dataclasses.replace``) share everything they do not change.

:func:`encode` / :func:`decode` turn such values into JSON documents and back,
driven by the dataclasses' type hints, so ``decode(T, encode(x)) == x``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping
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


#: A data format version (a spec's, a plugin's data): ``MAJOR.MINOR``.
VERSION_RE = re.compile(r"^[0-9]{1,9}\.[0-9]{1,9}$")


class CodecError(ValueError):
    """A document does not have the shape its type hints require."""


#: The largest integer of the model (Placement's ``MAX_INT``). Every integer
#: the model holds is a count, a size or an id: 0..MAX_INT.
MAX_INT = 0x7FFFFFFF


def enum_field(allowed: tuple[str, ...], default: Any = None) -> Any:
    """A ``str`` field that :func:`decode` accepts only from ``allowed``
    (or None): a payload cannot smuggle in a policy no parser produces."""
    return dataclasses.field(default=default, metadata={"enum": allowed})


def min_field(minimum: float, **kwargs: Any) -> Any:
    """A number field that :func:`decode` accepts only from ``minimum``
    (an allocation ratio: ``min_field(0, default=1.0)``)."""
    return dataclasses.field(metadata={"minimum": minimum}, **kwargs)


def _check_field(f: dataclasses.Field[Any], value: Any, where: str) -> None:
    allowed = f.metadata.get("enum")
    if allowed is not None and value is not None and value not in allowed:
        raise CodecError("%s: %r is not one of %s" % (where, value, ", ".join(allowed)))
    minimum = f.metadata.get("minimum")
    if minimum is not None and value < minimum:
        raise CodecError("%s: %r is below %d" % (where, value, minimum))


def check(hint: Any, value: Any, where: str = "$") -> None:
    """Refuse a value that would not come back equal from JSON.

    The construction-time twin of :func:`decode`: ``value`` must be exactly
    what ``decode(hint, encode(value))`` gives back, by the same rules
    (integers 0..MAX_INT, ``enum``/``minimum`` field metadata, immutable
    containers, str keys, JSON values for ``Any``). Frozen dataclasses call
    it from ``__post_init__`` (:func:`check_fields`), so a value the model
    holds always round-trips. The checker of each type is built once.

    :raises CodecError: names the path (``where``), the value and the rule.
    """
    _checker(hint)(value, where)


def check_fields(obj: Any, where: str = "") -> None:
    """:func:`check` every JSON field of the dataclass instance ``obj``
    against its type hint and field metadata.

    :raises CodecError: the first field that would not round-trip.
    """
    _fields_checker(type(obj))(obj, where or type(obj).__name__)


Checker = Callable[[Any, str], None]

_CHECKERS: dict[Any, Checker] = {}
_FIELD_CHECKERS: dict[type, Checker] = {}


def _checker(hint: Any) -> Checker:
    found = _CHECKERS.get(hint)
    if found is None:
        found = _CHECKERS[hint] = _compile(hint)
    return found


def _fields_checker(cls: type) -> Checker:
    found = _FIELD_CHECKERS.get(cls)
    if found is not None:
        return found
    try:
        hints = _hints(cls)
    except Exception as err:  # noqa: BLE001 - any failure to resolve
        text = "its type hints cannot be resolved (%s)" % err

        def unresolved(obj: Any, where: str) -> None:
            raise CodecError("%s: %s" % (where, text))
        return unresolved
    fields = [(f.name, _checker(hints[f.name]), f)
              for f in dataclasses.fields(cls) if f.metadata.get("json", True)]
    with_metadata = {f.name for _, _, f in fields
                     if "enum" in f.metadata or "minimum" in f.metadata}

    def check_all(obj: Any, where: str) -> None:
        for name, field_check, f in fields:
            value = getattr(obj, name)
            field_check(value, where + "." + name)
            if name in with_metadata:
                _check_field(f, value, where + "." + name)

    _FIELD_CHECKERS[cls] = check_all
    return check_all


def _compile(hint: Any) -> Checker:
    """The checker of one type hint (see :func:`check`)."""
    if hint is Any:
        return _check_json
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        nullable = type(None) in args
        options = [_checker(a) for a in args if a is not type(None)]

        def union(value: Any, where: str) -> None:
            if value is None and nullable:
                return
            errors = []
            for option in options:
                try:
                    option(value, where)
                    return
                except CodecError as err:
                    errors.append(str(err))
            raise CodecError("; ".join(errors))
        return union
    if origin in (frozenset, set):
        item_check = _checker(args[0])

        def a_frozenset(value: Any, where: str) -> None:
            _is(value, frozenset, where)
            for item in value:
                item_check(item, "%s[%r]" % (where, item))
        return a_frozenset
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item_check = _checker(args[0])

            def a_tuple(value: Any, where: str) -> None:
                _is(value, tuple, where)
                for i, item in enumerate(value):
                    item_check(item, "%s[%d]" % (where, i))
            return a_tuple
        checks = [_checker(a) for a in args]

        def a_fixed_tuple(value: Any, where: str) -> None:
            _is(value, tuple, where)
            if len(checks) != len(value):
                raise CodecError("%s: expected %d items" % (where, len(checks)))
            for i, (item_check, item) in enumerate(zip(checks, value,
                                                       strict=True)):
                item_check(item, "%s[%d]" % (where, i))
        return a_fixed_tuple
    if origin in (FrozenMap, Mapping, dict) or hint is FrozenMap:
        key_hint, value_hint = args or (str, Any)
        value_check = _checker(value_hint)
        int_keys = key_hint is int

        def a_map(value: Any, where: str) -> None:
            _is(value, FrozenMap, where)
            for key, item in value.items():
                if int_keys:
                    _check_int(key, where + " key")
                elif not isinstance(key, str):
                    raise CodecError("%s: key %r is not a string"
                                     % (where, key))
                value_check(item, "%s.%s" % (where, key))
        return a_map
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        def a_dataclass(value: Any, where: str) -> None:
            if type(value) is not hint:
                raise CodecError("%s: expected %s, got %s" % (
                    where, hint.__name__, type(value).__name__))
            _fields_checker(hint)(value, where)
        return a_dataclass
    if hint is bool:
        return lambda value, where: _is(value, bool, where)
    if hint is int:
        return _check_int
    if hint is float:
        return _check_float
    if hint is str:
        return lambda value, where: _is(value, str, where)
    if hint is type(None):
        def none(value: Any, where: str) -> None:
            if value is not None:
                raise CodecError("%s: expected None, got %r" % (where, value))
        return none
    if isinstance(hint, type):
        # A base class (``PluginRequest``): the value's own dataclass.
        def a_subclass(value: Any, where: str) -> None:
            if (not isinstance(value, hint)
                    or not dataclasses.is_dataclass(value)):
                raise CodecError("%s: expected a %s dataclass, got %s" % (
                    where, hint.__name__, type(value).__name__))
            _fields_checker(type(value))(value, where)
        return a_subclass

    def unknown(value: Any, where: str) -> None:
        raise CodecError("%s: cannot check type %r" % (where, hint))
    return unknown


def _check_int(value: Any, where: str) -> None:
    if (isinstance(value, bool) or not isinstance(value, int)
            or not 0 <= value <= MAX_INT):
        raise CodecError("%s: expected an integer from 0 to %d, got %r"
                         % (where, MAX_INT, value))


def _check_float(value: Any, where: str) -> None:
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value)):
        raise CodecError("%s: expected a finite number, got %r"
                         % (where, value))


class Checked:
    """Base of a frozen dataclass whose fields are checked when it is built
    (:func:`check_fields`): a bad value is a :class:`CodecError` (a
    ``ValueError``) at construction, never a payload that cannot be read
    back. A subclass with its own ``__post_init__`` calls this one last."""

    def __post_init__(self) -> None:
        check_fields(self)


def _check_json(value: Any, where: str) -> None:
    """A frozen JSON value (:func:`freeze_json`'s shapes); iterative, so a
    deep value cannot exhaust the stack."""
    todo = [(value, where)]
    while todo:
        item, path = todo.pop()
        if item is None or isinstance(item, (str, bool, int)):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise CodecError("%s: %r is not a JSON number" % (path, item))
        elif isinstance(item, tuple):
            todo.extend((v, "%s[%d]" % (path, i)) for i, v in enumerate(item))
        elif isinstance(item, FrozenMap):
            for key, v in item.items():
                if not isinstance(key, str):
                    raise CodecError("%s: key %r is not a string" % (path, key))
                todo.append((v, "%s.%s" % (path, key)))
        else:
            raise CodecError("%s: %s is not a frozen JSON value (str, "
                             "number, bool, None, tuple, FrozenMap)"
                             % (path, type(item).__name__))


def _is(value: Any, kind: type, where: str) -> None:
    if not isinstance(value, kind):
        raise CodecError("%s: expected %s, got %s"
                         % (where, kind.__name__, type(value).__name__))


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
