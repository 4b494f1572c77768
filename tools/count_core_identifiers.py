"""Identifiers and string literals of the core that name NUMA.

The core (the scheduler, the compute side, the host-state store, the
request model, ``fit``, the RequestSpec, the manager, the topology
contract) must not know the ``numa`` plugin: a plugin that places the guest
publishes a :class:`compute_plugins.plugin.topology.GuestTopology`, and the core
only handles that. This counts, with :mod:`tokenize`, every identifier
(``NAME`` token) and every string literal that is not a docstring whose
text contains ``numa`` (any case); comments and docstrings are not
counted. The nova adapters (``compute_plugins/nova``, which translate
nova's NUMA objects) and host discovery (``compute_plugins/host``) are not
part of the core.

Prints one line per file with a count (``-v``: every occurrence) and the
total. Exit 0 when the total is at most ``--max`` (default 0), 1 otherwise.

Usage: ``python tools/count_core_identifiers.py [-v] [--max N] [PATH ...]``
(paths relative to the current directory; default: the core of
``compute_plugins`` under the repository this file is in).
"""

from __future__ import annotations

import argparse
import io
import pathlib
import sys
import tokenize
from collections.abc import Iterable, Iterator, Sequence

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: The core modules and packages, relative to the repository root.
CORE = ("compute_plugins/scheduler", "compute_plugins/compute",
        "compute_plugins/hoststate", "compute_plugins/request",
        "compute_plugins/runtime", "compute_plugins/plugin/state.py",
        "compute_plugins/plugin/contract.py", "compute_plugins/plugin/topology.py",
        "compute_plugins/tree")
#: Core modules left out, each for a reason: the payload formats of earlier
#: releases, read with the names they were written with.
EXEMPT = ("compute_plugins/request/formats.py",)
WORD = "numa"
_LAYOUT = frozenset({tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                     tokenize.DEDENT, tokenize.COMMENT, tokenize.ENCODING})


def python_files(paths: Iterable[pathlib.Path]) -> Iterator[pathlib.Path]:
    """Every ``.py`` file of ``paths`` (a directory is walked), sorted;
    paths that do not exist are skipped (a module not written yet)."""
    for path in paths:
        if path.is_dir():
            yield from sorted(path.rglob("*.py"))
        elif path.is_file():
            yield path


def _is_docstring(tokens: Sequence[tokenize.TokenInfo], index: int) -> bool:
    """A string token that is a statement of its own (a docstring, or a
    bare string used as a comment)."""
    before = index - 1
    while before >= 0 and tokens[before].type in (tokenize.NL, tokenize.COMMENT):
        before -= 1
    after = index + 1
    while after < len(tokens) and tokens[after].type == tokenize.STRING:
        after += 1  # implicit concatenation
    while after < len(tokens) and tokens[after].type in (tokenize.NL,
                                                           tokenize.COMMENT):
        after += 1
    starts = before < 0 or tokens[before].type in _LAYOUT
    ends = after >= len(tokens) or tokens[after].type in (tokenize.NEWLINE,
                                                          tokenize.ENDMARKER)
    return starts and ends


def occurrences(source: str) -> Iterator[tuple[int, str]]:
    """``(line, token)`` of each identifier or non-docstring string literal
    of ``source`` naming :data:`WORD`."""
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    in_docstring = False
    for index, token in enumerate(tokens):
        if token.type == tokenize.STRING:
            # NOTE: the parts of an implicitly concatenated docstring are
            # one docstring.
            if not in_docstring:
                in_docstring = _is_docstring(tokens, index)
            if in_docstring:
                continue
        else:
            in_docstring = False
        if token.type in (tokenize.NAME, tokenize.STRING) and WORD in token.string.lower():
            yield token.start[0], token.string


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="count_core_identifiers.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print every occurrence")
    parser.add_argument("--max", type=int, default=0,
                        help="the most occurrences that still exit 0")
    parser.add_argument("paths", nargs="*", type=pathlib.Path,
                        help="files or directories (default: the core)")
    args = parser.parse_args(argv)
    paths = args.paths or [ROOT / p for p in CORE]
    total = 0
    exempt = {ROOT / p for p in EXEMPT}
    for path in python_files(paths):
        if path.resolve() in exempt:
            continue
        found = list(occurrences(path.read_text()))
        if not found:
            continue
        total += len(found)
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        print("%s: %d" % (name, len(found)))
        if args.verbose:
            for line, text in found:
                print("  %d: %s" % (line, text))
    print("total: %d" % total)
    return 0 if total <= args.max else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
