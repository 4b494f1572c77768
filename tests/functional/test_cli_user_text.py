"""Text a user gives (paths, names, values) as every command shows it.

Issue 20, item 7: a newline or a terminal escape sequence in a user's value
is shown escaped (``\\n``, ``\\x1b``), never raw: it forges no line and
recolours no terminal. And a name is accepted or refused the same way by
every command that takes it: one rule (:func:`compute_plugins.util.text.
name_problem`), one line and exit 2 when refused.
"""

from __future__ import annotations

import json

import pytest

from compute_plugins.cmd import main
from tests.output import flat

#: A value that would recolour the terminal and forge a line of its own.
EVIL = "e\x1b[31mvil\nFORGED line"


def run(capsys, *argv: str) -> tuple[int, str]:
    try:
        code = main.main(list(argv))
    except SystemExit as done:  # argparse's usage errors
        code = int(done.code or 0)
    out = capsys.readouterr()
    return code, out.out + out.err


def shown_safely(text: str) -> bool:
    return ("\x1b" not in text
            and not any(line.startswith("FORGED") for line in text.splitlines()))


@pytest.fixture
def flavor(tmp_path):
    path = tmp_path / "f.json"
    path.write_text(json.dumps({"name": "f", "vcpus": 1, "memory_mb": 256}))
    return str(path)


@pytest.mark.parametrize("command", [
    ["validate", "--flavor", "{missing}"],
    ["--libvirt-uri", "test:///default", "fit", "--flavor", "{flavor}", "--usage",
     "{missing}"],
    ["schedule", "--flavor", "{missing}"],
    ["--host-snapshot", "{missing}", "inventory"],
    ["--host-snapshot", "{missing}", "report", "--periodic", "1"],
    ["--config-file", "{missing}", "validate", "--flavor", "{flavor}"],
    ["release", "--consumer", EVIL],
    ["host", "disable", EVIL],
    ["host", "enable", EVIL],
    ["demo", "--state-dir", "{evil_dir}"],
], ids=lambda c: " ".join(a for a in c if not a.startswith(("{", "e\x1b"))))
def test_a_path_or_value_is_shown_escaped(capsys, tmp_path, flavor, command):
    values = {"{missing}": str(tmp_path / (EVIL + ".json")), "{flavor}": flavor,
              "{evil_dir}": str(tmp_path / EVIL)}
    code, text = run(capsys, *(values.get(arg, arg) for arg in command))
    assert shown_safely(text), text
    assert "Traceback" not in text and "unexpected error" not in text, text
    # NOTE: flat: a long path wraps at 100 columns (on a space of its own)
    assert "e\\x1b[31mvil\\nFORGED line" in flat(text), text


# ------------------------------------------------------------------ names


def _commands(path: str) -> dict[str, list[str]]:
    return {
        "validate": ["validate", "--flavor", path],
        "fit": ["--libvirt-uri", "test:///default", "fit", "--flavor", path],
        "schedule": ["schedule", "--flavor", path],
    }


@pytest.mark.parametrize("command", ["validate", "fit", "schedule"])
@pytest.mark.parametrize("name", ["red \x1b[31m", "two\nlines", "lone \ud800",
                                  "x" * 256, "rtl \u202e"])
def test_a_bad_name_is_refused_by_every_command_alike(capsys, tmp_path, command, name):
    """Before: fit said "unexpected error" (not XML, UnicodeEncodeError)
    where validate and schedule took the name."""
    path = tmp_path / "f.json"
    path.write_text(json.dumps({"name": name, "vcpus": 1, "memory_mb": 256}))
    code, text = run(capsys, *_commands(str(path))[command])
    assert code == 2, text
    lines = text.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "compute-plugins: error: flavor 'name' "), text
    assert shown_safely(text)


@pytest.mark.parametrize("command", ["validate", "fit", "schedule"])
def test_a_good_name_is_taken_by_every_command(capsys, tmp_path, command):
    path = tmp_path / "f.json"
    path.write_text(json.dumps({"name": "Gäst 客 \U0001f600 " + "x" * 240,
                                "vcpus": 1, "memory_mb": 256}))
    code, text = run(capsys, *_commands(str(path))[command])
    # NOTE: schedule finds no host (an empty embedded Placement): exit 1.
    assert code == (1 if command == "schedule" else 0), text
    assert "flavor 'name'" not in text


def test_fit_name_option_follows_the_same_rule(capsys, flavor):
    code, text = run(capsys, "--libvirt-uri", "test:///default", "fit", "--flavor",
                     flavor, "--name", EVIL)
    assert code == 2
    assert text.splitlines() == [
        "compute-plugins: error: --name 'e\\x1b[31mvil\\nFORGED line': character 1 "
        "is not printable (\\x1b)"]


# ---------------------------------------------------------- problem lists


@pytest.mark.parametrize("command", ["validate", "fit", "schedule"])
def test_a_long_problem_list_is_capped_with_a_count(capsys, tmp_path, command):
    """One value, a thousand problems: the first 20 and a count of the rest
    (it was a thousand lines); validate's JSON keeps them all."""
    path = tmp_path / "f.json"
    path.write_text(json.dumps({"name": "f", "vcpus": 2, "memory_mb": 1024, "extra_specs": {
        "hw:numa_nodes": "1", "hw:numa_cpus.0": "0-1000", "hw:numa_mem.0": "1024"}}))
    code, text = run(capsys, *_commands(str(path))[command])
    lines = text.splitlines()
    assert code == (1 if command == "validate" else 2), text
    assert lines[0].endswith("invalid request: 999 problem(s)"), lines[0]
    assert len(lines) == 22
    assert lines[-1] == "  ... and 979 more (validate --format json lists them all)"
    if command == "validate":
        code, text = run(capsys, "--format", "json", *_commands(str(path))[command])
        assert len(json.loads(text)["problems"]) == 999


# ------------------------------------------------- project and user ids


@pytest.mark.parametrize("command", ["schedule", "audit"])
@pytest.mark.parametrize("option", ["--project-id", "--user-id"])
def test_an_id_that_is_not_utf8_is_one_line_before_placement(capsys, flavor, command,
                                                             option):
    """Python hands an argument that is not UTF-8 over with its bytes as
    lone surrogates (b"ab\\xff" is "ab\\udcff"); Placement answered it with
    a 500 and a traceback in its log."""
    argv = ["schedule", "--flavor", flavor] if command == "schedule" else ["audit"]
    code, text = run(capsys, *argv, option, "ab\udcff")
    assert code == 2, text
    assert text.splitlines() == [
        "compute-plugins: error: %s 'ab\\udcff': not UTF-8 text (byte 0xff at "
        "character 2)" % option]


def test_a_non_utf8_argument_in_a_real_process(flavor):
    import os
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "compute_plugins.cmd.main", "schedule", "--flavor",
         flavor, "--project-id", b"p\xc3"], capture_output=True, timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        b"compute-plugins: error: --project-id 'p\\udcc3': not UTF-8 text "
        b"(byte 0xc3 at character 1)"]
