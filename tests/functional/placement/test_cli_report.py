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
    CLI_ENV,
    ServedPlacement,
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


def ok_or_degraded(proc_rc: int, stderr: str) -> None:
    # NOTE: a plugin that fails to load makes the host "degraded" (exit 1)
    # without touching what this test checks.
    assert proc_rc == 0 or "host degraded" in stderr, stderr
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
        capture_output=True, text=True, timeout=120, env=CLI_ENV)
    ok_or_degraded(proc.returncode, proc.stderr)
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
        capture_output=True, text=True, timeout=120, env=CLI_ENV)
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines()
             if "compute-plugins: error" in ln]
    assert len(lines) == 1 and url in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert json_lines(proc.stdout) == []


def test_sighup_to_a_running_report_clears_the_cache(tmp_path):
    """Embedded default (no Placement configured): a SQLite file in the
    state directory; SIGHUP between periodics makes the next one re-read."""
    env = {**CLI_ENV, "XDG_STATE_HOME": str(tmp_path)}
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
    ok_or_degraded(proc.returncode, stderr)
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
        capture_output=True, text=True, timeout=120, env=CLI_ENV)
    assert proc.returncode == 1
    assert "cannot listen on 127.0.0.1:%d" % served.port in proc.stderr
    assert "Traceback" not in proc.stderr
