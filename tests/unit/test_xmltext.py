"""xmltext.serialize: ElementTree's text, character for character."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute_plugins.util import xmltext

NAMES = st.sampled_from(["domain", "cputune", "vcpupin", "cell", "qemu:arg", "a-b",
                         "{urn:x}ns", "page"])
VALUES = st.one_of(st.sampled_from(["", "0", "0-3,8", "kvm", "a&b", "<x>", 'q"t',
                                    "tab\there", "cr\rlf\n", "\n  ", "é€"]),
                   st.text(max_size=6))
TEXTS = st.one_of(st.none(), VALUES)


@st.composite
def elements(draw, depth=0):
    element = ET.Element(draw(NAMES))
    for name in draw(st.lists(st.sampled_from(["vcpu", "cpuset", "id", "{urn:y}a",
                                               "unit"]), max_size=3, unique=True)):
        element.set(name, draw(VALUES))
    element.text = draw(TEXTS)
    element.tail = draw(TEXTS)
    if depth < 3:
        for _ in range(draw(st.integers(0, 3))):
            element.append(draw(elements(depth + 1)))
    if draw(st.integers(0, 9)) == 0:
        element.append(ET.Comment(draw(VALUES)))
    return element


@settings(max_examples=400, deadline=None)
@given(element=elements(), indent=st.booleans())
def test_serialize_writes_what_elementtree_writes(element, indent):
    if indent:
        ET.indent(element)
    assert xmltext.serialize(element) == ET.tostring(element, encoding="unicode")


def test_a_value_elementtree_cannot_write_is_its_error():
    element = ET.Element("vcpupin", vcpu=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ET.tostring(element, encoding="unicode")
    with pytest.raises(TypeError):
        xmltext.serialize(element)
