"""An element's XML text, as ElementTree writes it, written faster.

:func:`serialize` is ``ET.tostring(element, encoding="unicode")`` -- the
same text, character for character -- for the elements a libvirt domain is
made of (plain tags and attribute names, string values that need no
escaping), in one pass without ElementTree's namespace walk: the agent
writes a domain at every claim (:mod:`compute_plugins.compute.guest`) and
its plugins each of their fragments, and ElementTree's serialiser was
most of that. Anything else (a namespaced tag or attribute, a comment, a
value to escape, a value that is not a string) is written by
``ET.tostring`` itself, so its rules (escapes, namespace prefixes, errors)
stay ElementTree's.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable

__all__ = ["serialize"]

#: Characters ElementTree escapes in an attribute value or in text.
_ATTRIBUTE_ESCAPED = re.compile('[&<>"\r\n\t]').search
_TEXT_ESCAPED = re.compile("[&<>]").search


class _Unusual(Exception):
    """The element holds something only ``ET.tostring`` writes."""


def serialize(element: ET.Element) -> str:
    """``ET.tostring(element, encoding="unicode")``: the element, its
    children and its tail as XML text (see the module docstring).

    :raises TypeError: as ``ET.tostring`` (a value it cannot write).
    """
    parts: list[str] = []
    try:
        _write(element, parts.append)
    except _Unusual:
        return ET.tostring(element, encoding="unicode")
    return "".join(parts)


def _write(element: ET.Element, write: Callable[[str], object]) -> None:
    tag = element.tag
    if type(tag) is not str or tag[:1] == "{":
        raise _Unusual
    write("<" + tag)
    for name, value in element.items():
        if (type(name) is not str or name[:1] == "{" or type(value) is not str
                or _ATTRIBUTE_ESCAPED(value)):
            raise _Unusual
        write(' %s="%s"' % (name, value))
    text = element.text
    if text is not None and (type(text) is not str or _TEXT_ESCAPED(text)):
        raise _Unusual
    if text or len(element):
        write(">")
        if text:
            write(text)
        for child in element:
            _write(child, write)
        write("</" + tag + ">")
    else:
        write(" />")
    tail = element.tail
    if tail:
        if type(tail) is not str or _TEXT_ESCAPED(tail):
            raise _Unusual
        write(tail)
