"""The one JSON loader of every input: bounded depth, strict numbers.

Every JSON document this project reads from outside goes through
:func:`loads`: a flavor, an image, a port or hints file (``validate``), a
snapshot's ``host.json``, the agent's checkpoint, a serialised RequestSpec,
a ``[pci] alias`` value. ``json.loads`` alone has two traps:

* nesting: ``[[[...]]]`` 1200 deep (a 2 KB file) raises ``RecursionError``
  inside the decoder, and 500 deep decodes but then breaks every recursive
  walk over it (freezing, encoding, comparing). Such a document is refused
  before it is decoded: :data:`MAX_DEPTH` levels are far more than any of
  these documents has (a checkpoint, the deepest, has 6);
* ``NaN``, ``Infinity`` and ``-Infinity``, which Python accepts and JSON
  (RFC 8259) does not: a checkpoint holding one would send Placement a
  body it cannot parse, every periodic. They are refused too.
"""

from __future__ import annotations

import array
import itertools
import json
import re
from typing import Any

#: Deepest nesting of arrays and objects accepted.
MAX_DEPTH = 32

# A JSON string, closed or not (skipped: brackets in it do not nest), or
# one bracket. Possessive: a string that is never closed runs to the end of
# the text in one match, instead of the scan restarting at each escaped
# quote inside it (quadratic).
_TOKENS = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)|[\[\]{}]',
                     re.DOTALL)
# Every byte but the quote and the four brackets (deleted by translate).
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')
# The four brackets as +1 and -1 (signed bytes).
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


class JSONInputError(ValueError):
    """A document is not JSON, or is JSON this project refuses (the reason)."""


def _refuse_constant(name: str) -> Any:
    raise JSONInputError("%s is not a JSON number" % name)


def _brackets(text: str) -> bytes:
    """The brackets of ``text`` outside its strings, in order.

    Exact for a JSON document; for a text that is not JSON, some brackets
    (the decoder refuses it anyway). Only string methods, each one pass in
    C: in a JSON document a backslash appears only in a string, where
    escapes read left to right, so that deleting ``\\\\`` pairs then
    ``\\"`` leaves only the quotes that open and close strings. Of the
    quotes and brackets that remain, each run of quotes counts only by its
    parity (``""`` pairs deleted); what lies between an odd quote and the
    next is inside a string.
    """
    if "\\" in text:
        text = text.replace("\\\\", "").replace('\\"', "")
    # NOTE: a character beyond ASCII encodes to bytes >= 0x80, never to a
    # quote or a bracket; surrogatepass keeps a lone surrogate encodable.
    skeleton = text.encode("utf-8", "surrogatepass").translate(None, _NOT_STRUCTURE)
    skeleton = skeleton.replace(b'""', b"")
    if b'"' in skeleton:
        skeleton = b"".join(skeleton.split(b'"')[::2])
    return skeleton


def check_depth(text: str, max_depth: int = MAX_DEPTH) -> None:
    """Refuse ``text`` when its arrays and objects nest deeper than ``max_depth``.

    Linear in the size of ``text``, with no recursion; strings are skipped.
    About a third of ``json.loads``'s time on a large document (``python -m
    bench jsonload``).

    :raises JSONInputError: naming the limit and where it was passed.
    """
    brackets = _brackets(text)
    if brackets.count(b"[") + brackets.count(b"{") <= max_depth:
        return
    steps = array.array("b", brackets.translate(_STEPS))
    if max(itertools.accumulate(steps)) <= max_depth:
        return
    # NOTE: refused: find where, token by token (linear too, slower).
    depth = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > max_depth:
                raise JSONInputError(
                    "arrays and objects nested more than %d deep (at "
                    "character %d)" % (max_depth, match.start()))
        elif token in ("]", "}"):
            depth -= 1
    raise JSONInputError(
        "arrays and objects nested more than %d deep" % max_depth)


def loads(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """Decode ``text`` (str, or UTF-8 bytes) with the checks of this module.

    :raises JSONInputError: not UTF-8, not JSON, nested too deep, or a
        ``NaN``/``Infinity``; the message says which and where.
    """
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as err:
            raise JSONInputError(
                "not UTF-8 text (byte 0x%02x at offset %d)"
                % (err.object[err.start], err.start)) from None
    check_depth(text, max_depth)
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except JSONInputError:
        raise
    except RecursionError:
        # NOTE: unreachable below MAX_DEPTH; kept so that no caller ever
        # sees a RecursionError from here.
        raise JSONInputError("nested too deeply") from None
    except ValueError as err:
        raise JSONInputError(str(err)) from None
