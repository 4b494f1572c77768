"""The sriov plugin's decision: VFs for ports, devices for PCI aliases."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from compute_plugins.host.model import MdevType, PCIDevice
from compute_plugins.plugin import names
from compute_plugins.plugin.choice import Budget
from compute_plugins.plugin.contract import Rejection
from compute_plugins.plugin.state import AssignmentConflict
from resources.sriov import SRIOVPlugin
from resources.sriov import fit as sriov_fit
from resources.sriov.request import (
    DeviceAssignment,
    SRIOVAssignment,
    VFAssignment,
)
from resources.sriov.view import VFView
from tests.unit.resources.helpers import (
    NODE,
    cell,
    decoded,
    encoded,
    host,
    on_cells,
    parse,
    pf,
    state_of,
)

CELLS = [cell(0, range(4)), cell(1, range(4, 8))]
PF_A = "0000:5e:00.0"    # physnet1, cell 0, VFs 0000:5f:10.x
PF_B = "0000:af:00.0"    # physnet1, cell 1, VFs 0000:b0:10.x
PF_C = "0000:3a:00.0"    # physnet2, no NUMA information, VFs 0000:3b:10.x
QAT_A = "0000:88:00.0"   # 8086:0443 type-PCI, cell 0
QAT_B = "0000:89:00.0"   # 8086:0443 type-PCI, cell 1
QAT_PF = "0000:3d:00.0"  # 8086:37c8 type-PF (not a NIC), cell 1
ALIASES = [
    {"name": "qat", "vendor_id": "8086", "product_id": "0443",
     "device_type": "type-PCI", "numa_policy": "required"},
    {"name": "qatvf", "vendor_id": "8086", "product_id": "37c9",
     "device_type": "type-VF"},
    {"name": "c8", "vendor_id": "8086", "product_id": "37c8"},
    {"name": "blue", "resource_class": "CUSTOM_PCI_8086_0443", "traits": "blue"},
    {"name": "byclass", "resource_class": "CUSTOM_PCI_8086_0443"},
]


def pf_uuid(address):
    return names.provider_uuid(NODE, "pf", address)


def dev_uuid(address):
    return names.provider_uuid(NODE, "pci", address)


def vf_of(pf_address, index):
    bus = int(pf_address.split(":")[1], 16)
    return "0000:%02x:10.%d" % (bus + 1, index)


@pytest.fixture
def plugin(conf):
    conf.set_override("physical_device_mappings",
                      ["physnet1:%s" % PF_A, "physnet1:%s" % PF_B,
                       "physnet2:%s" % PF_C], "sriov")
    conf.set_override("bandwidth", ["%s:1000:2000" % PF_A, "%s:500:" % PF_B],
                      "sriov")
    conf.set_override("alias", [json.dumps(a) for a in ALIASES], "pci")
    return SRIOVPlugin(conf)


def qat(address, numa_node, product="0443", **kwargs):
    return PCIDevice(address=address, name="pci_" + address, vendor_id="8086",
                     product_id=product, class_code="0b4000",
                     numa_node=numa_node, **kwargs)


def qat_pf_with_vfs(vfs=2):
    vf_addresses = tuple("0000:3d:01.%d" % i for i in range(vfs))
    return [qat(QAT_PF, 1, "37c8", virt_functions=vf_addresses, max_vfs=16)] + [
        qat(a, 1, "37c9", phys_function=QAT_PF) for a in vf_addresses]


def nic_host(vfs=4, extra=()):
    return host(CELLS, [pf(PF_A, vfs, 0), pf(PF_B, vfs, 1), pf(PF_C, vfs, None),
                        *extra])


def state(plugin, info, *assignments):
    return state_of(plugin, plugin.discover(info), assignments)


def port(pid="p1", physnet="physnet1", egress=0, ingress=0, vnic="direct"):
    return {"id": pid, "vnic_type": vnic, "physnet": physnet,
            "min_kbps_egress": egress, "min_kbps_ingress": ingress}


def ports_request(plugin, *ports, policy=None):
    specs = {"hw:pci_numa_affinity_policy": policy} if policy else {}
    return parse(plugin, specs, ports=ports)


def alias_request(plugin, value, policy=None):
    specs = {"pci_passthrough:alias": value}
    if policy:
        specs["hw:pci_numa_affinity_policy"] = policy
    return parse(plugin, specs)


def vf_assignment(pf_address, vf_address, pid="p1", index=0, egress=0,
                  physnet="physnet1"):
    return SRIOVAssignment(vfs=(VFAssignment(
        "_PORT%d" % index, pf_uuid(pf_address), pf_address, vf_address, pid,
        physnet, egress, 0),))


def device_assignment(*addresses, alias="qat", group="_PCI0"):
    return SRIOVAssignment(devices=tuple(
        DeviceAssignment(group, alias, a, dev_uuid(a)) for a in addresses))


# -- host state ---------------------------------------------------------------

def test_state_of_pfs_and_alias_devices(plugin):
    gpu = PCIDevice(address="0000:84:00.0", name="pci_gpu", vendor_id="8086",
                    product_id="0443", mdev_types=(MdevType("nvidia-35", None, 4),))
    info = nic_host(2, [qat(QAT_A, 0), qat(QAT_B, 1), *qat_pf_with_vfs(), gpu])
    view = plugin.discover(info)
    got = state_of(plugin, view, [])
    contributed = {c.name: c.uuid for c in plugin.provider_contributions(view, NODE)}
    a = got.pf(PF_A)
    assert a.provider_uuid == contributed["node1_pf_0000_5e_00_0"]
    assert (a.physnet, a.cell, a.total_vfs, a.egress_kbps, a.ingress_kbps) == (
        "physnet1", 0, 2, 1000, 2000)
    assert a.vfs == (VFView(vf_of(PF_A, 0)), VFView(vf_of(PF_A, 1)))
    assert got.pf(PF_C).cell is None
    # the NICs' VFs serve ports and the mdev-capable device is the vgpu
    # plugin's; the QAT PF, its VFs and the QAT devices match aliases
    assert [(d.address, d.device_type, d.cell, d.parent) for d in got.devices] == [
        ("0000:3d:00.0", "type-PF", 1, None),
        ("0000:3d:01.0", "type-VF", 1, QAT_PF),
        ("0000:3d:01.1", "type-VF", 1, QAT_PF),
        (QAT_A, "type-PCI", 0, None), (QAT_B, "type-PCI", 1, None)]
    assert got.device(QAT_A).provider_uuid == dev_uuid(QAT_A)


def test_state_sums_ports_and_round_trips(plugin):
    info = nic_host(2, [qat(QAT_A, 0)])
    got = state(plugin, info,
                vf_assignment(PF_A, vf_of(PF_A, 1), "p1", egress=300),
                vf_assignment(PF_A, vf_of(PF_A, 0), "p2", egress=200),
                device_assignment(QAT_A))
    a = got.pf(PF_A)
    assert (a.used_vfs, a.used_egress_kbps, a.free_vfs()) == (
        {vf_of(PF_A, 0), vf_of(PF_A, 1)}, 500, ())
    assert got.device(QAT_A).used
    assert decoded(plugin, encoded(plugin, got)) == got


@pytest.mark.parametrize("assignments, reason", [
    ([vf_assignment(PF_A, vf_of(PF_A, 0), "p1"), vf_assignment(PF_A, vf_of(PF_A, 0), "p2")],
     "VF 0000:5f:10.0 is assigned twice (ports p1 and p2)"),
    ([vf_assignment(PF_A, vf_of(PF_B, 0))],
     "port p1 uses VF 0000:b0:10.0, which is not a VF of PF 0000:5e:00.0 on this host"),
    ([vf_assignment("0000:01:00.0", "0000:02:10.0")],
     "port p1 uses PF 0000:01:00.0, which is not an SR-IOV PF of this host"),
    ([device_assignment(QAT_A), device_assignment(QAT_A, alias="byclass")],
     "PCI device 0000:88:00.0 is assigned twice (aliases qat and byclass)"),
    ([device_assignment("0000:99:00.0")],
     "alias qat uses PCI device 0000:99:00.0, which this host does not offer "
     "for aliases"),
    ([device_assignment(QAT_PF, "0000:3d:01.0", alias="c8")],
     "PF 0000:3d:00.0 and its VF 0000:3d:01.0 are both assigned"),
])
def test_state_conflicts_name_the_unit(plugin, assignments, reason):
    info = nic_host(2, [qat(QAT_A, 0), *qat_pf_with_vfs()])
    with pytest.raises(AssignmentConflict) as err:
        state(plugin, info, *assignments)
    assert (err.value.plugin, err.value.reason) == ("sriov", reason)


# -- ports --------------------------------------------------------------------

def test_offline_ports_take_free_vfs_and_record_physnet_and_bandwidth(plugin):
    info = nic_host()
    request = ports_request(plugin, port("p1", egress=100),
                            port("p2", "physnet2"))
    got = plugin.fit(state(plugin, info), request, None, {})
    assert got == SRIOVAssignment(vfs=(
        VFAssignment("_PORT0", pf_uuid(PF_A), PF_A, vf_of(PF_A, 0), "p1",
                     "physnet1", 100, 0),
        VFAssignment("_PORT1", pf_uuid(PF_C), PF_C, vf_of(PF_C, 0), "p2",
                     "physnet2", 0, 0)))
    later = plugin.fit(state(plugin, info, got), request, None, {})
    assert [vf.vf_address for vf in later.vfs] == [vf_of(PF_A, 1), vf_of(PF_C, 1)]


def test_ports_above_a_lowered_bandwidth_keep_running(plugin):
    info = host(CELLS, [pf(PF_A, 4, 0)])
    now = state(plugin, info, vf_assignment(PF_A, vf_of(PF_A, 0), "p1", egress=700),
                vf_assignment(PF_A, vf_of(PF_A, 1), "p2", egress=700))
    assert now.pf(PF_A).used_egress_kbps == 1400
    assert plugin.fit(now, ports_request(plugin, port("p3", egress=1)), None,
                      {}).reason == (
        "no PF can serve port p3: PF 0000:5e:00.0 on physnet physnet1 has 0 kbps "
        "egress free, port p3 needs 1")
    assert isinstance(plugin.fit(now, ports_request(plugin, port("p3")), None, {}),
                      SRIOVAssignment)


def test_bandwidth_rejection_names_the_pf_and_the_numbers(plugin):
    info = host(CELLS, [pf(PF_A, 4, 0)])
    now = state(plugin, info, vf_assignment(PF_A, vf_of(PF_A, 0), "old", egress=900))
    got = plugin.fit(now, ports_request(plugin, port("p1", egress=200)),
                     {"_PORT0": [pf_uuid(PF_A)]}, {})
    assert got == Rejection("PF 0000:5e:00.0 on physnet physnet1 has 100 kbps "
                            "egress free, port p1 needs 200", pf_uuid(PF_A))


def test_ports_of_one_request_add_up_on_a_pf(plugin):
    info = host(CELLS, [pf(PF_A, 4, 0)])
    got = plugin.fit(state(plugin, info),
                     ports_request(plugin, port("p1", egress=600),
                                   port("p2", egress=600)), None, {})
    assert got == Rejection(
        "no PF can serve port p2: PF 0000:5e:00.0 on physnet physnet1 has 400 "
        "kbps egress free, port p2 needs 600")


def test_offline_finds_the_fit_the_best_first_choice_misses(plugin):
    # p1 on PF_A (first by address) leaves 600 kbps there, and PF_B has
    # 500 in all: p2 fits only if p1 goes to PF_B.
    info = nic_host()
    request = ports_request(plugin, port("p1", egress=400), port("p2", egress=900))
    got = plugin.fit(state(plugin, info), request, None, {})
    assert [(vf.port_id, vf.pf_address) for vf in got.vfs] == [
        ("p1", PF_B), ("p2", PF_A)]


def test_a_pf_without_bandwidth_or_on_another_physnet(plugin):
    info = host(CELLS, [pf(PF_C, 4, None)])
    now = state(plugin, info)
    assert plugin.fit(now, ports_request(plugin, port("p1", "physnet2", ingress=5)),
                      None, {}) == Rejection(
        "no PF can serve port p1: PF 0000:3a:00.0 on physnet physnet2 reports "
        "no ingress bandwidth, port p1 needs 5 kbps")
    assert plugin.fit(now, ports_request(plugin, port("p1", "physnet1")),
                      None, {}) == Rejection(
        "no PF can serve port p1: PF 0000:3a:00.0 on physnet physnet2, port p1 "
        "needs physnet physnet1")


def test_a_full_pf(plugin):
    info = host(CELLS, [pf(PF_A, 1, 0)])
    now = state(plugin, info, vf_assignment(PF_A, vf_of(PF_A, 0), "old"))
    assert plugin.fit(now, ports_request(plugin, port()), None, {}).reason == (
        "no PF can serve port p1: PF 0000:5e:00.0 on physnet physnet1 has 0 of "
        "1 VFs free, port p1 needs 1")


def test_the_mapped_pf_is_used(plugin):
    info = nic_host()
    request = ports_request(plugin, port())
    got = plugin.fit(state(plugin, info), request, {"_PORT0": [pf_uuid(PF_B)]}, {})
    assert (got.vfs[0].pf_address, got.vfs[0].vf_address) == (PF_B, vf_of(PF_B, 0))
    assert plugin.fit(state(plugin, info), request, {"_PORT0": ["x"]}, {}) == \
        Rejection("port p1 is allocated from provider x, which is not an "
                  "SR-IOV PF of this host", "x")
    assert plugin.fit(state(plugin, info), request, {}, {}) == Rejection(
        "the allocation maps no provider to port p1 (group _PORT0)")


@pytest.mark.parametrize("policy, cells, expected", [
    (None, (1,), PF_B),              # legacy: the affine PF
    ("required", (0,), PF_A),
    ("preferred", (1,), PF_B),
])
def test_port_affinity_prefers_the_guests_cells(plugin, policy, cells, expected):
    got = plugin.fit(state(plugin, nic_host()),
                     ports_request(plugin, port(), policy=policy), None,
                     on_cells(*cells))
    assert got.vfs[0].pf_address == expected
    assert got.host_cells == cells


def test_legacy_port_affinity_as_nova(plugin):
    # PF_A on cell 0 is not allowed for a guest on cell 1 (legacy is nova's
    # default for ports); PF_C without NUMA information is.
    only_a = state(plugin, host(CELLS, [pf(PF_A, 4, 0)]))
    got = plugin.fit(only_a, ports_request(plugin, port()), None, on_cells(1))
    assert got.reason == (
        "no PF can serve port p1: PF 0000:5e:00.0 on physnet physnet1 is on "
        "host cell 0; hw:pci_numa_affinity_policy=legacy needs a device on one "
        "of the guest's host cells (1) or one without NUMA affinity")
    assert isinstance(plugin.fit(only_a, ports_request(plugin, port(), policy="preferred"),
                                 None, on_cells(1)), SRIOVAssignment)
    only_c = state(plugin, host(CELLS, [pf(PF_C, 4, None)]))
    assert isinstance(plugin.fit(only_c, ports_request(plugin, port("p1", "physnet2")),
                                 None, on_cells(1)), SRIOVAssignment)
    assert isinstance(plugin.fit(only_c, ports_request(
        plugin, port("p1", "physnet2"), policy="required"), None, on_cells(1)),
        Rejection)


def test_macvtap_port_needs_a_vf_with_a_network_interface(plugin):
    vfs = [PCIDevice(address=vf_of(PF_A, i), name="vf%d" % i,
                     phys_function=PF_A, netdevs=("ens1f0v%d" % i,) if i else ())
           for i in range(2)]
    info = host(CELLS, [pf(PF_A, 2, 0), *vfs])
    request = ports_request(plugin, port(vnic="macvtap"))
    got = plugin.fit(state(plugin, info), request, None, {})
    assert (got.vfs[0].vf_address, got.vfs[0].vf_netdev) == (vf_of(PF_A, 1), "ens1f0v1")
    [fragment] = plugin.guest_config(request, got)
    element = ET.fromstring(fragment.xml)
    assert (element.tag, element.get("type")) == ("interface", "direct")
    assert element.find("source").attrib == {"dev": "ens1f0v1", "mode": "passthrough"}
    taken = state(plugin, info, got)
    assert plugin.fit(taken, request, None, {}).reason == (
        "no PF can serve port p1: PF 0000:5e:00.0 on physnet physnet1 has 1 "
        "free VFs and none has a network interface, macvtap port p1 needs one")


def test_verify_ports(plugin):
    info = nic_host()
    request = ports_request(plugin, port("p1", egress=300), policy="required")
    now = state(plugin, info)
    decided = plugin.fit(now, request, None, on_cells(0))
    assert plugin.verify(now, request, decided) is None
    vf = decided.vfs[0]
    taken = state(plugin, info, vf_assignment(PF_A, vf.vf_address, "other"))
    assert plugin.verify(taken, request, decided) == Rejection(
        "VF 0000:5f:10.0 of PF 0000:5e:00.0 (port p1) is used by another guest",
        pf_uuid(PF_A))
    squeezed = state(plugin, info, vf_assignment(PF_A, vf_of(PF_A, 3), "o", egress=800))
    assert plugin.verify(squeezed, request, decided).reason == (
        "PF 0000:5e:00.0 on physnet physnet1 has 200 kbps egress free, port p1 "
        "needs 300")
    elsewhere = SRIOVAssignment(vfs=decided.vfs, host_cells=(1,))
    assert "is on host cell 0; hw:pci_numa_affinity_policy=required" in \
        plugin.verify(now, request, elsewhere).reason
    other_port = ports_request(plugin, port("p9"))
    assert plugin.verify(now, other_port, decided).reason == (
        "the assignment serves ports p1, the request asks p9")


def test_guest_config_of_a_direct_port(plugin):
    request = ports_request(plugin, port())
    decided = plugin.fit(state(plugin, nic_host()), request, None, {})
    [fragment] = plugin.guest_config(request, decided)
    element = ET.fromstring(fragment.xml)
    assert fragment.parent == "devices"
    assert element.attrib == {"type": "hostdev", "managed": "yes"}
    assert element.find("source/address").attrib == {
        "type": "pci", "domain": "0x0000", "bus": "0x5f", "slot": "0x10",
        "function": "0x0"}


# -- PCI aliases --------------------------------------------------------------

def test_alias_request_carries_what_it_matches(plugin):
    request = alias_request(plugin, "qat:1, qatvf:2")
    assert [(a.name, a.vendor_id, a.product_id, a.device_type, a.count)
            for a in request.aliases] == [
        ("qat", "8086", "0443", "type-PCI", 1), ("qatvf", "8086", "37c9", "type-VF", 2)]


def test_alias_devices_offline_with_required_affinity(plugin):
    info = host(CELLS, [qat(QAT_A, 0), qat(QAT_B, 1)])
    request = alias_request(plugin, "qat:1")
    now = state(plugin, info)
    got = plugin.fit(now, request, None, on_cells(1))
    assert got.devices == (DeviceAssignment("_PCI0", "qat", QAT_B, dev_uuid(QAT_B)),)
    taken = state(plugin, info, device_assignment(QAT_B))
    assert plugin.fit(taken, request, None, on_cells(1)) == Rejection(
        "alias qat needs 1 device(s), 0 of the 2 matching on this host can be "
        "given: PCI device 0000:89:00.0 (alias qat) is used by another guest; "
        "PCI device 0000:88:00.0 is on host cell 0; hw:pci_numa_affinity_policy"
        "=required needs a device on one of the guest's host cells (1)")
    # the flavor's policy wins over the alias's
    loose = alias_request(plugin, "qat:1", policy="preferred")
    assert plugin.fit(taken, loose, None, on_cells(1)).devices[0].address == QAT_A


def test_alias_count_and_used_devices(plugin):
    info = host(CELLS, [qat(QAT_A, 0), qat(QAT_B, 1)])
    now = state(plugin, info, device_assignment(QAT_A, alias="byclass"))
    assert plugin.fit(now, alias_request(plugin, "byclass:2"), None, {}).reason == (
        "alias byclass needs 2 device(s), 1 of the 2 matching on this host can "
        "be given: PCI device 0000:88:00.0 (alias byclass) is used by another guest")
    got = plugin.fit(state(plugin, info), alias_request(plugin, "byclass:2"), None, {})
    assert [d.address for d in got.devices] == [QAT_A, QAT_B]


def test_a_pf_and_its_vfs_are_not_given_together(plugin):
    info = host(CELLS, qat_pf_with_vfs())
    now = state(plugin, info)
    # c8 (no device type) matches the PF only: 37c9 are the VFs
    got = plugin.fit(now, alias_request(plugin, "c8:1"), None, {})
    assert [d.address for d in got.devices] == [QAT_PF]
    vf_taken = state(plugin, info, device_assignment("0000:3d:01.1", alias="qatvf"))
    assert plugin.fit(vf_taken, alias_request(plugin, "c8:1"), None, {}).reason == (
        "alias c8 needs 1 device(s), 0 of the 1 matching on this host can be "
        "given: PCI device 0000:3d:00.0 (alias c8) cannot be given: its VF "
        "0000:3d:01.1 is used")
    both = plugin.fit(now, alias_request(plugin, "qatvf:1, c8:1"), None, {})
    assert both.reason.startswith("alias c8 needs 1 device(s), 0 of the 1 "
                                  "matching on this host can be given: PCI "
                                  "device 0000:3d:00.0 (alias c8) cannot be "
                                  "given: its VF 0000:3d:01.0 is used")


def test_alias_without_a_device_and_with_traits(plugin):
    now = state(plugin, host(CELLS, [qat(QAT_A, 0)]))
    assert plugin.fit(now, alias_request(plugin, "qatvf:1"), None, {}) == Rejection(
        "alias qatvf needs 1 device(s) (vendor_id 8086, product_id 37c9, "
        "device_type type-VF): no PCI device on this host matches it")
    assert plugin.fit(now, alias_request(plugin, "blue:1"), None, {}) == Rejection(
        "alias blue needs 1 device(s) (resource class CUSTOM_PCI_8086_0443): no "
        "PCI device on this host matches it; it requires traits CUSTOM_BLUE, "
        "which PCI devices do not carry")


def test_alias_mapping_is_honoured_when_the_allocation_has_one(plugin):
    info = host(CELLS, [qat(QAT_A, 0), qat(QAT_B, 1)])
    request = alias_request(plugin, "byclass:1")
    mapped = plugin.fit(state(plugin, info), request,
                        {"_PCI0": [dev_uuid(QAT_B)]}, {})
    assert mapped.devices[0].address == QAT_B
    # no provider reports alias devices yet: without a mapping the plugin
    # chooses
    unmapped = plugin.fit(state(plugin, info), request, {"": ["root"]}, {})
    assert unmapped.devices[0].address == QAT_A


def test_verify_alias_devices(plugin):
    info = host(CELLS, [qat(QAT_A, 0), qat(QAT_B, 1)])
    request = alias_request(plugin, "qat:1")
    now = state(plugin, info)
    decided = plugin.fit(now, request, None, on_cells(0))
    assert plugin.verify(now, request, decided) is None
    taken = state(plugin, info, device_assignment(QAT_A, alias="byclass"))
    assert plugin.verify(taken, request, decided) == Rejection(
        "PCI device 0000:88:00.0 (alias qat) is used by another guest",
        dev_uuid(QAT_A))
    wrong = SRIOVAssignment(devices=(DeviceAssignment("_PCI0", "qat", QAT_B,
                                                      dev_uuid(QAT_B)),),
                            host_cells=(0,))
    assert "is on host cell 1; hw:pci_numa_affinity_policy=required" in \
        plugin.verify(now, request, wrong).reason
    short = SRIOVAssignment(host_cells=(0,))
    assert plugin.verify(now, request, short).reason == (
        "alias qat gets 0 device(s), it asks 1")


def test_guest_config_of_alias_devices_after_ports(plugin):
    info = nic_host(2, [qat(QAT_A, 0)])
    request = parse(plugin, {"pci_passthrough:alias": "qat:1"}, ports=[port()])
    decided = plugin.fit(state(plugin, info), request, None, {})
    fragments = plugin.guest_config(request, decided)
    assert [ET.fromstring(f.xml).tag for f in fragments] == ["interface", "hostdev"]
    hostdev = ET.fromstring(fragments[1].xml)
    assert hostdev.attrib == {"mode": "subsystem", "type": "pci", "managed": "yes"}
    assert hostdev.find("source/address").attrib == {
        "domain": "0x0000", "bus": "0x88", "slot": "0x00", "function": "0x0"}


def test_a_malformed_alias_leaves_the_pfs_alone(conf, caplog):
    conf.set_override("alias", ['{"name": "x"}'], "pci")
    view = SRIOVPlugin(conf).discover(host(CELLS, [pf(PF_A, 2, 0), qat(QAT_A, 0)]))
    assert [p.address for p in view.pfs] == [PF_A]
    assert view.devices == ()
    assert "no PCI device is offered for aliases" in caplog.text


# -- PCI aliases: a complete, bounded choice -------------------------------------

QAT_0443_PF = "0000:8a:00.0"   # 8086:0443 type-PF, cell 0 (byclass, not qat)


def qat_0443_pf():
    vfs = ("0000:8a:01.0",)
    return [qat(QAT_0443_PF, 0, virt_functions=vfs, max_vfs=16),
            qat(vfs[0], 0, "37c9", phys_function=QAT_0443_PF)]


def many_qats(count, extra=()):
    return host(CELLS, [qat("0000:%02x:00.0" % (0x40 + i), i % 2)
                        for i in range(count)] + list(extra))


def test_a_broad_alias_first_leaves_the_narrow_one_its_device(plugin):
    info = host(CELLS, [qat(QAT_A, 0)] + qat_0443_pf())
    # byclass (any 0443) alone would take QAT_A first (a PF with VFs last);
    # qat (0443 type-PCI) can only have QAT_A.
    got = plugin.fit(state(plugin, info), alias_request(plugin, "byclass:1, qat:1"),
                     None, {})
    assert isinstance(got, SRIOVAssignment), got
    assert [(d.alias, d.address) for d in got.devices] == [
        ("byclass", QAT_0443_PF), ("qat", QAT_A)]


def test_aliases_that_cannot_fit_64_devices_answer_in_few_steps(plugin):
    now = state(plugin, many_qats(64, qat_pf_with_vfs(2)))
    # qat and byclass need 63 + 2 of the 64 type-PCI QATs (Hall's condition
    # fails on them), though all three aliases together have as many
    # candidates (66) as they need.
    budget = Budget()
    got = sriov_fit.fit(now, alias_request(plugin, "qat:63, byclass:2, qatvf:1"),
                        None, {}, budget)
    assert got.reason.startswith("alias byclass needs 2 device(s), 1 of the 64 "
                                 "matching on this host can be given")
    assert 0 < budget.used <= 66 * 3 * 66
    # More than every candidate together: refused before any search.
    budget = Budget()
    got = sriov_fit.fit(now, alias_request(plugin, "qat:63, byclass:4"), None,
                        {}, budget)
    assert isinstance(got, Rejection) and budget.used == 0


def test_an_exhausted_search_says_it_stopped(plugin):
    info = host(CELLS, [qat(QAT_A, 0)] + qat_0443_pf())
    got = sriov_fit.fit(state(plugin, info), alias_request(plugin, "byclass:1, qat:1"),
                        None, {}, Budget(limit=1))
    assert got == Rejection(
        "the search for the devices of the aliases stopped after 1 steps (its "
        "budget) without an answer; the host may still fit")


def test_the_search_for_pfs_has_a_budget_and_says_when_it_ran_out(plugin):
    now = state(plugin, nic_host(vfs=1))
    request = ports_request(plugin, port("p1"), port("p2"))
    budget = Budget()
    assert isinstance(sriov_fit.fit(now, request, None, {}, budget), SRIOVAssignment)
    got = sriov_fit.fit(now, request, None, {}, Budget(budget.used - 1))
    assert got == Rejection(
        "the search for PFs for 2 ports stopped after %d steps (its budget) "
        "without an answer; the host may still fit" % (budget.used - 1))
