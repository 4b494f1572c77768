"""The sriov plugin: PFs, VF counts, physnets, bandwidth, bad config."""

from __future__ import annotations

import dataclasses

import pytest

from compute_plugins.exception import ConfigError
from compute_plugins.host.model import PCIDevice
from resources.sriov import InvalidSRIOVConfig, SRIOVPlugin
from tests.unit.resources.helpers import (
    NODE,
    cell,
    host,
    manager,
    pf,
    record,
    update,
)

CELLS = [cell(0, range(4)), cell(1, range(4, 8))]
PF_A = "0000:5e:00.0"
PF_B = "0000:af:00.1"


def contribs(conf, info):
    plugin = SRIOVPlugin(conf)
    return {c.name: c for c in plugin.provider_contributions(
        plugin.discover(info), NODE)}


def test_pf_with_vfs_under_its_cell_with_physnet_and_bandwidth(conf):
    conf.set_override("physical_device_mappings",
                      ["physnet1:ens1f0", "physnet2:0000:AF:00.1"], "sriov")
    conf.set_override("bandwidth", ["ens1f0:10000000:20000000",
                                    f"{PF_B}::5000"], "sriov")
    info = host(CELLS, [pf(PF_A, 8, 0, "ens1f0"), pf(PF_B, 4, 1, "ens2f1")])
    tree = update(manager(conf, ["numa", "sriov"]), info)
    a = tree.data("node1_pf_0000_5e_00_0")
    assert tree.data(a.parent_uuid).name == "node1_NUMA0"
    assert a.inventory == {
        "SRIOV_NET_VF": record(8),
        "NET_BW_EGR_KILOBIT_PER_SEC": record(10000000),
        "NET_BW_IGR_KILOBIT_PER_SEC": record(20000000),
    }
    assert a.traits == {"CUSTOM_VNIC_TYPE_DIRECT", "CUSTOM_PHYSNET_PHYSNET1"}
    b = tree.data("node1_pf_0000_af_00_1")
    assert tree.data(b.parent_uuid).name == "node1_NUMA1"
    assert b.inventory == {"SRIOV_NET_VF": record(4),
                           "NET_BW_IGR_KILOBIT_PER_SEC": record(5000)}
    assert b.traits == {"CUSTOM_VNIC_TYPE_DIRECT", "CUSTOM_PHYSNET_PHYSNET2"}


def test_udev_num_vfs_wins_over_libvirt_list(conf):
    info = host(CELLS, [pf(PF_A, 8, num_vfs=16), pf(PF_B, 4, num_vfs=0)])
    got = contribs(conf, info)
    assert list(got) == ["node1_pf_0000_5e_00_0"]
    assert got["node1_pf_0000_5e_00_0"].inventory["SRIOV_NET_VF"]["total"] == 16


def test_pf_without_vfs_and_vfs_get_no_provider(conf):
    vf = PCIDevice(address="0000:5f:10.0", name="pci_0000_5f_10_0",
                   phys_function=PF_A, numa_node=0)
    info = host(CELLS, [pf(PF_A, 0), vf])
    assert contribs(conf, info) == {}


def test_unmapped_pf_has_no_physnet_and_unknown_device_warns(conf, caplog):
    conf.set_override("physical_device_mappings", ["physnet1:ens9"], "sriov")
    got = contribs(conf, host(CELLS, [pf(PF_A, 2, None, "ens1f0")]))
    only = got["node1_pf_0000_5e_00_0"]
    assert only.traits == {"CUSTOM_VNIC_TYPE_DIRECT"}
    assert only.parent is None
    assert "device ens9 is not a PF with VFs on this host" in caplog.text


@pytest.mark.parametrize("value", ["physnet1", ":ens1f0", "physnet1:"])
def test_malformed_mapping(conf, value):
    conf.set_override("physical_device_mappings", [value], "sriov")
    with pytest.raises(InvalidSRIOVConfig) as err:
        SRIOVPlugin(conf).discover(host(CELLS))
    assert isinstance(err.value, ConfigError)
    message = str(err.value)
    assert "[sriov] physical_device_mappings" in message
    assert repr(value) in message
    assert "<physnet>:<device>" in message


def test_device_on_two_physnets(conf):
    conf.set_override("physical_device_mappings",
                      ["physnet1:ens1f0", "physnet2:ens1f0"], "sriov")
    with pytest.raises(InvalidSRIOVConfig, match="already mapped to physnet"):
        SRIOVPlugin(conf).discover(host(CELLS))


@pytest.mark.parametrize("value", [
    "ens1f0", "ens1f0:10", ":1:2", "ens1f0:x:1", "ens1f0:1:-5"])
def test_malformed_bandwidth(conf, value):
    conf.set_override("bandwidth", [value], "sriov")
    with pytest.raises(InvalidSRIOVConfig) as err:
        SRIOVPlugin(conf).discover(host(CELLS))
    assert err.value.option == "[sriov] bandwidth"
    assert err.value.value == value
    assert "<device>:<egress kbps>:<ingress kbps>" in str(err.value)


def test_bandwidth_given_twice(conf):
    conf.set_override("bandwidth", ["ens1f0:1:1", "ens1f0:2:2"], "sriov")
    with pytest.raises(InvalidSRIOVConfig, match="given twice"):
        SRIOVPlugin(conf).discover(host(CELLS))


def _vf(address, pf_address, mdev_types=()):
    return PCIDevice(address=address, name="pci_" + address,
                     phys_function=pf_address, mdev_types=mdev_types,
                     class_code="030200")


def test_sriov_gpu_is_not_a_nic(conf):
    """An A100-style vGPU PF (class 0302, VFs with mdev types): no PF."""
    from compute_plugins.host.model import MdevType
    gpu_pf = dataclasses.replace(pf(PF_A, 2), class_code="030200")
    vfs = [_vf(a, PF_A, (MdevType("nvidia-471", available_instances=1),))
           for a in gpu_pf.virt_functions]
    assert contribs(conf, host(CELLS, [gpu_pf, *vfs])) == {}
    # Even with a network class, VFs offering mdev types are not NIC VFs.
    odd = dataclasses.replace(gpu_pf, class_code="020000")
    assert contribs(conf, host(CELLS, [odd, *vfs])) == {}


@pytest.mark.parametrize("class_code,offered", [
    ("020000", True), ("028000", True), ("ffffff", True), (None, True),
    ("030200", False), ("120000", False),
])
def test_only_network_class_pfs_are_nics(conf, class_code, offered):
    device = dataclasses.replace(pf(PF_A, 2), class_code=class_code)
    got = contribs(conf, host(CELLS, [device]))
    assert bool(got) is offered


def test_bandwidth_above_placement_max_is_refused(conf):
    conf.set_override("bandwidth", [f"{PF_A}:99999999999:1"], "sriov")
    with pytest.raises(InvalidSRIOVConfig, match="at most 2147483647"):
        SRIOVPlugin(conf).discover(host(CELLS, [pf(PF_A, 2)]))


@pytest.mark.parametrize("option,values", [
    ("physical_device_mappings", ["physnet1:ens1f0", f"physnet2:{PF_A}"]),
    ("bandwidth", ["ens1f0:1000:1000", f"{PF_A}:5:5"]),
])
def test_one_pf_named_twice_with_different_values(conf, option, values):
    conf.set_override(option, values, "sriov")
    with pytest.raises(InvalidSRIOVConfig, match="same PF 0000:5e:00.0"):
        SRIOVPlugin(conf).discover(host(CELLS, [pf(PF_A, 2, 0, "ens1f0")]))


def test_one_pf_named_twice_with_the_same_value(conf):
    conf.set_override("physical_device_mappings",
                      ["physnet1:ens1f0", f"physnet1:{PF_A}"], "sriov")
    got = contribs(conf, host(CELLS, [pf(PF_A, 2, 0, "ens1f0")]))
    assert "CUSTOM_PHYSNET_PHYSNET1" in got["node1_pf_0000_5e_00_0"].traits
