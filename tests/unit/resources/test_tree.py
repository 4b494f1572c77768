"""All four plugins through the PluginManager onto a real ProviderTree."""

from __future__ import annotations

import dataclasses

from compute_plugins.plugin import names
from compute_plugins.plugin.devices import (
    InvalidOptionValue,
    NUMAParents,
    normalize_pci_address,
)
from compute_plugins.runtime.manager import PluginManager, available_plugins
from tests.unit.resources.helpers import (
    NODE,
    DiskInfo,
    RecordingTree,
    cell,
    dump,
    gpu,
    host,
    manager,
    pf,
    record,
    update,
)

GPU = "0000:84:00.0"
PF = "0000:5e:00.0"


def full_host(with_devices=True):
    devices = [gpu(GPU, 1, nvidia_35=8), pf(PF, 4, 0, "ens1f0")]
    return host(
        [cell(0, range(0, 4), 4), cell(1, range(4, 8), 4)],
        devices if with_devices else [],
        disk=DiskInfo(total_gb=100, free_gb=80),
    )


def configure(conf):
    conf.set_override("cpu_dedicated_set", "2-3,6-7", "compute")
    conf.set_override("cpu_shared_set", "0-1,4-5", "compute")
    conf.set_override("reserved_host_memory_mb", 512, "compute")
    conf.set_override("enabled_mdev_types", ["nvidia-35"], "vgpu")
    conf.set_override("physical_device_mappings", ["physnet1:ens1f0"], "sriov")
    conf.set_override("bandwidth", ["ens1f0:1000:2000"], "sriov")


def test_exact_tree(conf):
    configure(conf)
    tree = update(manager(conf), full_host())
    numa = {"HW_NUMA_ROOT"}
    expected = {
        NODE: {"parent": None, "inventory": {"DISK_GB": record(100, 1.0, 0)},
               "traits": set()},
        "node1_NUMA0": {"parent": NODE, "traits": numa, "inventory": {
            "PCPU": record(2), "VCPU": record(2, 4.0),
            "MEMORY_MB": record(4096, 1.0, 512)}},
        "node1_NUMA1": {"parent": NODE, "traits": numa, "inventory": {
            "PCPU": record(2), "VCPU": record(2, 4.0),
            "MEMORY_MB": record(4096, 1.0, 0)}},
        "node1_pci_0000_84_00_0": {
            "parent": "node1_NUMA1", "inventory": {"VGPU": record(8)},
            "traits": {"CUSTOM_MDEV_TYPE_NVIDIA_35"}},
        "node1_pf_0000_5e_00_0": {"parent": "node1_NUMA0", "inventory": {
            "SRIOV_NET_VF": record(4),
            "NET_BW_EGR_KILOBIT_PER_SEC": record(1000),
            "NET_BW_IGR_KILOBIT_PER_SEC": record(2000)},
            "traits": {"CUSTOM_VNIC_TYPE_DIRECT", "CUSTOM_PHYSNET_PHYSNET1"}},
    }
    got = dump(tree)
    assert {n: {k: p[k] for k in ("parent", "inventory", "traits")}
            for n, p in got.items()} == expected
    assert got["node1_NUMA1"]["uuid"] == names.provider_uuid(NODE, "numa", "1")
    assert got["node1_pci_0000_84_00_0"]["uuid"] == names.provider_uuid(
        NODE, "pci", GPU)
    assert got["node1_pf_0000_5e_00_0"]["uuid"] == names.provider_uuid(
        NODE, "pf", PF)


def test_second_update_changes_nothing(conf):
    configure(conf)
    mgr = manager(conf)
    tree = RecordingTree()
    update(mgr, full_host(), tree)
    assert tree.changes
    tree.changes.clear()
    update(mgr, full_host(), tree)
    assert tree.changes == []
    assert not mgr.degraded


def test_removed_devices_disappear_operator_trait_stays(conf):
    configure(conf)
    mgr = manager(conf)
    tree = update(mgr, full_host())
    tree.add_traits(NODE, "CUSTOM_OPERATOR_GOLD")
    tree.add_traits("node1_NUMA0", "CUSTOM_OPERATOR_FAST")
    update(mgr, full_host(with_devices=False), tree)
    got = dump(tree)
    assert sorted(got) == [NODE, "node1_NUMA0", "node1_NUMA1"]
    assert got[NODE]["traits"] == {"CUSTOM_OPERATOR_GOLD"}
    assert got[NODE]["inventory"] == {"DISK_GB": record(100, 1.0, 0)}
    assert got["node1_NUMA0"]["traits"] == {"HW_NUMA_ROOT",
                                            "CUSTOM_OPERATOR_FAST"}
    update(mgr, full_host(), tree)  # the devices come back
    assert "node1_pci_0000_84_00_0" in dump(tree)


def test_gpu_moving_cell_is_reparented(conf):
    configure(conf)
    mgr = manager(conf)
    tree = update(mgr, full_host())
    moved = full_host()
    moved = dataclasses.replace(
        moved, pci_devices=(gpu(GPU, 0, nvidia_35=8),) + moved.pci_devices[1:])
    update(mgr, moved, tree)
    assert dump(tree)["node1_pci_0000_84_00_0"]["parent"] == "node1_NUMA0"


def test_real_entry_points(conf):
    assert {"numa", "vgpu", "sriov", "disk"} <= set(available_plugins())
    configure(conf)
    mgr = PluginManager(conf)
    assert list(mgr.plugins) == ["numa", "vgpu", "sriov", "disk"]
    assert sorted(dump(update(mgr, full_host()))) == sorted([
        NODE, "node1_NUMA0", "node1_NUMA1", "node1_pci_0000_84_00_0",
        "node1_pf_0000_5e_00_0"])


def test_pci_address_normalization():
    assert normalize_pci_address("0000:3B:00.0") == "0000:3b:00.0"
    assert normalize_pci_address("3b:0.1") == "0000:3b:00.1"
    assert normalize_pci_address("ens1f0") is None
    assert normalize_pci_address("0000:3b:00.8") is None
    # PCI's slot (device) field has 5 bits: 0x1f is the last.
    assert normalize_pci_address("0000:3b:1f.7") == "0000:3b:1f.7"
    assert normalize_pci_address("0000:3b:20.0") is None


def test_numa_parents_rule(conf):
    info = host([cell(0, [0]), cell(2, [1])])
    parents = NUMAParents(conf, info)
    assert [parents.cell(n) for n in (0, 1, 2, None, -1)] == [
        0, None, 2, None, None]
    conf.set_override("enabled_plugins", ["vgpu", "sriov"], "compute_plugins")
    assert NUMAParents(conf, info).cell(0) is None


def test_option_error_carries_its_data():
    err = InvalidOptionValue("[x] y", "v", "the rule")
    assert (err.option, err.value, err.rule) == ("[x] y", "v", "the rule")
    assert str(err) == "invalid [x] y value 'v': the rule"


def test_numa_failing_first_does_not_break_device_plugins(conf):
    conf.set_override("cpu_dedicated_set", "99", "compute")
    mgr = manager(conf)
    tree = update(mgr, full_host())
    assert set(mgr.failures) == {"numa"}
    # The devices go under the root until numa contributes their cells.
    root = tree.data(NODE).uuid
    devices = [tree.data(u) for u in tree.get_provider_uuids()
               if "_pf_" in tree.data(u).name or "_pci_" in tree.data(u).name]
    assert devices and all(d.parent_uuid == root for d in devices)
