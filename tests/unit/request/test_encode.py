"""``types.encode`` (each dataclass's encoded fields read once per class,
the scalars returned at once: issue 19) against the encoder it replaced
(:func:`reference_encode`, as it was): the same document, exactly (its
containers' and numbers' types, its keys in order), or the same error, for
values decoded from documents drawn from every type the scheduler and the
agents decode, the real plugins' states, and the values the shortcuts could
mistake (subclasses, enums, ``True`` and ``1``, ``inf``, a field left out
of the document). And :func:`types.encodes_alike_when_equal`, which the
compute agent's skip of an unchanged state rests on.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.decode import payloads
from compute_plugins.request import types
from compute_plugins.request.types import CodecError, FrozenMap, decode, encode
from tests.unit.request.test_decode_generated import documents


def reference_encode(value: Any) -> Any:
    """``types.encode`` before it kept each class's fields (the reference)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: reference_encode(getattr(value, f.name))
                for f in dataclasses.fields(value) if f.metadata.get("json", True)}
    if isinstance(value, Mapping):
        return {types._encode_key(k): reference_encode(v) for k, v in value.items()}
    if isinstance(value, frozenset):
        items = [reference_encode(v) for v in value]
        return sorted(items, key=lambda x: (str(type(x)), x))
    if isinstance(value, (tuple, list)):
        return [reference_encode(v) for v in value]
    return value


def exact(doc: Any) -> Any:
    """``doc`` with every item's type and a float's repr (``1``, ``1.0``
    and ``True`` are equal; nan is not equal to itself)."""
    if isinstance(doc, dict):
        return (dict, tuple((k, exact(v)) for k, v in doc.items()))
    if isinstance(doc, list):
        return (list, tuple(exact(v) for v in doc))
    return (type(doc), repr(doc))


def outcome(encoder: Any, value: Any) -> Any:
    try:
        return "value", exact(encoder(value))
    except Exception as err:  # noqa: BLE001 - compared
        return "raised", type(err), str(err)


def assert_same(value: Any) -> None:
    # NOTE: twice: the first encoding of a class reads its fields, the
    # next ones use those it kept.
    expected = outcome(reference_encode, value)
    assert outcome(encode, value) == expected
    assert outcome(encode, value) == expected


@pytest.fixture(scope="module")
def hints(manager: Any) -> list[Any]:
    from tests.unit.request.test_decode_generated import decoded_types
    return decoded_types(manager.plugins)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(data=st.data())
def test_drawn_values_encode_as_before(hints, data):
    hint = data.draw(st.sampled_from(hints))
    doc = data.draw(documents(hint), label=repr(hint))
    try:
        value = decode(hint, doc)
    except CodecError:
        return
    assert_same(value)


def test_the_real_states_and_specs_encode_as_before(manager):
    for hint, doc, _ in payloads.states() + payloads.specs(manager.plugins):
        assert_same(decode(hint, doc))


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    LOW = 1


class Name(enum.StrEnum):
    A = "a"


class Text(str):
    pass


@dataclasses.dataclass(frozen=True)
class Inner:
    n: int = 0
    hidden: str = dataclasses.field(default="x", metadata={"json": False})


@dataclasses.dataclass(frozen=True)
class Outer:
    inner: Inner = Inner()
    items: tuple[Any, ...] = ()
    maybe: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Derived(Outer):
    extra: float = 1.5


class Plain(Outer):
    """A subclass that is no dataclass of its own."""


def _stable_id(value: object) -> str:
    """A test id the same in every process: a frozenset of strings lists
    them in the order of their hashes, which differ by process (each xdist
    worker must collect the same ids)."""
    if isinstance(value, frozenset):
        return "frozenset(%r)" % sorted(value, key=repr)
    return repr(value)


@pytest.mark.parametrize("value", [
    None, True, False, 0, 1, -3, 1.0, 0.0, -0.0, math.inf, -math.inf, math.nan, "", "é",
    Colour.RED, Level.LOW, Name.A, Text("t"),
    (True, 1, 1.0), [1, (2, [3])], frozenset({1, 2, 3}), frozenset({"b", "a"}),
    frozenset({True, 2}), {"a": 1, 2: (3,)}, FrozenMap({"z": 1, "a": 2}),
    {True: 1}, {1.5: 1}, {None: 1}, {Level.LOW: 1},
    Inner(), Inner(3, "y"), Outer(Inner(2), (Inner(1), None, {"k": Colour.RED}), 4),
    Derived(items=(1,), extra=math.inf), Plain(maybe=7), Outer, (Outer, Inner),
    b"bytes", object,
], ids=lambda value: _stable_id(value))
def test_a_value_encodes_as_before(value):
    assert_same(value)


def test_a_subclass_and_its_base_keep_their_own_fields():
    assert_same(Outer(maybe=1))
    assert_same(Derived(maybe=1))
    assert_same(Plain(maybe=1))
    assert_same(Outer(maybe=2))


# -- encodes_alike_when_equal ---------------------------------------------------

@dataclasses.dataclass
class Mutable:
    n: int = 0


@dataclasses.dataclass(frozen=True)
class HoldsMutable:
    inner: Mutable = dataclasses.field(default_factory=Mutable)


@dataclasses.dataclass(frozen=True)
class Uncompared:
    n: int = 0
    note: str = dataclasses.field(default="", compare=False)


@dataclasses.dataclass(frozen=True)
class UncomparedUnpublished:
    n: int = 0
    cache: str = dataclasses.field(default="", compare=False, metadata={"json": False})


@dataclasses.dataclass(frozen=True)
class HoldsList:
    items: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class HoldsAny:
    value: Any = None


@dataclasses.dataclass(frozen=True, eq=False)
class NoEquality:
    n: int = 0


@dataclasses.dataclass(frozen=True)
class Tree:
    children: tuple[Tree, ...] = ()
    label: Optional[str] = None
    colour: Colour = Colour.RED
    weights: FrozenMap[str, float] = dataclasses.field(default_factory=FrozenMap)
    tags: frozenset[str] = frozenset()


@pytest.mark.parametrize("cls, alike", [
    (Tree, True), (Inner, True), (UncomparedUnpublished, True),
    (Mutable, False), (HoldsMutable, False), (Uncompared, False), (HoldsList, False),
    (HoldsAny, False), (NoEquality, False), (int, True),
], ids=lambda p: getattr(p, "__name__", repr(p)))
def test_equal_values_encode_alike_only_where_nothing_escapes_equality(cls, alike):
    assert types.encodes_alike_when_equal(cls) is alike


def test_the_real_plugins_states_encode_alike_when_equal(manager):
    """Every real plugin's state: the agent keeps its document while its
    state is unchanged (the skip is not lost to a field's hint)."""
    kinds = [manager.plugins.state_type(name) for name in manager.plugins]
    assert len([k for k in kinds if k is not None]) >= 4
    for kind in kinds:
        if kind is not None:
            assert types.encodes_alike_when_equal(kind), kind
