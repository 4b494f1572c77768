"""PluginProviderTreeMixin on nova's own ProviderTree.

A driver with the mixin updates ``nova.compute.provider_tree.ProviderTree``
as nova's resource tracker calls it: a host that nova's libvirt driver
reported flat (VCPU and MEMORY_MB on the root, with a guest's allocation
on them) becomes NUMA cells; the first call raises nova's
``ReshapeNeeded``, the second (with the allocations) moves the guest's
allocation to a cell; operator traits on the root stay; the next periodic
changes nothing.

Skipped without nova unless ``COMPUTE_PLUGINS_COMPAT`` is set.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("COMPUTE_PLUGINS_COMPAT"):
    import nova.compute.provider_tree as nova_pt
else:
    nova_pt = pytest.importorskip("nova.compute.provider_tree")

from nova import exception as nova_exception  # noqa: E402

from compute_plugins.nova.driver import PluginProviderTreeMixin  # noqa: E402
from tests.unit.resources import helpers  # noqa: E402

NODE = helpers.NODE
ROOT = "c0000000-0000-0000-0000-000000000001"
GUEST = "90000000-0000-0000-0000-000000000001"


class Driver(PluginProviderTreeMixin):
    def __init__(self, manager, host):
        self.plugin_manager = manager
        self.host = host

    def plugin_host_info(self, nodename):
        assert nodename == NODE
        return self.host


def state(tree):
    return {tree.data(u).name: (tree.data(u).parent_uuid,
                                dict(tree.data(u).inventory),
                                set(tree.data(u).traits), tree.data(u).generation)
            for u in tree.get_provider_uuids()}


@pytest.fixture
def driver(conf):
    host = helpers.host([helpers.cell(0, [0, 1], memory_gb=4),
                         helpers.cell(1, [2, 3], memory_gb=4)])
    return Driver(helpers.manager(conf, ("numa",)), host)


def nova_flat_tree():
    tree = nova_pt.ProviderTree()
    tree.new_root(NODE, ROOT, generation=3)
    tree.update_inventory(ROOT, {
        "VCPU": {"total": 4, "reserved": 0, "min_unit": 1, "max_unit": 4,
                 "step_size": 1, "allocation_ratio": 4.0},
        "MEMORY_MB": {"total": 8192, "reserved": 512, "min_unit": 1,
                      "max_unit": 8192, "step_size": 1, "allocation_ratio": 1.0},
        "DISK_GB": {"total": 100, "reserved": 0, "min_unit": 1, "max_unit": 100,
                    "step_size": 1, "allocation_ratio": 1.0}})
    tree.update_traits(ROOT, ["CUSTOM_OPERATOR", "COMPUTE_NODE"])
    return tree


def test_reshape_as_nova_resource_tracker_does(driver):
    tree = nova_flat_tree()
    with pytest.raises(nova_exception.ReshapeNeeded):
        driver.update_provider_tree(tree, NODE)
    allocations = {GUEST: {"allocations": {ROOT: {"resources": {
        "VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 10}}}}}
    driver.update_provider_tree(tree, NODE, allocations=allocations)
    got = state(tree)
    assert sorted(got) == [NODE, NODE + "_NUMA0", NODE + "_NUMA1"]
    root = got[NODE]
    assert "VCPU" not in root[1] and "MEMORY_MB" not in root[1]
    assert {"CUSTOM_OPERATOR", "COMPUTE_NODE"} <= root[2]
    assert got[NODE + "_NUMA0"][0] == ROOT
    assert got[NODE + "_NUMA0"][1]["VCPU"]["total"] == 2
    moved = allocations[GUEST]["allocations"]
    assert moved[ROOT]["resources"] == {"DISK_GB": 10}
    cell = [u for u in moved if u != ROOT]
    assert len(cell) == 1
    assert moved[cell[0]]["resources"] == {"VCPU": 2, "MEMORY_MB": 1024}
    assert tree.data(cell[0]).name.startswith(NODE + "_NUMA")


def test_a_second_periodic_changes_nothing(driver):
    tree = nova_flat_tree()
    driver.update_provider_tree(tree, NODE, allocations={})
    before = state(tree)
    driver.update_provider_tree(tree, NODE)
    assert state(tree) == before


def test_a_removed_cell_is_removed_from_nova_tree(driver, conf):
    tree = nova_flat_tree()
    driver.update_provider_tree(tree, NODE, allocations={})
    driver.host = helpers.host([helpers.cell(0, [0, 1, 2, 3], memory_gb=8)])
    driver.update_provider_tree(tree, NODE)
    assert sorted(state(tree)) == [NODE, NODE + "_NUMA0"]
    assert tree.data(NODE + "_NUMA0").inventory["VCPU"]["total"] == 4


def test_a_failing_plugin_keeps_its_last_providers_and_nova_runs_on(driver):
    # nova's periodic must not break on a plugin's bug: the mixin returns,
    # the failing plugin's last good providers stay in nova's tree, the
    # failure is recorded. (The bug is injected: a plugin that raises.)
    tree = nova_flat_tree()
    driver.update_provider_tree(tree, NODE, allocations={})
    good = state(tree)
    numa = driver.plugin_manager.plugins["numa"]

    def broken(view, nodename):
        raise RuntimeError("plugin bug")

    numa.provider_contributions = broken
    driver.host = helpers.host([helpers.cell(0, [0, 1], memory_gb=8),
                                helpers.cell(1, [2, 3], memory_gb=8)])
    driver.update_provider_tree(tree, NODE)
    assert state(tree) == good
    assert "numa" in driver.plugin_manager.failures
    del numa.provider_contributions
    driver.update_provider_tree(tree, NODE)
    assert tree.data(NODE + "_NUMA0").inventory["MEMORY_MB"]["total"] > \
        good[NODE + "_NUMA0"][1]["MEMORY_MB"]["total"]
    assert "numa" not in driver.plugin_manager.failures


def tree_with_pci_providers(conf):
    """nova's tree after a periodic with ``[pci] report_in_placement`` on:
    a GPU's provider of nova's layout (the one nova's translator gives,
    test_nova_pci_placement.py); the plugins' option left on."""
    import json

    from tests.unit.resources.test_sriov_devspec import devices
    conf.set_override("device_spec", [json.dumps(
        {"vendor_id": "10de", "product_id": "25b6"})], "pci")
    conf.set_override("report_in_placement", True, "pci")
    tree = nova_flat_tree()
    Driver(helpers.manager(conf, ("numa", "sriov")), devices()).update_provider_tree(
        tree, NODE, allocations={})
    assert "COMPUTE_MANAGED_PCI_DEVICE" in state(tree)[NODE + "_0000:84:00.0"][2]
    return tree


def test_turning_pci_reporting_off_again_is_refused_as_nova_does(conf):
    # nova's compute refuses to start with [pci] report_in_placement off
    # once its PCI providers are in Placement; the sriov plugin would
    # simply stop contributing them (and the mixin remove them from nova's
    # tree, so nova's own check, after the driver, found nothing)
    from tests.unit.resources.test_sriov_devspec import devices
    tree = tree_with_pci_providers(conf)
    before = state(tree)

    conf.set_override("report_in_placement", False, "pci")
    restarted = Driver(helpers.manager(conf, ("numa", "sriov")), devices())
    with pytest.raises(nova_exception.PlacementPciException) as err:
        restarted.update_provider_tree(tree, NODE)
    assert ("The [pci]report_in_placement is False but it was enabled before "
            "on this compute. Nova does not support disabling it after it is "
            "enabled.") in str(err.value)
    assert state(tree) == before


def test_nova_reporting_with_the_plugins_not_is_not_refused(conf):
    # nova's [pci] report_in_placement on, the plugins' off (a documented
    # mismatch: nova's translator then keeps its own providers in nova's
    # tree): nova refuses nothing, so neither does the mixin
    import nova.conf

    from tests.unit.resources.test_sriov_devspec import devices
    tree = tree_with_pci_providers(conf)
    conf.set_override("report_in_placement", False, "pci")
    nova.conf.CONF.set_override("report_in_placement", True, "pci")
    try:
        Driver(helpers.manager(conf, ("numa", "sriov")), devices()).update_provider_tree(
            tree, NODE)
    finally:
        nova.conf.CONF.clear_override("report_in_placement", "pci")
