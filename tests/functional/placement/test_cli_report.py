"""``compute-plugins report`` and ``placement serve`` as a user runs them.

Real Placement (served over HTTP, or embedded in the ``report`` process),
the libvirt test driver (``test:///default``) or a recorded host. Real
subprocesses where the process is what is tested (signals, two agents in
turn on one state, a report against ``placement serve``); the tests of a
command's output, exit code and files run it in-process (:mod:`tests.cli`:
a subprocess costs most of a second of imports).
"""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from tests import cli
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
                      "changed": [],
                      "claims": {"claimed": [], "rejected": [], "released": [],
                                 "store_writes": 0}}
    assert first["claims"]["store_writes"] == 1   # the host state, published
    # the tree is in the served Placement, for every other client to see
    names = {rp["name"] for rp in served.client().get(
        "/resource_providers")["resource_providers"]}
    assert any(n.endswith("_NUMA0") for n in names), names


def test_unreachable_placement_url_is_one_line_exit_1():
    url = "http://127.0.0.1:%d" % free_port()
    proc = cli.run(*HOST, "--placement-url", url, "report", "--periodic", "1")
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
    proc = cli.run("placement", "serve", "--port", str(served.port), "--db", ":memory:")
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
     ["[placement] embedded_connection: 'bogus://x': expected an sqlite, "
      "postgresql or mysql URL"]),
])
def test_placement_config_errors_are_one_line_exit_2(tmp_path, conf_text,
                                                     expected):
    proc = cli.run(*HOST, *_config(tmp_path, conf_text), "report", "--periodic", "1",
                   env={"XDG_STATE_HOME": str(tmp_path)})
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
    proc = cli.run(*args)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr and "Traceback" not in proc.stderr


def test_placement_serve_bad_db_names_the_database():
    proc = cli.run("placement", "serve", "--port", str(free_port()), "--db",
                   "/proc/x/y.db")
    assert proc.returncode == 2, proc.stderr
    assert "--db /proc/x/y.db" in proc.stderr
    assert "cannot listen" not in proc.stderr
    assert "Traceback" not in proc.stderr


def test_ctrl_c_stops_after_the_periodic_with_exit_130_and_one_line(tmp_path):
    # NOTE: SIGTERM (the service manager's stop) is exit 0; Ctrl-C is an
    # interrupt, as in every command. The next run finds nothing to mend.
    env = cli_env(XDG_STATE_HOME=str(tmp_path))
    proc = subprocess.Popen(
        CLI + HOST + ["--format", "json", "report", "--interval", "0.3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        read_json_line(proc.stdout)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.splitlines() == [
        "compute-plugins: interrupted (stopped after the current periodic)"], stderr
    again = cli.run(*HOST, "report", "--periodic", "1", env={"XDG_STATE_HOME": str(tmp_path)})
    succeeded(again.returncode, again.stderr)


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


# ----------------------------------------- the agent's files stay its own

SRIOV = __import__("pathlib").Path(__file__).parents[2] / "fixtures" / "hosts" / "sriov"


def _snapshot_named(tmp_path, hostname):
    """The sriov fixture host under another name (host.json ``hostname``)."""
    import shutil

    snap = tmp_path / "host"
    shutil.copytree(SRIOV, snap)
    document = json.loads((snap / "host.json").read_text())
    document["hostname"] = hostname
    (snap / "host.json").write_text(json.dumps(document))
    return snap


def _report(snap, state, *extra, periodic="1"):
    """``report`` on the snapshot ``snap`` with ``state`` as XDG_STATE_HOME,
    in-process (the agent's lock on the state directory is released when
    the command returns, as when its process exits)."""
    args = ["--host-snapshot", str(snap), "--format", "json", *extra,
            "report", "--periodic", periodic, "--interval", "0"]
    return cli.run(*args, env={"XDG_STATE_HOME": str(state)})


def _files_under(path):
    import os

    return sorted(os.path.relpath(os.path.join(d, f), path)
                  for d, _, fs in os.walk(path) for f in fs)


@pytest.mark.parametrize("hostname, stem", [
    ("../../escaped", "%2E.%2F..%2Fescaped"),
    ("/tmp/escaped", "%2Ftmp%2Fescaped"),
    ("..", "%2E."),
])
def test_a_host_name_that_is_a_path_keeps_the_checkpoint_in_the_state_dir(
        tmp_path, served, hostname, stem):
    """Placement takes ``../../escaped`` as a provider name; the checkpoint
    file gets a percent-encoded name in the state directory, and the next
    start reads it back."""
    import uuid

    hostname += "-" + uuid.uuid4().hex[:6]  # the served Placement is shared
    stem += hostname[-7:]
    snap = _snapshot_named(tmp_path, hostname)
    state = tmp_path / "xdg" / "state"
    first = _report(snap, state, "--placement-url", served.url)
    assert first.returncode == 0, first.stderr
    assert "create %s" % hostname in json_lines(first.stdout)[0]["changed"]
    # NOTE: the checkpoint and the ledger by the encoded name; the
    # host-state store's default database, the agent's lock and the node's
    # identity by their fixed names.
    assert sorted(_files_under(tmp_path / "xdg")) == sorted([
        "state/compute-plugins/%s.contributions.json" % stem,
        "state/compute-plugins/%s.ledger.json" % stem,
        "state/compute-plugins/agent.lock",
        "state/compute-plugins/compute_node.json",
        "state/compute-plugins/host_state.sqlite"])
    assert not (tmp_path / ("escaped" + hostname[-7:] + ".contributions.json")).exists()
    checkpoint = json.loads((state / "compute-plugins" / (
        stem + ".contributions.json")).read_text())
    assert checkpoint["nodename"] == hostname
    # A restart uses it (a device removed meanwhile is deleted).
    (snap / "nodedev" / "pci_0000_02_10_7.xml").unlink()
    second = _report(snap, state, "--placement-url", served.url)
    assert second.returncode == 0, second.stderr
    assert json_lines(second.stdout)[0]["changed"] == [
        "delete %s_pf_0000_02_10_7" % hostname]
    assert "ignoring the plugin checkpoint" not in second.stderr


@pytest.mark.parametrize("hostname, rule", [
    ("h" * 201, "is 201 characters long; Placement allows at most 200"),
    ("a\u0000b", "contains a NUL character (at position 1), which Placement "
     "on PostgreSQL cannot store"),
    ("x\ud800", "is not valid Unicode (a lone surrogate at position 1), "
     "which Placement cannot store"),
])
def test_a_host_name_placement_refuses_is_one_line_before_any_call(
        tmp_path, hostname, rule):
    snap = _snapshot_named(tmp_path, hostname)
    state = tmp_path / "state"
    proc = _report(snap, state)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "compute-plugins: error: %s: host name %r cannot be the compute "
        "node's Placement provider name: it %s"
        % (snap / "host.json", hostname, rule)]
    assert proc.stdout == ""
    assert not state.exists()  # no Placement database, no checkpoint


def test_child_names_over_placements_limit_degrade_only_their_plugin(tmp_path):
    """A 195-character node name fits, ``<name>_NUMA0`` does not: the numa
    plugin fails with the rule (exit 1, host degraded), nothing is sent
    for it, the other plugins' providers are created."""
    hostname = "h" * 195
    snap = _snapshot_named(tmp_path, hostname)
    proc = _report(snap, tmp_path / "state")
    assert proc.returncode == 1, proc.stderr
    assert ("host degraded: plugin numa failed to contribute: plugin 'numa': "
            "provider name '%s_NUMA0' is 201 characters long; Placement "
            "allows at most 200" % hostname) in proc.stderr
    assert "Traceback" not in proc.stderr
    (result,) = json_lines(proc.stdout)
    assert result["changed"][0] == "create %s" % hostname
    assert not any("_NUMA" in change for change in result["changed"])


def _embedded_client(db):
    from compute_plugins.placement import embedded

    service = embedded.EmbeddedPlacement(embedded.sqlite_url(str(db)))
    return service, service.start().client()


def test_a_checkpoint_naming_another_services_provider_is_ignored(tmp_path):
    """neutron's ``<host>:<agent>:<iface>`` provider in the compute node's
    tree, named in a tampered checkpoint as a plugin's: the checkpoint is
    refused (one warning) and the provider stays in Placement."""
    import uuid

    snap = _snapshot_named(tmp_path, "cmp1")
    state = tmp_path / "state"
    first = _report(snap, state)
    assert first.returncode == 0, first.stderr
    db = state / "compute-plugins" / "placement.sqlite"
    service, client = _embedded_client(db)
    try:
        root = client.get("/resource_providers?name=cmp1")[
            "resource_providers"][0]["uuid"]
        neutron = str(uuid.uuid4())
        client.post("/resource_providers", {
            "name": "cmp1:NIC Switch agent:ens1f0", "uuid": neutron,
            "parent_provider_uuid": root})
    finally:
        service.close()
    path = state / "compute-plugins" / "cmp1.contributions.json"
    checkpoint = json.loads(path.read_text())
    checkpoint["plugins"]["sriov"].append({
        "name": "cmp1:NIC Switch agent:ens1f0", "uuid": neutron,
        "parent": None, "inventory": {}, "traits": [], "aggregates": []})
    path.write_text(json.dumps(checkpoint))

    second = _report(snap, state)
    assert second.returncode == 0, second.stderr
    assert ("ignoring the plugin checkpoint %s (plugin 'sriov': provider "
            "'cmp1:NIC Switch agent:ens1f0' is not the compute node 'cmp1' "
            "nor named cmp1_*: it may belong to another service): adopting "
            "the provider tree instead" % path) in second.stderr
    assert json_lines(second.stdout)[0]["changed"] == []
    service, client = _embedded_client(db)
    try:
        assert client.get("/resource_providers/%s" % neutron)["name"] == (
            "cmp1:NIC Switch agent:ens1f0")
    finally:
        service.close()


@pytest.mark.parametrize("content", [
    "[" * 1200 + "]" * 1200,
    '{"format_version": 1, "plugins": ' + "[" * 500 + "]" * 500 + "}",
    "fifo",
])
def test_a_bad_checkpoint_is_ignored_with_a_warning_every_periodic_works(
        tmp_path, content):
    """Deep nesting used to raise RecursionError in every periodic (the
    checkpoint is read until one succeeds); a FIFO would block the agent."""
    import os

    snap = _snapshot_named(tmp_path, "cmp2")
    state = tmp_path / "state"
    path = state / "compute-plugins" / "cmp2.contributions.json"
    path.parent.mkdir(parents=True)
    if content == "fifo":
        os.mkfifo(path)
        reason = "cannot read: a FIFO, not a regular file"
    else:
        path.write_text(content)
        reason = "arrays and objects nested more than 32 deep"
    proc = _report(snap, state, periodic="2")
    assert proc.returncode == 0, proc.stderr
    first, second = json_lines(proc.stdout)
    assert "create cmp2" in first["changed"] and "error" not in first
    assert second["total_calls"] == 0
    warnings = [ln for ln in proc.stderr.splitlines()
                if "ignoring the plugin checkpoint" in ln]
    assert len(warnings) == 1 and reason in warnings[0], proc.stderr
    # The good checkpoint of this run replaced the bad one.
    assert json.loads(path.read_text())["nodename"] == "cmp2"


def test_two_runs_in_turn_on_one_state_in_one_process(tmp_path):
    """review: the agent's lock on its state directory is released when
    ``report`` returns, as when its process exits: a second run in the
    same process (tests.cli) is not "another agent" (it was: exit 2), and
    the lock's file descriptor is not left open."""
    import os

    snap = _snapshot_named(tmp_path, "cmp4")
    state = tmp_path / "state"
    fds = set(os.listdir("/proc/self/fd"))
    first = _report(snap, state)
    assert first.returncode == 0, first.stderr
    second = _report(snap, state)
    assert second.returncode == 0, second.stderr
    assert not [os.readlink("/proc/self/fd/" + fd)
                for fd in set(os.listdir("/proc/self/fd")) - fds
                if os.readlink("/proc/self/fd/" + fd).endswith("agent.lock")]


def test_debug_after_a_plain_run_in_one_process_logs_placement_as_alone(tmp_path):
    """review: a plain ``report`` quiets the embedded Placement's loggers
    (and oslo.log sets its default levels): run in-process (tests.cli),
    those levels outlived the call and the next ``--debug`` run printed
    none of Placement's or alembic's lines, which a user's ``--debug``
    shows."""
    import logging
    import re

    snap = _snapshot_named(tmp_path, "cmp5")
    assert _report(snap, tmp_path / "plain").returncode == 0
    # NOTE: what an earlier test of this worker may have left (a main()
    # called without tests.cli, alembic's fileConfig): Placement's loggers
    # quieted or disabled; the full suite's order made this test fail.
    for name in ("placement", "alembic"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
        logging.getLogger(name).disabled = True
    debug = _report(snap, tmp_path / "debug", "--debug")
    assert debug.returncode == 0, debug.stderr
    assert re.search(r" (DEBUG|INFO) placement\.", debug.stderr), debug.stderr
    assert re.search(r" (DEBUG|INFO) alembic\.", debug.stderr), debug.stderr


def test_the_state_is_private_to_the_agents_user(tmp_path):
    """New state directory 0700, database and checkpoint 0600; an existing
    database readable by others is tightened; an existing directory is
    left as it is (it may be shared: doc/source/state-and-claims.md)."""
    import os
    import stat

    def mode(path):
        return stat.S_IMODE(os.stat(path).st_mode)

    snap = _snapshot_named(tmp_path, "cmp3")
    state = tmp_path / "fresh"
    assert _report(snap, state).returncode == 0
    ours = state / "compute-plugins"
    assert mode(ours) == 0o700
    assert mode(ours / "placement.sqlite") == 0o600
    assert mode(ours / "cmp3.contributions.json") == 0o600

    old = tmp_path / "old"
    shutil_copy = __import__("shutil").copytree
    shutil_copy(ours, old / "compute-plugins")
    os.chmod(old / "compute-plugins", 0o755)
    os.chmod(old / "compute-plugins" / "placement.sqlite", 0o644)
    os.chmod(old / "compute-plugins" / "cmp3.contributions.json", 0o644)
    (snap / "nodedev" / "pci_0000_02_10_7.xml").unlink()  # a change to save
    proc = _report(snap, old)
    assert proc.returncode == 0, proc.stderr
    assert mode(old / "compute-plugins") == 0o755
    assert mode(old / "compute-plugins" / "placement.sqlite") == 0o600
    assert mode(old / "compute-plugins" / "cmp3.contributions.json") == 0o600


def test_placement_serve_on_a_file_that_is_not_a_database_is_only_the_line(
        tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    notes.chmod(0o644)
    proc = cli.run("placement", "serve", "--port", str(free_port()), "--db", str(notes))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "compute-plugins: configuration error: --db %s: cannot open the "
        "embedded Placement database sqlite:///%s: DBError: "
        "(sqlite3.DatabaseError) file is not a database" % (notes, notes)]
    assert notes.read_text() == "my notes\n"
    assert notes.stat().st_mode & 0o777 == 0o644


# ------------------------------- an answer Placement never gives: named error


class _Proxy:
    """A real HTTP proxy in front of the served Placement that answers
    ``PUT .../inventories`` itself with ``body`` (status 200), as a broken
    proxy or another service on the URL would; the rest is forwarded."""

    def __init__(self, upstream: str, body: bytes) -> None:
        import http.server
        import threading

        import requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length) if length else None
                if self.command == "PUT" and self.path.endswith("/inventories"):
                    status, headers, content = 200, {}, body
                else:
                    resp = requests.request(
                        self.command, upstream + self.path, data=data,
                        headers={k: v for k, v in self.headers.items()
                                 if k.lower() != "host"}, timeout=60)
                    status, content = resp.status_code, resp.content
                    headers = {k: v for k, v in resp.headers.items()
                               if k.lower() not in ("content-length", "connection",
                                                    "transfer-encoding")}
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_PUT = do_POST = do_DELETE = _forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("body, what", [
    (b"", "with status 200 and no body; a JSON document was expected"),
    (b"null", "with status 200 and a JSON null where Placement sends an object"),
])
def test_an_answer_without_the_body_placement_sends_is_a_named_error(
        tmp_path, served, body, what):
    import uuid

    hostname = "proxied-" + uuid.uuid4().hex[:6]
    snap = _snapshot_named(tmp_path, hostname)
    proxy = _Proxy(served.url, body)
    try:
        proc = _report(snap, tmp_path / "state", "--placement-url", proxy.url)
    finally:
        proxy.close()
    assert proc.returncode == 1, proc.stderr
    (result,) = json_lines(proc.stdout)
    assert result["error"].startswith(
        "%s answered PUT /resource_providers/{uuid}/inventories %s"
        % (proxy.url, what)), result["error"]
    assert "TypeError" not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    # Nothing of this node was recorded as contributed: no checkpoint.
    assert not list((tmp_path / "state").rglob("*.contributions.json"))


def test_the_readme_example_is_what_report_prints(tmp_path):
    """The ``report`` example of doc/source/usage.md: the calls of the first
    two periodics on the libvirt test driver with the embedded Placement, as
    they are."""
    import re
    from pathlib import Path

    usage = (Path(__file__).parents[3] / "doc" / "source" / "usage.md").read_text()
    example = usage.split("periodics (forever without N)", 1)[1]
    # The block's lines after its tag (console) and the command ($ ...).
    # (less the docs test's "..." line standing for the wrapped rest of
    # the changes, which this test does not compare)
    example = [ln for ln in example.split("```", 2)[1].splitlines()
               if ln.strip() and not ln.strip().startswith("...")][2:]
    proc = cli.run(*HOST, "report", "--periodic", "2", "--interval", "0",
                   env={"XDG_STATE_HOME": str(tmp_path)})
    succeeded(proc.returncode, proc.stderr)
    printed = [ln for ln in proc.stdout.splitlines()
               if ln.startswith(("periodic ", "     ", "  claims: "))]

    def calls(lines):
        # NOTE: the root's name is the machine's; the calls are not.
        return [re.sub(r", changed: .*", "", ln.strip()) for ln in lines]

    assert calls(printed) == calls(example)
