"""The command line run in-process (:mod:`tests.cli`) prints where a
subprocess would: to the call's file descriptors 1 and 2, C libraries'
writes included, whenever the command's modules were imported."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys

from compute_plugins.cmd import report as report_cmd
from tests import cli


def test_the_report_loop_prints_to_the_stdout_of_when_it_is_made():
    # NOTE: the default was bound when the module was first imported (in a
    # test worker: pytest's capture at collection): the in-process command
    # printed its periodics there, not to its own stdout.
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        loop = report_cmd.Loop(client=None, step=lambda: None,  # type: ignore[arg-type]
                               interval=0, count=0)
    assert loop.out is out


def test_a_c_librarys_message_on_fd_2_is_in_stderr_as_from_a_process():
    # NOTE: libxml2 (in libvirt) writes its warning to fd 2 itself.
    result = cli.run("inventory", "--libvirt-uri", "test:///nonexistent/host.xml")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines()[0].startswith("I/O warning : failed to load")
    assert result.stderr.splitlines()[1].startswith(
        "compute-plugins: error: test:///nonexistent/host.xml: libvirt error")


def test_usage_errors_are_exit_2_and_help_exit_0():
    assert cli.run("validate").returncode == 2
    assert cli.run("validate").stderr.startswith("usage: compute-plugins validate")
    shown = cli.run("--help")
    assert shown.returncode == 0 and shown.stdout.startswith("usage: compute-plugins")


def test_an_exit_with_a_message_prints_it_and_exits_1_as_a_process(monkeypatch):
    # NOTE: what Python does with SystemExit("text") at the top: the text
    # on stderr, exit status 1 (the in-process run printed nothing).
    process = subprocess.run([sys.executable, "-c", "raise SystemExit('cannot go on')"],
                             capture_output=True, text=True, check=False)
    assert (process.returncode, process.stdout, process.stderr) == (1, "", "cannot go on\n")

    def main(argv):
        raise SystemExit("cannot go on")
    monkeypatch.setattr(cli.cmd_main, "main", main)
    assert cli.run("validate") == cli.Result(1, "", "cannot go on\n")
