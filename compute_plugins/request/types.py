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
import threading
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Optional, TypeVar

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
        # NOTE: a frozen :class:`Checked` value was checked when it was
        # built (or decoded): a value holding it (an assignment holding
        # its cells) does not check it again (:func:`_checked_for_good`).
        built_checked = _checked_for_good(hint)

        def a_dataclass(value: Any, where: str) -> None:
            if type(value) is not hint:
                raise CodecError("%s: expected %s, got %s" % (
                    where, hint.__name__, type(value).__name__))
            if not built_checked:
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
            if not _checked_for_good(type(value)):
                _fields_checker(type(value))(value, where)
        return a_subclass

    def unknown(value: Any, where: str) -> None:
        raise CodecError("%s: cannot check type %r" % (where, hint))
    return unknown


def _checked_for_good(cls: type) -> bool:
    """Whether every value of dataclass ``cls`` still holds the fields it
    was checked with when it was built: a frozen :class:`Checked`. One
    that is not frozen (a plugin's type without ``frozen=True``) may have
    had a field set since, so a value holding it checks it again."""
    params = getattr(cls, "__dataclass_params__", None)
    return issubclass(cls, Checked) and params is not None and bool(params.frozen)


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
        if getattr(_BUILDING, "cls", None) is type(self):
            # NOTE: :func:`decode` is building this object from fields it
            # has just decoded by the same rules (every field and item of
            # it, nested dataclasses included): a request's or an
            # assignment's decode checked them twice. The subclass's own
            # ``__post_init__`` (its invariants) has run all the same.
            _BUILDING.cls = None
            return
        check_fields(self)


#: The dataclass :func:`decode` is building now, in this thread
#: (:meth:`Checked.__post_init__` skips the checks its decoder made).
_BUILDING = threading.local()


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

    The decoder of each type is built once (:func:`_decoder`): the type's
    shape (dataclass fields and their hints, union options, item and key
    types) is resolved when it is first decoded, not on every value.

    :raises CodecError: ``doc`` does not match ``hint`` (names the path).
    """
    try:
        return _decoder(hint)(doc)
    except _Refused as refused:
        raise CodecError(refused.message(where)) from None


class _Refused(Exception):
    """A compiled decoder's refusal, its paths relative to the value it was
    given: each enclosing decoder prepends its step (``.name``, ``[3]``)
    on the way out, so the success path builds no path strings.
    :func:`decode` turns it into the :class:`CodecError` whose message
    names the full path. A union's refusal holds one part per option, as
    its message joins them."""

    def __init__(self, parts: list[list[str]]) -> None:
        super().__init__()
        #: [relative path, rule] per part.
        self.parts = parts

    def under(self, step: str) -> _Refused:
        for part in self.parts:
            part[0] = step + part[0]
        return self

    def message(self, where: str) -> str:
        return "; ".join("%s%s: %s" % (where, path, rule)
                         for path, rule in self.parts)


def _refuse(rule: str) -> _Refused:
    return _Refused([["", rule]])


Decoder = Callable[[Any], Any]

#: Compiled decoders by :func:`_cache_key`.
_DECODERS: dict[Any, Decoder] = {}


def _cache_key(hint: Any) -> Any:
    # NOTE: typing compares unions as sets (Union[int, float] ==
    # Union[float, int], also nested in tuple[...]), but a union's options
    # are tried in order: a class is its own key, any other hint is keyed
    # by its text too, which keeps the order.
    if isinstance(hint, type):
        return hint
    return (hint, repr(hint))


def _decoder(hint: Any) -> Decoder:
    """The decoder of ``hint``, compiled on first use."""
    try:
        key = _cache_key(hint)
        found = _DECODERS.get(key)
    except TypeError:  # an unhashable hint (Annotated metadata): not kept
        return _compile_decoder(hint)
    if found is None:
        found = _DECODERS[key] = _compile_decoder(hint)
    return found


def _compile_decoder(hint: Any) -> Decoder:
    """One type hint's decoder: the branch :func:`decode` takes for it,
    chosen once (the same tests in the same order as the checks it
    replaces, so every document gives the same value or the same error)."""
    if hint is Any:
        return freeze_json
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return _union_decoder(args)
    if origin in (frozenset, set):
        return _frozenset_decoder(_decoder(args[0]))
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _tuple_decoder(_decoder(args[0]))
        return _fixed_tuple_decoder([_decoder(a) for a in args])
    if origin in (FrozenMap, Mapping, dict) or hint is FrozenMap:
        key_hint, value_hint = args or (str, Any)
        return _map_decoder(key_hint is int, _decoder(value_hint))
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass_decoder(hint)
    if hint is bool:
        return _bool
    if hint is int:
        return _int
    if hint is float:
        return _float
    if hint is str:
        return _str
    if hint is type(None):
        return _none
    rule = "cannot decode type %r" % (hint,)

    def unknown(doc: Any) -> Any:
        raise _refuse(rule)
    return unknown


def _union_decoder(args: tuple[Any, ...]) -> Decoder:
    nullable = type(None) in args
    options = [_decoder(a) for a in args if a is not type(None)]
    if nullable and len(options) == 1:
        only = options[0]

        def optional(doc: Any) -> Any:
            if doc is None:
                return None
            return only(doc)
        return optional

    def union(doc: Any) -> Any:
        if doc is None and nullable:
            return None
        parts: list[list[str]] = []
        for option in options:
            try:
                return option(doc)
            except _Refused as refused:
                parts.extend(refused.parts)
        raise _Refused(parts)
    return union


def _items(build: Callable[[Iterator[Any]], Any], item: Decoder,
           doc: list[Any]) -> Any:
    """``build`` of ``item`` of every element of ``doc``, decoded in order
    (a frozenset hashes each as it comes); a refusal names its index."""
    try:
        return build(map(item, doc))
    except _Refused:
        pass
    # NOTE: the index of the element refused, found again one by one
    # (decoding is deterministic), so the success path counts nothing.
    for i, v in enumerate(doc):
        try:
            item(v)
        except _Refused as refused:
            raise refused.under("[%d]" % i) from None
    raise AssertionError("unreachable: an element was refused")


def _all_leaves(item: Decoder) -> Optional[Callable[[list[Any]], bool]]:
    """For an ``int``, ``str`` or ``bool`` item decoder: a test that every
    element of a list is one it returns unchanged, checked in place (most
    of a state's lists are CPU ids); None for other items."""
    if item is _int:
        def ints(doc: list[Any]) -> bool:
            for v in doc:
                if type(v) is not int or not 0 <= v <= MAX_INT:
                    return False
            return True
        return ints
    kind = str if item is _str else bool if item is _bool else None
    if kind is None:
        return None

    def leaves(doc: list[Any]) -> bool:
        for v in doc:
            if type(v) is not kind:
                return False
        return True
    return leaves


def _frozenset_decoder(item: Decoder) -> Decoder:
    leaves = _all_leaves(item)

    def a_frozenset(doc: Any) -> Any:
        if not isinstance(doc, list):
            raise _expected("list", doc)
        if leaves is not None and leaves(doc):
            items = frozenset(doc)
        else:
            items = _items(frozenset, item, doc)
        if len(items) != len(doc):
            raise _refuse("duplicate items")
        return items
    return a_frozenset


def _tuple_decoder(item: Decoder) -> Decoder:
    leaves = _all_leaves(item)

    def a_tuple(doc: Any) -> Any:
        if not isinstance(doc, list):
            raise _expected("list", doc)
        if leaves is not None and leaves(doc):
            return tuple(doc)
        return _items(tuple, item, doc)
    return a_tuple


def _fixed_tuple_decoder(items: list[Decoder]) -> Decoder:
    count = len(items)
    rule = "expected %d items" % count

    def a_fixed_tuple(doc: Any) -> Any:
        if not isinstance(doc, list):
            raise _expected("list", doc)
        if len(doc) != count:
            raise _refuse(rule)
        out = []
        for i, (item, v) in enumerate(zip(items, doc, strict=True)):
            try:
                out.append(item(v))
            except _Refused as refused:
                raise refused.under("[%d]" % i) from None
        return tuple(out)
    return a_fixed_tuple


def _map_decoder(int_keys: bool, value: Decoder) -> Decoder:
    def a_map(doc: Any) -> Any:
        if not isinstance(doc, dict):
            raise _expected("dict", doc)
        pairs = []
        for k, v in doc.items():
            key = _int_key(k) if int_keys else k
            try:
                pairs.append((key, value(v)))
            except _Refused as refused:
                raise refused.under(".%s" % (k,)) from None
        return FrozenMap(pairs)
    return a_map


def _int_key(key: str) -> Any:
    if not (key.isascii() and key.isdigit() and len(key) <= 10):
        raise _refuse("key %r is not an integer" % (key,))
    return _int(int(key))


def _dataclass_decoder(cls: type) -> Decoder:
    # NOTE: the fields are resolved on the first document, not here: a
    # dataclass may hold itself (its decoder is then in the cache), and
    # hints that cannot be resolved fail where the old decoder failed, on
    # a dict document, each time.
    table: list[tuple[str, Decoder, str, bool, Optional[Callable[[Any], Optional[str]]]]] = []
    known: frozenset[str] = frozenset()
    ready = False

    def resolve() -> None:
        nonlocal known, ready
        hints = _hints(cls)
        rows = []
        for f in dataclasses.fields(cls):
            if not f.metadata.get("json", True):
                continue
            required = (f.default is dataclasses.MISSING
                        and f.default_factory is dataclasses.MISSING)
            rows.append((f.name, _decoder(hints[f.name]), "." + f.name,
                         required, _field_rule(f)))
        table[:] = rows
        known = frozenset(row[0] for row in rows)
        ready = True

    def a_dataclass(doc: Any) -> Any:
        if not isinstance(doc, dict):
            raise _expected("dict", doc)
        if not ready:
            resolve()
        kwargs = {}
        for name, field_decoder, step, required, rule in table:
            if name not in doc:
                if required:
                    raise _refuse("missing field %r" % (name,))
                continue
            try:
                value = kwargs[name] = field_decoder(doc[name])
            except _Refused as refused:
                raise refused.under(step) from None
            if rule is not None:
                broken = rule(value)
                if broken is not None:
                    raise _Refused([[step, broken]])
        if len(kwargs) != len(doc):
            unknown = set(doc) - known
            if unknown:
                raise _refuse("unknown field(s) %s" % ", ".join(sorted(unknown)))
        _BUILDING.cls = cls
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as err:
            raise _refuse(str(err)) from None
        finally:
            _BUILDING.cls = None
    return a_dataclass


def _field_rule(f: dataclasses.Field[Any]) -> Optional[Callable[[Any], Optional[str]]]:
    """What :func:`_check_field` says of a decoded value, without the path
    (None: nothing to check)."""
    allowed = f.metadata.get("enum")
    minimum = f.metadata.get("minimum")
    if allowed is None and minimum is None:
        return None

    def rule(value: Any) -> Optional[str]:
        if allowed is not None and value is not None and value not in allowed:
            return "%r is not one of %s" % (value, ", ".join(allowed))
        if minimum is not None and value < minimum:
            return "%r is below %d" % (value, minimum)
        return None
    return rule


def _expected(kind: str, doc: Any) -> _Refused:
    return _refuse("expected %s, got %r" % (kind, type(doc).__name__))


def _bool(doc: Any) -> Any:
    if not isinstance(doc, bool):
        raise _expected("bool", doc)
    return doc


def _int(doc: Any) -> Any:
    if isinstance(doc, bool) or not isinstance(doc, int) or not 0 <= doc <= MAX_INT:
        raise _refuse("expected an integer from 0 to %d, got %r" % (MAX_INT, doc))
    return doc


def _float(doc: Any) -> Any:
    if (isinstance(doc, bool) or not isinstance(doc, (int, float))
            or not math.isfinite(doc)):
        raise _refuse("expected a finite number, got %r" % (doc,))
    return float(doc)


def _str(doc: Any) -> Any:
    if not isinstance(doc, str):
        raise _expected("str", doc)
    return doc


def _none(doc: Any) -> Any:
    if doc is not None:
        raise _refuse("expected null")
    return None
