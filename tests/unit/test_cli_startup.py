"""The command line starts fast (issue 19, item 5): ``--version`` and
``--help`` (of the tool and of each command) import none of the heavy
libraries a command needs only once it runs (SQLAlchemy, nova, Placement,
stevedore, oslo.config, oslo.log, the HTTP and libvirt clients): each
command imports them in its ``run``. The times themselves are measured by
``python -m bench.startup``, not here (a timed unit test fails on a busy
machine).

Each case runs in a fresh interpreter: this process imported them all
already.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

#: Top-level packages a command imports only when it runs.
HEAVY = ("sqlalchemy", "nova", "placement", "stevedore", "oslo_config", "oslo_log",
         "oslo_db", "keystoneauth1", "requests", "libvirt", "waitress", "os_traits",
         "compute_plugins.hoststate", "compute_plugins.scheduler",
         "compute_plugins.runtime", "compute_plugins.placement")


def imported_after(statement: str) -> list[str]:
    """The :data:`HEAVY` modules imported once ``statement`` ran (a
    ``SystemExit`` of argparse is the end of the statement)."""
    script = textwrap.dedent("""
        import json, sys
        try:
            %s
        except SystemExit:
            pass
        heavy = %r
        sys.stderr.write("\\nHEAVY " + json.dumps(sorted(
            h for h in heavy if h in sys.modules)) + "\\n")
    """) % (statement, HEAVY)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True,
                          text=True, timeout=120)
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("HEAVY "), proc.stderr
    return list(json.loads(last[len("HEAVY "):]))


def test_importing_the_command_line_imports_no_heavy_library():
    assert imported_after("import compute_plugins.cmd.main") == []


@pytest.mark.parametrize("argv", [
    ["--version"], ["--help"], ["schedule", "--help"], ["report", "--help"],
    ["release", "--help"], ["host", "rename", "--help"],
])
def test_version_and_help_import_no_heavy_library(argv):
    assert imported_after("from compute_plugins.cmd.main import main; main(%r)"
                          % (argv,)) == []


@pytest.mark.parametrize("argv, shown", [
    # NOTE: these two show values of the modules they run (the server's
    # defaults, the kit's checks): read when that help is printed, not
    # when the command line starts.
    (["placement", "serve", "--help"], "(default 4; Placement answers one request"),
    (["conformance", "--help"], "run only this check (repeatable): discovery,"),
])
def test_a_help_shows_the_values_it_defers(argv, shown, capsys):
    from compute_plugins.cmd.main import main

    with pytest.raises(SystemExit):
        main(argv)
    assert shown in " ".join(capsys.readouterr().out.split())


def test_a_command_still_gets_what_it_needs():
    """The lazy imports are no missing import: a command that runs loads
    them (``validate`` builds a RequestSpec with the plugins)."""
    found = imported_after(
        "from compute_plugins.cmd.main import main; "
        "main(['validate', '--flavor', '/nonexistent/flavor.json'])")
    assert "oslo_config" in found and "compute_plugins.runtime" in found
