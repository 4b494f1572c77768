"""Ctrl-C while the command line is still starting (importing its
subcommands, which takes most of a second) exits 130 without a traceback,
as it does once a command runs.

NOTE: the interrupt is raised by a stand-in for ``build_parser``: a real
SIGINT cannot be timed to land inside the imports reliably.
"""

from __future__ import annotations

from compute_plugins.cmd import main as cli


def test_ctrl_c_while_the_subcommands_load_is_exit_130(monkeypatch, capsys):
    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["demo"]) == 130
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
