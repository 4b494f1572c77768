"""``compute-plugins demo``: the whole flow on the embedded default.

Five bundled hosts (snapshots shipped in :mod:`compute_plugins.demo`), real
Placement in-process on SQLite, the host-state store on SQLite, one compute
agent per host as a thread, a scheduler; see :mod:`compute_plugins.demo.run`
for the steps. State goes to a temporary directory, removed at the end,
unless ``--state-dir`` names one (kept; a second run there releases the
first run's instances and boots the list again).

Progress goes to stderr: a spinner on a terminal, plain lines otherwise;
stdout carries the report (text, or ``--format json``).

Exit codes: 0 the demo ran and every check it makes held (each request
placed or refused as the list says, the last periodic made no Placement
call); 1 it ran but a check failed (said on stderr); 2 bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Optional, TextIO

from compute_plugins.cmd import arguments, common
from compute_plugins.util.text import printable

if TYPE_CHECKING:
    from oslo_config import cfg

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = arguments.command(
        subparsers, "demo", "run the whole flow on bundled hosts: report, "
        "schedule, claim, guest XML (embedded Placement, no set-up)",
        uses=("format",), unused=UNUSED, details="""The config files
        (--config-file, --config-dir) set logging only ([DEFAULT] debug,
        log_file...): each bundled host brings its own configuration
        (compute_plugins/demo/hosts/*/compute-plugins.conf).""")
    parser.add_argument("--state-dir", metavar="DIR",
                        help="keep the demo's state (Placement's and the "
                        "store's databases, the agents' ledgers) here; a "
                        "second run releases the first run's instances. "
                        "Default: a temporary directory, removed at the end")
    parser.set_defaults(func=run)


class Progress:
    """Progress lines on ``stream``: a spinner on a terminal (each step
    replaces the last), plain lines with the elapsed time otherwise."""

    FRAMES = "|/-\\"

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.started = time.monotonic()
        self._message = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if self.tty:
            self._thread = threading.Thread(target=self._spin, daemon=True)
            self._thread.start()

    def __call__(self, message: str) -> None:
        message = printable(message)
        if self.tty:
            with self._lock:
                self._message = message
            return
        print("[%5.1fs] %s" % (time.monotonic() - self.started, message),
              file=self.stream, flush=True)

    def _spin(self) -> None:
        frame = 0
        while not self._stop.wait(0.1):
            with self._lock:
                message = self._message
            if message:
                width = self._width()
                line = "%s %s" % (self.FRAMES[frame % 4], message)
                self.stream.write("\r" + line[:width].ljust(width))
                self.stream.flush()
            frame += 1

    def _width(self) -> int:
        """The line's width: the terminal's, less one (a full line would
        wrap, and ``\r`` would then not return to its start), at most 78."""
        try:
            columns = os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            columns = 80
        return max(1, min(78, columns - 1))

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self.stream.write("\r" + " " * self._width() + "\r")
            self.stream.flush()


#: Why the demo takes no --libvirt-uri, --host-snapshot or --placement-url.
UNUSED = ("the demo runs its own embedded Placement on its bundled hosts, each "
          "with its own configuration (compute_plugins/demo/hosts/*/"
          "compute-plugins.conf)")


def run(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    import logging as std_logging

    from compute_plugins.cmd.report import quiet_placement_logs
    from compute_plugins.demo import render
    from compute_plugins.demo.run import run_demo

    quiet_placement_logs(conf.debug)
    ours = std_logging.getLogger("compute_plugins")
    level = ours.level
    if not conf.debug:
        # NOTE: the agents log each claim at INFO; the report says it.
        # Restored after: a caller in the same process (the tests) keeps
        # its own levels.
        ours.setLevel(std_logging.WARNING)
    progress = Progress(sys.stderr)
    try:
        if args.state_dir is not None:
            report = run_demo(args.state_dir, progress)
        else:
            with tempfile.TemporaryDirectory(prefix="compute-plugins-demo-") as tmp:
                report = run_demo(os.path.join(tmp, "state"), progress)
                report["state_dir"] = None
    finally:
        progress.close()
        ours.setLevel(level)
    if args.format == "json":
        common.print_json(render.to_json(report))
    else:
        print(render.text(report))
    problems = render.checks(report)
    for problem in problems:
        common.error(problem, prefix="compute-plugins: demo check failed: ")
    return EXIT_FAILED if problems else EXIT_OK
