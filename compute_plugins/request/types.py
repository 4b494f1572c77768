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
import enum
import inspect
import linecache
import math
import re
import threading
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
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
        # NOTE: another FrozenMap's dict copied as a dict (the Mapping
        # protocol's keys() and [] per item otherwise).
        self._data: dict[K, V] = dict(data._data if type(data) is FrozenMap else data)
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

    def __reduce__(self) -> tuple[Any, ...]:
        # NOTE: its items only, not its cached hash: a string's hash is
        # another in another process (PYTHONHASHSEED).
        return (type(self), (self._data,))

    def __eq__(self, other: object) -> bool:
        if type(other) is FrozenMap:
            return self._data == other._data
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
        ints = args[0] is int

        def a_frozenset(value: Any, where: str) -> None:
            _is(value, frozenset, where)
            if ints and _all_ints(value):
                return
            for item in value:
                item_check(item, "%s[%r]" % (where, item))
        return a_frozenset
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item_check = _checker(args[0])
            ints = args[0] is int

            def a_tuple(value: Any, where: str) -> None:
                _is(value, tuple, where)
                if ints and _all_ints(value):
                    return
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
        int_values = value_hint is int

        def a_map(value: Any, where: str) -> None:
            _is(value, FrozenMap, where)
            if int_keys and int_values and _all_ints(value) \
                    and _all_ints(value.values()):
                return
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


def checked_when_built(value: Any) -> bool:
    """Whether ``value`` holds the fields :func:`check_fields` passed when
    it was built (or decoded) and cannot have changed since: a frozen
    :class:`Checked` dataclass. A holder need not check it again."""
    return _checked_for_good(type(value))


def _checked_for_good(cls: type) -> bool:
    """Whether every value of dataclass ``cls`` still holds the fields it
    was checked with when it was built: a frozen :class:`Checked`. One
    that is not frozen (a plugin's type without ``frozen=True``) may have
    had a field set since, so a value holding it checks it again."""
    params = getattr(cls, "__dataclass_params__", None)
    return issubclass(cls, Checked) and params is not None and bool(params.frozen)


def _all_ints(values: Iterable[Any]) -> bool:
    """Whether every item of ``values`` passes :func:`_check_int`: the
    common case of a CPU set or a pinning map checked in one pass, without
    a path string per item (made only to name the item that fails: the
    per-item check then runs and says which)."""
    for value in values:
        if type(value) is not int or not 0 <= value <= MAX_INT:
            return False
    return True


def _check_int(value: Any, where: str) -> None:
    if (isinstance(value, bool) or not isinstance(value, int)
            or not 0 <= value <= MAX_INT):
        raise CodecError("%s: expected an integer from 0 to %d, got %r"
                         % (where, MAX_INT, value))


def _finite(number: float) -> bool:
    """Whether ``number`` (an int or a float) is a finite float: not inf,
    nan, nor an int too large for a float (a long JSON integer literal,
    which ``math.isfinite`` refuses with an OverflowError)."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def _check_float(value: Any, where: str) -> None:
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not _finite(value)):
        raise CodecError("%s: expected a finite number, got %r"
                         % (where, value))


class Checked:
    """Base of a frozen dataclass whose fields are checked when it is built
    (:func:`check_fields`): a bad value is a :class:`CodecError` (a
    ``ValueError``) at construction, never a payload that cannot be read
    back. A subclass with its own ``__post_init__`` calls this one last."""

    def __post_init__(self) -> None:
        # NOTE: :func:`decode` builds the value from fields it has just
        # decoded by the same rules (every field and item of it, nested
        # dataclasses included): a request's or an assignment's decode
        # checked them twice. The subclass's own ``__post_init__`` (its
        # invariants) has run all the same.
        if not built_by_decode(self):
            check_fields(self)


def built_by_decode(obj: Any) -> bool:
    """Whether :func:`decode` is building ``obj`` now, from fields it has
    just checked by the rules of :func:`check_fields`: what a frozen
    dataclass's ``__post_init__`` asks (once: the answer is cleared) to
    skip checking them again.
    """
    if getattr(_BUILDING, "cls", None) is type(obj):
        _BUILDING.cls = None
        return True
    return False


#: The dataclass :func:`decode` is building now, in this thread
#: (:func:`built_by_decode`).
_BUILDING = threading.local()


def build_decoded(cls: type[T], **fields: Any) -> T:
    """``cls(**fields)``, every field of it just decoded by the rules of
    :func:`decode` (a reader that decodes a document part by part, as
    :meth:`~compute_plugins.request.spec.RequestSpec.from_dict`): its
    ``__post_init__``, asking :func:`built_by_decode`, skips checking them
    again (its own invariants it checks all the same)."""
    _BUILDING.cls = cls
    try:
        return cls(**fields)
    finally:
        _BUILDING.cls = None


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


#: Each dataclass's fields that :func:`encode` writes, by class (read
#: once: an agent encodes its host's states at every claim and release).
_ENCODED_FIELDS: dict[type, tuple[str, ...]] = {}
#: Types :func:`encode` returns as they are (exactly these, not subclasses).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def encode(value: Any) -> Any:
    """A JSON-serialisable document for a frozen value (see module doc)."""
    cls = type(value)
    names = _ENCODED_FIELDS.get(cls)
    if names is not None:
        return {name: encode(getattr(value, name)) for name in names}
    if cls in _SCALARS:
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = tuple(f.name for f in dataclasses.fields(value)
                      if f.metadata.get("json", True))
        _ENCODED_FIELDS[cls] = names
        return {name: encode(getattr(value, name)) for name in names}
    if isinstance(value, Mapping):
        return {_encode_key(k): encode(v) for k, v in value.items()}
    if isinstance(value, frozenset):
        items = [encode(v) for v in value]
        return sorted(items, key=lambda x: (str(type(x)), x))
    if isinstance(value, (tuple, list)):
        return [encode(v) for v in value]
    return value


def encodes_alike_when_equal(cls: type) -> bool:
    """Whether two values of ``cls`` that are equal (``==``) are sure to
    give the same :func:`encode` document, whenever each was encoded: what
    a holder that keeps a value's document until a value unequal to it
    comes (the compute agent's states) rests on. True for a frozen
    dataclass with its generated equality whose fields that :func:`encode`
    writes all compare (none ``compare=False``) and hold only values that
    cannot change in place (str, int, float, bool, None, enums, tuples,
    frozensets, :class:`FrozenMap` and such dataclasses, by their type
    hints); False for anything else (a dataclass without ``frozen=True``,
    whose value may have been changed since it was encoded: equal to
    itself; a field hinted ``list``, ``dict`` or ``Any``). Decided once
    per class. A class's own ``__eq__`` is taken at its word."""
    found = _ENCODES_ALIKE.get(cls)
    if found is None:
        found = _encodes_alike(cls, set())
        _ENCODES_ALIKE[cls] = found
    return found


#: :func:`encodes_alike_when_equal`'s answers, by class.
_ENCODES_ALIKE: dict[type, bool] = {}
_IMMUTABLE_LEAVES = (str, int, float, bool, type(None))


def _encodes_alike(hint: Any, seen: set[type]) -> bool:
    if hint in _IMMUTABLE_LEAVES or hint is Ellipsis:
        return True
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        params = getattr(hint, "__dataclass_params__", None)
        if params is None or not params.frozen or not params.eq:
            return False
        if hint in seen:
            return True
        seen.add(hint)
        try:
            hints = _hints(hint)
        except Exception:  # noqa: BLE001 - a hint that cannot be resolved
            return False
        return all(f.compare and _encodes_alike(hints.get(f.name, Any), seen)
                   for f in dataclasses.fields(hint) if f.metadata.get("json", True))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return True
    if origin in (tuple, frozenset, FrozenMap, typing.Union, types.UnionType) \
            or hint is FrozenMap:
        return all(_encodes_alike(arg, seen) for arg in typing.get_args(hint))
    return False


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
        # NOTE: a class, or a hint without a union, is its own key
        # (:func:`_cache_key`): found without building the key.
        found = _DECODERS.get(hint)
    except TypeError:  # an unhashable hint
        found = None
    try:
        return (found or _decoder(hint))(doc)
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

#: The source of each dataclass's generated decoder (:func:`_generate`),
#: kept to be read (a test, a profile's ``<decoder of ...>`` frames; also in
#: :mod:`linecache`, for tracebacks).
_SOURCES: dict[type, str] = {}


def _cache_key(hint: Any) -> Any:
    # NOTE: typing compares unions as sets (Union[int, float] ==
    # Union[float, int], also nested in tuple[...]), but a union's options
    # are tried in order: a hint with a union in it is keyed by its text
    # too, which keeps the order; any other hint (a class) is its own key.
    if isinstance(hint, type) or not _has_union(hint):
        return hint
    return (hint, repr(hint))


def _has_union(hint: Any) -> bool:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return True
    return any(_has_union(arg) for arg in typing.get_args(hint))


#: Held while decoders are compiled (by one thread at a time: a type's
#: decoder is published whole), re-entered for the types of its fields.
_COMPILING = threading.RLock()

#: The dataclasses whose decoders are being compiled now (by the thread
#: holding :data:`_COMPILING`): their forwarders (:func:`_dataclass_decoder`).
_IN_PROGRESS: dict[Any, Decoder] = {}


def _decoder(hint: Any) -> Decoder:
    """The decoder of ``hint``, compiled on first use."""
    try:
        key = _cache_key(hint)
        found = _DECODERS.get(key)
    except TypeError:  # an unhashable hint (Annotated metadata): not kept
        with _COMPILING:
            return _compile_decoder(hint)
    if found is None:
        with _COMPILING:
            found = _DECODERS.get(key) or _IN_PROGRESS.get(key)
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
        built: FrozenMap[Any, Any] = FrozenMap(pairs)
        if int_keys and len(built) != len(pairs):  # two spellings of one key
            raise _refuse(_repeated_key(doc))
        return built
    return a_map


def _repeated_key(doc: dict[str, Any]) -> str:
    """The rule an int-keyed map's document breaks when two of its keys
    are one integer (``"1"``, ``"01"``): one value would be lost."""
    seen: dict[int, str] = {}
    for key in doc:
        number = int(key)
        if number in seen:
            return "keys %r and %r are both %d" % (seen[number], key, number)
        seen[number] = key
    raise AssertionError("unreachable: no key repeats")


def _int_key(key: str) -> Any:
    if not (key.isascii() and key.isdigit() and len(key) <= 10):
        raise _refuse("key %r is not an integer" % (key,))
    return _int(int(key))


def _dataclass_decoder(cls: type) -> Decoder:
    """The decoder of dataclass ``cls``: one function generated for it
    (:func:`_generate`), each field's lookup and check written out, ints,
    strings, bools and floats checked inline.

    Its fields' decoders are compiled now; while they are, ``cls`` decodes
    through a forwarder (a dataclass may hold itself), which only the
    compiling thread finds (:data:`_IN_PROGRESS`); another thread that
    reaches it through a field's decoder before the end waits for it.
    Hints that cannot be resolved yet fail on each dict document, where
    the generic decoder failed, until they can.
    """
    try:
        hints = _hints(cls)
    except Exception:  # noqa: BLE001 - raised again on each dict document
        return _unresolved_decoder(cls)
    built: list[Decoder] = []

    def forward(doc: Any) -> Any:
        return (built[0] if built else _decoder(cls))(doc)

    _IN_PROGRESS[cls] = forward
    try:
        built.append(_generate(cls, hints))
    finally:
        del _IN_PROGRESS[cls]  # :func:`_decoder` keeps the one it gets back
    return built[0]


def _unresolved_decoder(cls: type) -> Decoder:
    generated: list[Decoder] = []

    def unresolved(doc: Any) -> Any:
        if not isinstance(doc, dict):
            raise _expected("dict", doc)
        if not generated:
            with _COMPILING:
                generated.append(_generate(cls, _hints(cls)))
        return generated[0](doc)
    return unresolved


#: The inline fast path of a leaf decoder in generated code (``%(v)s``: the
#: value): a value it passes is the one the decoder would return.
_INLINE: dict[Any, str] = {
    int: "type(%(v)s) is int and 0 <= %(v)s <= " + str(MAX_INT),
    str: "type(%(v)s) is str",
    bool: "%(v)s is True or %(v)s is False",
    # NOTE: x - x is 0.0 for a finite float only (inf - inf, nan: nan);
    # float(x) of a float is x itself.
    float: "type(%(v)s) is float and %(v)s - %(v)s == 0.0",
}


def _inline_test(hint: Any, value: str) -> Optional[str]:
    """The inline test that a field's document value is its value as it
    is (``int``, ``str``, ``bool``, ``float`` and their ``Optional``);
    None when the field's decoder is called instead."""
    test = _leaf_test(hint)
    if test is not None:
        return test % {"v": value}
    args = typing.get_args(hint)
    if (typing.get_origin(hint) in (typing.Union, types.UnionType)
            and len(args) == 2 and type(None) in args):
        inner = _leaf_test(args[0] if args[1] is type(None) else args[1])
        if inner is not None:
            return "%s is None or %s" % (value, inner % {"v": value})
    return None


def _leaf_test(hint: Any) -> Optional[str]:
    return _INLINE.get(hint) if isinstance(hint, type) else None


def _inline(hint: Any, src: str, dst: str, names: dict[str, Any]) -> Optional[list[str]]:
    """Lines that set ``dst`` to the value of container ``hint`` (a
    frozenset, a tuple of any length, a mapping) decoded from ``src``,
    their items' loops written out (nested containers too, a leaf's test
    inline, a dataclass item by its decoder); None for other hints.

    The lines raise :class:`_Slow` where they are not sure the value is
    the one the hint's decoder makes (a list subclass, an item that is not
    a leaf value as it is, a duplicate, a key that is not a plain
    number), and let a nested decoder's refusal through: the caller then
    decodes ``src`` with the decoder, which makes the value or the refusal
    with its path.
    """
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (frozenset, set):
        build, item_hint = "frozenset", args[0]
    elif origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        build, item_hint = "tuple", args[0]
    elif origin in (FrozenMap, Mapping, dict) or hint is FrozenMap:
        key_hint, item_hint = args or (str, Any)
        return _inline_map(key_hint is int, item_hint, src, dst, names)
    else:
        return None
    test = _inline_test(item_hint, "x_" + dst)
    if test is not None:
        loop = ["for x_%s in %s:" % (dst, src),
                "    if not (%s):" % test,
                "        raise _Slow",
                "%s = %s(%s)" % (dst, build, src)]
    else:
        loop = ["a_%s = []" % dst, "for x_%s in %s:" % (dst, src)]
        loop += ["    " + line for line in _inline_item(item_hint, "x_" + dst, "y_" + dst,
                                                         names)]
        loop += ["    a_%s.append(y_%s)" % (dst, dst), "%s = %s(a_%s)" % (dst, build, dst)]
    if build == "frozenset":
        loop += ["if len(%s) != len(%s):" % (dst, src), "    raise _Slow"]
    # NOTE: an empty list (most of a state's) is the one empty value.
    names["_EMPTY_" + build] = frozenset() if build == "frozenset" else ()
    return (["if type(%s) is not list:" % src, "    raise _Slow",
             "if not %s:" % src, "    %s = _EMPTY_%s" % (dst, build), "else:"]
            + ["    " + line for line in loop])


def _inline_map(int_keys: bool, item_hint: Any, src: str, dst: str,
                names: dict[str, Any]) -> list[str]:
    """:func:`_inline` of a mapping (``int`` keys: only plain digits of the
    model's range)."""
    lines = ["if type(%s) is not dict:" % src, "    raise _Slow",
             "m_%s = {}" % dst, "for k_%s, x_%s in %s.items():" % (dst, dst, src)]
    key = "k_" + dst
    if int_keys:
        lines += [f"    if not (type({key}) is str and {key}.isascii() and {key}.isdigit() "
                  f"and len({key}) <= 10):", "        raise _Slow",
                  f"    {key} = int({key})",
                  f"    if {key} > {MAX_INT}:", "        raise _Slow"]
    lines += ["    " + line for line in _inline_item(item_hint, "x_" + dst, "y_" + dst, names)]
    lines += ["    m_%s[%s] = y_%s" % (dst, key, dst)]
    if int_keys:  # two spellings of one key ("1", "01"): refused by the decoder
        lines += ["if len(m_%s) != len(%s):" % (dst, src), "    raise _Slow"]
    lines += ["%s = _frozen_map(m_%s)" % (dst, dst)]
    return lines


def _inline_item(hint: Any, src: str, dst: str, names: dict[str, Any]) -> list[str]:
    """Lines that set ``dst`` to the item ``src`` decoded as ``hint``
    (see :func:`_inline`): a leaf's test, a container's loop, or a call of
    its decoder."""
    test = _inline_test(hint, src)
    if test is not None:
        return ["if not (%s):" % test, "    raise _Slow", "%s = %s" % (dst, src)]
    inline = _inline(hint, src, dst, names)
    if inline is not None:
        return inline
    name = "i_" + dst
    names[name] = _decoder(hint)
    return ["%s = %s(%s)" % (dst, name, src)]


class _Slow(Exception):
    """Raised by a generated decoder's loop when it is not sure (see
    :func:`_inline`): the field is decoded by its decoder instead."""


def _frozen_map(data: dict[Any, Any]) -> FrozenMap[Any, Any]:
    """A :class:`FrozenMap` that takes ``data`` (a dict nothing else
    holds) as it is, without the copy its constructor makes."""
    built: FrozenMap[Any, Any] = object.__new__(FrozenMap)
    built._data = data
    built._hash = None
    return built


def _constructed_as_fields(cls: type) -> bool:
    """Whether a value of ``cls`` can be built by setting its fields in its
    ``__dict__`` (its default values, or the value of its default factory,
    for the fields a document leaves out), then calling its
    ``__post_init__``: what its dataclass ``__init__`` does, without one
    call per field (a frozen dataclass's ``object.__setattr__``). Not when
    its ``__init__`` or ``__new__`` is its own, when a field is not an
    ``__init__`` argument or an ``InitVar`` is, when a field that is not
    carried in JSON has no default, when its values have no ``__dict__``
    (``slots``), or when its ``__init__`` sets a field through more than
    the ``__dict__``: a data descriptor (a descriptor-typed field), or the
    class's own ``__setattr__`` (not frozen: ``self.name = value``)."""
    owner: Any = next((k for k in cls.__mro__ if "__init__" in k.__dict__), object)
    code = getattr(owner.__dict__.get("__init__"), "__code__", None)
    # NOTE: dataclasses writes its __init__'s source and compiles it
    # ("<string>"); a class's own __init__ is in its module's file.
    every: Any = getattr(cls, "__dataclass_fields__", {})
    # NOTE: the __init__ of ``cls``'s own fields (a plain subclass shares
    # them): a dataclass(init=False) subclass's fields may have other
    # defaults than its parent's __init__ applies.
    if (code is None or code.co_filename != "<string>"
            or owner.__dict__.get("__dataclass_fields__") is not every
            or not owner.__dataclass_params__.init
            or cls.__new__ is not object.__new__):  # type: ignore[comparison-overlap]
        return False
    if (not owner.__dataclass_params__.frozen
            and cls.__setattr__ is not object.__setattr__):  # type: ignore[comparison-overlap]
        return False
    fields = dataclasses.fields(cls)
    try:
        arguments = list(inspect.signature(owner.__dict__["__init__"]).parameters)[1:]
    except (TypeError, ValueError):
        return False
    if arguments != [f.name for f in fields]:
        return False  # an InitVar, or a field that is not an argument
    for f in fields:
        if (not f.metadata.get("json", True) and f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING):
            return False
        if hasattr(type(inspect.getattr_static(cls, f.name, None)), "__set__"):
            return False
    try:
        return isinstance(object.__new__(cls).__dict__, dict)
    except (AttributeError, TypeError):
        return False


def _generate(cls: type, hints: dict[str, Any]) -> Decoder:
    """Write, compile and return the decoder function of dataclass ``cls``.

    It makes the checks the interpreted decoder made, in the same order
    (each field in turn: missing, its value, its ``enum``/``minimum`` rule;
    then unknown fields; then the value is built, its ``TypeError`` or
    ``ValueError`` refused), so that every document gives the same value
    or the same error; only the work is written out once per type instead
    of looked up per field and value. Why: a scheduler decodes every
    host's published states, and the interpreted loop (a table lookup and
    a call per field and item, a frozen ``__init__``'s ``setattr`` per
    field) was most of that (issue 19; ``doc/source/benchmarks.md``).

    To read one: ``_SOURCES[cls]``; a traceback shows its lines (its file
    is ``<decoder of MODULE.CLASS>``, in :mod:`linecache`).
    """
    direct = _constructed_as_fields(cls)
    post_init = getattr(cls, "__post_init__", None)
    # NOTE: :meth:`Checked.__post_init__` of a decoded value skips its
    # checks (the decoder made them): nothing to call.
    post_init_runs = post_init is not None and post_init is not Checked.__post_init__
    names: dict[str, Any] = {
        "cls": cls, "_new": object.__new__, "_expected": _expected, "_refuse": _refuse,
        "_Refused": _Refused, "_field": _field, "_BUILDING": _BUILDING,
        "_unknown": _unknown, "_Slow": _Slow, "_frozen_map": _frozen_map,
    }
    lines = ["def decode(doc):",
             "    if not isinstance(doc, dict):",
             "        raise _expected('dict', doc)"]
    required = 0
    present: list[tuple[int, dataclasses.Field[Any]]] = []
    for i, f in enumerate(dataclasses.fields(cls)):
        if not f.metadata.get("json", True):
            continue
        present.append((i, f))
        hint = hints[f.name]
        value, step = "v%d" % i, "." + f.name
        names["d%d" % i] = _decoder(hint)
        is_required = (f.default is dataclasses.MISSING
                       and f.default_factory is dataclasses.MISSING)
        body = ["%s = doc[%r]" % (value, f.name)]
        test = _inline_test(hint, value)
        inline = None if test is not None else _inline(hint, value, "w%d" % i, names)
        if test is not None:
            body += ["if not (%s):" % test,
                     "    %s = _field(d%d, %s, %r)" % (value, i, value, step)]
        elif inline is not None:
            # NOTE: the written-out loop takes only what it is sure of; on
            # any doubt the field's decoder decodes it again and makes the
            # value or the refusal (with its path) as it always did.
            body += ["try:"] + ["    " + line for line in inline]
            body += ["except (_Slow, _Refused):",
                     "    w%d = _field(d%d, %s, %r)" % (i, i, value, step),
                     "%s = w%d" % (value, i)]
        else:
            body += ["try:",
                     "    %s = d%d(%s)" % (value, i, value),
                     "except _Refused as refused:",
                     "    raise refused.under(%r) from None" % step]
        body += _rule_lines(f, i, value, step, names)
        if is_required:
            required += 1
            lines += ["    if %r not in doc:" % f.name,
                      "        raise _refuse(%r)" % ("missing field %r" % (f.name,))]
            lines += ["    " + line for line in body]
        else:
            lines += ["    if %r in doc:" % f.name]
            lines += ["        " + line for line in body + ["n += 1"]]
            lines += ["    else:", "        %s = %s" % (value, _default(f, i, names, direct))]
    lines.insert(3, "    n = %d" % required)
    names["_ABSENT"] = _ABSENT
    names["known"] = frozenset(f.name for _, f in present)
    lines += ["    if n != len(doc):", "        _unknown(doc, known)"]
    if direct:
        lines += ["    obj = _new(cls)", "    into = obj.__dict__"]
        decoded = {i for i, _ in present}
        for i, f in enumerate(dataclasses.fields(cls)):
            value = "v%d" % i if i in decoded else _default(f, i, names, direct)
            lines.append("    into[%r] = %s" % (f.name, value))
        build = ["obj.__post_init__()"] if post_init_runs else []
    else:
        lines += ["    kwargs = {}"]
        for i, f in present:
            lines += ["    if v%d is not _ABSENT:" % i, "        kwargs[%r] = v%d" % (f.name, i)]
        build = ["obj = cls(**kwargs)"]
    if build:
        lines += ["    _BUILDING.cls = cls", "    try:"]
        lines += ["        " + line for line in build]
        lines += ["    except (TypeError, ValueError) as err:",
                  "        raise _refuse(str(err)) from None",
                  "    finally:",
                  "        _BUILDING.cls = None"]
    lines.append("    return obj")
    source = "\n".join(lines) + "\n"
    _SOURCES[cls] = source
    filename = "<decoder of %s.%s>" % (cls.__module__, cls.__qualname__)
    # NOTE: a traceback or a debugger shows the generated lines (an entry
    # without a modification time stays in the cache).
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), names)
    decoder: Decoder = names["decode"]
    decoder.__qualname__ = decoder.__name__ = "decode_%s" % cls.__name__
    return decoder


def _default(f: dataclasses.Field[Any], i: int, names: dict[str, Any],
             direct: bool) -> str:
    """The expression of field ``f``'s value when a document leaves it out,
    its default put in ``names``: :data:`_ABSENT` when the value is built
    by its ``__init__``, which applies the default."""
    if not direct:
        return "_ABSENT"
    if f.default is not dataclasses.MISSING:
        names["D%d" % i] = f.default
        return "D%d" % i
    names["F%d" % i] = f.default_factory
    return "F%d()" % i


def _rule_lines(f: dataclasses.Field[Any], i: int, value: str, step: str,
                names: dict[str, Any]) -> list[str]:
    """The lines that check field ``f``'s ``enum`` and ``minimum`` on the
    decoded ``value``: :func:`_check_field`'s tests and text, without the
    path (its step, which the refusal is under)."""
    lines = []
    allowed = f.metadata.get("enum")
    if allowed is not None:
        names["A%d" % i] = allowed
        # NOTE: joined when refused, as :func:`_check_field` does: an enum
        # of other values than strings fails there, not every document.
        lines += ["if %s is not None and %s not in A%d:" % (value, value, i),
                  "    raise _Refused([[%r, '%%r is not one of %%s' %% (%s, ', '.join(A%d))]])"
                  % (step, value, i)]
    minimum = f.metadata.get("minimum")
    if minimum is not None:
        names["M%d" % i] = minimum
        lines += ["if %s < M%d:" % (value, i),
                  "    raise _Refused([[%r, '%%r is below %%d' %% (%s, M%d)]])"
                  % (step, value, i)]
    return lines


class _Absent:
    """A field the document left out (its default applies)."""

    __slots__ = ()


_ABSENT = _Absent()


def _field(decoder: Decoder, doc: Any, step: str) -> Any:
    """``decoder(doc)``, a refusal under ``step`` (a field's slow path)."""
    try:
        return decoder(doc)
    except _Refused as refused:
        raise refused.under(step) from None


def _unknown(doc: dict[str, Any], known: frozenset[str]) -> None:
    unknown = set(doc) - known
    if unknown:
        raise _refuse("unknown field(s) %s" % ", ".join(sorted(unknown)))


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
            or not _finite(doc)):
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
