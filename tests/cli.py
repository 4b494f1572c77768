"""The ``compute-plugins`` command line run in this process, for the tests
that check what it prints and its exit code.

A subprocess spends most of a second of CPU importing the command's
libraries before it does anything (``python -m bench.startup``); the
suite ran hundreds. :func:`run` calls :func:`compute_plugins.cmd.main.main`
as the entry point does (``sys.exit(main())``: argparse's usage errors are
a ``SystemExit`` of 2; one with a text prints it to stderr and is 1) with
file descriptors 1 and 2 on files of their own for the call: what Python
prints and what a C library writes (libvirt's default error handler prints
to fd 2) both land in ``stdout``/``stderr``, in the order written, as a
subprocess's pipes would get them. Python's
streams are set up as the interpreter sets them up for a pipe (UTF-8;
stdout strict, stderr ``backslashreplace``).

What needs a process of its own keeps one (``tests/functional/test_cli.py``
``test_the_entry_point_*``, the closed pipe, signals, the demo's Ctrl-C):
the entry point's ``sys.exit``, the interpreter's exit, signals.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Optional
from unittest import mock

from compute_plugins.cmd import main as cmd_main


@dataclass(frozen=True)
class Result:
    """What ``subprocess.run(..., capture_output=True, text=True)`` gives:
    the exit code and the two streams' text."""

    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def _fd_redirected(fd: int, to: IO[bytes]) -> Iterator[None]:
    saved = os.dup(fd)
    try:
        os.dup2(to.fileno(), fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def _stream(fd: int, errors: str) -> io.TextIOWrapper:
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8",
                            errors=errors, write_through=True)


#: ``sys.stdout`` and ``sys.stderr`` during a call: on file descriptors 1
#: and 2 themselves, whatever they point at, and never closed: a module
#: that bound ``sys.stdout`` when first imported (``report``'s ``out``
#: default) still writes to the call's fd 1 in the next call.
STDOUT, STDERR = _stream(1, "strict"), _stream(2, "backslashreplace")


#: The signals whose handlers a command sets (``report``, ``placement
#: serve``): restored after each call, the worker's own are pytest's.
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _loggers() -> dict[str, logging.Logger]:
    return {name: logger for name, logger in logging.Logger.manager.loggerDict.items()
            if isinstance(logger, logging.Logger)}


def _logger_levels() -> dict[str, tuple[int, bool, bool]]:
    """Each logger's level, ``propagate`` and ``disabled``."""
    return {name: (logger.level, logger.propagate, logger.disabled)
            for name, logger in _loggers().items()}


def _fresh_loggers() -> None:
    """Every logger's level NOTSET and none disabled, as a new process
    finds the loggers its imports made: what an earlier caller in this
    worker left (a ``main()`` called without :func:`run`, alembic's
    ``fileConfig`` disabling the loggers it does not name) would
    otherwise decide what this call logs."""
    for logger in _loggers().values():
        logger.setLevel(logging.NOTSET)
        logger.disabled = False


def _restore_logger_levels(levels: Mapping[str, tuple[int, bool, bool]]) -> None:
    """The loggers as :func:`_logger_levels` found them; those made since
    back to NOTSET, as a new process makes them: oslo.log's default levels
    and ``report``'s quieted Placement loggers would otherwise outlive the
    call (the next ``--debug`` run printed none of Placement's lines)."""
    for name, logger in _loggers().items():
        level, logger.propagate, logger.disabled = levels.get(
            name, (logging.NOTSET, logger.propagate, logger.disabled))
        logger.setLevel(level)


def _exit_status(done: SystemExit) -> int:
    """The exit status of ``done``, and what it prints, as the interpreter
    at the top: its code (None: 0), else its text on stderr and 1."""
    if done.code is None or isinstance(done.code, int):
        return int(done.code or 0)
    print(done.code, file=sys.stderr)
    return 1


def run(*args: str, env: Optional[Mapping[str, str]] = None) -> Result:
    """``compute-plugins ARGS`` in this process: its exit code and output;
    ``env``: environment variables set for the call (a subprocess's
    ``env={**os.environ, **env}``).

    Every logger starts as in a new process (level NOTSET, enabled). The
    root logger's handlers, every logger's level, ``sys.excepthook``
    and the handlers of :data:`SIGNALS` are restored afterwards: oslo.log's
    set-up replaces the root's handlers (one on this call's stderr), sets
    levels (its default levels, ``report`` quiets Placement's) and the
    hook, ``report`` sets its own handlers for SIGHUP and SIGTERM.
    """
    root = logging.getLogger()
    handlers, level, excepthook = list(root.handlers), root.level, sys.excepthook
    levels = _logger_levels()
    _fresh_loggers()
    signals = {signum: signal.getsignal(signum) for signum in SIGNALS}
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        with _fd_redirected(1, out), _fd_redirected(2, err):
            try:
                with (contextlib.redirect_stdout(STDOUT), contextlib.redirect_stderr(STDERR),
                      mock.patch.dict(os.environ, env or {})):
                    try:
                        code = cmd_main.main(list(args))
                    except SystemExit as done:  # argparse's usage errors, --help
                        code = _exit_status(done)
            finally:
                for handler in list(root.handlers):
                    if handler not in handlers:
                        root.removeHandler(handler)
                        handler.close()
                for handler in handlers:
                    if handler not in root.handlers:
                        root.addHandler(handler)
                root.setLevel(level)
                _restore_logger_levels(levels)
                sys.excepthook = excepthook
                for signum, previous in signals.items():
                    if previous is not None:
                        signal.signal(signum, previous)
                STDOUT.flush()
                STDERR.flush()
        out.seek(0)
        err.seek(0)
        return Result(code, out.read().decode("utf-8"), err.read().decode("utf-8"))
