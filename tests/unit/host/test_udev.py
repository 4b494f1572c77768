"""Merging udev facts, their JSON and real-libudev lookups (no mocks)."""

from __future__ import annotations

import os

import pytest

from compute_plugins.host import udev
from compute_plugins.host.errors import HostDataError
from compute_plugins.host.model import HostInfo, PCIDevice
from compute_plugins.host.uri import is_local_uri

PF = PCIDevice(
    address="0000:02:10.7",
    name="pci_0000_02_10_7",
    virt_functions=("0000:02:00.2",),
)
NIC = PCIDevice(
    address="0000:42:00.0", name="pci_0000_42_00_0", numa_node=0, max_vfs=16
)
OTHER = PCIDevice(address="0000:00:02.0", name="pci_0000_00_02_0")
HOST = HostInfo(hostname="h", source="s", pci_devices=(PF, NIC, OTHER))


def test_apply_fills_what_libvirt_did_not_say():
    host = udev.apply_udev_facts(
        HOST,
        {
            PF.address: udev.UdevFacts(7, 4, 1, ("ens1f0",)),
            NIC.address: udev.UdevFacts(8, 0, None, ()),
        },
    )
    pf = host.pci_device(PF.address)
    assert (pf.max_vfs, pf.num_vfs, pf.numa_node, pf.netdevs) == (
        7,
        4,
        1,
        ("ens1f0",),
    )
    nic = host.pci_device(NIC.address)
    # libvirt's maxCount and NUMA node are kept.
    assert (nic.max_vfs, nic.num_vfs, nic.numa_node) == (16, 0, 0)
    assert host.pci_device(OTHER.address) == OTHER
    assert HOST.pci_device(PF.address) == PF  # the input is untouched
    assert host.hostname == "h"


def test_apply_without_facts_changes_nothing():
    assert udev.apply_udev_facts(HOST, {}) == HOST


def test_facts_json_round_trip():
    facts = {
        PF.address: udev.UdevFacts(7, 4, 0, ("ens1f0", "ens1f0d1")),
        NIC.address: udev.UdevFacts(),
    }
    text = udev.dump_facts_json(facts)
    assert udev.parse_facts_json(text, "x") == facts


@pytest.mark.parametrize(
    "text,reason",
    [
        ("", "printed no JSON"),
        ("[]", "no 'devices' object"),
        ('{"devices": {}}', "format_version None"),
        (
            '{"format_version": 1, "devices": {"a": {"max_vfs": "x"}}}',
            "bad udev facts",
        ),
    ],
)
def test_bad_facts_json(text, reason):
    with pytest.raises(HostDataError) as err:
        udev.parse_facts_json(text, "/snap/sysfs.umockdev")
    assert str(err.value).startswith("/snap/sysfs.umockdev: ")
    assert reason in str(err.value)


def test_real_libudev_does_not_know_a_made_up_address():
    # NOTE: this machine's real udev; the address cannot exist.
    assert udev.collect_udev_facts(["ffff:ff:1f.7"]) == {}


@pytest.mark.parametrize(
    "uri,local",
    [
        ("qemu:///system", True),
        ("qemu+unix:///system", True),
        ("qemu://localhost/system", True),
        ("qemu+ssh://h1/system", False),
        ("qemu+tcp://h1/system", False),
        ("test:///default", False),
        ("test+unix:///default", False),
        ("nonsense", False),
    ],
)
def test_is_local_uri(uri, local):
    assert is_local_uri(uri) is local


def _local_pci_address():
    root = "/sys/bus/pci/devices"
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    return names[0] if names else None


def test_enrich_from_this_machines_udev():
    """Live path on this machine's real udev (whatever the device is)."""
    address = _local_pci_address()
    assert address is not None, "this test needs a PCI device in /sys"
    with open(f"/sys/bus/pci/devices/{address}/numa_node") as handle:
        numa = int(handle.read())
    host = HostInfo(
        hostname="h",
        source="s",
        pci_devices=(PCIDevice(address=address, name="x"),),
    )
    device = udev.enrich_with_udev(host).pci_device(address)
    assert device.numa_node == (numa if numa >= 0 else None)
    assert all(isinstance(n, str) for n in device.netdevs)
