"""The report client with the REAL plugins, on a host snapshot, against
real (embedded) Placement on a SQLite file.

Each test plays a compute agent: a ``PluginManager(auto_commit=False,
checkpoint_dir=...)`` and a ``ReportClient``, wired as ``compute-plugins
report`` wires them (:func:`compute_plugins.cmd.report.run_periodic`). A
"restart" is a new manager and a new report client on the same database and
state directory.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest
from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins import host as host_discovery
from compute_plugins.cmd import report as report_cmd
from compute_plugins.placement import embedded, report
from compute_plugins.plugin import names
from compute_plugins.runtime.manager import PluginManager
from tests.functional.placement.test_report import placement_state, tree_usage

SNAPSHOT = Path(__file__).parents[2] / "fixtures" / "hosts" / "sriov"
NODE = "sriov-compute-01"
PF = NODE + "_pf_0000_02_10_7"
PF_NODEDEV = "nodedev/pci_0000_02_10_7.xml"
NUMA0 = NODE + "_NUMA0"


@pytest.fixture
def emb(tmp_path):
    service = embedded.EmbeddedPlacement(
        embedded.sqlite_url(str(tmp_path / "placement.sqlite"))).start()
    yield service
    service.close()


@pytest.fixture
def snapshot(tmp_path):
    """A copy of the ``sriov`` snapshot that a test may change."""
    path = tmp_path / "host"
    shutil.copytree(SNAPSHOT, path)
    return path


class Agent:
    """One run of the compute agent (a process's worth of state)."""

    def __init__(self, emb, snapshot, state_dir, plugins=None):
        conf = cfg.ConfigOpts()
        conf_areas.register_all(conf)
        conf([], project="compute-plugins-tests", default_config_files=[],
             default_config_dirs=[])
        if plugins is not None:
            conf.set_override("enabled_plugins", plugins, "compute_plugins")
        self.snapshot = str(snapshot)
        self.manager = PluginManager(conf, auto_commit=False,
                                     checkpoint_dir=str(state_dir))
        self.client = report.ReportClient(emb.client(), refresh_interval=0,
                                          sleep=lambda s: None)

    def periodic(self):
        host = host_discovery.discover_host(host_snapshot=self.snapshot)
        self.manager.discover(host)
        assert host.hostname == NODE
        return report_cmd.run_periodic(self.client, self.manager,
                                       host.hostname)


@pytest.fixture
def agent(emb, snapshot, tmp_path):
    def make(plugins=None):
        return Agent(emb, snapshot, tmp_path / "state", plugins)
    return make


def uuids_by_name(client, root_uuid):
    return {rp["name"]: rp["uuid"] for rp in client.get(
        "/resource_providers?in_tree=%s" % root_uuid)["resource_providers"]}


def ok(result):
    assert result.ok, result.error
    return result


def set_reserved(client, rp_uuid, rc, reserved):
    """What an operator does with another client (e.g. to drain a PF)."""
    path = "/resource_providers/%s/inventories/%s" % (rp_uuid, rc)
    cur = client.get(path)
    cur["reserved"] = reserved
    client.put(path, cur)


def test_operator_reserved_on_a_pf_survives_periodics_and_restart(
        emb, agent):
    first = agent()
    ok(first.periodic())
    op = emb.client()
    pf = names.provider_uuid(NODE, "pf", "0000:02:10.7")
    numa0 = names.provider_uuid(NODE, "numa", "0")
    assert uuids_by_name(op, names.provider_uuid(NODE))[PF] == pf
    set_reserved(op, pf, "SRIOV_NET_VF", 4)        # drain the PF
    set_reserved(op, numa0, "MEMORY_MB", 1000)     # config says 512

    # The next periodic re-reads the tree (as after SIGHUP or a refresh).
    first.client.clear_cache()
    ok(first.periodic())
    state = placement_state(op, names.provider_uuid(NODE))
    assert state[PF]["inventory"]["SRIOV_NET_VF"]["reserved"] == 4
    # [compute] reserved_host_memory_mb is configuration: it wins (nova).
    assert state[NUMA0]["inventory"]["MEMORY_MB"]["reserved"] == 512
    assert first.periodic().calls == {}

    # Restart: a new manager and report client on the same database.
    result = ok(agent().periodic())
    assert not any(c.startswith("PUT") for c in result.calls), result
    state = placement_state(op, names.provider_uuid(NODE))
    assert state[PF]["inventory"]["SRIOV_NET_VF"]["reserved"] == 4


def test_reparenting_reaches_placement(emb, agent):
    ok(agent(["sriov", "disk"]).periodic())
    op = emb.client()
    root_uuid = names.provider_uuid(NODE)
    pf = names.provider_uuid(NODE, "pf", "0000:02:10.7")
    assert placement_state(op, root_uuid)[PF]["parent"] == NODE
    consumer = str(uuid.uuid4())
    op.put("/allocations/%s" % consumer, {
        "allocations": {pf: {"resources": {"SRIOV_NET_VF": 1}}},
        "project_id": str(uuid.uuid4()), "user_id": str(uuid.uuid4()),
        "consumer_generation": None, "consumer_type": "INSTANCE"})

    # The defaults enable numa: the PF belongs under its NUMA cell.
    second = agent()
    result = ok(second.periodic())
    assert result.calls.get("PUT /resource_providers/{uuid}") == 1, result
    state = placement_state(op, root_uuid)
    assert state[PF]["parent"] == NUMA0
    assert uuids_by_name(op, root_uuid)[PF] == pf
    # the allocation stays with the provider's uuid: no reshape needed
    assert op.get("/allocations/%s" % consumer)["allocations"][pf][
        "resources"] == {"SRIOV_NET_VF": 1}
    assert second.periodic().calls == {}


def test_node_registered_by_nova_under_another_uuid_is_adopted(emb, agent):
    op = emb.client()
    nova_uuid = str(uuid.uuid4())
    op.post("/resource_providers", {"name": NODE, "uuid": nova_uuid})

    result = ok(agent().periodic())
    assert result.calls["GET /resource_providers?name"] == 1
    state = placement_state(op, nova_uuid)
    assert state[NODE]["parent"] is None
    assert state[PF]["parent"] == NUMA0
    assert "DISK_GB" in state[NODE]["inventory"]
    assert op.get("/resource_providers?uuid=%s" % names.provider_uuid(
        NODE))["resource_providers"] == []
    listed = op.get("/resource_providers?name=%s" % NODE)["resource_providers"]
    assert [rp["uuid"] for rp in listed] == [nova_uuid]

    # a restart finds it again and has nothing to write
    again = ok(agent().periodic())
    assert not any(c.startswith(("PUT", "POST", "DELETE"))
                   for c in again.calls), again


def test_device_removed_while_the_agent_was_down_is_deleted(
        emb, agent, snapshot):
    ok(agent().periodic())
    op = emb.client()
    assert PF in placement_state(op, names.provider_uuid(NODE))
    (snapshot / PF_NODEDEV).unlink()

    result = ok(agent().periodic())        # a new agent: a restart
    assert "delete %s" % PF in result.changed, result
    assert PF not in placement_state(op, names.provider_uuid(NODE))


def test_device_removed_during_a_failed_periodic_is_deleted_later(
        emb, agent, snapshot):
    running = agent()
    ok(running.periodic())
    op = emb.client()
    (snapshot / PF_NODEDEV).unlink()
    emb.stop()
    try:
        assert not running.periodic().ok
    finally:
        emb.start()
    result = ok(running.periodic())
    assert "delete %s" % PF in result.changed, result
    assert PF not in placement_state(op, names.provider_uuid(NODE))
    assert running.periodic().calls == {}


def test_reshape_from_novas_flat_layout(emb, agent):
    """nova registered the node flat (VCPU, MEMORY_MB, DISK_GB on the root,
    under its own uuid) and an instance runs; the plugins move VCPU and
    MEMORY_MB onto the NUMA cell through one POST /reshaper."""
    op = emb.client()
    root_uuid = str(uuid.uuid4())
    op.post("/resource_providers", {"name": NODE, "uuid": root_uuid})
    gen = op.get("/resource_providers/%s" % root_uuid)["generation"]
    op.put("/resource_providers/%s/inventories" % root_uuid, {
        "resource_provider_generation": gen,
        "inventories": {
            "VCPU": {"total": 32, "allocation_ratio": 4.0},
            "MEMORY_MB": {"total": 61907, "reserved": 512},
            "DISK_GB": {"total": 893},
        }})
    consumer = str(uuid.uuid4())
    op.put("/allocations/%s" % consumer, {
        "allocations": {root_uuid: {"resources": {
            "VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 10}}},
        "project_id": str(uuid.uuid4()), "user_id": str(uuid.uuid4()),
        "consumer_generation": None, "consumer_type": "INSTANCE"})
    before = tree_usage(op, root_uuid)

    running = agent()
    result = ok(running.periodic())
    assert result.reshaped, result
    assert result.calls["POST /reshaper"] == 1
    assert "PUT /resource_providers/{uuid}/inventories" not in result.calls

    numa0 = uuids_by_name(op, root_uuid)[NUMA0]
    alloc = op.get("/allocations/%s" % consumer)["allocations"]
    assert alloc[numa0]["resources"] == {"VCPU": 2, "MEMORY_MB": 2048}
    assert alloc[root_uuid]["resources"] == {"DISK_GB": 10}
    assert tree_usage(op, root_uuid) == before
    root_inv = op.get("/resource_providers/%s/inventories" % root_uuid)[
        "inventories"]
    assert set(root_inv) == {"DISK_GB"}
    assert running.periodic().calls == {}


def test_report_command_discovers_once_per_periodic(tmp_path, monkeypatch):
    """``run`` in-process: the first periodic uses the discovery done before
    Placement was contacted (no second discovery), and the contributions
    are committed to the state directory."""
    import argparse
    import io

    from oslo_log import log as oslo_logging

    from compute_plugins.cmd import common

    conf = cfg.ConfigOpts()
    oslo_logging.register_options(conf)
    conf_areas.register_all(conf)
    conf([], project="compute-plugins-tests", default_config_files=[],
         default_config_dirs=[])
    conf.set_override("embedded_connection", "sqlite://", "placement")
    conf.set_override("state_dir", str(tmp_path / "state"), "compute_plugins")
    calls = []
    real = common.discover

    def counting(conf_, args_):
        calls.append(1)
        return real(conf_, args_)

    monkeypatch.setattr(common, "discover", counting)
    monkeypatch.setattr(report_cmd.Loop, "install_signals", lambda self: None)
    monkeypatch.setattr("sys.stdout", io.StringIO())
    args = argparse.Namespace(
        host_snapshot=str(SNAPSHOT), libvirt_uri=None, placement_url=None,
        periodic=2, interval=0.0, format="json", rebuild_ledger=False)
    assert report_cmd.run(conf, args) == 0
    assert len(calls) == 2
    assert (tmp_path / "state" / ("%s.contributions.json" % NODE)).exists()


def test_sigint_stops_after_the_current_periodic(emb):
    import os
    import signal

    client = report.ReportClient(emb.client())
    done = []

    def step():
        if not done:
            os.kill(os.getpid(), signal.SIGINT)   # during the periodic
        done.append(1)
        return report.PeriodicResult(len(done), {}, [])

    sigs = (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)
    old = {s: signal.getsignal(s) for s in sigs}
    loop = report_cmd.Loop(client, step, interval=0, count=None,
                           out=open(os.devnull, "w"))
    try:
        loop.install_signals()
        assert loop.run() == 0
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    assert done == [1]
