"""SEV slots and vPMEM namespaces end to end: the real embedded Placement,
a real compute agent on a snapshot (libvirt's SEV domain capabilities and
nova's ndctl capture) in a thread, the real scheduler. The allocations in
Placement are what the assignments take, and a namespace is never given
twice.

The plugins load through their entry points (the project installed).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import threading
import uuid

import pytest
from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins.compute.agent import ComputeAgent
from compute_plugins.host.snapshot import load_snapshot
from compute_plugins.hoststate.store import HostStateStore
from compute_plugins.placement import embedded
from compute_plugins.runtime.manager import PluginManager
from compute_plugins.scheduler.selection import Scheduler
from tests.functional.request.hosts import Placement
from tests.unit.request.conftest import build

HOSTS = pathlib.Path(__file__).parents[2] / "fixtures" / "hosts"
PLUGINS = ["numa", "disk", "memenc", "pmem"]
UEFI = {"hw_firmware_type": "uefi", "hw_machine_type": "q35"}


def plugin_conf(state_dir=None):
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    conf([], project="compute-plugins-tests", default_config_files=[],
         default_config_dirs=[])
    conf.set_override("enabled_plugins", PLUGINS, "compute_plugins")
    PluginManager(conf)  # NOTE: registers the plugins' option groups
    conf.set_override("pmem_namespaces", ["4GB:ns_0", "SMALL:ns_1|ns_2"], "libvirt")
    if state_dir:
        conf.set_override("state_dir", state_dir, "compute_plugins")
        conf.set_override("claim_poll_interval", 0.05, "compute")
    return conf


@pytest.fixture
def cloud(tmp_path):
    snapshot = tmp_path / "host"
    shutil.copytree(HOSTS / "memenc" / "sev", snapshot)
    shutil.copy(HOSTS / "pmem" / "ndctl.json", snapshot / "ndctl.json")
    info = load_snapshot(str(snapshot))
    emb = embedded.EmbeddedPlacement("sqlite://").start()
    store = HostStateStore("sqlite:///%s" % os.path.join(tmp_path, "hs.sqlite"))
    agent = ComputeAgent.from_config(plugin_conf(str(tmp_path / "state")), emb.client(),
                                     store, lambda: info)
    assert agent.run_once().ok
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop, 3600.0), daemon=True)
    thread.start()
    sched_conf = cfg.ConfigOpts()
    conf_areas.register_all(sched_conf)
    sched_conf([], default_config_files=[], default_config_dirs=[])
    scheduler = Scheduler(sched_conf, PluginManager(plugin_conf()).plugins, emb.client(),
                          store)
    yield scheduler, Placement(emb), agent, info.hostname
    stop.set()
    thread.join(30)
    store.close()
    emb.close()


def usages(placement):
    """Provider name -> its non-zero usages in Placement."""
    uuid_of = {p["name"]: p["uuid"] for p in placement.get("/resource_providers").json()[
        "resource_providers"]}
    out = {}
    for name, rp in uuid_of.items():
        usage = placement.get("/resource_providers/%s/usages" % rp).json()["usages"]
        out[name] = {rc: n for rc, n in usage.items() if n}
    return out


def test_sev_and_pmem_guests_are_placed_and_counted(cloud):
    scheduler, placement, agent, hostname = cloud
    specs = {"hw:mem_encryption": "true", "hw:pmem": "SMALL", "hw:numa_nodes": "1"}
    placed = []
    for _ in range(2):
        spec = build(scheduler.plugins, specs, vcpus=2, memory_mb=1024, image=UEFI)
        result = scheduler.schedule(spec, str(uuid.uuid4()), "project", "user")
        assert result.placed, result.reasons
        placed.append(result.spec.decision.assignments)
    assert [a["pmem"].namespaces[0].name for a in placed] == ["ns_1", "ns_2"]
    assert {a["memenc"].model for a in placed} == {"amd-sev"}
    used = usages(placement)
    assert used[hostname + "_amd_sev"] == {"MEM_ENCRYPTION_CONTEXT": 2}
    assert used[hostname].get("CUSTOM_PMEM_NAMESPACE_SMALL") == 2
    # the agent's ledger holds both namespaces: a third SMALL has none
    spec = build(scheduler.plugins, specs, vcpus=2, memory_mb=1024, image=UEFI)
    third = scheduler.schedule(spec, str(uuid.uuid4()), "project", "user")
    assert not third.placed
    assert usages(placement) == used
