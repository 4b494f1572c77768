"""``compute-plugins report`` and ``placement serve`` as a user runs them.

Real subprocesses, real Placement (served over HTTP, or embedded in the
``report`` process), the libvirt test driver (``test:///default``) as host.
"""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from tests.functional.placement.conftest import (
    CLI,
    ServedPlacement,
    cli_env,
    free_port,
)

HOST = ["--libvirt-uri", "test:///default"]


def json_lines(text: str) -> list[dict]:
    # NOTE: oslo.log writes to stdout unless use_stderr/log_file is set; the
    # results are the lines that are JSON objects.
    return [json.loads(ln) for ln in text.splitlines() if ln.startswith("{")]


def read_json_line(stream) -> dict:
    while True:
        line = stream.readline()
        if not line:
            raise EOFError("report exited early")
        if line.startswith("{"):
            return json.loads(line)


def succeeded(proc_rc: int, stderr: str) -> None:
    """Exit 0 with every plugin working: a plugin that failed to load,
    discover or report makes the host degraded (exit 1), a failure here."""
    assert proc_rc == 0, stderr
    assert "degraded" not in stderr, stderr
    assert "Traceback" not in stderr, stderr


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("served") / "placement.sqlite")
    placement = ServedPlacement(db, free_port())
    placement.start()
    yield placement
    placement.stop()


def test_report_json_against_placement_serve(served):
    proc = subprocess.run(
        CLI + HOST + ["--placement-url", served.url, "--format", "json",
                      "report", "--periodic", "2", "--interval", "0"],
        capture_output=True, text=True, timeout=120, env=cli_env())
    succeeded(proc.returncode, proc.stderr)
    first, second = json_lines(proc.stdout)
    assert first["periodic"] == 1
    assert first["calls"]["GET /resource_providers?in_tree"] == 1
    assert first["calls"]["POST /resource_providers"] >= 1
    assert first["total_calls"] == sum(first["calls"].values())
    assert second == {"periodic": 2, "calls": {}, "total_calls": 0,
                      "changed": []}
    # the tree is in the served Placement, for every other client to see
    names = {rp["name"] for rp in served.client().get(
        "/resource_providers")["resource_providers"]}
    assert any(n.endswith("_NUMA0") for n in names), names


def test_unreachable_placement_url_is_one_line_exit_1():
    url = "http://127.0.0.1:%d" % free_port()
    proc = subprocess.run(
        CLI + HOST + ["--placement-url", url, "report", "--periodic", "1"],
        capture_output=True, text=True, timeout=120, env=cli_env())
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines()
             if "compute-plugins: error" in ln]
    assert len(lines) == 1 and url in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert json_lines(proc.stdout) == []


def test_sighup_to_a_running_report_clears_the_cache(tmp_path):
    """Embedded default (no Placement configured): a SQLite file in the
    state directory; SIGHUP between periodics makes the next one re-read."""
    env = cli_env(XDG_STATE_HOME=str(tmp_path))
    proc = subprocess.Popen(
        CLI + HOST + ["--format", "json", "report", "--periodic", "3",
                      "--interval", "1.5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        first = read_json_line(proc.stdout)
        proc.send_signal(signal.SIGHUP)
        second = read_json_line(proc.stdout)
        third = read_json_line(proc.stdout)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    succeeded(proc.returncode, stderr)
    assert first["changed"], first
    assert second["calls"]["GET /resource_providers?in_tree"] == 1
    assert not any(c.startswith(("PUT", "POST", "DELETE"))
                   for c in second["calls"]), second
    assert third["total_calls"] == 0
    assert (tmp_path / "compute-plugins" / "placement.sqlite").exists()


def test_placement_serve_bad_port_is_one_line(served):
    proc = subprocess.run(
        CLI + ["placement", "serve", "--port", str(served.port), "--db",
               ":memory:"],
        capture_output=True, text=True, timeout=120, env=cli_env())
    assert proc.returncode == 1
    assert "cannot listen on 127.0.0.1:%d" % served.port in proc.stderr
    assert "Traceback" not in proc.stderr


def test_restart_deletes_a_device_removed_while_down(tmp_path):
    """Two ``report`` processes on the embedded default: the plugins'
    contributions are checkpointed in the state directory, so the second
    process deletes the provider of a PF that vanished in between."""
    import shutil
    from pathlib import Path

    snap = tmp_path / "host"
    shutil.copytree(Path(__file__).parents[2] / "fixtures" / "hosts" / "sriov",
                    snap)
    env = cli_env(XDG_STATE_HOME=str(tmp_path / "state"))
    cmd = CLI + ["--host-snapshot", str(snap), "--format", "json", "report",
                 "--periodic", "1"]
    pf = "sriov-compute-01_pf_0000_02_10_7"
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                           env=env)
    succeeded(first.returncode, first.stderr)
    assert "create %s" % pf in json_lines(first.stdout)[0]["changed"]
    assert list((tmp_path / "state" / "compute-plugins").glob(
        "*.contributions.json"))
    (snap / "nodedev" / "pci_0000_02_10_7.xml").unlink()
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                            env=env)
    succeeded(second.returncode, second.stderr)
    assert json_lines(second.stdout)[0]["changed"] == ["delete %s" % pf]


def _config(tmp_path, text):
    path = tmp_path / "bad.conf"
    path.write_text(text)
    return ["--config-file", str(path)]


@pytest.mark.parametrize("conf_text, expected", [
    ("[placement]\nauth_type = password\n",
     ["[placement] auth_type = password", "auth_url"]),
    ("[placement]\nauth_type = bogus\n", ["[placement] auth_type = bogus"]),
    ("[placement]\nembedded_state_dir = /proc/nope\n",
     ["[placement] embedded_state_dir = /proc/nope"]),
    ("[placement]\nembedded_connection = bogus://x\n",
     ["[placement] embedded_connection = bogus://x"]),
])
def test_placement_config_errors_are_one_line_exit_2(tmp_path, conf_text,
                                                     expected):
    proc = subprocess.run(
        CLI + HOST + _config(tmp_path, conf_text)
        + ["report", "--periodic", "1"],
        capture_output=True, text=True, timeout=120,
        env=cli_env(XDG_STATE_HOME=str(tmp_path)))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines()
             if ln.startswith("compute-plugins: configuration error")]
    assert len(lines) == 1, proc.stderr
    for text in expected:
        assert text in lines[0], lines[0]


@pytest.mark.parametrize("args, expected", [
    (["placement", "serve", "--port", "70000"], "invalid port '70000'"),
    (["placement", "serve", "--port", "-1"], "invalid port '-1'"),
    (["report", "--interval", "-1"], "invalid value '-1'"),
    (["report", "--interval", "nan"], "invalid value 'nan'"),
])
def test_bad_arguments_are_argparse_errors(args, expected):
    proc = subprocess.run(CLI + args, capture_output=True, text=True,
                          timeout=120, env=cli_env())
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr and "Traceback" not in proc.stderr


def test_placement_serve_bad_db_names_the_database():
    proc = subprocess.run(
        CLI + ["placement", "serve", "--port", str(free_port()), "--db",
               "/proc/x/y.db"],
        capture_output=True, text=True, timeout=120, env=cli_env())
    assert proc.returncode == 2, proc.stderr
    assert "--db /proc/x/y.db" in proc.stderr
    assert "cannot listen" not in proc.stderr
    assert "Traceback" not in proc.stderr


def test_sighup_with_a_bad_config_keeps_the_agent_running(tmp_path):
    """A reload that finds a bad value, then a malformed file, is one error
    line each; the agent keeps its old values and goes on."""
    conf = tmp_path / "c.conf"
    conf.write_text("[compute]\nresource_provider_association_refresh = 0\n")
    proc = subprocess.Popen(
        CLI + HOST + ["--config-file", str(conf), "--format", "json",
                      "report", "--interval", "0.3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=cli_env(XDG_STATE_HOME=str(tmp_path)))
    try:
        read_json_line(proc.stdout)
        for text in ("[compute]\nresource_provider_association_refresh = "
                     "abc\n", "[compute\nbroken = \n"):
            conf.write_text(text)
            proc.send_signal(signal.SIGHUP)
            # still running: two more periodics come
            read_json_line(proc.stdout)
            read_json_line(proc.stdout)
            assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    succeeded(proc.returncode, stderr)
    errors = [ln for ln in stderr.splitlines() if "not reloaded" in ln]
    assert len(errors) == 2, stderr
    assert "abc" in errors[0] and "c.conf" in errors[1], errors


def test_a_renamed_host_keeps_reporting_under_its_first_name(tmp_path):
    """A hostname changing under a running agent registers no second node."""
    import pathlib
    import shutil

    snapshot = tmp_path / "host"
    shutil.copytree(pathlib.Path(__file__).parents[2] / "fixtures" / "hosts" / "sriov",
                    snapshot)
    host_json = snapshot / "host.json"
    env = cli_env(XDG_STATE_HOME=str(tmp_path / "state"))
    proc = subprocess.Popen(
        CLI + ["--host-snapshot", str(snapshot), "--format", "json", "report",
               "--periodic", "2", "--interval", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        first = read_json_line(proc.stdout)
        document = json.loads(host_json.read_text())
        document["hostname"] = "renamed-compute"
        host_json.write_text(json.dumps(document))
        second = read_json_line(proc.stdout)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "create sriov-compute-01" in first["changed"]
    assert second["total_calls"] == 0, second
    assert ("the host's name changed from sriov-compute-01 to renamed-compute"
            in stderr)


def test_the_readme_example_is_what_report_prints(tmp_path):
    """README's ``report`` example: the calls of the first two periodics on
    the libvirt test driver with the embedded Placement, as they are."""
    import re
    from pathlib import Path

    readme = (Path(__file__).parents[3] / "README.md").read_text()
    example = readme.split("periodics (forever without N)", 1)[1]
    example = [ln for ln in example.split("```", 2)[1].splitlines() if ln.strip()]
    proc = subprocess.run(
        CLI + HOST + ["report", "--periodic", "2", "--interval", "0"],
        capture_output=True, text=True, timeout=120,
        env=cli_env(XDG_STATE_HOME=str(tmp_path)))
    succeeded(proc.returncode, proc.stderr)
    printed = [ln for ln in proc.stdout.splitlines()
               if ln.startswith(("periodic ", "     "))]

    def calls(lines):
        # NOTE: the root's name is the machine's; the calls are not.
        return [re.sub(r", changed: .*", "", ln.strip()) for ln in lines]

    assert calls(printed) == calls(example)
