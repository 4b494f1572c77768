"""PluginProviderTreeMixin inside nova's own ResourceTracker, on real Placement.

Everything here is nova's own code except the mixin: nova's
``nova.compute.resource_tracker.ResourceTracker`` and
``SchedulerReportClient``, nova's ``LibvirtDriver`` on nova's fake libvirt
(``nova.tests.fixtures.libvirt``: a 2-cell host of 2 hyper-threaded cores,
set up as nova's functional libvirt tests do, see
:mod:`tests.compat.nova_libvirt`), nova's cell database fixtures, and
real Placement in-process (nova's ``PlacementFixture``: the
``openstack-placement`` WSGI app on SQLite behind wsgi-intercept).

The story is an upgrade: nova's plain libvirt driver reported the host
flat (VCPU, MEMORY_MB and DISK_GB on the compute node) and a guest holds an
allocation there. The driver is then replaced by one with the mixin:

- a periodic (``update_available_resource``) gets nova's ``ReshapeNeeded``
  out of the mixin, which nova's resource tracker raises up (a periodic must
  not reshape): Placement is untouched;
- at service start (``startup=True``) the tracker calls again with the
  allocations, the mixin moves the guest's VCPU and MEMORY_MB to a NUMA
  cell provider (and adds a VGPU provider per GPU under its cell), and
  the tracker sends both through Placement's ``POST /reshaper``: the
  cells exist in Placement and the guest's allocation is on one;
- the next periodic changes nothing in Placement (no generation moves);
- nova's own traits on the compute node (``COMPUTE_NODE`` and the
  driver's capability traits, added by the tracker) stay.

Skipped without nova unless ``COMPUTE_PLUGINS_COMPAT`` is set.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

if os.environ.get("COMPUTE_PLUGINS_COMPAT"):
    import nova.compute.resource_tracker as resource_tracker
else:
    resource_tracker = pytest.importorskip("nova.compute.resource_tracker")

from nova import context as nova_context  # noqa: E402
from nova import exception as nova_exception  # noqa: E402
from nova import objects  # noqa: E402
from nova.scheduler.client import report  # noqa: E402
from nova.virt.libvirt import driver as libvirt_driver  # noqa: E402

from compute_plugins.nova.driver import PluginProviderTreeMixin  # noqa: E402
from tests.compat.nova_libvirt import (  # noqa: E402
    LOCAL_GB,
    NovaLibvirt,
    fakelibvirt,
)
from tests.unit.resources import helpers  # noqa: E402

NODE = "compute1"
GUEST = "90000000-0000-0000-0000-000000000001"
PROJECT = "a0000000-0000-0000-0000-000000000001"
USER = "b0000000-0000-0000-0000-000000000001"
#: nova's fake mdev-capable GPUs and the cell each is on.
GPUS = {NODE + "_pci_0000_81_00_0": NODE + "_NUMA0",
        NODE + "_pci_0000_81_01_0": NODE + "_NUMA1"}
GUEST_RESOURCES = {"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 10}


class PluginLibvirtDriver(PluginProviderTreeMixin, libvirt_driver.LibvirtDriver):
    """nova's libvirt driver with the plugins' provider tree."""


class World:
    """nova's services, Placement and the fake host of this module."""

    def __init__(self, nova: NovaLibvirt, placement: Any) -> None:
        self.nova = nova
        self.placement = placement
        self.context = nova_context.get_admin_context()
        self.service = objects.Service(self.context, host=NODE,
                                       binary="nova-compute", topic="compute")
        self.service.create()

    def tracker(self, driver: Any) -> Any:
        """A resource tracker as nova-compute builds it."""
        tracker = resource_tracker.ResourceTracker(
            NODE, driver, report.SchedulerReportClient())
        tracker.service_ref = self.service
        return tracker

    def get(self, url: str) -> Any:
        response = self.placement.api.get(url, version="1.38")
        assert response.status == 200, (url, response.body)
        return response.body

    def providers(self) -> dict[str, dict[str, Any]]:
        """Every provider in Placement by name: parent, generation,
        inventory totals, traits."""
        out = {}
        for rp in self.get("/resource_providers")["resource_providers"]:
            inventories = self.get(
                "/resource_providers/%s/inventories" % rp["uuid"])["inventories"]
            traits = self.get("/resource_providers/%s/traits" % rp["uuid"])["traits"]
            out[rp["name"]] = {
                "uuid": rp["uuid"], "parent": rp["parent_provider_uuid"],
                "generation": rp["generation"],
                "totals": {rc: inv["total"] for rc, inv in inventories.items()},
                "traits": set(traits)}
        return out

    def allocations(self, consumer: str) -> dict[str, dict[str, int]]:
        return {rp: alloc["resources"] for rp, alloc in self.get(
            "/allocations/%s" % consumer)["allocations"].items()}


@pytest.fixture(scope="module")
def world():
    """nova's fixtures and real Placement, all undone at the end."""
    nova = NovaLibvirt()
    nova.setUp()
    try:
        placement = nova.services()
        nova.connect(NODE, host_info=fakelibvirt.HostInfo(
            cpu_nodes=2, cpu_sockets=1, cpu_cores=2, cpu_threads=2),
            pci_info=fakelibvirt.HostPCIDevicesInfo(
                num_pci=0, num_pfs=0, num_vfs=0, num_mdevcap=2))
        yield World(nova, placement)
    finally:
        nova.cleanUp()


@pytest.fixture(scope="module")
def flat(world):
    """nova's plain libvirt driver reported the host; a guest is on it."""
    tracker = world.tracker(world.nova.driver())
    tracker.update_available_resource(world.context, NODE, startup=True)
    root = tracker.compute_nodes[NODE].uuid
    response = world.placement.api.put("/allocations/%s" % GUEST, {
        "allocations": {root: {"resources": GUEST_RESOURCES}},
        "project_id": PROJECT, "user_id": USER, "consumer_generation": None,
    }, version="1.28")
    assert response.status == 204, response.body
    return {"root": root, "providers": world.providers()}


@pytest.fixture(scope="module")
def plugin_driver(world):
    conf, fixture = helpers.make_conf()
    driver = world.nova.driver(PluginLibvirtDriver)
    conf.set_override("enabled_mdev_types", ["nvidia-11"], group="vgpu")
    driver.plugin_manager = helpers.manager(conf, ("numa", "vgpu", "disk"))
    yield driver
    fixture.cleanUp()


@pytest.fixture(scope="module")
def periodic_before_reshape(world, flat, plugin_driver):
    """A periodic with the mixin, before the service restarted."""
    tracker = world.tracker(plugin_driver)
    with pytest.raises(nova_exception.ReshapeNeeded) as raised:
        tracker.update_available_resource(world.context, NODE)
    return {"raised": raised.value, "providers": world.providers()}


@pytest.fixture(scope="module")
def reshaped(world, flat, plugin_driver, periodic_before_reshape):
    """The service restarted with the mixin: nova's startup reshape."""
    tracker = world.tracker(plugin_driver)
    tracker.update_available_resource(world.context, NODE, startup=True)
    return {"tracker": tracker, "providers": world.providers()}


def test_nova_reported_the_host_flat(flat):
    root = flat["providers"][NODE]
    assert list(flat["providers"]) == [NODE]
    assert root["totals"] == {"VCPU": 8, "MEMORY_MB": 16780000,
                              "DISK_GB": LOCAL_GB["total"]}


def test_a_periodic_gets_reshape_needed_and_writes_nothing(
        flat, periodic_before_reshape):
    assert isinstance(periodic_before_reshape["raised"],
                      nova_exception.ReshapeNeeded)
    assert periodic_before_reshape["providers"] == flat["providers"]


def test_startup_reshapes_into_numa_cells(world, flat, reshaped):
    providers = reshaped["providers"]
    root = providers[NODE]
    assert root["uuid"] == flat["root"]
    cells = [NODE + "_NUMA0", NODE + "_NUMA1"]
    assert sorted(providers) == sorted([NODE, *cells, *GPUS])
    for cell in cells:
        assert providers[cell]["parent"] == root["uuid"]
        assert providers[cell]["totals"]["VCPU"] == 4
        # nova's fake cell: 8390000 KiB
        assert providers[cell]["totals"]["MEMORY_MB"] == 8390000 // 1024
    assert root["totals"] == {"DISK_GB": LOCAL_GB["total"]}


def test_the_gpus_nova_lists_are_vgpu_providers_under_their_cells(reshaped):
    """nova's fake GPUs (``Host.list_pci_devices``): one on each cell, 16
    nvidia-11 instances each, parented under their NUMA cell."""
    providers = reshaped["providers"]
    for name, cell in GPUS.items():
        assert providers[name]["totals"] == {"VGPU": 16}
        assert providers[name]["parent"] == providers[cell]["uuid"]


def test_the_guests_allocation_moved_to_a_cell(world, flat, reshaped):
    providers = reshaped["providers"]
    by_uuid = {p["uuid"]: name for name, p in providers.items()}
    moved = {by_uuid[rp]: res for rp, res in world.allocations(GUEST).items()}
    assert moved.pop(NODE) == {"DISK_GB": GUEST_RESOURCES["DISK_GB"]}
    [(cell, resources)] = moved.items()
    assert cell.startswith(NODE + "_NUMA")
    assert resources == {"VCPU": GUEST_RESOURCES["VCPU"],
                         "MEMORY_MB": GUEST_RESOURCES["MEMORY_MB"]}
    usages = world.get("/resource_providers/%s/usages"
                       % providers[cell]["uuid"])["usages"]
    assert usages["VCPU"] == 2 and usages["MEMORY_MB"] == 1024


def test_nova_traits_on_the_compute_node_stay(flat, reshaped):
    before = flat["providers"][NODE]["traits"]
    after = reshaped["providers"][NODE]["traits"]
    assert {"COMPUTE_NODE", "OWNER_NOVA"} <= after
    assert any(t.startswith("COMPUTE_") and t != "COMPUTE_NODE" for t in before)
    assert before <= after


def test_the_next_periodic_changes_nothing(world, reshaped, plugin_driver):
    reshaped["tracker"].update_available_resource(world.context, NODE)
    assert world.providers() == reshaped["providers"]


def test_nova_fixtures_did_not_monkey_patch_the_process(world):
    import eventlet.patcher
    assert not eventlet.patcher.is_monkey_patched("thread")
    assert not eventlet.patcher.is_monkey_patched("socket")
