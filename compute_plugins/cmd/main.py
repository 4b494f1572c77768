"""``compute-plugins``: the command line.

Global options are parsed here; each subcommand lives in its own module of
this package with ``register(subparsers)`` and ``run(conf, args) -> int``.
Exit codes: 0 success, 1 the job failed (or the host is degraded),
2 bad usage, configuration or input (:class:`~compute_plugins.exception.
InputError`), 130 interrupted (Ctrl-C, at any moment). Errors are one clear
line on stderr, never a traceback (``--debug`` logs the traceback too).

Start-up is kept short (issue 19, item 5; ``python -m bench.startup``):
building the parser imports only the subcommands' light modules
(``register``), never oslo.config, oslo.log, SQLAlchemy, Placement or the
plugins: ``--version`` and ``--help`` run without them, and each command
imports what it needs in its ``run`` (``tests/unit/test_cli_startup.py``).
"""

from __future__ import annotations

import argparse
import glob
import importlib
import logging as std_logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Optional

from compute_plugins import exception
from compute_plugins.cmd import arguments
from compute_plugins.util.text import printable

if TYPE_CHECKING:
    from oslo_config import cfg

#: Subcommand modules in ``compute_plugins.cmd``, in help order.
SUBCOMMANDS = ("inventory", "record_host", "report", "validate", "fit", "schedule",
               "release", "move", "audit", "demo", "placement", "conformance", "host")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    """The command line: the common options on every command (before or
    after its name), each shared option on the commands that use it."""
    parser = argparse.ArgumentParser(
        prog="compute-plugins",
        description="Discover a compute host's resources with plugins and "
        "report them as a Placement provider tree.")
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="show program's version number and exit")
    arguments.add_common_options(parser, suppress=False)
    shared = parser.add_argument_group(
        "options of some commands (before or after the command; see each "
        "command's --help)")
    for dest, (flags, kwargs) in arguments.SHARED_OPTIONS.items():
        shared.add_argument(*flags, dest=dest, default=arguments.SHARED_DEFAULTS[dest],
                            **kwargs)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in SUBCOMMANDS:
        importlib.import_module("compute_plugins.cmd." + name).register(subparsers)
    _add_options(subparsers)
    return parser


class _Version(argparse.Action):
    """``--version``: the installed package's version, read only when
    asked (``importlib.metadata`` is not free)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: Optional[str] = None) -> None:
        from compute_plugins import version

        sys.stdout.write("%s %s\n" % (parser.prog, version.version_string()))
        parser.exit()


def _add_options(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]
                 ) -> None:
    """The common options on every parser under ``subparsers`` (``placement``
    and ``placement serve`` alike); the shared options on each command.

    NOTE: SUPPRESS keeps a value given before the command.
    """
    for subparser in subparsers.choices.values():
        uses = subparser.get_default("shared_options")
        if uses is not None:
            arguments.add_shared_options(subparser, uses, suppress=True)
        arguments.add_common_options(subparser, suppress=True)
        for action in subparser._actions:
            if isinstance(action, argparse._SubParsersAction):
                _add_options(action)


def check_config_files(args: argparse.Namespace) -> None:
    """Refuse a config file oslo.config would trip over with a traceback.

    oslo.config opens ``--config-file`` and the ``*.conf`` of a
    ``--config-dir`` itself: a directory raises ``IsADirectoryError``, a
    file that is not UTF-8 ``UnicodeDecodeError``, and a FIFO blocks. Each
    is read here first (:func:`compute_plugins.util.files.read_text`: regular
    files only) so that it is one line naming the file.

    :raises ConfigError: naming the option, the file and the reason.
    """
    from compute_plugins.util import files

    for path in args.config_file:
        if os.path.lexists(path):
            try:
                files.read_text(path)
            except files.UnreadableFile as err:
                raise exception.ConfigError("--config-file %s" % err) from None
    for directory in args.config_dir:
        if os.path.lexists(directory) and not os.path.isdir(directory):
            # NOTE: oslo.config would silently read nothing from it.
            raise exception.ConfigError(
                "--config-dir %s: not a directory" % directory)
        if os.path.isdir(directory):
            for path in sorted(glob.glob(os.path.join(directory, "*.conf"))):
                try:
                    files.read_text(path)
                except files.UnreadableFile as err:
                    raise exception.ConfigError(
                        "--config-dir %s: %s" % (directory, err)) from None


def setup_logging(conf: cfg.ConfigOpts) -> None:
    """oslo.log's set-up; a log file it cannot open is a ConfigError."""
    from oslo_log import log as logging

    try:
        logging.setup(conf, "compute-plugins")
    except OSError as err:
        where = ("--log-file %s" % conf.log_file if conf.log_file
                 else "[DEFAULT] log_dir %s" % conf.log_dir)
        raise exception.ConfigError("%s: cannot open the log file: %s"
                                    % (where, err.strerror or err)) from None


def load_config(args: argparse.Namespace) -> cfg.ConfigOpts:
    """A private ConfigOpts loaded from the files named on the command line."""
    from oslo_config import cfg
    from oslo_log import log as logging

    from compute_plugins import conf as conf_areas
    from compute_plugins import version

    check_config_files(args)
    conf = cfg.ConfigOpts()
    logging.register_options(conf)
    # NOTE: stdout carries the command's output (JSON); logs go to stderr.
    conf.set_default("use_stderr", True)
    conf_areas.register_all(conf)
    oslo_args: list[str] = []
    for path in args.config_file:
        oslo_args += ["--config-file", path]
    for path in args.config_dir:
        oslo_args += ["--config-dir", path]
    if args.debug:
        oslo_args.append("--debug")
    if args.log_file:
        oslo_args += ["--log-file", args.log_file]
    conf(oslo_args, project="compute-plugins", prog="compute-plugins",
         version=version.version_string(),
         default_config_files=[], default_config_dirs=[])
    setup_logging(conf)
    return conf


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line (``argv``, default ``sys.argv[1:]``); the exit code.

    Ctrl-C at any moment is exit 130 and one line on stderr
    (:func:`common.interrupted`): while the subcommands load, while a command runs
    (each command cleans up as the ``KeyboardInterrupt`` unwinds it), and
    when it lands in a destructor or a weakref callback, where Python would
    print it and carry on (:func:`_redeliver_interrupts`).
    """
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _redeliver_interrupts(previous_hook)
    previous_sigint = _quiet_interrupts()
    try:
        return _main(argv)
    except KeyboardInterrupt:
        from compute_plugins.cmd import common

        return common.interrupted()
    finally:
        sys.unraisablehook = previous_hook
        if previous_sigint is not None:
            signal.signal(signal.SIGINT, previous_sigint)
        std_logging.disable(std_logging.NOTSET)
        if argv is None:
            # NOTE: the process's own command line, about to exit: a
            # second Ctrl-C must not print a traceback from the
            # interpreter's shutdown (joining threads, atexit).
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _quiet_interrupts() -> Any:
    """Make Ctrl-C silence logging before it unwinds the command; the
    previous SIGINT handler (None when not on the main thread, where no
    handler can be set).

    NOTE: a Ctrl-C that lands inside the embedded Placement's database
    transaction unwinds through oslo.utils' ``save_and_reraise_exception``,
    which logs the exception it drops, traceback and all, at ERROR (the
    demo printed ~140 such lines in 2 of 10 interrupts): once the user
    asked to stop, nothing but the one ``interrupted`` line is said.
    """
    if threading.current_thread() is not threading.main_thread():
        return None

    def interrupt(signum: int, frame: Any) -> None:
        std_logging.disable(std_logging.CRITICAL)
        raise KeyboardInterrupt

    return signal.signal(signal.SIGINT, interrupt)


def _redeliver_interrupts(previous: Callable[[Any], object]
                          ) -> Callable[[Any], object]:
    """An ``unraisablehook`` that raises SIGINT again for a Ctrl-C that
    landed where Python drops exceptions (a ``__del__``, a weakref callback
    of the garbage collector: the demo then ran on and exited 0); other
    unraisable exceptions go to ``previous``."""
    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            # NOTE: from another thread, a moment later: a signal sent from
            # the main thread would be handled here at once, in the hook,
            # and dropped again.
            threading.Timer(0.01, signal.pthread_kill,
                            (threading.main_thread().ident, signal.SIGINT)).start()
            return
        previous(unraisable)
    return hook


def _main(argv: Optional[Sequence[str]]) -> int:
    # NOTE: importing the subcommands takes most of a second: Ctrl-C there
    # is exit 130 too (main), not a traceback.
    parser = build_parser()
    args = parser.parse_args(argv)
    # NOTE: imported once the command line parsed: --version and --help
    # need none of them (module doc).
    from oslo_config import cfg
    from oslo_log import log as logging

    from compute_plugins.cmd import common

    log = logging.getLogger(__name__)
    # NOTE: every message below is one line: printable() escapes the
    # newlines and control characters a user's value may carry.
    try:
        arguments.refuse_unused(args)
        arguments.check_urls(args)
        arguments.check_ids(args)
        conf = load_config(args)
        common.check_values(conf)
        return int(args.func(conf, args))
    except (cfg.Error, exception.ConfigError) as err:
        print("compute-plugins: configuration error: %s" % printable(err),
              file=sys.stderr)
        return EXIT_USAGE
    except exception.InputError as err:
        log.debug("unusable input", exc_info=True)
        print("compute-plugins: error: %s" % printable(err), file=sys.stderr)
        return EXIT_USAGE
    except exception.ComputePluginsError as err:
        log.debug("command failed", exc_info=True)
        print("compute-plugins: error: %s" % printable(err), file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:
        # NOTE: the reader went away (``inventory | head``); nothing to tell it,
        # and Python must not complain when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except Exception as err:  # noqa: BLE001 - the last resort: one line
        log.debug("unexpected error", exc_info=True)
        print("compute-plugins: unexpected error (a bug; --debug logs the "
              "traceback): %s: %s" % (type(err).__name__, printable(err)),
              file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
