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

import json
import re
from typing import Any

#: Deepest nesting of arrays and objects accepted.
MAX_DEPTH = 32

# A JSON string (skipped: brackets in it do not nest) or one bracket.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


class JSONInputError(ValueError):
    """A document is not JSON, or is JSON this project refuses (the reason)."""


def _refuse_constant(name: str) -> Any:
    raise JSONInputError("%s is not a JSON number" % name)


def check_depth(text: str, max_depth: int = MAX_DEPTH) -> None:
    """Refuse ``text`` when its arrays and objects nest deeper than ``max_depth``.

    Linear in the size of ``text``, with no recursion; strings are skipped.

    :raises JSONInputError: naming the limit.
    """
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
