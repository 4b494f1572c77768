"""The compiled decoder (``types.decode``) against the generic decoder it
replaced (kept as ``bench.decode.baseline``): the same value, or the same
exception with the same message, for the project's real payloads and for
every malformed variant of them made by changing one value.

The payloads are the plugins' published states of the benchmark's four host
shapes and RequestSpec payloads (built by the real plugins, and the previous
format's fixture), cut into the parts ``RequestSpec.from_dict`` decodes.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from typing import Any, Optional, Union

import pytest

from bench.decode import baseline, payloads
from compute_plugins.request import types
from compute_plugins.request.types import (
    MAX_INT,
    CodecError,
    FrozenMap,
    decode,
    enum_field,
    min_field,
)

#: What a value of a document is replaced with, one at a time.
REPLACEMENTS: tuple[Any, ...] = (None, -1, MAX_INT + 1, 1.5, float("nan"), True, "x", "7",
                                 [], [1, 1], {}, {"zz": 1})


def outcome(hint: Any, doc: Any, where: str, decoder: Any) -> tuple[str, Any]:
    """What ``decoder`` makes of ``doc``: its value (with its repr, so 1 and
    1.0 differ) or its exception's type and message."""
    try:
        value = decoder(hint, copy.deepcopy(doc), where)
    except Exception as err:  # noqa: BLE001 - any exception is compared
        return ("raised", (type(err), str(err)))
    return ("value", (value, repr(value)))


def assert_same(hint: Any, doc: Any, where: str) -> None:
    assert outcome(hint, doc, where, decode) == outcome(hint, doc, where, baseline.decode), \
        (hint, doc, where)


def variants(doc: Any) -> Iterator[Any]:
    """``doc`` with one value replaced, one key removed or added, or one
    list item repeated, at every place of the document."""
    if isinstance(doc, dict):
        for key in doc:
            for value in REPLACEMENTS:
                yield {**doc, key: value}
            yield {k: v for k, v in doc.items() if k != key}
            for inner in variants(doc[key]):
                yield {**doc, key: inner}
        yield {**doc, "zz_unknown": 1}
    elif isinstance(doc, list):
        for i, item in enumerate(doc):
            for value in REPLACEMENTS:
                yield doc[:i] + [value] + doc[i + 1:]
            for inner in variants(item):
                yield doc[:i] + [inner] + doc[i + 1:]
        if doc:
            yield doc + [doc[0]]


@pytest.fixture(scope="module")
def real_payloads(manager: Any) -> list[payloads.Payload]:
    return payloads.states() + payloads.specs(manager.plugins)


def test_the_real_payloads_decode_to_the_same_values(real_payloads):
    assert {p.where.split(".")[0] for p in real_payloads} >= {
        "numa", "vgpu", "sriov", "disk", "flavor", "groups", "requests", "decision"}
    for payload in real_payloads:
        kind, (new, _) = outcome(*payload, decode)
        assert kind == "value", new
        assert_same(*payload)


def test_every_one_change_variant_gives_the_same_value_or_error(real_payloads):
    checked = errors = 0
    for hint, doc, where in real_payloads:
        for variant in variants(doc):
            assert_same(hint, variant, where)
            checked += 1
            errors += outcome(hint, variant, where, decode)[0] == "raised"
    # the variants reach every rule: most of them are refused
    assert checked > 5000 and errors > checked // 2


@dataclasses.dataclass(frozen=True)
class Node:
    """A dataclass that holds itself, with field rules and defaults."""

    name: str
    policy: Optional[str] = enum_field(("a", "b"))
    ratio: float = min_field(0, default=1.0)
    children: tuple[Node, ...] = ()
    pair: tuple[int, str] = (0, "")
    ids: frozenset[int] = frozenset()
    by_id: FrozenMap[int, Union[int, float]] = FrozenMap()
    either: Union[float, int, None] = None
    extra: Any = None

    def __post_init__(self) -> None:
        if self.name == "bad":
            raise ValueError("a node is not named bad")


NODE_DOCS: tuple[Any, ...] = (
    {"name": "n", "policy": "a", "ratio": 2, "pair": [1, "x"], "ids": [1, 2],
     "by_id": {"1": 2, "3": 4.5}, "either": 3, "extra": {"a": [1, {"b": None}]},
     "children": [{"name": "c", "children": [{"name": "d", "ids": [3]}]}]},
    {"name": "bad"}, {"name": "n", "children": [{"name": "bad"}]},
    {"name": "n", "by_id": {"01": 1, "x": 2}}, {"name": "n", "by_id": {"99999999999": 1}},
    {"name": "n", "pair": [1]}, {"name": "n", "ids": [1, 1]}, {"name": "n", "either": "x"},
    [], None, "n", 3,
)


@pytest.mark.parametrize("doc", NODE_DOCS)
@pytest.mark.parametrize("hint", [Node, Optional[Node], tuple[Node, ...], Union[int, Node],
                                  Union[Node, int], FrozenMap[str, Node], frozenset[int],
                                  tuple[int, ...], tuple[str, ...], tuple[bool, ...],
                                  Union[float, int], Union[int, float], Any, bytes,
                                  type(None), FrozenMap])
def test_synthetic_shapes_give_the_same_value_or_error(hint, doc):
    assert_same(hint, doc, "$")
    for variant in variants(doc):
        assert_same(hint, variant, "top")


def test_a_union_decodes_its_options_in_their_order():
    # typing compares unions as sets: each order has its own decoder
    assert repr(decode(Union[int, float], 1)) == "1"
    assert repr(decode(Union[float, int], 1)) == "1.0"
    assert repr(decode(tuple[Union[float, int], ...], [1])) == "(1.0,)"
    assert repr(decode(tuple[Union[int, float], ...], [1])) == "(1,)"


def test_an_error_names_the_path_and_the_rule():
    with pytest.raises(CodecError, match=r"^\$\.children\[0\]\.by_id: key 'y' is not an "
                                         r"integer$"):
        decode(Node, {"name": "n", "children": [{"name": "c", "by_id": {"y": 1}}]})
    with pytest.raises(CodecError, match=r"^\$\[1\]: expected a finite number, got 'x'; "
                                         r"\$\[1\]: expected an integer from 0 to"):
        decode(tuple[Union[float, int], ...], [1, "x"])


@dataclasses.dataclass(frozen=True)
class Span(types.Checked):
    """A checked dataclass with an invariant of its own (``first <= last``)."""

    first: int
    last: int = min_field(1, default=1)

    def __post_init__(self) -> None:
        if self.first > self.last:
            raise ValueError("first %d is after last %d" % (self.first, self.last))
        super().__post_init__()


@dataclasses.dataclass(frozen=True)
class Spans(types.Checked):
    spans: tuple[Span, ...] = ()


def test_a_decoded_value_is_checked_once_and_keeps_its_own_invariants(monkeypatch):
    """The decoder checks every field and item as it builds them: a decoded
    dataclass is not checked again field by field (it was half of a host
    state's decode, nested values checked once per level), but its own
    ``__post_init__`` still runs, and a value built directly is checked."""
    checked = []
    real = types.check_fields
    monkeypatch.setattr(types, "check_fields",
                        lambda obj, where="": (checked.append(obj), real(obj, where)))
    doc = {"spans": [{"first": 1, "last": 2}, {"first": 3, "last": 3}]}
    assert decode(Spans, doc) == Spans((Span(1, 2), Span(3, 3)))
    assert [type(obj) for obj in checked] == [Span, Span, Spans]  # the direct ones only
    checked.clear()
    assert decode(Spans, doc).spans[1] == Span(3, 3)
    assert [type(obj) for obj in checked] == [Span]
    with pytest.raises(CodecError, match=r"^\$\.spans\[1\]: first 4 is after last 3$"):
        decode(Spans, {"spans": [{"first": 1, "last": 2}, {"first": 4, "last": 3}]})
    with pytest.raises(CodecError, match=r"^\$\.spans\[0\]\.last: 0 is below 1$"):
        decode(Spans, {"spans": [{"first": 0, "last": 0}]})
    with pytest.raises(CodecError, match=r"Span.first: expected an integer"):
        Span(True, 2)


def test_a_checked_value_inside_another_is_not_checked_again(monkeypatch):
    """A :class:`types.Checked` value was checked when built: one holding
    it (an assignment holding its cells) checks only its own fields."""
    spans = (Span(1, 2), Span(3, 3))
    calls = []
    real = types._fields_checker(Span)
    monkeypatch.setitem(types._FIELD_CHECKERS, Span,
                        lambda obj, where: (calls.append(where), real(obj, where)))
    assert Spans(spans).spans == spans
    assert calls == []
    types.check(Span, Span(5, 6))
    assert calls == ["Span"]  # built directly: checked


class Part(types.Checked):
    """A base class as a field's hint (as ``PluginRequest`` in a spec)."""


@dataclasses.dataclass
class LoosePart(Part):
    """Not frozen (a plugin's type that forgot ``frozen=True``): its
    fields can change after it was checked."""

    count: int = 0


@dataclasses.dataclass(frozen=True)
class Holder(types.Checked):
    parts: tuple[LoosePart, ...] = ()
    part: Optional[Part] = None


def test_a_value_that_can_change_after_its_check_is_checked_again_inside_another():
    """Only a frozen :class:`types.Checked` value is taken as checked when
    another holds it: one whose fields were set since (not frozen) is
    refused with the path and the rule, never written as a payload that
    cannot be read back."""
    loose = LoosePart(1)
    loose.count = -1
    with pytest.raises(CodecError, match=r"^Holder\.parts\[0\]\.count: expected an integer"):
        Holder(parts=(loose,))
    with pytest.raises(CodecError, match=r"^Holder\.part\.count: expected an integer"):
        Holder(part=loose)
    assert Holder(parts=(LoosePart(2),), part=LoosePart(3)).part == LoosePart(3)


@pytest.mark.parametrize("hint,value,where,good", [
    (frozenset[int], frozenset({1, 2, -3}), r"\$\[-3\]: expected an integer",
     frozenset({1, 2})),
    (frozenset[int], frozenset({1, False}), r"\$\[False\]: expected an integer",
     frozenset({0, 1})),
    (tuple[int, ...], (1, 2, types.MAX_INT + 1), r"\$\[2\]: expected an integer",
     (1, types.MAX_INT)),
    (FrozenMap[int, int], FrozenMap({0: 4, 1: -1}), r"\$\.1: expected an integer",
     FrozenMap({0: 4, 1: 0})),
    (FrozenMap[int, int], FrozenMap({0: 4, -2: 5}), r"\$ key: expected an integer",
     FrozenMap({0: 4})),
    (FrozenMap[int, int], FrozenMap({0: 4, 1: 5.0}), r"\$\.1: expected an integer",
     FrozenMap()),
])
def test_a_container_of_integers_checked_at_once_still_names_the_bad_item(
        hint, value, where, good):
    """The integer containers' one-pass check (a CPU set, a pinning map)
    falls back to the per-item check for the message: the item named."""
    with pytest.raises(CodecError, match=where):
        types.check(hint, value)
    types.check(hint, good)
