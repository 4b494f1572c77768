"""The ``.. cli-reference::`` directive: every ``compute-plugins`` command's
``--help``, generated from the argument parsers.

It imports :func:`compute_plugins.cmd.main.build_parser`, the parser the
command itself uses, and renders the main parser's help and then each
subcommand's (and each subcommand's own subcommands', e.g. ``placement
serve``), so the reference cannot drift from the options the commands take.
"""

from __future__ import annotations

import argparse
import os

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.application import Sphinx


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """The (name, parser) of each subcommand of ``parser``, in definition order."""
    found: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:  # argparse keeps no public list of them
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # aliases share one parser
                    seen.add(id(sub))
                    found.append((name, sub))
    return found


def _help(parser: argparse.ArgumentParser) -> str:
    """The parser's ``--help`` text at 80 columns, as a terminal shows it."""
    os.environ["COLUMNS"] = "80"
    return parser.format_help()


class CLIReference(Directive):
    """Render ``compute-plugins --help`` and every subcommand's help."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from compute_plugins.cmd.main import build_parser

        parser = build_parser()
        parser.prog = "compute-plugins"
        out: list[nodes.Node] = [nodes.literal_block(text=_help(parser), language="text")]

        def walk(prefix: str, p: argparse.ArgumentParser) -> None:
            for name, sub in _subparsers(p):
                title = "%s %s" % (prefix, name)
                section = nodes.section(ids=[nodes.make_id("cli " + title)])
                section += nodes.title(text=title)
                section += nodes.literal_block(text=_help(sub), language="text")
                out.append(section)
                walk(title, sub)

        walk("compute-plugins", parser)
        return out


def setup(app: Sphinx) -> dict[str, object]:
    """Register the directive with Sphinx."""
    app.add_directive("cli-reference", CLIReference)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
