"""nova's ``[pci] device_spec`` in the sriov plugin: which devices are given,
on which physnet, with which class and traits; nova's errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from compute_plugins.exception import ConfigError
from compute_plugins.host import snapshot
from compute_plugins.host.model import PCIDevice
from compute_plugins.plugin.contract import Rejection
from compute_plugins.plugin.state import AssignmentConflict
from resources.sriov import SRIOVPlugin, devspec
from resources.sriov import fit as sriov_fit
from resources.sriov.request import DeviceAssignment, SRIOVAssignment
from tests.unit.resources.helpers import NODE, cell, host, state_of
from tests.unit.resources.test_sriov_fit import (
    alias_request,
    dev_uuid,
    parse,
    port,
    ports_request,
    vf_assignment,
)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "hosts"
CELLS = [cell(0, range(4)), cell(1, range(4, 8))]
PF = "0000:81:00.0"        # 8086:1528, cell 0, VFs 0000:81:00.1-2 (8086:1515)
PF2 = "0000:82:00.0"       # 8086:1528, cell 1, VFs 0000:82:00.1-2
GPU = "0000:84:00.0"       # 10de:25b6 type-PCI, cell 1


def nic(address, numa_node, vfs=2, netdev=None):
    bus = address[5:7]
    vf_addresses = tuple("0000:%s:00.%d" % (bus, i + 1) for i in range(vfs))
    return [PCIDevice(address=address, name="pci_" + address, vendor_id="8086",
                      product_id="1528", class_code="020000", numa_node=numa_node,
                      virt_functions=vf_addresses, max_vfs=8,
                      netdevs=(netdev,) if netdev else ())] + [
        PCIDevice(address=a, name="pci_" + a, vendor_id="8086",
                  product_id="1515", class_code="020000", numa_node=numa_node,
                  phys_function=address) for a in vf_addresses]


def devices(vfs=2):
    gpu = PCIDevice(address=GPU, name="pci_gpu", vendor_id="10de",
                    product_id="25b6", class_code="030200", numa_node=1)
    return host(CELLS, [*nic(PF, 0, vfs=vfs, netdev="ens1f0"), *nic(PF2, 1, vfs=vfs),
                        gpu])


def specs(conf, *values, aliases=()):
    conf.set_override("device_spec", [json.dumps(v) for v in values], "pci")
    conf.set_override("alias", [json.dumps(a) for a in aliases], "pci")
    return SRIOVPlugin(conf)


# -- the matcher ----------------------------------------------------------------

@pytest.mark.parametrize("spec, matched", [
    ({"vendor_id": "8086", "product_id": "1515"},
     ["0000:81:00.1", "0000:81:00.2", "0000:82:00.1", "0000:82:00.2"]),
    ({"address": "*:81:00.*"}, [PF, "0000:81:00.1", "0000:81:00.2"]),
    ({"address": ":82:00."}, [PF2, "0000:82:00.1", "0000:82:00.2"]),
    ({"address": ".2"}, ["0000:81:00.2", "0000:82:00.2"]),
    ({"address": {"bus": "8[12]", "function": "[1-7]"}},
     ["0000:81:00.1", "0000:81:00.2", "0000:82:00.1", "0000:82:00.2"]),
    # a PF's single address or network interface names its VFs too
    ({"address": "0000:81:00.0", "product_id": "1515"},
     ["0000:81:00.1", "0000:81:00.2"]),
    ({"devname": "ens1f0"}, [PF, "0000:81:00.1", "0000:81:00.2"]),
    ({"devname": "ens9"}, []),
    ({"vendor_id": "10DE"}, [GPU]),
])
def test_what_a_spec_matches(spec, matched):
    info = devices()
    (parsed,) = devspec.parse([json.dumps(spec)])
    assert [d.address for d in info.pci_devices if parsed.match(d, info)] == matched


@pytest.mark.parametrize("value, reason", [
    ("{not json", "Invalid entry: '{not json'"),
    ('"0000:81:00.0"', "Invalid entry: '\"0000:81:00.0\"'; Expecting list or dict"),
    ('["x"]', "Invalid entry: 'x'; Expecting dict"),
    ('{"vendor_id": "80g6"}',
     "property vendor_id ('80g6') does not parse as a hex number."),
    ('{"product_id": "10000"}',
     "property product_id (10000) is greater than the maximum allowable "
     "value (FFFF)."),
    ('{"address": "0000:81:20.0"}',
     "property slot (20) is greater than the maximum allowable value (1F)."),
    ('{"address": "1:2:3:4.0"}',
     "The PCI address 1:2:3:4.0 has an incorrect format."),
    ('{"address": {"bus": "(8"}}',
     "The PCI address {'bus': '(8'} has an incorrect format."),
    # a part that is not a string (nova: a traceback) names no device
    ('{"address": {"bus": "81", "function": null}}',
     "The PCI address {'bus': '81', 'function': None} has an incorrect format."),
    ('{"address": {"bus": 81}}',
     "The PCI address {'bus': 81} has an incorrect format."),
    ('{"address": "0000:81:00.0", "devname": "ens1f0"}',
     "Invalid PCI Whitelist: The PCI whitelist can specify devname or "
     "address, but not both"),
    ('{"managed": "maybe"}', "Cannot parse tag 'managed': Unrecognized value "
     "'maybe', acceptable values are:"),
])
def test_bad_specs_get_novas_reason_and_the_entry(conf, value, reason):
    conf.set_override("device_spec", [value], "pci")
    with pytest.raises(devspec.PciConfigInvalidSpec) as err:
        SRIOVPlugin(conf).discover(devices())
    assert isinstance(err.value, ConfigError)
    message = str(err.value)
    assert message.startswith("Invalid [pci]device_spec config: " + reason)
    assert message.endswith("(entry %s)" % value)


@pytest.mark.parametrize("spec, reason", [
    # the PF's VFs' ids: nova accepts the spec (the devices need a VPD serial)
    ({"address": PF, "product_id": "1515", "remote_managed": "true"}, None),
    ({"address": PF, "vendor_id": "8086", "product_id": "1516",
      "remote_managed": "true"},
     "the specified VF vendor ID 8086 and product ID 1516 do not match the "
     "expected VF IDs based on the corresponding PF identified by PCI address "
     "0000:81:00.0"),
    ({"address": PF, "vendor_id": "15b3", "product_id": "1515",
      "remote_managed": "true"},
     "the specified VF vendor ID 15b3 and product ID 1515 do not match the "
     "expected VF IDs based on the corresponding PF identified by PCI address "
     "0000:81:00.0"),
])
def test_remote_managed_spec_of_a_pf_address_as_nova_checks_it(conf, spec, reason):
    plugin = specs(conf, spec)
    if reason is None:
        view = plugin.discover(devices())
        assert [d.address for d in view.devices] == []
        return
    with pytest.raises(devspec.PciConfigInvalidSpec) as err:
        plugin.discover(devices())
    assert str(err.value) == "Invalid [pci]device_spec config: %s (entry %s)" % (
        reason, json.dumps(spec))


def test_remote_managed_spec_of_a_pf_is_refused(conf):
    specs(conf, {"address": PF, "remote_managed": "true"})
    with pytest.raises(devspec.PciConfigInvalidSpec,
                       match='PFs must not have the "remote_managed"tag, '
                             'device address: 0000:81:00.0'):
        SRIOVPlugin(conf).discover(devices())


# -- the view: ports ------------------------------------------------------------

def test_unmapped_pf_serves_ports_with_the_vfs_a_physnet_spec_names(conf):
    plugin = specs(conf, {"vendor_id": "8086", "product_id": "1515",
                          "address": "*:81:00.*", "physical_network": "physnet4"})
    view = plugin.discover(devices())
    got = {c.name: c for c in plugin.provider_contributions(view, NODE)}
    # the other PF's VFs are not in the device_spec: no provider
    assert list(got) == ["node1_pf_0000_81_00_0"]
    only = got["node1_pf_0000_81_00_0"]
    assert only.inventory["SRIOV_NET_VF"]["total"] == 2
    assert only.traits == {"CUSTOM_VNIC_TYPE_DIRECT", "CUSTOM_PHYSNET_PHYSNET4"}
    request = ports_request(plugin, port("p1", "physnet4"))
    assignment = plugin.fit(state_of(plugin, view), request, None, {})
    assert [vf.vf_address for vf in assignment.vfs] == ["0000:81:00.1"]


def test_physical_device_mappings_keeps_its_pf_with_a_device_spec(conf):
    conf.set_override("physical_device_mappings", ["physnet1:%s" % PF2], "sriov")
    plugin = specs(conf, {"devname": "ens1f0", "physical_network": "physnet4"})
    view = plugin.discover(devices())
    assert [(p.address, p.physnet, p.vfs) for p in view.pfs] == [
        (PF, "physnet4", 2), (PF2, "physnet1", 2)]


def test_real_snapshot_pf_named_by_its_interface(conf, tmp_path):
    snap = tmp_path / "sriov"
    shutil.copytree(FIXTURES / "sriov", snap)
    info = snapshot.load_snapshot(str(snap), use_udev=True)
    plugin = specs(conf, {"devname": "ens1f0", "physical_network": "physnet2"})
    (pf,) = plugin.discover(info).pfs
    assert (pf.address, pf.physnet, pf.vfs) == ("0000:02:10.7", "physnet2", 4)
    conf.set_override("device_spec", [json.dumps({"devname": "ens1f0"})], "pci")
    # VFs without a physical_network serve no port
    assert SRIOVPlugin(conf).discover(info).pfs == ()


# -- the view: alias devices ----------------------------------------------------

PF_ALIAS = {"name": "pfs", "vendor_id": "8086", "product_id": "1528",
            "device_type": "type-PF"}
VF_ALIAS = {"name": "vfs", "vendor_id": "8086", "product_id": "1515"}


def test_nic_pfs_and_vfs_are_alias_devices_with_a_device_spec(conf):
    plugin = specs(conf, {"vendor_id": "8086", "product_id": "1528",
                          "physical_network": "physnet4"},
                   {"vendor_id": "8086", "product_id": "1515",
                    "physical_network": "physnet4"},
                   aliases=[PF_ALIAS, VF_ALIAS])
    view = plugin.discover(devices())
    # the GPU is in no spec
    assert [(d.address, d.device_type) for d in view.devices] == [
        (PF, "type-PF"), ("0000:81:00.1", "type-VF"), ("0000:81:00.2", "type-VF"),
        (PF2, "type-PF"), ("0000:82:00.1", "type-VF"), ("0000:82:00.2", "type-VF")]
    state = state_of(plugin, view)
    got = plugin.fit(state, alias_request(plugin, "pfs:1"), None, {})
    assert [d.address for d in got.devices] == [PF]
    # a PF given whole: its VFs serve neither ports nor aliases
    taken = state_of(plugin, view, [got])
    assert taken.pf(PF).free_vfs() == ()
    vf = plugin.fit(taken, alias_request(plugin, "vfs:1"), None, {})
    assert [d.address for d in vf.devices] == ["0000:82:00.1"]


def test_a_port_vf_is_not_given_to_an_alias_nor_its_pf(conf):
    plugin = specs(conf, {"vendor_id": "8086", "physical_network": "physnet4",
                          "address": "*:81:*.*"},
                   aliases=[PF_ALIAS, VF_ALIAS])
    view = plugin.discover(devices())
    used = state_of(plugin, view, [vf_assignment(PF, "0000:81:00.1",
                                                 physnet="physnet4")])
    assert used.device("0000:81:00.1").used and not used.device(PF).used
    pf_refused = plugin.fit(used, alias_request(plugin, "pfs:1"), None, {})
    assert isinstance(pf_refused, Rejection)
    assert ("PCI device 0000:81:00.0 (alias pfs) cannot be given: its VF "
            "0000:81:00.1 is used") in pf_refused.reason
    vf = plugin.fit(used, alias_request(plugin, "vfs:1"), None, {})
    assert [d.address for d in vf.devices] == ["0000:81:00.2"]
    with pytest.raises(AssignmentConflict, match="given to an alias too"):
        state_of(plugin, view, [
            vf_assignment(PF, "0000:81:00.1", physnet="physnet4"),
            SRIOVAssignment(devices=(DeviceAssignment(
                "_PCI0", "vfs", "0000:81:00.1", dev_uuid("0000:81:00.1")),))])


def test_a_pf_is_not_given_while_a_port_uses_its_vf(conf):
    # the PF's VFs serve ports by physical_device_mappings, the PF is an
    # alias device by its device_spec
    conf.set_override("physical_device_mappings", ["physnet4:%s" % PF], "sriov")
    plugin = specs(conf, {"address": PF, "product_id": "1528"},
                   aliases=[PF_ALIAS])
    view = plugin.discover(devices())
    assert [d.address for d in view.devices] == [PF]
    used = state_of(plugin, view, [vf_assignment(PF, "0000:81:00.1",
                                                 physnet="physnet4")])
    refused = plugin.fit(used, alias_request(plugin, "pfs:1"), None, {})
    assert isinstance(refused, Rejection)
    assert ("PCI device 0000:81:00.0 (alias pfs) cannot be given: its VF "
            "0000:81:00.1 serves a port") in refused.reason


def test_resource_class_and_traits_of_the_spec_serve_rc_aliases(conf):
    plugin = specs(conf, {"vendor_id": "10de", "product_id": "25b6",
                          "resource_class": "pgpu", "traits": "blue,HW_GPU_API_VULKAN",
                          "managed": "no"},
                   aliases=[{"name": "gpu", "resource_class": "PGPU",
                             "traits": "blue"},
                            {"name": "red", "resource_class": "PGPU",
                             "traits": "red"}])
    view = plugin.discover(devices())
    (gpu,) = view.devices
    assert (gpu.resource_class, gpu.managed) == ("PGPU", False)
    assert gpu.traits == {"CUSTOM_BLUE", "HW_GPU_API_VULKAN",
                          "COMPUTE_MANAGED_PCI_DEVICE"}
    state = state_of(plugin, view)
    got = plugin.fit(state, alias_request(plugin, "gpu:1"), None, {})
    assert [d.address for d in got.devices] == [GPU]
    red = plugin.fit(state, alias_request(plugin, "red:1"), None, {})
    assert isinstance(red, Rejection)
    assert red.reason == (
        "alias red needs 1 device(s) (resource class PGPU): no PCI device on "
        "this host matches it; it requires traits CUSTOM_RED, no device of "
        "this host's [pci] device_spec carries all")


def test_without_device_spec_nothing_changes(conf):
    plugin = specs(conf, aliases=[PF_ALIAS, VF_ALIAS])
    view = plugin.discover(devices())
    # the NICs' PFs and VFs serve ports, not aliases (no device_spec)
    assert view.devices == ()
    assert [(p.address, p.physnet, p.vfs) for p in view.pfs] == [
        (PF, None, 2), (PF2, None, 2)]


def test_an_alias_saying_live_migratable_names_devices_whose_spec_says_it(conf):
    plugin = specs(conf, {"vendor_id": "8086", "product_id": "1515",
                          "address": "*:81:00.*", "live_migratable": "yes"},
                   {"vendor_id": "8086", "product_id": "1515",
                    "address": "*:82:00.*", "live_migratable": "no"},
                   aliases=[{**VF_ALIAS, "name": "lm", "live_migratable": "yes"},
                            {**VF_ALIAS, "name": "nolm", "live_migratable": "no"},
                            VF_ALIAS])
    state = state_of(plugin, plugin.discover(devices()))
    for alias, address in (("lm", "0000:81:00.1"), ("nolm", "0000:82:00.1"),
                           ("vfs", "0000:81:00.1")):
        got = plugin.fit(state, alias_request(plugin, alias + ":1"), None, {})
        assert [d.address for d in got.devices] == [address], alias
    assert "HW_PCI_LIVE_MIGRATABLE" in state.device("0000:81:00.1").traits
    conf.set_override("device_spec", [json.dumps(
        {"vendor_id": "8086", "product_id": "1515"})], "pci")
    refused = plugin.fit(state_of(plugin, plugin.discover(devices())),
                         alias_request(plugin, "lm:1"), None, {})
    assert refused.reason == (
        "alias lm needs 1 device(s) (vendor_id 8086, product_id 1515, "
        "live_migratable true): no PCI device on this host matches it")


def test_a_bad_live_migratable_of_an_alias(conf):
    specs(conf, aliases=[{**VF_ALIAS, "live_migratable": "perhaps"}])
    with pytest.raises(ConfigError, match="live_migratable of alias vfs is "
                                          "'perhaps': expected one of 1, t"):
        alias_request(SRIOVPlugin(conf), "vfs:1")


# -- [pci] report_in_placement: nova's layout ------------------------------------

def test_report_in_placement_gives_novas_providers_and_the_decision_names_them(conf):
    conf.set_override("report_in_placement", True, "pci")
    plugin = specs(conf, {"vendor_id": "8086", "product_id": "1515",
                          "address": "*:81:00.*", "traits": "blue"},
                   {"vendor_id": "10de", "resource_class": "pgpu"},
                   # a physnet device serves ports: nova does not report it
                   {"vendor_id": "8086", "product_id": "1515",
                    "address": "*:82:00.*", "physical_network": "physnet4"},
                   aliases=[VF_ALIAS, {"name": "gpu", "resource_class": "PGPU"}])
    view = plugin.discover(devices())
    got = {c.name: c for c in plugin.provider_contributions(view, NODE)}
    assert sorted(got) == ["node1_0000:81:00.0", "node1_0000:84:00.0",
                           "node1_pf_0000_82_00_0"]
    vfs = got["node1_0000:81:00.0"]
    assert vfs.parent is None
    assert {rc: inv["total"] for rc, inv in vfs.inventory.items()} == {
        "CUSTOM_PCI_8086_1515": 2}
    assert vfs.inventory["CUSTOM_PCI_8086_1515"]["max_unit"] == 2
    assert vfs.traits == {"CUSTOM_BLUE", "COMPUTE_MANAGED_PCI_DEVICE"}
    gpu = got["node1_0000:84:00.0"]
    assert (list(gpu.inventory), gpu.traits) == (
        ["PGPU"], {"COMPUTE_MANAGED_PCI_DEVICE"})
    state = state_of(plugin, view)
    two = plugin.fit(state, alias_request(plugin, "vfs:2"), None, {})
    assert {d.provider_uuid for d in two.devices} == {vfs.uuid}
    assert plugin.group_providers(None, two, state) == {"_PCI0": vfs.uuid}
    # the allocation's mapping of the group is honoured
    mapped = plugin.fit(state, alias_request(plugin, "gpu:1"),
                        {"_PCI0": (gpu.uuid,)}, {})
    assert [d.provider_uuid for d in mapped.devices] == [gpu.uuid]


@pytest.mark.parametrize("values, message", [
    # nova names the device that meets the conflict first (address order)
    ([{"address": PF, "product_id": "1528"}, {"address": "*:81:00.*"}],
     "Configuring both 0000:81:00.1 and 0000:81:00.0 in "
     "[pci]device_spec is not supported. Either the parent PF or its "
     "children VFs can be configured."),
    ([{"address": "0000:81:00.1", "resource_class": "a"},
      {"address": "0000:81:00.2"}],
     "VFs from the same PF cannot be configured with different "
     "'resource_class' values in [pci]device_spec. We got "
     "CUSTOM_PCI_8086_1515 for 0000:81:00.2 and CUSTOM_A for 0000:81:00.1."),
    ([{"address": "0000:81:00.1", "traits": "a"}, {"address": "0000:81:00.2"}],
     "VFs from the same PF cannot be configured with different set of "
     "'traits' in [pci]device_spec. We got COMPUTE_MANAGED_PCI_DEVICE for "
     "0000:81:00.2 and COMPUTE_MANAGED_PCI_DEVICE,CUSTOM_A for 0000:81:00.1."),
])
def test_report_in_placement_refuses_what_nova_refuses(conf, values, message):
    # nova's messages of its PlacementPciException's subclasses (no prefix)
    conf.set_override("report_in_placement", True, "pci")
    plugin = specs(conf, *values)
    with pytest.raises(ConfigError) as err:
        plugin.provider_contributions(plugin.discover(devices()), NODE)
    assert str(err.value) == message


# -- one request: ports and aliases -----------------------------------------------

def test_one_request_never_gives_a_port_vf_to_an_alias_too(conf):
    # the VFs serve ports (physnet4) and match the alias: the port takes the
    # first VF, the alias in the same request must take another one, and a
    # PF whose VF serves the request's port is never given whole
    plugin = specs(conf, {"vendor_id": "8086", "physical_network": "physnet4",
                          "address": "*:81:*.*"},
                   aliases=[PF_ALIAS, VF_ALIAS])
    view = plugin.discover(devices())
    state = state_of(plugin, view)
    specs_ = {"pci_passthrough:alias": "vfs:1"}
    both = parse(plugin, specs_, ports=(port("p1", "physnet4"),))
    got = plugin.fit(state, both, None, {})
    assert [vf.vf_address for vf in got.vfs] == ["0000:81:00.1"]
    assert [d.address for d in got.devices] == ["0000:81:00.2"]
    # the host state of the claim holds
    state_of(plugin, view, [got])
    pf = parse(plugin, {"pci_passthrough:alias": "pfs:1"},
               ports=(port("p1", "physnet4"),))
    refused = plugin.fit(state, pf, None, {})
    assert isinstance(refused, Rejection)
    assert "PCI device 0000:81:00.0 (alias pfs) cannot be given" in refused.reason
    # verify refuses such an assignment made elsewhere
    bad = SRIOVAssignment(vfs=got.vfs, devices=(DeviceAssignment(
        "_PCI0", "vfs", "0000:81:00.1", dev_uuid("0000:81:00.1")),),
        host_cells=got.host_cells)
    rejected = sriov_fit.verify(state, both, bad)
    assert rejected is not None
    assert rejected.reason == ("PCI device 0000:81:00.1 (alias vfs) serves a "
                               "port of this request")


# -- nova's refusals around report_in_placement ----------------------------------

def test_report_in_placement_refuses_a_devname_spec(conf):
    conf.set_override("report_in_placement", True, "pci")
    plugin = specs(conf, {"devname": "ens1f0", "physical_network": "physnet4"})
    with pytest.raises(ConfigError) as err:
        plugin.provider_contributions(plugin.discover(devices()), NODE)
    assert str(err.value) == (
        "Failed to gather or report PCI resources to Placement: Invalid "
        "[pci]device_spec configuration. PCI Placement reporting does not "
        "support 'devname' based device specification but we got "
        "{'devname': 'ens1f0', 'physical_network': 'physnet4'}. Please use "
        "PCI address in the configuration instead.")


def test_one_time_use_needs_report_in_placement(conf):
    value = {"vendor_id": "10de", "one_time_use": "yes"}
    plugin = specs(conf, value)
    with pytest.raises(devspec.PciConfigInvalidSpec) as err:
        plugin.discover(devices())
    assert str(err.value) == (
        "Invalid [pci]device_spec config: one_time_use=true requires "
        "pci.report_in_placement to be enabled (entry %s)" % json.dumps(value))
    # false is fine
    specs(conf, {"vendor_id": "10de", "one_time_use": "no"}).discover(devices())


def test_one_time_use_in_placement_as_nova_reports_it(conf):
    conf.set_override("report_in_placement", True, "pci")
    plugin = specs(conf, {"vendor_id": "10de", "one_time_use": "yes"})
    (gpu,) = plugin.provider_contributions(plugin.discover(devices()), NODE)
    assert gpu.name == "node1_0000:84:00.0"
    assert gpu.traits == {"COMPUTE_MANAGED_PCI_DEVICE", "HW_PCI_ONE_TIME_USE"}
    # a VF may not say one_time_use at all (nova's message)
    plugin = specs(conf, {"address": "0000:81:00.1", "one_time_use": "false"})
    with pytest.raises(ConfigError) as err:
        plugin.provider_contributions(plugin.discover(devices()), NODE)
    assert str(err.value) == (
        "Failed to gather or report PCI resources to Placement: Only "
        "type-PCI and type-PF devices may set one_time_use and "
        "node1_0000:81:00.0 does not qualify")


def test_report_in_placement_puts_an_aliases_devices_on_one_provider(conf):
    # the alias's request group {CUSTOM_PCI_8086_1515: 2} is served by one
    # provider: with 0000:81:00.1 taken, both VFs come from the other PF
    conf.set_override("report_in_placement", True, "pci")
    plugin = specs(conf, {"vendor_id": "8086", "product_id": "1515"},
                   aliases=[VF_ALIAS])
    view = plugin.discover(devices())
    taken = SRIOVAssignment(devices=(DeviceAssignment(
        "_PCI0", "vfs", "0000:81:00.1",
        plugin.provider_contributions(view, NODE)[0].uuid),))
    state = state_of(plugin, view, [taken])
    request = alias_request(plugin, "vfs:2")
    got = plugin.fit(state, request, None, {})
    assert [d.address for d in got.devices] == ["0000:82:00.1", "0000:82:00.2"]
    assert list(plugin.group_providers(request, got, state)) == ["_PCI0"]
    refused = plugin.fit(state, alias_request(plugin, "vfs:3"), None, {})
    assert isinstance(refused, Rejection)
    assert refused.reason == (
        "alias vfs needs 3 device(s) on one provider (its request group is "
        "served by one Placement provider): no provider of this host has them")
