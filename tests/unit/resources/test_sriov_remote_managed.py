"""The sriov plugin's ``remote-managed`` ports (a SmartNIC DPU's VFs, nova's
``remote_managed`` device_spec tag and PCI VPD card serial number) and a
port's own NUMA affinity policy (neutron's ``numa_affinity_policy``)."""

from __future__ import annotations

import json
import logging
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from compute_plugins.host import snapshot
from compute_plugins.host.model import PCIDevice
from compute_plugins.plugin import names
from compute_plugins.plugin.contract import Rejection
from compute_plugins.request.errors import RequestInputError
from compute_plugins.request.inputs import Port, RequestInput
from resources.sriov import SRIOVPlugin, devspec
from resources.sriov import request as sriov_request
from resources.sriov.request import SRIOVAssignment
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

FIXTURES = Path(__file__).parents[2] / "fixtures" / "hosts"
DPU_PF = "0000:42:00.0"       # BlueField-2 PF, VPD serial MT2113X00000
DPU_VFS = ["0000:42:00.2", "0000:42:00.3"]  # 15b3:101e, no VPD of their own
INTEL_PF = "0000:02:10.7"     # 82576 PF, no VPD, VFs 0000:02:00.2-5
#: nova's RemoteManagedServersTest device_spec, for the fixture's DPU: the
#: PF on no physnet, its VFs remote-managed (a tunnel's).
TUNNEL_SPEC = [
    {"vendor_id": "15b3", "product_id": "a2d6", "physical_network": None,
     "remote_managed": "false"},
    {"vendor_id": "15b3", "product_id": "101e", "physical_network": None,
     "remote_managed": "true"},
]


def configure(conf, *values, mappings=()):
    conf.set_override("device_spec", [json.dumps(v) for v in values], "pci")
    conf.set_override("physical_device_mappings", list(mappings), "sriov")
    return SRIOVPlugin(conf)


@pytest.fixture
def dpu_host(tmp_path):
    """The ``dpu/`` snapshot: libvirt's own BlueField-2 nodedev XML (see
    tests/fixtures/hosts/SOURCES.md)."""
    snap = tmp_path / "dpu"
    shutil.copytree(FIXTURES / "dpu", snap)
    return snapshot.load_snapshot(str(snap), use_udev=False)


def rm_port(pid="rm1", physnet=None, **more):
    return {"id": pid, "vnic_type": "remote-managed", "physnet": physnet, **more}


def direct_port(pid="d1", physnet="physnet4", **more):
    return {"id": pid, "vnic_type": "direct", "physnet": physnet, **more}


def ports_request(plugin, *ports, policy=None):
    specs = {"hw:pci_numa_affinity_policy": policy} if policy else {}
    return parse(plugin, specs, ports=ports)


# -- which devices a remote_managed spec matches ----------------------------------

def test_a_remote_managed_spec_matches_a_vf_by_its_pfs_vpd_serial(dpu_host):
    (spec,) = devspec.parse([json.dumps(TUNNEL_SPEC[1])])
    vf = dpu_host.pci_device(DPU_VFS[0])
    assert vf.card_serial_number is None
    assert devspec.card_serial_number(vf, dpu_host) == "MT2113X00000"
    assert [d.address for d in dpu_host.pci_devices
            if spec.match(d, dpu_host)] == DPU_VFS


def test_a_remote_managed_spec_matches_nothing_without_a_card_serial_number(
        dpu_host):
    # the Intel PF and its VFs have no VPD (nor do the DPU's VFs without it)
    (spec,) = devspec.parse([json.dumps({"vendor_id": "8086",
                                         "remote_managed": "true"})])
    assert [d for d in dpu_host.pci_devices if spec.match(d, dpu_host)] == []
    no_vpd = dpu_host.pci_device(DPU_PF)
    without = host([], [PCIDevice(address=no_vpd.address, name=no_vpd.name,
                                  vendor_id="15b3", product_id="a2d6",
                                  virt_functions=tuple(DPU_VFS)),
                        *(dpu_host.pci_device(a) for a in DPU_VFS)])
    (rm,) = devspec.parse([json.dumps(TUNNEL_SPEC[1])])
    assert [d for d in without.pci_devices if rm.match(d, without)] == []
    # the same spec without the tag matches them
    (plain,) = devspec.parse([json.dumps({"product_id": "101e"})])
    assert [d.address for d in without.pci_devices
            if plain.match(d, without)] == DPU_VFS


# -- the view and the providers ---------------------------------------------------

def test_a_dpus_remote_managed_vfs_serve_tunneled_remote_managed_ports(
        conf, dpu_host):
    plugin = configure(conf, *TUNNEL_SPEC)
    view = plugin.discover(dpu_host)
    (pf,) = view.pfs
    assert (pf.address, pf.physnet, pf.remote_managed, pf.vfs) == (
        DPU_PF, None, True, 2)
    assert [f.address for f in pf.functions] == DPU_VFS
    # the PF (remote_managed false) is an alias device, never its VFs
    assert [d.address for d in view.devices] == [DPU_PF]
    (provider,) = plugin.provider_contributions(view, NODE)
    assert provider.traits == {"CUSTOM_VNIC_TYPE_REMOTE_MANAGED",
                               "CUSTOM_NETWORK_TUNNEL_PROVIDER"}
    assert provider.inventory["SRIOV_NET_VF"]["total"] == 2
    request = ports_request(plugin, rm_port())
    (group,) = plugin.request_groups(request)
    assert group.required_traits == provider.traits
    got = plugin.fit(state_of(plugin, view), request, None, {})
    assert isinstance(got, SRIOVAssignment)
    ((vf),) = got.vfs
    assert (vf.pf_address, vf.vf_address, vf.physnet) == (DPU_PF, DPU_VFS[0], "")
    assert plugin.verify(state_of(plugin, view), request, got) is None
    # nova's libvirt driver gives a remote-managed VF as <interface type='hostdev'>
    [fragment] = plugin.guest_config(request, got)
    element = ET.fromstring(fragment.xml)
    assert (element.tag, element.get("type")) == ("interface", "hostdev")
    assert plugin.describe(request, got) == [
        "port rm1 (tunneled) -> VF 0000:42:00.2 of PF 0000:42:00.0"]
    taken = state_of(plugin, view, [got])
    assert taken.pf(DPU_PF).remote_managed
    assert decoded(plugin, encoded(plugin, taken)) == taken
    assert [v.vf_address for v in plugin.fit(taken, request, None, {}).vfs] == [
        DPU_VFS[1]]


def test_a_direct_port_never_gets_a_remote_managed_vf(conf, dpu_host):
    plugin = configure(conf, {"product_id": "101e", "physical_network": "physnet4",
                              "remote_managed": "true"})
    view = plugin.discover(dpu_host)
    (pf,) = view.pfs
    assert (pf.physnet, pf.remote_managed) == ("physnet4", True)
    (provider,) = plugin.provider_contributions(view, NODE)
    assert provider.traits == {"CUSTOM_VNIC_TYPE_REMOTE_MANAGED",
                               "CUSTOM_PHYSNET_PHYSNET4"}
    state = state_of(plugin, view)
    refused = plugin.fit(state, ports_request(plugin, direct_port()), None, {})
    assert refused == Rejection(
        "no PF can serve port d1: PF 0000:42:00.0 on physnet physnet4 has "
        "remote-managed VFs ([pci] device_spec remote_managed), port d1 "
        "(vnic_type direct) cannot use them")
    # a remote-managed port on physnet4 gets it; on a tunnel it does not
    got = plugin.fit(state, ports_request(plugin, rm_port(physnet="physnet4")),
                     None, {})
    assert [(v.vf_address, v.physnet) for v in got.vfs] == [(DPU_VFS[0], "physnet4")]
    tunnel = plugin.fit(state, ports_request(plugin, rm_port()), None, {})
    assert tunnel == Rejection(
        "no PF can serve port rm1: PF 0000:42:00.0 on physnet physnet4, port "
        "rm1 needs no physnet (a tunneled network)")


def test_a_remote_managed_port_never_gets_a_plain_vf(conf, dpu_host):
    # no device_spec: the PFs' VFs are plain ones
    plugin = configure(conf, mappings=["physnet4:%s" % INTEL_PF])
    state = state_of(plugin, plugin.discover(dpu_host))
    refused = plugin.fit(state, ports_request(plugin, rm_port(physnet="physnet4")),
                         None, {})
    assert refused == Rejection(
        "no PF can serve port rm1: PF 0000:02:10.7 on physnet physnet4 has no "
        "remote-managed VF, port rm1 (vnic_type remote-managed) needs one; PF "
        "0000:42:00.0 on no physnet, port rm1 needs physnet physnet4")
    no_pf = plugin.fit(state_of(plugin, configure(conf).discover(host())),
                       ports_request(plugin, rm_port()), None, {})
    assert no_pf == Rejection("this host has no SR-IOV PF; port rm1 needs a VF "
                              "on no physnet (a tunneled network)")


def test_a_mapped_pfs_remote_managed_vfs_serve_no_direct_port(
        conf, dpu_host, caplog):
    # physical_device_mappings names the DPU's PF: its VFs are on physnet4,
    # but the device_spec says they are remote-managed: a direct port never
    # gets one (nova's _filter_pools_for_unrequested_remote_managed_devices)
    plugin = configure(conf, {"product_id": "101e", "remote_managed": "true"},
                       mappings=["physnet4:%s" % DPU_PF])
    with caplog.at_level(logging.WARNING):
        view = plugin.discover(dpu_host)
    (pf,) = view.pfs
    assert (pf.physnet, pf.remote_managed, [f.address for f in pf.functions]) == (
        "physnet4", True, DPU_VFS)
    assert ("PF 0000:42:00.0 on physnet physnet4 ([sriov] "
            "physical_device_mappings): its VFs 0000:42:00.2, 0000:42:00.3 are "
            "remote-managed ([pci] device_spec remote_managed), they serve "
            "remote-managed ports only" in caplog.text)
    (provider,) = plugin.provider_contributions(view, NODE)
    assert provider.traits == {"CUSTOM_VNIC_TYPE_REMOTE_MANAGED",
                               "CUSTOM_PHYSNET_PHYSNET4"}
    state = state_of(plugin, view)
    refused = plugin.fit(state, ports_request(plugin, direct_port()), None, {})
    assert isinstance(refused, Rejection), refused
    assert "has remote-managed VFs" in refused.reason
    got = plugin.fit(state, ports_request(plugin, rm_port(physnet="physnet4")),
                     None, {})
    assert [v.vf_address for v in got.vfs] == DPU_VFS[:1]


def test_a_mapped_pfs_vfs_remote_managed_and_not_keep_the_first_ones(
        conf, dpu_host, caplog):
    plugin = configure(conf, {"address": DPU_VFS[1], "remote_managed": "true"},
                       mappings=["physnet4:%s" % DPU_PF])
    with caplog.at_level(logging.WARNING):
        (pf,) = plugin.discover(dpu_host).pfs
    assert (pf.remote_managed, pf.vfs, [f.address for f in pf.functions]) == (
        False, 1, DPU_VFS[:1])
    assert "; VFs 0000:42:00.3 left out" in caplog.text


def test_vfs_of_one_pf_remote_managed_and_not_keep_the_first_ones(
        conf, dpu_host, caplog):
    plugin = configure(conf, {"address": DPU_VFS[0], "physical_network": "physnet4"},
                       {"address": DPU_VFS[1], "physical_network": "physnet4",
                        "remote_managed": "true"})
    with caplog.at_level(logging.WARNING):
        (pf,) = plugin.discover(dpu_host).pfs
    assert (pf.physnet, pf.remote_managed, [f.address for f in pf.functions]) == (
        "physnet4", False, DPU_VFS[:1])
    assert ("VF 0000:42:00.3 of PF 0000:42:00.0 is on remote-managed, physnet "
            "physnet4, its PF's other VFs on physnet physnet4; left out"
            in caplog.text)


# -- the request ----------------------------------------------------------------------

def test_only_a_remote_managed_port_may_have_no_physnet(conf):
    plugin = configure(conf)
    request = ports_request(plugin, rm_port(), rm_port("rm2", "physnet4"))
    assert [(p.port_id, p.physnet, p.vnic_type) for p in request.ports] == [
        ("rm1", None, "remote-managed"), ("rm2", "physnet4", "remote-managed")]
    assert [g.required_traits for g in plugin.request_groups(request)] == [
        {"CUSTOM_VNIC_TYPE_REMOTE_MANAGED", "CUSTOM_NETWORK_TUNNEL_PROVIDER"},
        {"CUSTOM_VNIC_TYPE_REMOTE_MANAGED", "CUSTOM_PHYSNET_PHYSNET4"}]
    ri = RequestInput.from_dicts({"vcpus": 1, "memory_mb": 1},
                                 ports=[direct_port(physnet=None)]).for_plugin("sriov")
    assert plugin.parse_request(ri) is None
    assert [(p.key, p.rule) for p in ri.problems] == [
        ("physnet", "an SR-IOV port (vnic_type direct) needs the physical "
                    "network of its network")]


# -- a port's own NUMA affinity policy ---------------------------------------------

CELLS = [cell(0, range(4)), cell(1, range(4, 8))]


def nic_on_cell(conf, numa_node):
    plugin = configure(conf, mappings=["physnet4:0000:5e:00.0"])
    return plugin, state_of(plugin, plugin.discover(
        host(CELLS, [pf("0000:5e:00.0", 2, numa_node)])))


@pytest.mark.parametrize("flavor, port_policy, fits", [
    (None, None, False),              # nova's default for ports: legacy
    (None, "preferred", True),        # the port's policy
    ("required", "preferred", True),  # the port's over the flavor's
    ("preferred", "required", False),
    ("preferred", None, True),
])
def test_a_ports_policy_overrides_the_flavors_for_that_port(
        conf, flavor, port_policy, fits):
    plugin, state = nic_on_cell(conf, 0)
    request = ports_request(plugin, direct_port(affinity_policy=port_policy),
                            policy=flavor)
    (group,) = plugin.request_groups(request)
    assert group.affinity == (port_policy or flavor or "legacy")
    got = plugin.fit(state, request, None, on_cells(1))
    assert isinstance(got, SRIOVAssignment) is fits, got
    if not fits:
        assert "host cell 0" in got.reason


def test_a_ports_socket_policy_asks_for_the_socket_trait(conf):
    plugin = configure(conf)
    request = ports_request(plugin, direct_port(affinity_policy="socket"),
                            direct_port("d2"))
    groups = plugin.request_groups(request)
    assert [g.affinity for g in groups] == ["socket", "legacy", None]
    assert groups[-1].required_traits == {sriov_request.SOCKET_TRAIT}


def test_a_ports_policy_is_one_of_novas():
    assert Port.from_dict({"id": "p", "affinity_policy": "socket"}, 0).affinity_policy == \
        "socket"
    with pytest.raises(RequestInputError,
                       match="port 0 field 'affinity_policy' must be one of "
                             "required, preferred, legacy, socket, got 'strict'"):
        RequestInput.from_dicts({"vcpus": 1, "memory_mb": 1},
                                ports=[{"id": "p", "affinity_policy": "strict"}])


def test_the_physnet_trait_names_are_neutrons():
    assert names.NETWORK_TUNNEL_PROVIDER == "CUSTOM_NETWORK_TUNNEL_PROVIDER"
    assert names.VNIC_TYPE_REMOTE_MANAGED == "CUSTOM_VNIC_TYPE_REMOTE_MANAGED"
