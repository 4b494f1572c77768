"""The scheduler's decision survives to the compute in stock nova.

nova 34's own pieces, as a nova operator runs them: the host is reported by
nova's ``ResourceTracker`` with the driver mixin (``PluginProviderTreeMixin``
on nova's ``LibvirtDriver`` over nova's fake libvirt: 2 cells of 2
hyper-threaded cores, ``cpu_dedicated_set`` 0-7, so 4 + 4 pinned CPUs) into
real Placement (nova's ``PlacementFixture``); its plugin states are
published to a host-state store (SQLite) by the mixin after each
``update_provider_tree`` (under the decisions of the instances on the
host); nova's own
``SchedulerManager.select_destinations`` (Placement's allocation candidates
for nova's query, nova's ``HostManager`` filtering with ``PluginFitFilter``
loaded by class path from ``[filter_scheduler]``, nova's weighers, the
claims in Placement, ``consume_from_request`` between instances) schedules
the requests. Only the host states' source is the test's
(``_get_all_host_states``, nova's "template method": the host's
``HostState`` made by nova's ``HostManager`` from the ``ComputeNode`` nova's
tracker wrote, kept between requests as nova keeps it).

The compute side is the mixin's ``plugin_decision`` (what its ``spawn``
calls first), reading the decision the filter recorded for each instance.

Skipped without nova unless ``COMPUTE_PLUGINS_COMPAT`` is set.
"""

from __future__ import annotations

import datetime
import json
import os
import uuid
import warnings
from typing import Any
from urllib import parse

import pytest

if os.environ.get("COMPUTE_PLUGINS_COMPAT"):
    import nova.scheduler.manager  # noqa: F401
else:
    pytest.importorskip("nova.scheduler.manager")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from nova import context as nova_context
    from nova import exception as nova_exception
    from nova import objects
    from nova.compute import resource_tracker
    from nova.scheduler import manager as scheduler_manager
    from nova.scheduler.client import report
    from nova.virt import hardware
    from nova.virt.libvirt import driver as libvirt_driver
    from oslo_messaging.rpc import dispatcher as rpc_dispatcher  # type: ignore[import-untyped]

from compute_plugins.hoststate.store import HostStateStore  # noqa: E402
from compute_plugins.nova import decisions as nova_decisions  # noqa: E402
from compute_plugins.nova import spec as nova_spec  # noqa: E402
from compute_plugins.nova.driver import (  # noqa: E402
    DecisionRefused,
    PluginProviderTreeMixin,
)
from compute_plugins.request.spec import RequestSpec  # noqa: E402
from resources.numa.request import NUMAAssignment  # noqa: E402
from tests.compat.nova_libvirt import (  # noqa: E402
    NovaLibvirt,
    fakelibvirt,
)
from tests.unit.resources import helpers  # noqa: E402

NODE = "compute1"
PROJECT = "a0000000-0000-0000-0000-000000000001"
USER = "b0000000-0000-0000-0000-000000000001"
FILTER = "compute_plugins.nova.filters.PluginFitFilter"
CELL = "c0000000-0000-0000-0000-000000000001"


class PluginLibvirtDriver(PluginProviderTreeMixin, libvirt_driver.LibvirtDriver):
    """nova's libvirt driver with the plugins."""


class Scheduler(scheduler_manager.SchedulerManager):  # type: ignore[misc]
    """nova's scheduler; its hosts are the one compute node nova's tracker
    wrote, as nova's ``HostManager`` makes and keeps host states."""

    def __init__(self, compute: Any, service: Any) -> None:
        super().__init__()
        self.state = self.host_manager.host_state_cls(NODE, NODE, CELL)
        self.compute, self.service = compute, service

    def _get_all_host_states(self, context: Any, spec_obj: Any,
                             provider_summaries: Any) -> Any:
        if self.compute.uuid in (provider_summaries or {}):
            self.state.update(self.compute, dict(self.service), [], {})
            return iter([self.state])
        return iter([])


class World:
    """nova's services, Placement, the host-state store."""

    def __init__(self, nova: NovaLibvirt, placement: Any, store: HostStateStore,
                 driver: Any) -> None:
        self.nova, self.placement, self.store, self.driver = nova, placement, store, driver
        self.context = nova_context.get_admin_context()
        self.service = objects.Service(self.context, host=NODE,
                                       binary="nova-compute", topic="compute")
        self.service.create()
        self.tracker = resource_tracker.ResourceTracker(
            NODE, driver, report.SchedulerReportClient())
        self.tracker.service_ref = self.service
        self.tracker.update_available_resource(self.context, NODE, startup=True)
        self.compute = self.tracker.compute_nodes[NODE]
        self.scheduler = Scheduler(self.compute, self.service)

    def spec(self, vcpus: int, instances: int, extra_specs: dict[str, str],
             root_gb: int = 1) -> Any:
        flavor = objects.Flavor(name="pinned%d" % vcpus, vcpus=vcpus, memory_mb=512,
                                root_gb=root_gb, ephemeral_gb=0, swap=0,
                                flavorid="f%d" % vcpus,
                                extra_specs=extra_specs, disabled=False, is_public=True,
                                description=None, rxtx_factor=1.0, vcpu_weight=0,
                                projects=[])
        image = objects.ImageMeta.from_dict({"name": "img", "properties": {}})
        spec = objects.RequestSpec.from_components(
            self.context, str(uuid.uuid4()), image, flavor,
            hardware.numa_get_constraints(flavor, image),
            objects.InstancePCIRequests(requests=[]), {}, None, None,
            project_id=PROJECT, user_id=USER)
        spec.num_instances = instances
        return spec

    def select(self, spec: Any, instances: list[str], scheduler: Any = None) -> list[Any]:
        return (scheduler or self.scheduler).select_destinations(
            self.context, spec_obj=spec, instance_uuids=instances,
            return_objects=True, return_alternates=False)

    def allocations(self, consumer: str) -> dict[str, dict[str, int]]:
        body = self.placement.api.get("/allocations/%s" % consumer, version="1.28").body
        return {rp: a["resources"] for rp, a in body["allocations"].items()}

    def instance(self, instance_uuid: str, spec: Any, compute: Any = None) -> Any:
        """The instance as nova's conductor and tracker leave it on the
        host (``compute``: its compute node, default this host's): its NUMA
        topology as nova's claim fits it on nova's view of the host (nova's
        own choice of cells and CPUs)."""
        compute = compute or self.compute
        host = objects.NUMATopology.obj_from_db_obj(compute.numa_topology)
        claim = hardware.numa_fit_instance_to_host(
            host, hardware.numa_get_constraints(spec.flavor, spec.image),
            provider_mapping=None)
        inst = objects.Instance(
            self.context, uuid=instance_uuid, host=compute.host,
            node=compute.hypervisor_hostname, compute_id=compute.id,
            project_id=PROJECT, user_id=USER, flavor=spec.flavor,
            vcpus=spec.flavor.vcpus, memory_mb=spec.flavor.memory_mb,
            numa_topology=claim)
        inst.create()
        return inst


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    nova = NovaLibvirt()
    nova.setUp()
    conf, fixture = helpers.make_conf()
    try:
        placement = nova.services()
        nova.connect(NODE, host_info=fakelibvirt.HostInfo(
            cpu_nodes=2, cpu_sockets=1, cpu_cores=2, cpu_threads=2))
        path = tmp_path_factory.mktemp("store") / "hs.sqlite"
        url = "sqlite:///%s" % path
        conf_file = path.parent / "compute-plugins.conf"
        conf_file.write_text("[compute_plugins]\nenabled_plugins = numa,disk\n"
                             "[host_state]\nconnection = %s\n" % url)
        from compute_plugins.nova import conf as adapter_conf
        adapter_conf.register_nova_opts(nova.conf)
        nova.conf.set_override("config_file", [str(conf_file)], "compute_plugins")
        nova.conf.set_override("available_filters", [FILTER], "filter_scheduler")
        nova.conf.set_override("enabled_filters", ["PluginFitFilter"],
                               "filter_scheduler")
        conf.set_override("cpu_dedicated_set", "0-7", "compute")
        nova.conf.set_override("cpu_dedicated_set", "0-7", "compute")
        nova.conf.set_override("host", NODE)
        conf.set_override("reserved_host_memory_mb", 0, "compute")
        driver = nova.driver(PluginLibvirtDriver)
        driver.plugin_manager = helpers.manager(conf, ("numa", "disk"))
        with HostStateStore(url) as store:
            driver.plugin_decisions = nova_decisions.NovaDecisions(store)
            yield World(nova, placement, store, driver)
    finally:
        nova.conf.clear_override("config_file", "compute_plugins")
        fixture.cleanUp()
        nova.cleanUp()


def pinned(world: World, vcpus: int, instances: int) -> tuple[Any, list[str]]:
    spec = world.spec(vcpus, instances, {"hw:cpu_policy": "dedicated"})
    return spec, [str(uuid.uuid4()) for _ in range(instances)]


def recorded(world: World, instance: str) -> RequestSpec:
    spec = nova_decisions.decision_for(world.driver.plugin_decisions, instance,
                                       NODE, world.driver.plugin_manager.plugins)
    assert spec is not None and spec.decision is not None
    return spec


def host_cpus(spec: RequestSpec) -> list[int]:
    assert spec.decision is not None
    numa = spec.decision.assignments["numa"]
    assert isinstance(numa, NUMAAssignment)
    return [cpu for cell in numa.cells for cpu in cell.pinning.values()]


def test_a_two_node_guest_is_claimed_on_both_cells_as_decided(world):
    """nova asks its guest's CPUs as one unsuffixed group (each resource
    class from one provider): no candidate of nova's splits 4 pinned CPUs
    2 + 2 over the cells. The filter moves nova's candidate onto the
    decision's providers, and nova claims that in Placement."""
    spec = world.spec(4, 1, {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2"})
    instance = str(uuid.uuid4())
    world.select(spec, [instance])
    try:
        decision = recorded(world, instance).decision
        assert decision is not None
        numa = decision.assignments["numa"]
        assert isinstance(numa, NUMAAssignment)
        assert sorted(c.host_cell for c in numa.cells) == [0, 1]
        claimed = world.allocations(instance)
        assert claimed == {rp: dict(r) for rp, r in decision.allocations.items()}
        assert sorted(r.get("PCPU", 0) for r in claimed.values()) == [0, 2, 2]
    finally:
        world.placement.api.delete("/allocations/%s" % instance)


PATCH = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "contrib", "nova",
                     "0001-scheduler-candidates-of-nested-only-allocations.patch")


PATCH_NUMA = os.path.join(os.path.dirname(PATCH),
                          "0002-scheduler-one-request-group-per-guest-numa-node.patch")


def patched_modules(tmp_path: Any, patch_file: str, paths: list[str]) -> dict[str, Any]:
    """nova's modules at ``paths`` (``nova/...py``) with contrib/nova's
    ``patch_file`` applied to copies of them, each loaded under another
    name (nova's own stay as they are)."""
    import importlib.util
    import shutil
    import subprocess
    # <site-packages>/nova/scheduler/manager.py
    site = os.path.dirname(os.path.dirname(os.path.dirname(scheduler_manager.__file__)))
    for path in paths:
        copy = tmp_path / path
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(os.path.join(site, path), copy)
    with open(patch_file, "rb") as patch:
        subprocess.run(["patch", "-s", "-p1", "-d", str(tmp_path)], stdin=patch,
                       check=True)
    modules = {}
    for path in paths:
        name = "nova_patched_" + path[:-3].replace("/", "_")
        spec = importlib.util.spec_from_file_location(name, tmp_path / path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules[path] = module
    return modules


def patched_scheduler(world: World, tmp_path: Any) -> Any:
    """nova's scheduler manager with contrib/nova's patch applied (to a
    copy of nova's module, loaded under another name)."""
    module = patched_modules(tmp_path, PATCH, ["nova/scheduler/manager.py"])[
        "nova/scheduler/manager.py"]
    patched = type("PatchedScheduler", (Scheduler,), {
        "select_destinations": module.SchedulerManager.select_destinations})
    return patched(world.compute, world.service)


def test_a_guest_without_root_resources_needs_the_nova_patch(world, tmp_path):
    """A boot-from-volume guest (no DISK_GB): every resource it asks is on
    the NUMA cell providers, nothing on the root. Stock nova gives the
    host none of Placement's candidates (they are indexed by provider and a
    host takes its root's): NoValidHost. With contrib/nova's patch it is
    scheduled, the decision recorded and claimed."""
    spec = world.spec(2, 1, {"hw:cpu_policy": "dedicated"}, root_gb=0)
    instance = str(uuid.uuid4())
    with pytest.raises(rpc_dispatcher.ExpectedException) as raised:
        world.select(spec, [instance])
    assert isinstance(raised.value.exc_info[1], nova_exception.NoValidHost)
    spec = world.spec(2, 1, {"hw:cpu_policy": "dedicated"}, root_gb=0)
    world.select(spec, [instance], patched_scheduler(world, tmp_path))
    try:
        decision = recorded(world, instance).decision
        assert decision is not None
        claimed = world.allocations(instance)
        assert claimed == {rp: dict(r) for rp, r in decision.allocations.items()}
        assert world.compute.uuid not in claimed
    finally:
        world.placement.api.delete("/allocations/%s" % instance)


def numa_patched_modules(world: World, tmp_path: Any, paths: list[str]) -> dict[str, Any]:
    """nova's ``nova.scheduler.utils`` (and ``paths``) with contrib/nova's
    0002 patch, its option registered in nova's configuration (off)."""
    modules = patched_modules(tmp_path, PATCH_NUMA, [
        "nova/conf/scheduler.py", "nova/scheduler/utils.py", *paths])
    option = next(o for o in modules["nova/conf/scheduler.py"].filter_scheduler_opts
                  if o.name == "numa_in_placement")
    if "numa_in_placement" not in world.nova.conf.filter_scheduler:
        world.nova.conf.register_opt(option, group="filter_scheduler")
    return modules


def test_the_nova_patch_asks_one_group_per_guest_node(world, tmp_path):
    """The query of contrib/nova's 0002 patch: stock with the option off;
    with it, one ``_NUMA<N>`` group per guest node on a ``HW_NUMA_ROOT``
    provider, split as the topology, the emulator threads' PCPU with node
    0; ``isolate`` unless the request has other numbered groups (then
    nova's ``none``) or the flavor says; a guest asking nothing else of
    the unsuffixed group (boot from volume) keeps it."""
    utils = numa_patched_modules(world, tmp_path, [])["nova/scheduler/utils.py"]

    def query(vcpus: int, extra: dict[str, str], root_gb: int = 1) -> str:
        request = utils.ResourceRequest.from_request_spec(
            world.spec(vcpus, 1, extra, root_gb=root_gb))
        return parse.unquote(request.to_querystring())

    two = {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2"}
    stock = query(8, two)
    assert "resources=DISK_GB:1,MEMORY_MB:512,PCPU:8" in stock and "_NUMA" not in stock
    world.nova.conf.set_override("numa_in_placement", True, "filter_scheduler")
    try:
        asked = query(8, two).split("&")
        assert sorted(asked) == sorted([
            "group_policy=isolate", "limit=1000", "resources=DISK_GB:1",
            "resources_NUMA0=MEMORY_MB:256,PCPU:4", "required_NUMA0=HW_NUMA_ROOT",
            "resources_NUMA1=MEMORY_MB:256,PCPU:4", "required_NUMA1=HW_NUMA_ROOT"])
        uneven = query(8, {**two, "hw:numa_cpus.0": "0-1", "hw:numa_cpus.1": "2-7",
                           "hw:numa_mem.0": "128", "hw:numa_mem.1": "384",
                           "hw:emulator_threads_policy": "isolate"})
        assert "resources_NUMA0=MEMORY_MB:128,PCPU:3" in uneven
        assert "resources_NUMA1=MEMORY_MB:384,PCPU:6" in uneven
        floating = query(2, {})
        assert "_NUMA" not in floating and "VCPU:2" in floating
        shared = query(4, {"hw:numa_nodes": "2", "resources_X:CUSTOM_Y": "1"})
        assert "group_policy=none" in shared
        assert "resources_NUMA1=MEMORY_MB:256,VCPU:2" in shared
        own = query(4, {"hw:numa_nodes": "2", "group_policy": "none"})
        assert "group_policy=none" in own and "resources_NUMA0" in own
        # none: Placement's answer also holds two nodes on one cell, which
        # the filter refuses; no limit, so that they hide no fitting one
        assert "limit=" not in shared and "limit=" not in own
        # boot from volume: nothing left for the unsuffixed group, whose
        # traits (here the thread policy's) Placement refuses alone
        volume = query(8, {**two, "hw:cpu_thread_policy": "isolate"}, root_gb=0)
        assert "_NUMA" not in volume and "PCPU:8" in volume
        assert "required=!HW_CPU_HYPERTHREADING" in volume
    finally:
        world.nova.conf.clear_override("numa_in_placement", "filter_scheduler")


def numa_patched_scheduler(world: World, tmp_path: Any) -> Any:
    """nova's scheduler asking Placement with contrib/nova's 0002 patch
    (``nova.scheduler.utils`` patched, its option registered in nova's
    configuration; nova's ``select_destinations`` run on it)."""
    modules = numa_patched_modules(world, tmp_path, ["nova/scheduler/manager.py"])
    manager = modules["nova/scheduler/manager.py"]
    manager.utils = modules["nova/scheduler/utils.py"]
    patched = type("NumaPatchedScheduler", (Scheduler,), {
        "select_destinations": manager.SchedulerManager.select_destinations})
    return patched(world.compute, world.service)


def test_a_guest_larger_than_a_cell_needs_the_nova_patch(world, tmp_path):
    """8 pinned vCPUs in 2 guest NUMA nodes on 2 cells of 4 PCPUs. Stock
    nova asks ``PCPU:8`` in its unsuffixed group, which takes a resource
    class from one provider: no cell has 8, no candidate, NoValidHost.
    With contrib/nova's 0002 patch and ``[filter_scheduler]
    numa_in_placement`` nova asks one group per guest node
    (``resources_NUMA0``, ``resources_NUMA1``, ``group_policy=isolate``):
    the guest is scheduled, each node's 4 vCPUs on the cell Placement
    allocated its group from, and nova's driver builds the guest's NUMA
    configuration (its XML) from the decision: 4 vCPUs pinned in each
    host cell, each node's memory on its cell."""
    extra = {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2"}
    instance = str(uuid.uuid4())
    with pytest.raises(rpc_dispatcher.ExpectedException) as raised:
        world.select(world.spec(8, 1, extra), [instance])
    assert isinstance(raised.value.exc_info[1], nova_exception.NoValidHost)
    scheduler = numa_patched_scheduler(world, tmp_path)
    # the option's default is stock nova's query
    with pytest.raises(rpc_dispatcher.ExpectedException):
        world.select(world.spec(8, 1, extra), [instance], scheduler)
    world.nova.conf.set_override("numa_in_placement", True, "filter_scheduler")
    try:
        spec = world.spec(8, 1, extra)
        world.select(spec, [instance], scheduler)
        decision = recorded(world, instance).decision
        assert decision is not None
        numa = decision.assignments["numa"]
        assert isinstance(numa, NUMAAssignment)
        cells = {c.host_cell: sorted(c.pinning.values()) for c in numa.cells}
        assert sorted(cells) == [0, 1] and all(len(p) == 4 for p in cells.values())
        claimed = world.allocations(instance)
        assert claimed == {rp: dict(r) for rp, r in decision.allocations.items()}
        assert sorted(r.get("PCPU", 0) for r in claimed.values()) == [0, 4, 4]
        # each guest node on the cell Placement gave its group
        # each guest node on the cell Placement gave its group in the
        # candidate nova claimed (its first; Placement answers both orders)
        nova_claimed = scheduler.state.allocation_candidates[0]
        assert len({json.dumps(c["mappings"], sort_keys=True)
                    for c in scheduler.state.allocation_candidates}) == 2
        assert decision.mappings == {g: tuple(rps) for g, rps in
                                     nova_claimed["mappings"].items()}
        for c in numa.cells:
            assert decision.mappings["_NUMA%d" % c.guest_cell] == (c.provider_uuid,)
            assert claimed[c.provider_uuid]["PCPU"] == 4
        # the compute: nova's claim carries the decision, nova's driver
        # builds the guest's NUMA configuration from it
        inst = world.instance(instance, spec)
        world.driver.plugin_decision(world.context, inst, {
            rp: {"resources": r} for rp, r in claimed.items()})
        guest = world.driver._get_guest_numa_config(
            inst.numa_topology, spec.flavor, spec.image)
        pins = {pin.id: sorted(pin.cpuset) for pin in guest.cputune.vcpupin}
        by_cell: dict[int, list[int]] = {}
        for node in guest.numaconfig.cells:
            host_cell = next(m.nodeset for m in guest.numatune.memnodes
                             if m.cellid == node.id)
            by_cell[host_cell[0]] = sorted(
                cpu for vcpu in node.cpus for cpu in pins[vcpu])
        assert by_cell == cells
        inst.destroy()
    finally:
        world.nova.conf.clear_override("numa_in_placement", "filter_scheduler")
        world.placement.api.delete("/allocations/%s" % instance)


def test_the_nova_patch_without_isolate_does_not_limit_the_candidates(world, tmp_path):
    """With ``group_policy=none`` (the flavor's, or contrib/nova's 0002
    patch beside a port's or device's group) Placement also answers
    candidates with two guest nodes on one cell, which the scheduler filter
    refuses after Placement has cut its answer at ``[scheduler]
    max_placement_results``: those refused candidates must not hide the
    ones that fit. Like nova's affinity hints, the patch then asks without
    a limit (here a limit of 1: 2 nodes of 1 pinned vCPU on 2 cells of 4,
    Placement's first candidate has both nodes on cell 0)."""
    extra = {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2",
             "group_policy": "none"}
    instance = str(uuid.uuid4())
    scheduler = numa_patched_scheduler(world, tmp_path)
    world.nova.conf.set_override("numa_in_placement", True, "filter_scheduler")
    world.nova.conf.set_override("max_placement_results", 1, "scheduler")
    try:
        world.select(world.spec(2, 1, extra), [instance], scheduler)
        numa = recorded(world, instance).decision.assignments["numa"]
        assert sorted(c.host_cell for c in numa.cells) == [0, 1]
        # isolate: every candidate has each node on its own cell, the limit stays
        isolated = {**extra, "group_policy": "isolate"}
        utils = numa_patched_modules(world, tmp_path / "query", [])[
            "nova/scheduler/utils.py"]
        query = utils.ResourceRequest.from_request_spec(world.spec(2, 1, isolated))
        assert "limit=1" in query.to_querystring().split("&")
    finally:
        world.nova.conf.clear_override("max_placement_results", "scheduler")
        world.nova.conf.clear_override("numa_in_placement", "filter_scheduler")
        world.placement.api.delete("/allocations/%s" % instance)


@pytest.fixture(scope="module")
def three(world):
    """num_instances=3 of 2 pinned vCPUs on one host with 4 + 4 pinned CPUs."""
    before = dict(nova_spec.PARSES)
    spec, instances = pinned(world, 2, 3)
    selections = world.select(spec, instances)
    parses = nova_spec.PARSES[nova_spec.SCHEDULER] - before.get(nova_spec.SCHEDULER, 0)
    # on the host, as nova's conductor and tracker leave them, then what
    # the mixin's spawn does first, and nova's save of the instance after
    compute_before = nova_spec.PARSES[nova_spec.COMPUTE]
    on_host, executed = [], []
    for instance in instances:
        inst = world.instance(instance, spec)
        executed.append(world.driver.plugin_decision(
            world.context, inst, {rp: {"resources": r} for rp, r in
                                  world.allocations(instance).items()}))
        inst.save()
        on_host.append(inst)
    return {"spec": spec, "instances": instances, "selections": selections,
            "parses": parses, "on_host": on_host, "executed": executed,
            "compute_parses": nova_spec.PARSES[nova_spec.COMPUTE] - compute_before}


def test_three_instances_of_one_request_never_share_a_cpu(world, three):
    assert [s[0].service_host for s in three["selections"]] == [NODE] * 3
    specs = [recorded(world, i) for i in three["instances"]]
    cpus = [host_cpus(s) for s in specs]
    assert all(len(c) == 2 for c in cpus), cpus
    flat = [cpu for c in cpus for cpu in c]
    assert len(set(flat)) == 6, cpus


def test_nova_claims_in_placement_what_each_decision_names(world, three):
    for instance in three["instances"]:
        decision = recorded(world, instance).decision
        assert decision is not None
        claimed = world.allocations(instance)
        for rp, resources in decision.allocations.items():
            assert claimed[rp] == dict(resources), (instance, claimed)
        assert set(claimed) == set(decision.allocations)


def test_the_scheduler_parses_once_per_request(three):
    # one select_destinations, three instances: one parse of the flavor
    assert three["parses"] == 1


def test_the_compute_executes_the_decision_without_parsing(world, three):
    assert three["compute_parses"] == 0
    for instance, executed in zip(three["instances"], three["executed"], strict=True):
        assert executed is not None
        assert executed.decision == recorded(world, instance).decision
        # nova's claim, saved with the instance, is the decision (what
        # nova's driver writes the guest from, and its tracker counts)
        inst = objects.Instance.get_by_uuid(world.context, instance,
                                            expected_attrs=["numa_topology"])
        pinning = {cpu for cell in inst.numa_topology.cells
                   for cpu in cell.cpu_pinning.values()}
        assert sorted(pinning) == sorted(host_cpus(executed))


def test_make_nova_functional_compares_the_decision_the_compute_executes(world, three):
    # the harness's boot check reads the decision where the mixin's spawn
    # reads it (not a copy of its own from the scheduler)
    from tools.nova_functional.hooks import Plugins
    for instance, executed in zip(three["instances"], three["executed"], strict=True):
        assert Plugins.decision(world.driver, instance) == executed.decision
    assert Plugins.decision(world.driver, str(uuid.uuid4())) is None


def test_two_more_pinned_pairs_do_not_fit_on_the_two_cpus_left(world, three):
    # 6 of 8 CPUs are taken by the request above: nova's next periodic has
    # the mixin publish the host's states under the decisions of the
    # instances on it; two instances of 2 more do not fit
    world.tracker.update_available_resource(world.context, NODE)
    states = world.store.get_host(NODE).states["numa"]["state"]
    assert sum(len(c["pinned"]) for c in states["cells"]) == 6
    spec, instances = pinned(world, 2, 2)
    with pytest.raises(rpc_dispatcher.ExpectedException) as raised:
        world.select(spec, instances)
    assert isinstance(raised.value.exc_info[1], nova_exception.NoValidHost)
    for instance in instances:
        assert world.allocations(instance) == {}


def test_the_periodic_publishes_the_trackers_instances_without_reading_nova_db(
        world, three, monkeypatch):
    # update_provider_tree runs inside nova's periodic (its per-node
    # worker): the mixin publishes the host under the instances nova's
    # tracker counts (tracked_instances, read at the periodic's start) and
    # reads nova's database no more there; that late read deadlocked nova's
    # live-migration functional tests (the CellDatabases fixture's lock,
    # doc/source/nova-compat.md, cause: varies)
    import types

    from nova.compute import manager as compute_manager
    reads: list[Any] = []
    real = objects.InstanceList.get_uuids_by_host

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(objects.InstanceList, "get_uuids_by_host", counted)
    # nova's ComputeVirtAPI of a compute manager whose tracker is the test's
    compute = types.SimpleNamespace(host=NODE, rt=world.tracker,
                                    reportclient=world.tracker.reportclient)
    monkeypatch.setattr(world.driver, "virtapi", compute_manager.ComputeVirtAPI(compute))
    world.tracker.update_available_resource(world.context, NODE)
    assert reads == []
    assert set(three["instances"]) <= world.tracker.tracked_instances
    states = world.store.get_host(NODE).states["numa"]["state"]
    assert sum(len(c["pinned"]) for c in states["cells"]) == 6


def test_a_decision_taken_by_another_instance_fails_the_spawn_loudly(
        world, three, caplog):
    # a decision naming CPUs an instance on the host holds already
    first = recorded(world, three["instances"][0])
    inst = world.instance(str(uuid.uuid4()), three["spec"])
    world.driver.plugin_decisions.record(inst.uuid, NODE, first)
    try:
        with caplog.at_level("ERROR"), pytest.raises(DecisionRefused) as refused:
            world.driver.plugin_decision(world.context, inst, None, host=NODE)
    finally:
        inst.destroy()
    message = str(refused.value)
    # the numa plugin's verify: its CPUs are another guest's
    assert inst.uuid in message and "numa: " in message and "CPU" in message
    assert message in caplog.text


def test_nova_claim_on_other_cpus_is_said_and_the_guest_gets_the_decision(
        world, three, caplog):
    instance = three["instances"][0]
    spec = recorded(world, instance)
    inst = objects.Instance.get_by_uuid(world.context, instance,
                                        expected_attrs=["numa_topology"])
    cell = inst.numa_topology.cells[0]
    ours = dict(cell.cpu_pinning)
    cell.cpu_pinning = {g: (h + 1) % 8 for g, h in ours.items()}
    with caplog.at_level("ERROR"):
        world.driver.plugin_decision(world.context, inst, None, host=NODE)
    assert "nova's claim differs" in caplog.text and instance in caplog.text
    assert dict(inst.numa_topology.cells[0].cpu_pinning) == dict(
        spec.decision.assignments["numa"].cells[0].pinning)


def test_no_decision_recorded_is_said_and_nova_claim_stays(world, three, caplog):
    inst = world.instance(str(uuid.uuid4()), three["spec"])
    with caplog.at_level("WARNING"):
        assert world.driver.plugin_decision(world.context, inst, None,
                                            host=NODE) is None
    assert "no scheduler decision for instance %s" % inst.uuid in caplog.text


def test_an_allocation_other_than_the_decision_fails_the_spawn(world, three, caplog):
    # nova's claim in Placement moved (another candidate than the decided
    # one): the compute refuses rather than run a guest Placement does not
    # account where it runs
    instance = three["instances"][1]
    inst = objects.Instance.get_by_uuid(world.context, instance,
                                        expected_attrs=["numa_topology"])
    claimed = world.allocations(instance)
    moved = {rp: {"resources": {rc: n + 1 for rc, n in res.items()}}
             for rp, res in claimed.items()}
    with caplog.at_level("ERROR"), pytest.raises(DecisionRefused) as refused:
        world.driver.plugin_decision(world.context, inst, moved, host=NODE)
    assert "Placement holds" in str(refused.value)
    assert instance in caplog.text


def _evacuation(world: World, monkeypatch: Any, inst: Any,
                source: str = "source") -> Any:
    """``inst`` evacuated from ``source`` to this host as nova's
    ``rebuild_claim`` leaves it (an ``evacuation`` migration in its
    migration context), with nova's compute manager (its report client) as
    the driver's ``virtapi``."""
    import types

    from nova.compute import manager as compute_manager
    compute = types.SimpleNamespace(host=NODE, rt=world.tracker,
                                    reportclient=world.tracker.reportclient)
    monkeypatch.setattr(world.driver, "virtapi", compute_manager.ComputeVirtAPI(compute))
    migration = objects.Migration(
        context=world.context, instance_uuid=inst.uuid, source_compute=source,
        source_node=source, dest_compute=NODE, dest_node=NODE,
        dest_compute_id=world.compute.id,
        migration_type="evacuation", status="accepted")
    migration.create()
    inst.migration_context = objects.MigrationContext(
        instance_uuid=inst.uuid, migration_id=migration.id)
    return migration


def _root(world: World, name: str) -> str:
    """A new root provider named ``name`` in Placement (another compute
    node's, as nova names it by its node)."""
    rp = str(uuid.uuid4())
    world.placement.api.post("/resource_providers", {"name": name, "uuid": rp},
                             version="1.20")
    return rp


def _with_another_provider(world: World, instance: str, provider: str,
                           evacuated: Any = None) -> tuple[Any, dict[str, Any]]:
    """``instance`` (evacuated to this host when ``evacuated`` is pytest's
    monkeypatch) and its allocation in Placement plus 2 VCPU and 512 MB of
    ``provider``, as ``spawn`` gets them."""
    inst = objects.Instance.get_by_uuid(world.context, instance,
                                        expected_attrs=["numa_topology"])
    if evacuated is not None:
        _evacuation(world, evacuated, inst)
    claimed = {rp: {"resources": res}
               for rp, res in world.allocations(instance).items()}
    claimed[provider] = {"resources": {"VCPU": 2, "MEMORY_MB": 512}}
    return inst, claimed


def test_an_evacuations_source_host_allocation_is_not_compared(
        world, three, monkeypatch, caplog):
    # an evacuation: nova's allocation of the instance keeps the source
    # host's providers (nova frees them when the source comes back) next to
    # the decided ones on this host; the decision holds on this host
    source = _root(world, "source")
    assert not world.driver.provider_tree.exists(source)
    inst, claimed = _with_another_provider(world, three["instances"][1], source,
                                           evacuated=monkeypatch)
    with caplog.at_level("INFO"):
        assert world.driver.plugin_decision(world.context, inst, claimed,
                                            host=NODE) is not None
    assert source in caplog.text and "evacuation from source" in caplog.text
    # a provider of this host the decision does not take is compared
    mine = next(u for u in world.driver.provider_tree.get_provider_uuids()
                if u not in claimed)
    claimed[mine] = {"resources": {"VCPU": 1}}
    with caplog.at_level("ERROR"), pytest.raises(DecisionRefused) as refused:
        world.driver.plugin_decision(world.context, inst, claimed, host=NODE)
    assert "Placement holds" in str(refused.value)


def test_another_hosts_allocation_outside_an_evacuation_fails_the_spawn(
        world, three, caplog):
    # no evacuation: Placement holding another host's providers under the
    # instance is wrong (a leaked or misplaced claim), said and refused
    other = _root(world, "elsewhere")
    inst, claimed = _with_another_provider(world, three["instances"][1], other)
    with caplog.at_level("ERROR"), pytest.raises(DecisionRefused) as refused:
        world.driver.plugin_decision(world.context, inst, claimed, host=NODE)
    assert "Placement holds" in str(refused.value) and other in str(refused.value)


@pytest.mark.parametrize("where", ["third host", "unknown to Placement"])
def test_an_evacuation_with_providers_not_of_its_source_fails_the_spawn(
        world, three, monkeypatch, caplog, where):
    # an evacuation from "source": a provider under the instance that is
    # neither this host's nor the source's (a third host's, or one
    # Placement does not know) is not left out: compared, refused
    other = _root(world, "third") if where == "third host" else str(uuid.uuid4())
    inst, claimed = _with_another_provider(world, three["instances"][1], other,
                                           evacuated=monkeypatch)
    with caplog.at_level("ERROR"), pytest.raises(DecisionRefused) as refused:
        world.driver.plugin_decision(world.context, inst, claimed, host=NODE)
    assert "Placement holds" in str(refused.value) and other in str(refused.value)


def test_a_reverted_resize_gives_the_instance_its_decision_back(world, three):
    # a resize to the same host records the new flavor's decision for the
    # instance on this host; nova reverts it: the host publishes the
    # instance under the decision it runs under again, not the reverted one
    import datetime
    instance = three["instances"][0]
    before = recorded(world, instance)
    migration = objects.Migration(
        source_compute=NODE, dest_compute=NODE, source_node=NODE, dest_node=NODE,
        created_at=datetime.datetime.now(datetime.UTC))
    moved = recorded(world, three["instances"][1])  # other CPUs
    world.driver.plugin_decisions.record(instance, NODE, moved)
    assert host_cpus(recorded(world, instance)) != host_cpus(before)
    inst = objects.Instance.get_by_uuid(world.context, instance)
    world.driver.plugin_reverted(inst, migration)
    assert recorded(world, instance).decision == before.decision
    states = world.store.get_host(NODE).states["numa"]["state"]
    pinned_cpus = {cpu for cell in states["cells"] for cpu in cell["pinned"]}
    assert set(host_cpus(before)) <= pinned_cpus


def test_the_destination_of_a_reverted_move_forgets_its_decision(world, three):
    # nova reverts a resize: on the move's destination its revert_resize
    # destroys the guest, then publishes (drop_move_claim_at_dest); the
    # move's decision must be gone by then, or the destination keeps
    # publishing the reverted flavor's resources as used
    inst = world.instance(str(uuid.uuid4()), three["spec"])
    try:
        migration = objects.Migration(
            context=world.context, instance_uuid=inst.uuid, source_compute="other",
            dest_compute=NODE,
            migration_type="resize", status="reverting")
        migration.create()
        inst.migration_context = objects.MigrationContext(
            instance_uuid=inst.uuid, migration_id=migration.id)
        inst.task_state = "resize_reverting"
        world.driver.plugin_decisions.record(
            inst.uuid, NODE, recorded(world, three["instances"][2]))
        world.driver.destroy(world.context, inst, [], destroy_disks=False)
        assert nova_decisions.decision_for(
            world.driver.plugin_decisions, inst.uuid, NODE,
            world.driver.plugin_manager.plugins) is None
    finally:
        inst.destroy()


def test_the_periodic_counts_an_instance_migrating_in_as_nova_s_tracker_does(
        world, three, monkeypatch):
    # a cold migration to this host: nova's tracker counts the incoming
    # instance from its move claim (tracked_migrations; the instance's host
    # is still the source and its guest is not defined here yet); the
    # published state must count the move's decision too, or the scheduler
    # places another guest on the CPUs the move was given
    import types

    from nova.compute import manager as compute_manager
    compute = types.SimpleNamespace(host=NODE, rt=world.tracker,
                                    reportclient=world.tracker.reportclient)
    monkeypatch.setattr(world.driver, "virtapi", compute_manager.ComputeVirtAPI(compute))
    world.tracker.update_available_resource(world.context, NODE)
    spec, (instance,) = pinned(world, 2, 1)
    world.select(spec, [instance])  # the move's decision, on the 2 CPUs left
    inst = world.instance(instance, spec)
    inst.host, inst.node, inst.compute_id = "other", "other", None
    inst.vm_state, inst.task_state = "active", "resize_migrating"
    inst.save()
    migration = objects.Migration(
        context=world.context, instance_uuid=instance, source_compute="other",
        source_node="other", dest_compute=NODE, dest_node=NODE,
        dest_compute_id=world.compute.id,
        migration_type="migration", status="migrating")
    migration.create()
    try:
        world.tracker.update_available_resource(world.context, NODE)
        assert instance in world.tracker.tracked_migrations
        states = world.store.get_host(NODE).states["numa"]["state"]
        assert sum(len(c["pinned"]) for c in states["cells"]) == 8
        # and the spawn's verify of a decision on the move's CPUs refuses it
        other = world.instance(str(uuid.uuid4()), spec)
        world.driver.plugin_decisions.record(other.uuid, NODE, recorded(world, instance))
        try:
            with pytest.raises(DecisionRefused) as refused:
                world.driver.plugin_decision(world.context, other, None, host=NODE)
        finally:
            other.destroy()
        assert "numa: host cell 1 has 0 free dedicated CPUs" in str(refused.value)
    finally:
        migration.status = "error"
        migration.save()
        inst.destroy()
        world.driver.plugin_decisions.forget_since(
            instance, NODE, datetime.datetime(2000, 1, 1))
        world.tracker.update_available_resource(world.context, NODE)


def test_a_moves_decision_is_one_recorded_since_its_migration(world, three):
    # a live migration's destination reads the decision the scheduler
    # recorded for the move (after nova created the migration), never one
    # of an earlier stay of the instance on that host
    import datetime
    instance = three["instances"][0]
    spec = recorded(world, instance)
    plugins = world.driver.plugin_manager.plugins
    decisions = world.driver.plugin_decisions
    created = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    assert nova_decisions.decision_for(decisions, instance, NODE, plugins,
                                       since=created) is None
    decisions.record(instance, NODE, spec)
    again = nova_decisions.decision_for(decisions, instance, NODE, plugins,
                                        since=created)
    assert again is not None and again.decision == spec.decision


NODE2 = "compute2"
PATCH_ALTERNATES = os.path.join(os.path.dirname(PATCH),
                                "0003-scheduler-alternates-told-to-their-host-state.patch")


@pytest.fixture(scope="module")
def second(world):
    """A second compute host (the same fake libvirt topology, its own
    compute node in Placement, its states published by its own mixin to
    the same store), for the scheduler's alternates."""
    import types

    from nova.virt import node as nova_node
    nova = world.nova
    first, identity = nova.connection, nova_node.LOCAL_NODE_UUID
    nova.conf.set_override("host", NODE2)
    # nova's node identity (a file in state_path, cached): the second host's own
    nova_node.LOCAL_NODE_UUID = str(uuid.uuid4())
    try:
        connection = nova.connect(NODE2, host_info=fakelibvirt.HostInfo(
            cpu_nodes=2, cpu_sockets=1, cpu_cores=2, cpu_threads=2))
        driver = nova.driver(PluginLibvirtDriver, hostname=NODE2)
        driver.plugin_manager = world.driver.plugin_manager
        driver.plugin_decisions = world.driver.plugin_decisions
        service = objects.Service(world.context, host=NODE2,
                                  binary="nova-compute", topic="compute")
        service.create()
        tracker = resource_tracker.ResourceTracker(
            NODE2, driver, report.SchedulerReportClient())
        tracker.service_ref = service
        tracker.update_available_resource(world.context, NODE2, startup=True)
    finally:
        nova.conf.set_override("host", NODE)
        nova.connection, nova_node.LOCAL_NODE_UUID = first, identity
    assert world.store.get_host(NODE2) is not None
    return types.SimpleNamespace(compute=tracker.compute_nodes[NODE2],
                                 service=service, driver=driver,
                                 connection=connection)


def reschedule_spawn(world: World, second: Any, instance: str, spec: Any,
                     candidate: dict[str, Any]) -> tuple[Any, Any]:
    """What a reschedule's compute on the second host does first: the
    instance as nova's conductor and tracker leave it there (nova's own
    claim on the host), then the mixin's ``plugin_decision`` with the
    alternate's candidate (what the conductor claims). Returns the
    decision read and the instance."""
    first = world.nova.connection
    world.nova.connection = second.connection
    try:
        inst = world.instance(instance, spec, second.compute)
        return second.driver.plugin_decision(
            world.context, inst, candidate["allocations"], host=NODE2), inst
    finally:
        world.nova.connection = first


def two_hosts(world: World, second: Any, manager: Any = scheduler_manager,
              hosts: Any = None) -> Any:
    """nova's scheduler (``manager``'s ``select_destinations``,
    ``_schedule`` and ``_get_alternate_hosts``) over both hosts, their host
    states of ``hosts``' ``HostState`` (nova's ``host_manager`` module)."""

    class TwoHosts(Scheduler):
        select_destinations = manager.SchedulerManager.select_destinations
        _schedule = manager.SchedulerManager._schedule
        _get_alternate_hosts = manager.SchedulerManager._get_alternate_hosts

        def __init__(self) -> None:
            super().__init__(world.compute, world.service)
            cls = (hosts.HostState if hosts is not None
                   else self.host_manager.host_state_cls)
            self.hosts = [(cls(NODE, NODE, CELL), world.compute, world.service),
                          (cls(NODE2, NODE2, CELL), second.compute, second.service)]

        def _get_all_host_states(self, context: Any, spec_obj: Any,
                                 provider_summaries: Any) -> Any:
            found = []
            for state, compute, service in self.hosts:
                if compute.uuid in (provider_summaries or {}):
                    state.update(compute, dict(service), [], {})
                    found.append(state)
            return iter(found)

    return TwoHosts()


def test_an_alternate_host_gets_a_decision_with_the_nova_patch(world, second, tmp_path):
    """Two instances of one request stacked on one host (nova's weighers
    set to stack), the other host their alternate. Stock nova returns the
    alternate with its first candidate and records nothing there: a
    reschedule's compute finds no decision. With contrib/nova's 0003 patch
    each instance has the decision of the alternate's first candidate (the
    one the conductor claims) recorded on that host, and a reschedule's
    compute there (the mixin's ``plugin_decision`` on the second host's
    driver, with that candidate as nova's claim) executes it; the selected
    host's decisions are unchanged; the alternate consumes nothing (not
    counted for the request, not claimed)."""
    from compute_plugins.nova.filters import candidate_key
    for name, value in (("ram_weight_multiplier", -1.0), ("cpu_weight_multiplier", -1.0),
                        ("disk_weight_multiplier", -1.0), ("io_ops_weight_multiplier", 1.0)):
        world.nova.conf.set_override(name, value, "filter_scheduler")
    plugins = world.driver.plugin_manager.plugins
    store = world.driver.plugin_decisions

    def select(scheduler: Any) -> tuple[Any, list[str], list[Any]]:
        spec, instances = pinned(world, 1, 2)
        return spec, instances, scheduler.select_destinations(
            world.context, spec_obj=spec, instance_uuids=instances,
            return_objects=True, return_alternates=True)

    done: list[str] = []
    try:
        _, instances, selections = select(two_hosts(world, second))
        done += instances
        primary = {s[0].service_host for s in selections}
        assert len(primary) == 1 and [len(s) for s in selections] == [2, 2]
        alternate = selections[0][1].service_host
        assert alternate not in primary
        for instance in instances:
            assert nova_decisions.decision_for(store, instance, alternate, plugins) is None
            world.placement.api.delete("/allocations/%s" % instance)

        modules = patched_modules(tmp_path, PATCH_ALTERNATES, [
            "nova/scheduler/host_manager.py", "nova/scheduler/manager.py"])
        scheduler = two_hosts(world, second, modules["nova/scheduler/manager.py"],
                              modules["nova/scheduler/host_manager.py"])
        spec_obj, instances, selections = select(scheduler)
        done += instances
        (host,) = {s[0].service_host for s in selections}
        states = {state.host: state for state, _, _ in scheduler.hosts}
        alt = states[NODE2 if host == NODE else NODE]
        for n, (instance, selected) in enumerate(zip(instances, selections, strict=True)):
            assert [s.service_host for s in selected] == [host, alt.host]
            # the primary: the decision of the candidate nova claimed
            chosen = recorded_on(world, instance, host)
            assert world.allocations(instance) == {
                rp: dict(r) for rp, r in chosen.decision.allocations.items()}
            # the alternate: its first candidate, handed out by nova to
            # both instances; its decision, where the compute reads it,
            # for the first instance only (the two would take the same CPUs)
            candidate = json.loads(selected[1].allocation_request)
            assert candidate == alt.allocation_candidates[0]
            spec = nova_decisions.decision_for(store, instance, alt.host, plugins)
            if n:
                assert spec is None
                continue
            assert spec is not None
            assert spec.decision == alt.plugin_decisions[candidate_key(candidate)]
            assert spec.decision.host == alt.host
            # not claimed on the alternate
            assert not set(world.allocations(instance)) & set(candidate["allocations"])
        # a reschedule of the first instance to its alternate: the compute
        # there executes the decision (stacked on compute1, listed first
        # and at least as loaded)
        assert alt.host == NODE2
        candidate = json.loads(selections[0][1].allocation_request)
        executed, inst = reschedule_spawn(world, second, instances[0],
                                          spec_obj, candidate)
        try:
            assert executed is not None
            assert executed.decision == recorded_on(world, instances[0], NODE2).decision
            # nova's claim on the host set to the decision's CPUs
            assert sorted(cpu for cell in inst.numa_topology.cells
                          for cpu in cell.cpu_pinning.values()) == sorted(
                              host_cpus(executed))
        finally:
            inst.destroy()
        # the two instances on the selected host never share a CPU
        assert len({cpu for i in instances
                    for cpu in host_cpus(recorded_on(world, i, host))}) == 2
        # counted for the request on the selected host only
        token, given = states[host].plugin_given
        assert [i for i, _ in given] == instances
        assert getattr(alt, "plugin_given", None) is None or alt.plugin_given[0] != token
    finally:
        for name in ("ram_weight_multiplier", "cpu_weight_multiplier",
                     "disk_weight_multiplier", "io_ops_weight_multiplier"):
            world.nova.conf.clear_override(name, "filter_scheduler")
        for instance in done:
            world.placement.api.delete("/allocations/%s" % instance)


def recorded_on(world: World, instance: str, host: str) -> RequestSpec:
    spec = nova_decisions.decision_for(world.driver.plugin_decisions, instance,
                                       host, world.driver.plugin_manager.plugins)
    assert spec is not None and spec.decision is not None
    return spec


def test_two_instances_rescheduled_at_once_onto_one_alternate(world, second, tmp_path):
    """The two instances of one request stacked on one host share their
    alternate. When that host fails both (the correlated case: one host,
    one failure), nova's conductor reschedules both onto the alternate,
    whose compute claims both (nova's tracker sets their host) before
    either spawns. The first instance executes its decision; the second,
    for which the filter recorded none there (the candidate's decision
    went to the first), gets nova's own claim, as stock nova: neither is
    refused (with a decision each, each counted the other's as taken and
    both refused)."""
    for name, value in (("ram_weight_multiplier", -1.0), ("cpu_weight_multiplier", -1.0),
                        ("disk_weight_multiplier", -1.0), ("io_ops_weight_multiplier", 1.0)):
        world.nova.conf.set_override(name, value, "filter_scheduler")
    modules = patched_modules(tmp_path, PATCH_ALTERNATES, [
        "nova/scheduler/host_manager.py", "nova/scheduler/manager.py"])
    scheduler = two_hosts(world, second, modules["nova/scheduler/manager.py"],
                          modules["nova/scheduler/host_manager.py"])
    spec, instances = pinned(world, 1, 2)
    made: list[Any] = []
    try:
        selections = scheduler.select_destinations(
            world.context, spec_obj=spec, instance_uuids=instances,
            return_objects=True, return_alternates=True)
        assert [[s.service_host for s in selected] for selected in selections] == [
            [NODE, NODE2], [NODE, NODE2]]
        first = world.nova.connection
        world.nova.connection = second.connection
        try:
            made = [world.instance(i, spec, second.compute) for i in instances]
        finally:
            world.nova.connection = first
        outcomes = []
        for inst, selected in zip(made, selections, strict=True):
            candidate = json.loads(selected[1].allocation_request)
            try:
                executed = second.driver.plugin_decision(
                    world.context, inst, candidate["allocations"], host=NODE2)
                outcomes.append("nova's claim" if executed is None else "executed")
            except DecisionRefused:
                outcomes.append("refused")
        assert outcomes == ["executed", "nova's claim"]
    finally:
        for inst in made:
            inst.destroy()
        for name in ("ram_weight_multiplier", "cpu_weight_multiplier",
                     "disk_weight_multiplier", "io_ops_weight_multiplier"):
            world.nova.conf.clear_override(name, "filter_scheduler")
        for instance in instances:
            world.placement.api.delete("/allocations/%s" % instance)
