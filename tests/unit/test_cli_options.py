"""Every command's ``--help`` says what it does and lists only the options
it uses; the common options (config and logging) parse on every command.

"Uses" is checked against the code: the options a command's ``run`` reads
(``args.NAME``, followed through the helpers of ``compute_plugins.cmd`` it
hands ``args`` to) are read from the source, so an option listed but never
read, or read but not listed, fails here.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import textwrap
from collections.abc import Iterator

import pytest

from compute_plugins.cmd import arguments
from compute_plugins.cmd import main as cli

#: What the options of each command are for, as a user reads --help: the
#: shared options each command must list (and no other).
EXPECTED_SHARED = {
    "inventory": {"format", "libvirt_uri", "host_snapshot"},
    "record-host": {"libvirt_uri"},
    "report": {"format", "libvirt_uri", "host_snapshot", "placement_url"},
    "validate": {"format"},
    "fit": {"format", "libvirt_uri", "host_snapshot"},
    "schedule": {"format", "placement_url"},
    "release": {"format", "placement_url"},
    "resize": {"format", "placement_url"},
    "migrate": {"format", "placement_url"},
    "confirm": {"format", "placement_url"},
    "revert": {"format", "placement_url"},
    "evacuate": {"format", "placement_url"},
    "audit": {"format", "placement_url"},
    "demo": {"format"},
    "placement serve": set(),
    "conformance": {"format", "host_snapshot"},
    "host rename": {"format", "placement_url"},
    "host disable": {"format", "placement_url"},
    "host enable": {"format", "placement_url"},
}
COMMON = {"config_file", "config_dir", "debug", "log_file"}
#: Defaults set by :func:`arguments.command` and the subparsers, not options.
NOT_OPTIONS = {"func", "command", "placement_command", "host_command", "command_name",
               "shared_options", "unused_reason"}
#: A value every required option of the commands accepts.
ANY_VALUE = "00000000-0000-0000-0000-000000000000"


def commands() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``(name, parser)`` of every command that runs (``placement serve``,
    not ``placement``)."""
    def walk(parser: argparse.ArgumentParser, path: str):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, (path + " " + name).strip())
                return
        yield path, parser
    yield from walk(cli.build_parser(), "")


COMMANDS = dict(commands())


def _listed() -> dict[str, str]:
    """What each command's parent says of it in its command list."""
    listed: dict[str, str] = {}

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    name = (path + " " + choice.dest).strip()
                    listed[name] = choice.help or ""
                    walk(action.choices[choice.dest], name)
    walk(cli.build_parser(), "")
    return listed


LISTED = _listed()


def _visible(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The options ``--help`` lists outside the common group, by dest."""
    common = next(g for g in parser._action_groups if g.title == "common options")
    return {a.dest: a for a in parser._actions
            if a.help != argparse.SUPPRESS and a not in common._group_actions
            and not isinstance(a, argparse._HelpAction)}


def _function(module: str, name: str) -> ast.FunctionDef:
    source = textwrap.dedent(inspect.getsource(importlib.import_module(module)))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise LookupError("%s.%s" % (module, name))


def reads(module: str, name: str, seen: set[tuple[str, str]] | None = None) -> set[str]:
    """The ``args.NAME`` that ``module.name`` reads, itself or through the
    functions of ``compute_plugins.cmd`` it passes ``args`` to."""
    seen = set() if seen is None else seen
    if (module, name) in seen:
        return set()
    seen.add((module, name))
    imported = {alias: "compute_plugins.cmd." + alias
                for alias in ("common", "validate", "arguments", "report")}
    found: set[str] = set()
    for node in ast.walk(_function(module, name)):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "args"):
            found.add(node.attr)
        if isinstance(node, ast.Call) and any(
                isinstance(arg, ast.Name) and arg.id == "args"
                for arg in list(node.args) + [k.value for k in node.keywords]):
            callee = node.func
            if isinstance(callee, ast.Name):
                found |= reads(module, callee.id, seen)
            elif (isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name)
                  and callee.value.id in imported):
                found |= reads(imported[callee.value.id], callee.attr, seen)
            else:
                raise AssertionError("cannot follow args into %s" % ast.dump(callee))
    return found


def test_every_command_is_checked():
    assert set(COMMANDS) == set(EXPECTED_SHARED)


@pytest.mark.parametrize("command", sorted(EXPECTED_SHARED))
def test_help_starts_with_what_the_command_does(command):
    parser = COMMANDS[command]
    description = parser.description or ""
    first = description.split("\n\n")[0]
    assert first.endswith(".") and len(first.split()) >= 5, description
    help_text = parser.format_help()
    assert help_text.split("\n\n")[1] == first, help_text
    # NOTE: the command list says the same (its help, before the period).
    summary = " ".join(first.split()).rstrip(".")
    assert summary.lower() == LISTED[command].lower()


@pytest.mark.parametrize("command", sorted(EXPECTED_SHARED))
def test_help_lists_only_the_options_the_command_reads(command):
    parser = COMMANDS[command]
    func = parser.get_default("func")
    read = reads(func.__module__, func.__name__)
    listed = set(_visible(parser))
    assert listed & set(arguments.SHARED_OPTIONS) == EXPECTED_SHARED[command]
    assert listed - read == set(), "listed but never read"
    # NOTE: and nothing is read that the command does not take.
    assert read - listed - COMMON - NOT_OPTIONS == set(), "read but not an option"
    help_text = parser.format_help()
    usage, options = help_text.split("\n\n")[0], help_text.split("\noptions:")[1]
    for dest in set(arguments.SHARED_OPTIONS) - EXPECTED_SHARED[command]:
        flag = arguments.SHARED_OPTIONS[dest][0][0]
        assert flag not in usage and flag not in options


def test_the_common_options_are_read_for_every_command():
    assert COMMON <= reads(cli.__name__, "load_config")


def _required(parser: argparse.ArgumentParser) -> list[str]:
    argv = []
    for action in parser._actions:
        if action.required and action.option_strings:
            argv += [action.option_strings[0], ANY_VALUE]
    # the positional arguments (``host rename OLD NEW``) after the options
    argv += [ANY_VALUE + str(i) for i, action in enumerate(parser._actions)
             if not action.option_strings and action.nargs is None
             and not isinstance(action, argparse._SubParsersAction)]
    return argv


@pytest.mark.parametrize("command", sorted(EXPECTED_SHARED))
@pytest.mark.parametrize("before", [False, True], ids=["after", "before"])
def test_the_common_options_parse_on_every_command(command, before):
    common = ["--config-file", "a.conf", "--config-file", "b.conf", "--config-dir",
              "conf.d", "--debug", "--log-file", "x.log"]
    words = command.split() + _required(COMMANDS[command])
    argv = common + words if before else words + common
    args = cli.build_parser().parse_args(argv)
    assert args.config_file == ["a.conf", "b.conf"] and args.config_dir == ["conf.d"]
    assert args.debug is True and args.log_file == "x.log"
    assert args.command_name == command


@pytest.mark.parametrize("command, dest", [
    (command, dest) for command in sorted(EXPECTED_SHARED)
    for dest in sorted(set(arguments.SHARED_OPTIONS) - EXPECTED_SHARED[command])])
@pytest.mark.parametrize("before", [False, True], ids=["after", "before"])
def test_an_option_the_command_does_not_use_is_one_line_exit_2(command, dest, before,
                                                               capsys):
    flag = arguments.SHARED_OPTIONS[dest][0][0]
    value = ["json"] if dest == "format" else ["x"]
    words = command.split() + _required(COMMANDS[command])
    argv = [flag] + value + words if before else words + [flag] + value
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [err.splitlines()[0]]
    assert err.startswith("compute-plugins: error: %s does not use %s" % (command, flag))


def test_placement_serve_takes_debug():
    # NOTE: issue 22: it was refused while every other command took it.
    args = cli.build_parser().parse_args(["placement", "serve", "--debug", "--port", "0"])
    assert args.debug is True and args.port == 0

