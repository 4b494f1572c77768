"""What the commands' parsers share: argument types, the common options
(every command), the shared options (the commands that use them), and
:func:`command`, which makes a subcommand's parser (light: imported when the
command line is built, before any command runs)."""

from __future__ import annotations

import argparse
import math
import textwrap
from collections.abc import Callable, Iterable
from typing import Any


def seconds(text: str) -> float:
    """An argparse ``type``: a finite number of seconds >= 0 (``inf`` and
    ``nan`` would wait forever or never)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            "invalid value %r: must be a number of seconds" % text) from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            "invalid value %r: must be a finite number of seconds >= 0" % text)
    return value


class Deferred:
    """A value a help text shows, computed only when the help is printed
    (a module's constant whose import is not free: the command line's
    start-up imports no command's dependencies).

    Set it as an attribute of the option's action and name it in the help
    (``%(NAME)s``), as argparse's ``%(default)s``.

    :param compute: makes the value.
    """

    def __init__(self, compute: Callable[[], object]) -> None:
        self._compute = compute

    def __str__(self) -> str:
        return str(self._compute())


#: Where a command's ``--help`` wraps its description.
HELP_WIDTH = 79

#: Options a command takes only when it uses them, by ``dest``: each
#: command names its own in :func:`command`. The flags and help of each.
SHARED_OPTIONS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "format": (("--format",), dict(
        choices=("text", "json"), help="output format (default: text)")),
    "libvirt_uri": (("--libvirt-uri",), dict(
        metavar="URI", help="libvirt URI of the host (overrides [libvirt] "
        "connection_uri; e.g. test:///default)")),
    "host_snapshot": (("--host-snapshot",), dict(
        metavar="DIR", help="replay a host snapshot written by record-host "
        "instead of asking libvirt")),
    "placement_url": (("--placement-url",), dict(
        metavar="URL", help="a Placement running with noauth2 (token admin; "
        "on 127.0.0.1, placement serve's token from the state directory); "
        "default: [placement] options, else embedded Placement")),
}
#: The value of each shared option when it is not given.
SHARED_DEFAULTS: dict[str, Any] = {"format": "text", "libvirt_uri": None,
                                   "host_snapshot": None, "placement_url": None}


def add_common_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """The options every command takes, before or after its name: where the
    configuration is and how to log (read by :func:`compute_plugins.cmd.
    main.load_config` for every command).

    :param suppress: no defaults (a subcommand's parser: a value given
        before the command name is kept).
    """
    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("common options")
    group.add_argument("--config-file", action="append", default=default([]),
                       metavar="PATH", help="config file (repeatable)")
    group.add_argument("--config-dir", action="append", default=default([]),
                       metavar="DIR", help="directory of *.conf files (repeatable)")
    group.add_argument("--debug", "-d", action="store_true", default=default(False),
                       help="log at DEBUG level")
    group.add_argument("--log-file", metavar="PATH", default=default(None),
                       help="log to this file")


def add_shared_options(parser: argparse.ArgumentParser, uses: Iterable[str],
                       suppress: bool) -> None:
    """The :data:`SHARED_OPTIONS` in ``uses`` as ``parser``'s options; the
    others hidden (no help), so that :func:`refuse_unused` can say that the
    command does not use them instead of argparse's "unrecognized
    arguments"."""
    uses = set(uses)
    for dest, (flags, kwargs) in SHARED_OPTIONS.items():
        kwargs = dict(kwargs, dest=dest)
        kwargs["default"] = argparse.SUPPRESS if suppress else SHARED_DEFAULTS[dest]
        if dest not in uses:
            kwargs["help"] = argparse.SUPPRESS
        parser.add_argument(*flags, **kwargs)


def command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
            name: str, summary: str, *, uses: Iterable[str] = (),
            unused: str = "", details: str = "") -> argparse.ArgumentParser:
    """A subcommand's parser: ``summary`` (one line: what it does) in the
    command list and at the top of its ``--help``, then ``details``.

    :param uses: the :data:`SHARED_OPTIONS` the command reads (its
        ``--help`` lists these only; the others are refused).
    :param unused: why the command takes none of the others, said when one
        is given (default: a pointer to its ``--help``).
    """
    paragraphs = [summary[0].upper() + summary[1:] + "."]
    paragraphs += details.split("\n\n") if details else []
    paragraphs = [textwrap.fill(" ".join(p.split()), HELP_WIDTH) for p in paragraphs]
    parser = subparsers.add_parser(
        name, help=summary, description="\n\n".join(paragraphs),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(command_name=parser.prog.partition(" ")[2],
                        shared_options=frozenset(uses), unused_reason=unused)
    return parser


def check_urls(args: argparse.Namespace) -> None:
    """Refuse a ``--placement-url`` that is not an http(s) URL with a host,
    before the command opens anything: one line with the value (its
    password masked), exit 2, where an HTTP library's parse error was
    "cannot reach Placement" (exit 1).

    :raises InputError: naming the option, the value and the rule.
    """
    from compute_plugins import exception
    from compute_plugins.util import urls

    url = getattr(args, "placement_url", None)
    if url is not None:
        try:
            urls.check_http_url(url)
        except ValueError as err:
            raise exception.InputError("--placement-url %s" % err) from None


#: Placement's limit on a project or user id.
MAX_ID_LENGTH = 255


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a Placement project or user id, or None:
    1 to :data:`MAX_ID_LENGTH` characters, valid UTF-8 (an argument that is
    not arrives with its bytes as lone surrogates, which Placement answers
    with a 500) and printable (:func:`~compute_plugins.util.text.name_problem`)."""
    from compute_plugins.util.text import name_problem

    if not 1 <= len(value) <= MAX_ID_LENGTH:
        return "expected 1 to %d characters" % MAX_ID_LENGTH
    for index, char in enumerate(value):
        if "\udc80" <= char <= "\udcff":
            return "not UTF-8 text (byte 0x%02x at character %d)" % (
                ord(char) - 0xDC00, index)
    return name_problem(value)


def check_ids(args: argparse.Namespace) -> None:
    """Refuse a ``--project-id`` or ``--user-id`` Placement would not take
    (:func:`id_problem`), before the command asks Placement anything.

    :raises InputError: naming the option, the value (escaped) and the rule.
    """
    from compute_plugins import exception
    from compute_plugins.util.text import printable

    for option in ("project_id", "user_id"):
        value = getattr(args, option, None)
        problem = None if value is None else id_problem(value)
        if problem is not None:
            raise exception.InputError("--%s %s: %s" % (
                option.replace("_", "-"), printable(repr(value)), problem))


def refuse_unused(args: argparse.Namespace) -> None:
    """Refuse a shared option the command would silently ignore.

    :raises InputError: naming the command and the option.
    """
    from compute_plugins import exception

    for dest, (flags, _) in SHARED_OPTIONS.items():
        if dest in args.shared_options:
            continue
        if getattr(args, dest, SHARED_DEFAULTS[dest]) != SHARED_DEFAULTS[dest]:
            raise exception.InputError(
                "%s does not use %s%s" % (
                    args.command_name, flags[0], ": " + args.unused_reason
                    if args.unused_reason else " (its options: compute-plugins "
                    "%s --help)" % args.command_name))
