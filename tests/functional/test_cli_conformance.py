"""``compute-plugins conformance [PLUGIN...]``: the conformance kit on
installed plugins; its output lines and exit codes (0 every check held,
1 one failed, 2 bad usage).

In-process ``main()``; a failing plugin is a built-in one with a seeded
defect put in its entry point's place.
"""

from __future__ import annotations

import json

import pytest

from compute_plugins.cmd.main import main
from compute_plugins.testing import CHECKS, _framework
from tests.functional.testing.test_kit import LenientDisk
from tests.output import records

STATUSES = ("PASS ", "SKIP ")


def conformance(capsys, *args, code):
    assert main(["conformance", *args]) == code
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return out


def test_one_line_per_check_and_plugin_exit_0(capsys):
    out = conformance(capsys, "disk", "--check", "json-roundtrip", "--check", "guest-xml",
                      "--check", "double-booking", code=0)
    lines = records(out.out)
    assert [line.split(":")[0] for line in lines] == [
        "PASS disk json-roundtrip", "PASS disk double-booking",
        lines[2].split(":")[0]]
    assert lines[0] == ("PASS disk json-roundtrip: 100 requests, 20 states, "
                        "200 assignments, 5 hosts")
    assert lines[2].split(":")[0] in ("PASS disk guest-xml", "SKIP disk guest-xml")
    assert out.err == ""


def test_every_installed_plugin_by_default(capsys):
    out = conformance(capsys, code=0).out
    # Wrapped at 100 columns as every command's text output, nothing cut.
    assert max(len(line) for line in out.splitlines()) <= 100, out
    lines = records(out)
    assert [line.split(":")[0].split(" ", 1)[1] for line in lines] == [
        "%s %s" % (plugin, check) for plugin in ("disk", "memenc", "numa", "pmem", "sriov", "vgpu")
        for check in CHECKS]
    assert all(line.startswith(STATUSES) for line in lines), lines


def test_a_failing_check_is_exit_1(capsys, monkeypatch):
    monkeypatch.setattr(_framework, "installed_class",
                        lambda name: LenientDisk if name == "disk" else None)
    lines = conformance(capsys, "disk", "--check", "discovery", "--check", "fit-verify",
                        code=1).out
    assert max(len(line) for line in lines.splitlines()) <= 100, lines
    lines = records(lines)
    assert len(lines) == 2
    assert lines[0] == "PASS disk discovery: 5 of 5 hosts"
    assert lines[1].startswith("FAIL disk fit-verify: host numa, 8 guests, sample 1 "
                               "(2 vCPUs, 2048 MiB): verify accepts the decision fit "
                               "made on empty, where fit refuses the request: disk: ")


def test_a_plugin_that_cannot_be_loaded_is_exit_1(capsys, monkeypatch):
    def broken(name):
        raise ImportError("No module named 'gone'")

    monkeypatch.setattr(_framework, "installed_class", broken)
    out = conformance(capsys, "disk", code=1)
    assert out.out == ("FAIL disk load: its entry point cannot be loaded: "
                       "ImportError: No module named 'gone'\n")


def test_an_unknown_plugin_is_exit_2(capsys):
    out = conformance(capsys, "disk", "gpu", code=2)
    assert out.out == ""
    assert out.err == ("compute-plugins: error: unknown plugin(s) gpu; installed "
                       "plugins: disk, memenc, numa, pmem, sriov, vgpu\n")


def test_an_unknown_check_is_exit_2_one_line(capsys):
    out = conformance(capsys, "disk", "--check", "speed", "--check", "fit-verify", code=2)
    assert out.out == ""
    assert out.err == ("compute-plugins: error: unknown check(s) speed; the checks "
                       "are %s\n" % ", ".join(CHECKS))


@pytest.mark.parametrize("snapshot, why", [
    ("missing", "not a host snapshot directory (missing or not a directory)"),
    ("empty", "missing: a host snapshot needs capabilities.xml"),
], ids=["missing", "empty"])
def test_a_bad_host_snapshot_is_exit_2_one_line(capsys, tmp_path, snapshot, why):
    (tmp_path / "empty").mkdir()
    out = conformance(capsys, "disk", "--host-snapshot", str(tmp_path / snapshot), code=2)
    assert out.out == ""
    assert len(out.err.splitlines()) == 1, out.err
    assert out.err.startswith("compute-plugins: error: %s" % tmp_path) and why in out.err


def test_json(capsys):
    out = conformance(capsys, "numa", "--check", "determinism", "--format", "json", code=0)
    (report,) = json.loads(out.out)
    assert report["plugin"] == "numa" and report["ok"] is True
    (check,) = report["checks"]
    assert check["check"] == "determinism" and check["status"] == "PASS"
    assert check["detail"].startswith("two runs gave the same ")
    assert check["problems"] == []


def test_on_a_host_snapshot_of_ones_own(capsys):
    from compute_plugins import demo

    lines = conformance(capsys, "vgpu", "--check", "discovery", "--check", "double-booking",
                        "--host-snapshot", demo.host_dir("gpu"), code=0).out
    lines = records(lines)
    assert lines == ["PASS vgpu discovery: 1 of 1 host",
                     "PASS vgpu double-booking: 36 decisions: 36 rejected once held"]
