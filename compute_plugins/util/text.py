"""Text from outside: shown safely (:func:`printable`), read strictly
(:func:`ascii_int`).

A flavor key, an image property, a host name or a file path reaches the
rule texts, error lines and logs as given. Raw, a newline in it forges a
second line, an ANSI escape recolours a terminal, a right-to-left override
reverses what follows, and a lone surrogate (``"\\ud800"``, which JSON
allows) makes ``print`` raise ``UnicodeEncodeError``. :func:`printable`
escapes every such character the way ``repr`` does, and leaves everything
else (accented letters, CJK, emoji) as it is.
"""

from __future__ import annotations

import re
from typing import Any

_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    if code <= 0xFF:
        return "\\x%02x" % code
    if code <= 0xFFFF:
        return "\\u%04x" % code
    return "\\U%08x" % code


def printable(value: Any) -> str:
    """``str(value)`` with every non-printable character escaped.

    Non-printable is Python's ``str.isprintable``: control characters
    (``\\n``, ``\\x1b``...), format characters (``\\u202e``), line and
    paragraph separators, surrogates, private-use and unassigned code
    points, and any space but ``" "``. A backslash is left alone: the
    result is for people, not to be parsed back.

    >>> printable("a\\nb\\u202ec")
    'a\\\\nb\\\\u202ec'
    """
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


_INT_PATTERNS = {
    10: re.compile(r"[+-]?[0-9]+"),
    16: re.compile(r"[+-]?(?:0[xX])?[0-9a-fA-F]+"),
    0: re.compile(r"[+-]?(?:0[xX][0-9a-fA-F]+|[0-9]+)"),
}
#: More digits than any count, size or id has (2**64 has 20).
MAX_INT_DIGITS = 40


def ascii_int(text: str, base: int = 10) -> int:
    """``text`` as an integer, written with ASCII digits only.

    ``int()`` also takes other scripts' digits (``"٣"``, ``"１０２４"``),
    underscores (``"1_0"``) and thousands of digits; an id or a count read
    from a file, an option or a flavor takes none of these. Surrounding
    whitespace is ignored. ``base`` 0 reads ``0x1f`` as hex and ``010`` as
    decimal (libvirt's forms), 16 takes an optional ``0x``.

    :raises ValueError: anything else.
    """
    stripped = text.strip()
    if (len(stripped) > MAX_INT_DIGITS + 3
            or not _INT_PATTERNS[base].fullmatch(stripped)):
        raise ValueError("not an integer written with ASCII digits: %r" % (text,))
    if base == 0:
        digits = stripped.lstrip("+-")
        return int(stripped, 16 if digits[:2].lower() == "0x" else 10)
    return int(stripped, base)
