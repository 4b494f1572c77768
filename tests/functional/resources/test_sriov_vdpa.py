"""vDPA ports on a host read from libvirt: discovery, providers, fit, guest.

The host is libvirt's real test driver (``testdriver-vdpa.xml``: a
ConnectX-6 Dx PF and three of its VFs) plus the two ``<capability
type='vdpa'>`` node devices of its first two VFs (``vdpa/vdpa_vdpa0.xml``,
``vdpa/vdpa_vdpa1.xml``, as ``virsh nodedev-dumpxml`` prints them on a
real host), added to what the driver lists: libvirt 9.0's test driver
refuses such a device in its host file. As in nova, a VF that is the
parent of a vDPA device is a ``vdpa`` device: it serves ``vdpa`` ports
only, the plain VF ``direct`` ports only.
"""

from __future__ import annotations

import dataclasses
import pathlib
import xml.etree.ElementTree as ET

import pytest

from compute_plugins.host import libvirt_host
from compute_plugins.host.libvirt_xml import VDPADevice, parse_node_device
from compute_plugins.plugin import names
from compute_plugins.plugin.contract import Rejection
from compute_plugins.request.inputs import RequestInput
from resources.sriov import SRIOVPlugin
from resources.sriov.request import SRIOVAssignment
from tests.unit.resources import helpers

FIXTURES = pathlib.Path(__file__).parents[2] / "fixtures" / "hosts"
URI = "test://%s" % (FIXTURES / "testdriver-vdpa.xml")
VDPA_XML = sorted((FIXTURES / "vdpa").glob("vdpa_vdpa*.xml"))
PF = "0000:08:01.0"
VF1, VF2, VF3 = "0000:08:01.1", "0000:08:01.2", "0000:08:01.3"


def vdpa_host():
    """The test driver's host with the two captured vDPA node devices."""
    raw = libvirt_host.fetch_libvirt(URI)
    nodedevs = dict(raw.nodedevs)
    for path in VDPA_XML:
        nodedevs[path.stem] = path.read_text()
    return libvirt_host.host_info_from_raw(dataclasses.replace(raw, nodedevs=nodedevs))


@pytest.fixture
def conf():
    conf, fixture = helpers.make_conf()
    conf.set_override("physical_device_mappings", ["physnet4:%s" % PF], "sriov")
    yield conf
    fixture.cleanUp()


@pytest.fixture
def plugin(conf):
    return SRIOVPlugin(conf)


@pytest.fixture
def view(plugin):
    """The plugin's view of :func:`vdpa_host`."""
    return plugin.discover(vdpa_host())


def request(plugin, *vnic_types):
    ports = [{"id": "port%d" % i, "vnic_type": vnic, "physnet": "physnet4"}
             for i, vnic in enumerate(vnic_types)]
    ri = RequestInput.from_dicts({"name": "f", "vcpus": 1, "memory_mb": 512},
                                 None, ports).for_plugin(plugin.name)
    parsed = plugin.parse_request(ri)
    assert not ri.has_problems(), ri.problems
    return parsed


def test_captured_vdpa_node_device_parses():
    device = parse_node_device(VDPA_XML[0].read_text(), str(VDPA_XML[0]))
    assert device == VDPADevice("vdpa_vdpa0", "/dev/vhost-vdpa-0", VF1)


def test_discovery_marks_the_vdpa_vfs():
    host = vdpa_host()
    assert [(d.address, d.vdpa_dev) for d in host.pci_devices] == [
        (PF, None), (VF1, "/dev/vhost-vdpa-0"), (VF2, "/dev/vhost-vdpa-1"),
        (VF3, None)]
    # NOTE: without the captured documents the test driver's host has none.
    plain = libvirt_host.discover_libvirt(URI)
    assert all(d.vdpa_dev is None for d in plain.pci_devices)


def test_pf_provider_serves_direct_and_vdpa_ports(plugin, view):
    [pf] = view.pfs
    assert [(vf.address, vf.vdpa_dev) for vf in pf.functions] == [
        (VF1, "/dev/vhost-vdpa-0"), (VF2, "/dev/vhost-vdpa-1"), (VF3, None)]
    [provider] = plugin.provider_contributions(view, helpers.NODE)
    assert provider.traits == {names.VNIC_TYPE_DIRECT, names.VNIC_TYPE_VDPA,
                               names.physnet_trait("physnet4")}
    assert provider.inventory["SRIOV_NET_VF"]["total"] == 3
    [group] = plugin.request_groups(request(plugin, "vdpa"))
    assert group.required_traits == {names.VNIC_TYPE_VDPA,
                                     names.physnet_trait("physnet4")}


def test_vdpa_port_gets_a_vdpa_vf_and_its_vhost_device(plugin, view):
    req = request(plugin, "direct", "vdpa")
    got = plugin.fit(helpers.state_of(plugin, view), req, None, {})
    assert isinstance(got, SRIOVAssignment)
    assert [(vf.port_id, vf.vf_address, vf.vdpa_dev) for vf in got.vfs] == [
        ("port0", VF3, ""), ("port1", VF1, "/dev/vhost-vdpa-0")]
    direct, vdpa = (ET.fromstring(f.xml) for f in plugin.guest_config(req, got))
    assert direct.get("type") == "hostdev"
    assert (vdpa.tag, vdpa.attrib) == ("interface", {"type": "vdpa"})
    assert vdpa.find("source").attrib == {"dev": "/dev/vhost-vdpa-0"}
    assert plugin.describe(req, got)[1] == (
        "port port1 (physnet4) -> VF %s (vDPA /dev/vhost-vdpa-0) of PF %s" % (VF1, PF))
    # the decision round-trips and holds on the host it was made on
    state = helpers.state_of(plugin, view)
    assert plugin.verify(state, req, got) is None
    # the next vdpa port gets the other vDPA VF; then none is left
    taken = helpers.state_of(plugin, view, [got])
    second = plugin.fit(taken, request(plugin, "vdpa"), None, {})
    assert [(vf.vf_address, vf.vdpa_dev) for vf in second.vfs] == [
        (VF2, "/dev/vhost-vdpa-1")]
    assert plugin.fit(helpers.state_of(plugin, view, [got, second]),
                      request(plugin, "vdpa"), None, {}).reason == (
        "no PF can serve port port0: PF %s on physnet physnet4 has 0 of 3 VFs "
        "free, port port0 needs 1" % PF)
    only_vdpa = dataclasses.replace(got, vfs=got.vfs[1:])
    full = helpers.state_of(plugin, view, [only_vdpa, second])
    assert plugin.fit(full, request(plugin, "vdpa"), None, {}).reason == (
        "no PF can serve port port0: PF %s on physnet physnet4 has 1 free VFs "
        "and none is a vDPA device, vdpa port port0 needs one" % PF)


def test_direct_port_never_gets_a_vdpa_vf(plugin, view):
    first = plugin.fit(helpers.state_of(plugin, view), request(plugin, "direct"),
                       None, {})
    assert [vf.vf_address for vf in first.vfs] == [VF3]
    taken = helpers.state_of(plugin, view, [first])
    assert plugin.fit(taken, request(plugin, "direct"), None, {}).reason == (
        "no PF can serve port port0: PF %s on physnet physnet4 has 2 free VFs, "
        "all vDPA devices (for vdpa ports), direct port port0 needs another" % PF)


def test_verify_refuses_a_decision_the_host_does_not_carry(plugin, view):
    state = helpers.state_of(plugin, view)
    req = request(plugin, "vdpa")
    got = plugin.fit(state, req, None, {})
    [vf] = got.vfs
    other_dev = dataclasses.replace(got, vfs=(dataclasses.replace(
        vf, vdpa_dev="/dev/vhost-vdpa-1"),))
    assert plugin.verify(state, req, other_dev).reason == (
        "VF %s of port port0 has vDPA device /dev/vhost-vdpa-0, the assignment "
        "says /dev/vhost-vdpa-1" % VF1)
    plain_vf = dataclasses.replace(got, vfs=(dataclasses.replace(
        vf, vf_address=VF3, vdpa_dev=""),))
    assert plugin.verify(state, req, plain_vf).reason == (
        "VF %s of PF %s is not a vDPA device, vdpa port port0 needs one" % (VF3, PF))
    # the VF lost its vDPA device since (unbound from the vDPA driver)
    raw = libvirt_host.discover_libvirt(URI)
    now = helpers.state_of(plugin, plugin.discover(raw))
    assert isinstance(plugin.verify(now, req, got), Rejection)


def test_direct_physical_is_still_refused(plugin):
    ri = RequestInput.from_dicts(
        {"name": "f", "vcpus": 1, "memory_mb": 512}, None,
        [{"id": "p", "vnic_type": "direct-physical", "physnet": "physnet4"}]
    ).for_plugin(plugin.name)
    plugin.parse_request(ri)
    assert [(p.key, p.rule) for p in ri.problems] == [(
        "vnic_type", "vnic_type direct-physical is not supported: the sriov "
        "plugin provides VFs (vnic_type direct, macvtap, vdpa or remote-managed)")]


def test_verify_refuses_a_vdpa_vf_for_a_direct_port(plugin, view):
    # a decision (another scheduler's, or made before the VF was bound to
    # a vDPA driver) giving a direct port a vDPA VF, or a vDPA device:
    # refused, saying which VF and why
    state = helpers.state_of(plugin, view)
    req = request(plugin, "direct")
    got = plugin.fit(state, req, None, {})
    [vf] = got.vfs
    assert (vf.vf_address, vf.vdpa_dev) == (VF3, "")
    on_vdpa_vf = dataclasses.replace(got, vfs=(dataclasses.replace(
        vf, vf_address=VF1, vf_netdev=""),))
    assert plugin.verify(state, req, on_vdpa_vf).reason == (
        "VF %s of PF %s is a vDPA device (/dev/vhost-vdpa-0), direct port port0 "
        "needs another" % (VF1, PF))
    with_dev = dataclasses.replace(got, vfs=(dataclasses.replace(
        vf, vdpa_dev="/dev/vhost-vdpa-0"),))
    assert plugin.verify(state, req, with_dev).reason == (
        "the assignment gives direct port port0 vDPA device /dev/vhost-vdpa-0")


def test_a_macvtap_port_is_told_the_free_vfs_are_vdpa_devices(plugin, view):
    # no VF of the test driver's host has a network interface; two of the
    # three free VFs are vDPA devices: the rejection counts every free VF
    # and says which are vDPA devices
    got = plugin.fit(helpers.state_of(plugin, view), request(plugin, "macvtap"),
                     None, {})
    assert got.reason == (
        "no PF can serve port port0: PF %s on physnet physnet4 has 3 free VFs, "
        "2 of them vDPA devices (for vdpa ports), and none of the others has a "
        "network interface, macvtap port port0 needs one" % PF)


#: A standalone PCI device (no VF: nova's ``type-PCI``) that is the parent
#: of a vDPA device, as a virtio-net device bound to virtio_vdpa is.
VIRTIO = "0000:09:00.0"
VIRTIO_XML = """<device>
  <name>pci_0000_09_00_0</name>
  <parent>computer</parent>
  <capability type='pci'>
    <class>0x020000</class>
    <domain>0</domain><bus>9</bus><slot>0</slot><function>0</function>
    <product id='0x1041'>Virtio 1.0 network device</product>
    <vendor id='0x1af4'>Red Hat, Inc.</vendor>
    <iommuGroup number='70'>
      <address domain='0x0000' bus='0x09' slot='0x00' function='0x0'/>
    </iommuGroup>
    <numa node='0'/>
  </capability>
</device>"""
VIRTIO_VDPA_XML = """<device>
  <name>vdpa_vdpa9</name>
  <parent>pci_0000_09_00_0</parent>
  <driver><name>vhost_vdpa</name></driver>
  <capability type='vdpa'><chardev>/dev/vhost-vdpa-9</chardev></capability>
</device>"""


def test_only_a_vf_is_a_vdpa_device(conf):
    # nova gives dev_type vdpa to a VF only (Host._get_pcidev_info): a
    # device without a PF that is the parent of a vDPA device stays a
    # type-PCI device an alias names, as in nova
    import json
    conf.set_override("alias", [json.dumps({
        "name": "virtio", "vendor_id": "1af4", "product_id": "1041",
        "device_type": "type-PCI"})], "pci")
    raw = libvirt_host.fetch_libvirt(URI)
    nodedevs = dict(raw.nodedevs, pci_0000_09_00_0=VIRTIO_XML,
                    vdpa_vdpa9=VIRTIO_VDPA_XML)
    for path in VDPA_XML:
        nodedevs[path.stem] = path.read_text()
    host = libvirt_host.host_info_from_raw(dataclasses.replace(raw, nodedevs=nodedevs))
    view = SRIOVPlugin(conf).discover(host)
    assert [d.address for d in view.devices] == [VIRTIO]
    [pf] = view.pfs
    assert pf.vdpa_vfs == 2
