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
    assert captured.out == ""
    assert captured.err == "compute-plugins: interrupted\n"


def test_ctrl_c_in_a_destructor_still_stops_the_command(monkeypatch, capsys):
    # NOTE: Python prints and drops an exception raised in a __del__ or a
    # weakref callback of the garbage collector: a Ctrl-C landing there
    # (seen in the demo, in SQLAlchemy's) let the command run on and exit
    # 0. The command line delivers it again.
    import gc
    import time

    class Finalised:
        def __del__(self):
            raise KeyboardInterrupt

    ran_on = []

    def interrupted_in_a_destructor(conf, args):
        Finalised()
        gc.collect()
        for _ in range(500):  # the command's work, 5 s at most
            time.sleep(0.01)
        ran_on.append(True)
        return 0

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    commands = next(a for a in parser._actions if a.dest == "command")
    commands.choices["validate"].set_defaults(func=interrupted_in_a_destructor)
    assert cli.main(["validate", "--flavor", "f.json"]) == 130
    captured = capsys.readouterr()
    assert ran_on == [] and captured.out == ""
    assert captured.err == "compute-plugins: interrupted\n"
