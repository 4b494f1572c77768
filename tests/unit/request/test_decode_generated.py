"""The generated dataclass decoders (``types._generate``, issue 19) against
the generic decoder (``bench.decode.baseline``): the same value, built the
same way (its ``__dict__``, key for key, every container's type), or the
same exception with the same message, for documents drawn from every type
the scheduler and the agents decode (the real plugins' states, requests
and assignments, and the RequestSpec parts), valid or not.

``test_decode_compiled`` compares the two on the real payloads and every
one-change variant of them; this one draws documents from the type hints
(hypothesis), and pins the ways a value is built (directly in its
``__dict__``, or through its ``__init__`` where it has its own).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import types as pytypes
import typing
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.decode import baseline, payloads
from compute_plugins.request import types
from compute_plugins.request.generic import GenericRequest
from compute_plugins.request.groups import Decision, RequestGroup
from compute_plugins.request.inputs import Flavor, Port
from compute_plugins.request.types import (
    MAX_INT,
    CodecError,
    FrozenMap,
    decode,
    enum_field,
    min_field,
)
from tests.unit.request.test_decode_compiled import Node


def shape(value: Any) -> Any:
    """``value`` exactly: its type, a dataclass's ``__dict__`` in order,
    a float's repr (1 and 1.0, nan), containers item by item."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = (vars(value) if hasattr(value, "__dict__")
                  else {f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
        return (type(value), tuple((k, shape(v)) for k, v in fields.items()))
    if isinstance(value, FrozenMap):
        return (FrozenMap, tuple((shape(k), shape(v)) for k, v in value.items()))
    if isinstance(value, frozenset):
        return (frozenset, tuple(sorted((shape(v) for v in value), key=repr)))
    if isinstance(value, tuple):
        return (tuple, tuple(shape(v) for v in value))
    return (type(value), repr(value))


def outcome(decoder: Any, hint: Any, doc: Any) -> tuple[str, Any]:
    try:
        value = decoder(hint, copy.deepcopy(doc), "$")
    except Exception as err:  # noqa: BLE001 - any exception is compared
        return ("raised", (type(err), str(err)))
    return ("value", shape(value))


def assert_same(hint: Any, doc: Any) -> str:
    new, old = outcome(decode, hint, doc), outcome(baseline.decode, hint, doc)
    assert new == old, (hint, doc)
    return new[0]


# -- documents drawn from the type hints ----------------------------------------

JUNK = st.sampled_from([None, -1, MAX_INT + 1, 1.5, True, "x", "7", [], [1, 1], {},
                        {"zz": 1}])
JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 2**40)
                    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=3),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=8)
INT_KEYS = st.sampled_from(["0", "1", "7", "01", "x", "", "99999999999", "2147483648",
                            "\u0661"])


def documents(hint: Any, metadata: Any = None, depth: int = 0) -> st.SearchStrategy[Any]:
    """Documents for ``hint``: mostly its shape (so that decoding reaches
    deep), sometimes a value of another kind anywhere."""
    good = _shaped(hint, metadata or {}, depth)
    return st.one_of(good, good, good, JUNK) if depth else good


def _shaped(hint: Any, metadata: Any, depth: int) -> st.SearchStrategy[Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return JSON
    if origin in (typing.Union, pytypes.UnionType):
        return st.one_of([documents(a, metadata, depth + 1) for a in args])
    if origin in (frozenset, set) or (origin is tuple and args[-1] is Ellipsis):
        return st.lists(documents(args[0], None, depth + 1), max_size=4)
    if origin is tuple:
        return st.tuples(*[documents(a, None, depth + 1) for a in args]).map(list)
    if origin in (FrozenMap, dict) or hint is FrozenMap:
        key, value = args or (str, Any)
        keys = INT_KEYS if key is int else st.text(max_size=3)
        return st.dictionaries(keys, documents(value, None, depth + 1), max_size=3)
    if dataclasses.is_dataclass(hint):
        if depth > 4:
            return st.just({})
        hints = types._hints(typing.cast(type, hint))
        fields = [f for f in dataclasses.fields(hint) if f.metadata.get("json", True)]
        required = {f.name: documents(hints[f.name], f.metadata, depth + 1) for f in fields
                    if f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING}
        optional = {f.name: documents(hints[f.name], f.metadata, depth + 1) for f in fields
                    if f.name not in required}
        optional["zz_unknown"] = st.just(1)
        return st.fixed_dictionaries(required, optional=optional)
    if hint is bool:
        return st.booleans()
    if hint is int:
        small = st.integers(0, 64)
        if "minimum" in metadata:
            return st.one_of(small, st.integers(-2, MAX_INT + 2))
        return st.one_of(small, small, st.integers(-2, MAX_INT + 2), st.booleans())
    if hint is float:
        return st.one_of(st.floats(-2, 64), st.integers(-2, 8),
                         st.sampled_from([math.inf, math.nan, True]))
    if hint is str:
        allowed = metadata.get("enum")
        if allowed:
            return st.one_of(st.sampled_from(allowed), st.text(max_size=3))
        return st.text(max_size=5)
    return JUNK


def decoded_types(plugins: Any) -> list[Any]:
    """Every type a scheduler or an agent decodes from a payload."""
    found: list[Any] = [Flavor, tuple[Port, ...], GenericRequest, tuple[RequestGroup, ...],
                        Decision, FrozenMap[str, Any], Node]
    for name in plugins:
        for kind in (plugins.state_type(name), plugins.request_type(name),
                     plugins.assignment_type(name)):
            if kind is not None:
                found.append(kind)
    return found


@pytest.fixture(scope="module")
def hints(manager: Any) -> list[Any]:
    kinds = decoded_types(manager.plugins)
    assert len(kinds) > 15
    return kinds


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(data=st.data())
def test_drawn_documents_give_the_same_value_or_error(hints, data):
    hint = data.draw(st.sampled_from(hints))
    assert_same(hint, data.draw(documents(hint), label=repr(hint)))


def test_the_drawn_documents_are_often_decoded():
    """The strategy reaches values, not only refusals (of each state); the
    same draws each run (a count of random draws failed now and then)."""
    from bench.decode.payloads import states
    kinds = {p.hint for p in states()}
    for hint in kinds:
        seen = {"value": 0, "raised": 0}

        @settings(max_examples=60, deadline=None, database=None, derandomize=True)
        @given(doc=documents(hint))
        def count(doc: Any) -> None:
            seen[assert_same(hint, doc)] += 1  # noqa: B023 - run at once
        count()
        assert seen["value"] >= 3 and seen["raised"] >= 3, (hint, seen)


# -- the real payloads, exactly ----------------------------------------------------

def test_the_real_payloads_are_built_the_same_way(manager):
    """Value for value, ``__dict__`` for ``__dict__`` (repr and == would not
    see a field's container type or an entry too many)."""
    for hint, doc, _ in payloads.states() + payloads.specs(manager.plugins):
        assert assert_same(hint, doc) == "value"


def test_a_tampered_state_is_refused_as_before():
    """A published state changed by hand, through the generated decoder
    (a state is built directly in its ``__dict__``): the same message,
    naming the path, the value and the rule."""
    numa = next(p for p in payloads.states() if p.where == "numa.state")
    cases = {
        ("cells", 0, "pcpus", 3): (True, r"numa\.state\.cells\[0\]\.pcpus\[3\]: expected "
                                         r"an integer from 0 to 2147483647, got True"),
        ("cells", 1, "small_page_kb"): (0, r"numa\.state\.cells\[1\]\.small_page_kb: 0 is "
                                           r"below 1"),
        ("cells", 1, "pinned"): ([1, 1], r"numa\.state\.cells\[1\]\.pinned: duplicate "
                                         r"items"),
        ("cell_devices",): ({"x": 1}, r"numa\.state\.cell_devices: key 'x' is not an "
                                      r"integer"),
        ("cpu_allocation_ratio",): (float("inf"), r"numa\.state\.cpu_allocation_ratio: "
                                                  r"expected a finite number, got inf"),
        ("cells", 0, "id"): ("0", r"numa\.state\.cells\[0\]\.id: expected an integer"),
    }
    for path, (value, message) in cases.items():
        doc = copy.deepcopy(numa.doc)
        place = doc
        for step in path[:-1]:
            place = place[step]
        place[path[-1]] = value
        with pytest.raises(CodecError, match="^" + message):
            decode(numa.hint, doc, numa.where)
        assert_same(numa.hint, doc)


# -- how a value is built ----------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Plain:
    count: int
    ratio: float = min_field(0, default=1.0)
    ids: frozenset[int] = frozenset()
    by_id: FrozenMap[int, Optional[int]] = dataclasses.field(default_factory=FrozenMap)
    note: str = dataclasses.field(default="", metadata={"json": False})


@dataclasses.dataclass(frozen=True)
class OwnInit:
    """A dataclass whose ``__init__`` is its own: built through it."""

    count: int = 0

    def __init__(self, count: int = 0) -> None:
        object.__setattr__(self, "count", count * 2)


@dataclasses.dataclass(frozen=True, slots=True)
class Slotted:
    count: int = 0
    policy: Optional[str] = enum_field(("a", "b"))


@dataclasses.dataclass(frozen=True)
class NotInit:
    count: int = 0
    derived: int = dataclasses.field(default=5, init=False)


@dataclasses.dataclass(frozen=True)
class WithInitVar:
    count: int = 0
    scale: dataclasses.InitVar[int] = 1

    def __post_init__(self, scale: int) -> None:
        object.__setattr__(self, "count", self.count * scale)


@dataclasses.dataclass(frozen=True)
class WithClassVar:
    """A ``ClassVar`` is no field: built in its ``__dict__`` all the same."""

    KIND: typing.ClassVar[str] = "k"
    count: int = 0


@dataclasses.dataclass(frozen=True)
class Unresolved:
    """A hint that names nothing (yet): refused on each dict document, as
    the generic decoder refused it."""

    later: NotDefinedAnywhere = None  # type: ignore[name-defined]  # noqa: F821


@dataclasses.dataclass(frozen=True)
class Invariant(types.Checked):
    low: int = 0
    high: int = 0

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError("low %d is above high %d" % (self.low, self.high))
        super().__post_init__()


@dataclasses.dataclass
class OwnSetattr:
    """Not frozen, with its own ``__setattr__``: its ``__init__`` sets each
    field through it (``self.count = count``)."""

    count: int = 0

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value * 2 if name == "count" else value)


class Plus100:
    """A data descriptor a field's default may be (a descriptor-typed field:
    its ``__init__`` sets the field through ``__set__``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return 5 if obj is None else getattr(obj, self.slot)

    def __set__(self, obj: Any, value: Any) -> None:
        object.__setattr__(obj, self.slot, value + 100)


@dataclasses.dataclass(frozen=True)
class WithDescriptor:
    count: int = Plus100()  # type: ignore[assignment]


@dataclasses.dataclass(frozen=True)
class ParentDefault:
    count: int = 1


@dataclasses.dataclass(frozen=True, init=False)
class ChildDefault(ParentDefault):
    """Built by its parent's ``__init__``, whose default (1) is not its
    field's (2)."""

    count: int = 2


@dataclasses.dataclass(frozen=True)
class IntEnum:
    """An ``enum`` of other values than strings (``enum_field`` says
    strings; its metadata does not)."""

    level: Any = dataclasses.field(default=None, metadata={"enum": (1, 2)})


@pytest.mark.parametrize("cls,direct", [(Plain, True), (Invariant, True), (Node, True),
                                        (WithClassVar, True),
                                        (OwnInit, False), (Slotted, False),
                                        (NotInit, False), (WithInitVar, False),
                                        (OwnSetattr, False), (WithDescriptor, False),
                                        (ChildDefault, False)])
def test_a_value_is_built_in_its_dict_only_where_its_init_would_do_just_that(cls, direct):
    assert types._constructed_as_fields(cls) is direct
    types._decoder(cls)
    assert ("obj = _new(cls)" in types._SOURCES[cls]) is direct


@pytest.mark.parametrize("cls,doc", [
    (Plain, {"count": 1}), (Plain, {"count": 1, "ratio": 2, "ids": [3, 1],
                                    "by_id": {"2": None, "01": 3}}),
    (Plain, {"count": 1, "note": "x"}), (Plain, {"count": 1, "ratio": -1}),
    (Plain, {"count": 1, "by_id": {"1": -1}}), (Plain, {"ratio": 1.0}),
    (OwnInit, {"count": 2}), (Slotted, {"count": 2, "policy": "b"}),
    (Slotted, {"policy": "c"}), (NotInit, {"count": 1}), (NotInit, {"derived": 1}),
    (WithInitVar, {"count": 3}), (Invariant, {"low": 1, "high": 2}),
    (Invariant, {"low": 3, "high": 2}), (Invariant, {"low": -3}),
    (WithClassVar, {"count": 1}), (WithClassVar, {"KIND": "x"}),
    (Unresolved, {}), (Unresolved, {"later": 1}),
    (OwnSetattr, {"count": 3}), (WithDescriptor, {"count": 1}), (WithDescriptor, {}),
    (ChildDefault, {}), (ChildDefault, {"count": 3}),
    (IntEnum, {"level": 1}), (IntEnum, {}),
])
def test_every_way_of_building_gives_the_generic_decoders_value_or_error(cls, doc):
    assert_same(cls, doc)
    for variant in (None, [], {**doc, "zz": 1}):
        assert_same(cls, variant)


def test_defaults_are_the_fields_own_and_factories_are_called_per_value():
    first, second = decode(Plain, {"count": 1}), decode(Plain, {"count": 2})
    assert first.by_id == FrozenMap() and first.by_id is not second.by_id
    assert first.note == "" and first.ids == frozenset()
    assert list(vars(first)) == ["count", "ratio", "ids", "by_id", "note"]
    assert OwnInit(2) == decode(OwnInit, {"count": 2}) == OwnInit(count=2)


def test_an_invariant_still_holds_and_its_checks_are_not_made_twice(monkeypatch):
    checked = []
    monkeypatch.setattr(types, "check_fields", lambda obj, where="": checked.append(obj))
    assert decode(Invariant, {"low": 1, "high": 2}) == Invariant(1, 2)
    assert [type(obj) for obj in checked] == [Invariant]  # the direct one only
    with pytest.raises(CodecError, match=r"^\$: low 3 is above high 2$"):
        decode(Invariant, {"low": 3, "high": 2})


def test_a_decoded_request_group_is_not_field_checked_again(monkeypatch):
    """A group's fields were checked by the decoder; :func:`check_group`
    still applies its own rules (names, uuids) to it."""
    from compute_plugins.request import groups
    calls = []
    real = groups.check_fields
    monkeypatch.setattr(groups, "check_fields",
                        lambda obj, where="": (calls.append(where), real(obj, where)))
    doc = {"requester_id": "_A", "resources": {"VCPU": 2}, "required_traits": ["HW_CPU_X86_AVX2"]}
    assert decode(RequestGroup, doc) == RequestGroup("_A", FrozenMap({"VCPU": 2}),
                                                     frozenset({"HW_CPU_X86_AVX2"}))
    assert calls == ["request group '_A'"]  # the one built directly
    with pytest.raises(CodecError, match=r"^\$: request group '_A': required_traits: "
                                         r"'NOPE' is not a standard"):
        decode(RequestGroup, {**doc, "required_traits": ["NOPE"]})
    with pytest.raises(CodecError, match=r"^\$\.resources\.VCPU: expected an integer"):
        decode(RequestGroup, {**doc, "resources": {"VCPU": -1}})


def test_a_group_held_by_another_value_is_not_checked_again(monkeypatch):
    """A :class:`RequestGroup` is checked when built (a frozen ``Checked``):
    a spec holding its groups does not check their fields again."""
    group = RequestGroup("", FrozenMap({"VCPU": 2}))
    calls = []
    real = types._fields_checker(RequestGroup)
    monkeypatch.setitem(types._FIELD_CHECKERS, RequestGroup,
                        lambda obj, where: (calls.append(where), real(obj, where)))
    types.check(tuple[RequestGroup, ...], (group, group))
    assert calls == []


def test_frozen_maps_compare_by_their_items():
    assert FrozenMap({"a": 1}) == FrozenMap({"a": 1}) == {"a": 1}
    assert FrozenMap({"a": 1}) != FrozenMap({"a": 2})
    assert FrozenMap({1: 1}) == FrozenMap({1: 1.0})
    assert FrozenMap() != FrozenMap({"a": 1})


@dataclasses.dataclass(frozen=True)
class Tree:
    """A dataclass that holds itself (its decoder forwards to itself while
    it is compiled)."""

    name: str = ""
    children: tuple[Tree, ...] = ()


def test_a_decoder_being_compiled_is_not_used_by_another_thread(monkeypatch):
    """A thread that decodes a type while another compiles its decoder
    waits for it and gets the whole decoder (it found a forwarder to a
    decoder not built yet: IndexError)."""
    import threading
    started, go = threading.Event(), threading.Event()
    real = types._generate

    def slow(cls, hints):
        if cls is Tree:
            started.set()
            go.wait(10)
        return real(cls, hints)
    monkeypatch.setattr(types, "_generate", slow)
    doc = {"name": "a", "children": [{"name": "b"}]}
    results: dict[str, Any] = {}

    def run(name: str) -> None:
        try:
            results[name] = decode(Tree, doc)
        except Exception as err:  # noqa: BLE001 - compared below
            results[name] = err
    first = threading.Thread(target=run, args=("first",))
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=run, args=("second",))
    second.start()
    second.join(0.5)
    go.set()
    first.join(10)
    second.join(10)
    expected = Tree("a", (Tree("b"),))
    assert results == {"first": expected, "second": expected}


def test_a_decoded_group_with_keys_that_are_not_strings_is_refused_as_before():
    """A document built in Python (not read from JSON) may have other keys
    than strings: the decoder takes them as they are, so the group's own
    check names them, as it did (not ``re``'s TypeError about them)."""
    doc = {"requester_id": "", "resources": {1: 2}}
    with pytest.raises(CodecError, match=r"^\$: request group ''\.resources: key 1 is not "
                                         r"a string$"):
        decode(RequestGroup, doc)
    assert_same(RequestGroup, doc)
    doc = {"requester_id": "", "choices": [{"VCPU": 1}, {2: 1}]}
    with pytest.raises(CodecError, match=r"^\$: request group ''\.choices\[1\]: key 2 is "
                                         r"not a string$"):
        decode(RequestGroup, doc)
    assert_same(RequestGroup, doc)


def test_an_integer_too_large_for_a_float_is_refused_not_an_overflow():
    """JSON reads a long integer literal as a Python int: in a float field
    it is refused like inf (it was ``math.isfinite``'s OverflowError),
    decoded or given to a constructor."""
    huge = int("1" + "0" * 400)
    with pytest.raises(CodecError, match=r"^\$\.ratio: expected a finite number, got 1000"):
        decode(Plain, {"count": 1, "ratio": huge})
    with pytest.raises(CodecError, match=r"^\$\.by_id: expected a finite number, got 1000"):
        types.check(float, huge, "$.by_id")
    assert_same(Plain, {"count": 1, "ratio": huge})


@dataclasses.dataclass(frozen=True)
class Broken:
    count: int = 0

    def __post_init__(self) -> None:
        raise RuntimeError("a bug in a __post_init__")


def test_a_traceback_through_a_generated_decoder_shows_its_lines():
    """The generated source is in ``linecache`` under the decoder's file
    name: a traceback (a debugger) shows the line it was at."""
    import traceback
    with pytest.raises(RuntimeError) as caught:
        decode(Broken, {"count": 1})
    text = "".join(traceback.format_exception(caught.value))
    assert 'File "<decoder of %s.Broken>"' % __name__ in text
    assert "obj.__post_init__()" in text


def test_a_pickled_frozen_map_hashes_as_its_items_in_another_process():
    """A string's hash differs between processes (``PYTHONHASHSEED``): a
    map pickled after it was hashed (a set's item, a dict's key) must not
    carry its cached hash into the process that loads it."""
    import os
    import pickle
    import subprocess
    import sys
    program = ("import pickle, sys\n"
               "from compute_plugins.request.types import FrozenMap\n"
               "fresh = FrozenMap({'VCPU': 1, 'MEMORY_MB': 2})\n"
               "if sys.argv[1] == 'dump':\n"
               "    hash(fresh)\n"
               "    sys.stdout.buffer.write(pickle.dumps(fresh))\n"
               "else:\n"
               "    loaded = pickle.loads(sys.stdin.buffer.read())\n"
               "    print(loaded == fresh, hash(loaded) == hash(fresh), loaded in {fresh})\n")

    def run(seed: str, *args: str, data: bytes = b"") -> bytes:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        return subprocess.run([sys.executable, "-c", program, *args], input=data, env=env,
                              capture_output=True, check=True).stdout
    dumped = run("1", "dump")
    assert run("2", "load", data=dumped).split() == [b"True", b"True", b"True"]
    assert pickle.loads(dumped) == FrozenMap({"VCPU": 1, "MEMORY_MB": 2})


@pytest.mark.parametrize("hint", [Plain, FrozenMap[int, Optional[int]]])
def test_two_spellings_of_one_integer_key_are_refused_not_one_dropped(hint):
    """``"1"`` and ``"01"`` are both key 1 of an int-keyed map: a document
    with both (never one :func:`encode` wrote) lost one of the two values
    without a word."""
    by_id = {"2": 5, "1": 3, "01": 4}
    doc = {"count": 1, "by_id": by_id} if hint is Plain else by_id
    where = r"\$\.by_id" if hint is Plain else r"\$"
    with pytest.raises(CodecError, match="^%s: keys '1' and '01' are both 1$" % where):
        decode(hint, doc)
    assert_same(hint, doc)
    assert decode(hint, {**doc, "by_id": {"01": 4}} if hint is Plain else {"01": 4}) is not None
