"""The `compute-plugins` command line.

:func:`console_main` is the console script's entry point: it imports the command
line (:mod:`compute_plugins.cmd.main`: oslo.config, the subcommands, a
quarter of a second) under its own guard, so that a Ctrl-C landing in those
imports is exit 130 with one line, as once a command runs, not a
traceback. Nothing heavy is imported here.
"""

from __future__ import annotations

import signal
import sys

#: As :data:`compute_plugins.cmd.common.INTERRUPTED` (not imported: it
#: imports what this guards).
_INTERRUPTED = "compute-plugins: interrupted"


def console_main() -> int:
    """``compute-plugins``: :func:`compute_plugins.cmd.main.main`, a Ctrl-C
    while it is imported included."""
    try:
        from compute_plugins.cmd.main import main as command_line
    except KeyboardInterrupt:
        # NOTE: a second Ctrl-C must not print a traceback from the
        # interpreter's shutdown.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            print(_INTERRUPTED, file=sys.stderr, flush=True)
        except OSError:
            pass
        return 130
    return command_line()
