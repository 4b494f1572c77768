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
from collections.abc import Sequence
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


#: The most problems of a request that human output shows; the rest are
#: counted (:func:`capped`). ``validate --format json`` lists them all.
MAX_LISTED = 20


def capped(lines: Sequence[str], indent: str = "  ", limit: int = MAX_LISTED) -> list[str]:
    """The first ``limit`` of a request's problem ``lines``, then ``INDENT...
    and N more (validate --format json lists them all)`` for the others, if
    any: one value such as ``hw:numa_cpus.0=0-1000`` makes a thousand
    problems, which would bury the first ones."""
    if len(lines) <= limit:
        return list(lines)
    return [*lines[:limit], "%s... and %d more (validate --format json lists "
            "them all)" % (indent, len(lines) - limit)]


#: The longest name accepted (nova's flavor, image and server names).
MAX_NAME_LENGTH = 255


def name_problem(name: str) -> str | None:
    """Why ``name`` (a flavor's, an image's, a guest's) is refused, or None.

    The one rule of every command for the names a user gives (nova's
    ``parameter_types.name``, less its ban on leading and trailing spaces):
    at most :data:`MAX_NAME_LENGTH` characters, each printable
    (``str.isprintable``, the space included). A control character, a
    format character or a lone surrogate fits no guest XML, no log line
    and no terminal; nova's API refuses them too.
    """
    if len(name) > MAX_NAME_LENGTH:
        return "longer than %d characters" % MAX_NAME_LENGTH
    if not name.isprintable():
        index, char = next((i, c) for i, c in enumerate(name) if not c.isprintable())
        return "character %d is not printable (%s)" % (index, _escape(char))
    return None


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


#: The width of the commands' human output: lines are wrapped to it, never
#: cut (:func:`wrap`).
WIDTH = 100

#: Where a word too long for a line may be broken: after a comma or an
#: ampersand (a CPU list, a query string), else anywhere.
_BREAK_AFTER = re.compile(r"(?<=[,&])")
#: A word and the spaces before it (kept inside a line: a value's spaces
#: are part of it).
_WORD = re.compile(r"( *)(\S+)")


def wrap(text: str, indent: str = "", hang: str | None = None,
         width: int = WIDTH) -> list[str]:
    """``text`` as lines of at most ``width`` columns, nothing dropped.

    The first line starts with ``indent``, the others with ``hang``
    (default: ``indent`` and four spaces), so that a wrapped line reads as
    one. Lines break at spaces (the spaces inside a line are kept as
    given); a word longer than a line (a Placement query, a CPU list)
    breaks after a comma or an ampersand, and only failing those anywhere.
    Joining the lines, less ``indent`` and ``hang``, with a space gives
    ``text`` back (less its leading spaces), except where a long word was
    broken.
    """
    hang = indent + "    " if hang is None else hang
    room = max(1, width - len(hang))
    words: list[tuple[str, str]] = []  # (the spaces before it, piece)
    for match in _WORD.finditer(text):
        spaces, word = match.groups()
        for index, chunk in enumerate(_chunks(word, room)):
            words.append((spaces if index == 0 else "", chunk))
    lines: list[str] = []
    line, empty = indent, True
    for spaces, piece in words:
        gap = "" if empty else spaces
        if not empty and len(line) + len(gap) + len(piece) > width:
            # NOTE: the line break stands for one space; more are kept.
            lines.append(line)
            line, gap = hang, spaces[1:]
        line += gap + piece
        empty = False
    lines.append(line)
    return lines


def _chunks(word: str, room: int) -> list[str]:
    """``word`` in pieces of at most ``room`` characters, broken after
    commas and ampersands where it can be."""
    if len(word) <= room:
        return [word]
    chunks: list[str] = []
    current = ""
    for part in _BREAK_AFTER.split(word):
        pieces = [part[i:i + room] for i in range(0, len(part), room)] or [""]
        for piece in pieces:
            if current and len(current) + len(piece) > room:
                chunks.append(current)
                current = ""
            current += piece
    if current:
        chunks.append(current)
    return chunks


def wrap_lines(text: str, width: int = WIDTH) -> str:
    """Each line of ``text`` wider than ``width`` wrapped under its own
    indent (:func:`wrap`: its continuation lines four columns further in);
    the other lines as they are."""
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[:len(line) - len(line.lstrip(" "))]
        out.extend(wrap(line, indent=indent, width=width))
    return "\n".join(out)
