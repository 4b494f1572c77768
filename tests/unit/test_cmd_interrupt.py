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


def _console_script() -> str:
    """What pip's ``compute-plugins`` script runs: the setup.cfg entry
    point, imported and called."""
    import configparser
    from pathlib import Path

    setup = configparser.ConfigParser()
    setup.read(Path(__file__).parents[2] / "setup.cfg")
    scripts = dict(line.split(" = ") for line in
                   setup["entry_points"]["console_scripts"].strip().splitlines())
    module, func = scripts["compute-plugins"].split(":")
    return "import sys\nfrom %s import %s\nsys.exit(%s())\n" % (module, func, func)


#: A Ctrl-C landing while the script imports the command line's modules
#: (oslo.config, the subcommands: the first quarter second).
_INTERRUPTED_IMPORT = """
import sys
class InterruptedImport:
    def find_spec(self, name, path=None, target=None):
        if name == "oslo_config":
            raise KeyboardInterrupt
sys.meta_path.insert(0, InterruptedImport())
"""


#: Says "started" when the entry point begins importing the command line.
_STARTED_IN_THE_ENTRY_POINT = """
import sys
class Started:
    def find_spec(self, name, path=None, target=None):
        if name == "compute_plugins.cmd.main":
            print("started", flush=True)
sys.meta_path.insert(0, Started())
"""


def test_ctrl_c_while_the_script_imports_the_command_line_is_exit_130():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _INTERRUPTED_IMPORT + _console_script(),
                           "validate", "--flavor", "f.json"],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (
        130, "", "compute-plugins: interrupted\n")


def test_ctrl_c_at_any_moment_of_the_start_is_no_traceback():
    """A real SIGINT, early and late in the start (once Python itself
    started and the script imported the entry point: a signal before then
    kills Python or makes it print a fatal error, which no program can
    help): exit 130 with one line, or the command's own exit when it
    finished first."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    flavor = Path(__file__).parents[2] / "examples" / "fit" / "nfv.medium.json"
    seen = []
    # NOTE: "started" once the entry point runs: when it starts importing
    # the command line (inside its guard). Printed by the script right
    # before calling the entry point, a signal could land in the few
    # bytecodes between the two, a window no program can guard (it failed
    # so at delay 0 under load).
    script = _STARTED_IN_THE_ENTRY_POINT + _console_script().replace(
        "sys.exit(", "assert 'compute_plugins.cmd.main' not in sys.modules\nsys.exit(")
    for delay in (0, 0.03, 0.06, 0.1, 0.15, 0.2, 0.3, 0.45):
        proc = subprocess.Popen([sys.executable, "-c", script,
                                 "validate", "--flavor", str(flavor)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline() == "started\n"
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        seen.append((delay, proc.returncode, err))
        assert "Traceback" not in err, (delay, err)
        assert (proc.returncode, err) in ((130, "compute-plugins: interrupted\n"),
                                          (0, "")), (delay, err)
    assert any(code == 130 for _, code, _ in seen), seen


def test_ctrl_c_inside_placements_database_transaction_logs_nothing(
        monkeypatch, capsys, caplog):
    # NOTE: a Ctrl-C landing in the embedded Placement's database
    # transaction unwinds through oslo.utils' save_and_reraise_exception,
    # which logs the exception it drops with its traceback at ERROR (the
    # demo printed ~140 lines of them): once interrupted, the command says
    # its one line and nothing else. A real SIGINT, sent from inside such a
    # block of a command.
    import os
    import signal
    import time

    from oslo_utils import excutils

    def command(conf, args):
        try:
            raise RuntimeError("the transaction's own error")
        except RuntimeError:
            with excutils.save_and_reraise_exception():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)
        return 0

    from compute_plugins.cmd import validate

    monkeypatch.setattr(validate, "run", command)
    # NOTE: as a new process has it (an earlier test of this worker left
    # SIGINT ignored once, in the full suite's order: the kill was ignored)
    found = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with caplog.at_level("DEBUG"):
            assert cli.main(["validate", "--flavor", "x.json"]) == 130
        # the command line leaves the SIGINT handler as it found it
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, found)
    assert caplog.records == []
    captured = capsys.readouterr()
    assert captured.err == "compute-plugins: interrupted\n"
    import logging
    assert logging.root.manager.disable == logging.NOTSET
