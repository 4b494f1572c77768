"""The combined guest XML on real libvirt: the test driver (``test:///default``).

Every domain is defined with ``VIR_DOMAIN_DEFINE_VALIDATE``, so libvirt
checks it against its RelaxNG schema (domain.rng) before parsing it, then
read back with ``XMLDesc()``: what survives is what libvirt understood.
The test driver accepts every element built here (``<cputune>``,
``<numatune>``, guest ``<cpu><numa>``, ``<memoryBacking><hugepages>``,
``<hostdev type='mdev'>``, ``<interface type='hostdev'>``, ``<hostdev
type='pci'>``); it does not start guests, so it cannot say whether a host
has the pinned CPUs or the devices (the plugins' fit is what decides that).
"""

from __future__ import annotations

import itertools
import uuid
import xml.etree.ElementTree as ET

import libvirt
import pytest
from oslo_config import cfg

from compute_plugins.compute import guest
from compute_plugins.host import discover_host
from compute_plugins.plugin.contract import GuestFragment
from compute_plugins.request.inputs import RequestInput
from compute_plugins.request.spec import RequestSpec
from compute_plugins.runtime import PluginSet
from tests.unit import fit_plugins
from tests.unit.resources.helpers import state_of

_names = itertools.count()

MDEV_UUID = "c2177883-f1bb-47f0-914d-32a22e3a8804"


@pytest.fixture(scope="module")
def conn():
    libvirt.registerErrorHandler(lambda *args: None, None)
    connection = libvirt.open("test:///default")
    yield connection
    connection.close()


def define(conn, xml):
    """Define ``xml`` (schema-validated), return the read-back XML, undefine."""
    domain = conn.defineXMLFlags(xml, libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
    try:
        return ET.fromstring(domain.XMLDesc())
    finally:
        domain.undefine()


def name():
    return "guest-test-%d" % next(_names)


def D(xml):  # noqa: N802
    return GuestFragment("domain", xml)


def V(xml):  # noqa: N802
    return GuestFragment("devices", xml)


#: What the NUMA, realtime, vGPU and SR-IOV plugins give for a guest of two
#: nodes (vCPUs 0-1 on host cell 3, 2-3 on host cell 1, 2 MiB pages, the
#: emulator on its own CPU), an mdev, a VF and a PCI alias device.
FRAGMENTS = [
    ("numa", [
        D("<cputune><vcpupin vcpu='0' cpuset='12'/><vcpupin vcpu='1' cpuset='14'/>"
          "<vcpupin vcpu='2' cpuset='5'/><vcpupin vcpu='3' cpuset='6'/>"
          "<emulatorpin cpuset='15'/></cputune>"),
        D("<numatune><memory mode='strict' nodeset='1,3'/>"
          "<memnode cellid='0' mode='strict' nodeset='3'/>"
          "<memnode cellid='1' mode='strict' nodeset='1'/></numatune>"),
        D("<cpu><numa><cell id='0' cpus='0-1' memory='2097152' unit='KiB'/>"
          "<cell id='1' cpus='2-3' memory='2097152' unit='KiB'/></numa></cpu>"),
        D("<memoryBacking><hugepages><page size='2048' unit='KiB' nodeset='0-1'/>"
          "</hugepages></memoryBacking>"),
    ]),
    ("realtime", [
        D("<cputune><vcpusched vcpus='2-3' scheduler='fifo' priority='1'/></cputune>"),
        D("<memoryBacking><locked/></memoryBacking>"),
    ]),
    ("vgpu", [
        V("<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source>"
          "<address uuid='%s'/></source></hostdev>" % MDEV_UUID),
    ]),
    ("sriov", [
        V("<interface type='hostdev' managed='yes'><mac address='52:54:00:6d:90:02'/>"
          "<source><address type='pci' domain='0x0000' bus='0x5e' slot='0x10' "
          "function='0x2'/></source></interface>"),
        V("<hostdev mode='subsystem' type='pci' managed='yes'><source>"
          "<address domain='0x0000' bus='0x3b' slot='0x00' function='0x0'/>"
          "</source></hostdev>"),
    ]),
]


def test_every_fragment_kind_survives_libvirt(conn):
    xml = guest.assemble(FRAGMENTS, name=name(), vcpus=4, memory_mb=4096,
                         domain_type="test")
    back = define(conn, xml)
    assert back.findtext("vcpu") == "4"
    assert int(back.findtext("memory")) == 4096 * 1024
    assert {p.get("vcpu"): p.get("cpuset") for p in back.findall("cputune/vcpupin")} \
        == {"0": "12", "1": "14", "2": "5", "3": "6"}
    assert back.find("cputune/emulatorpin").get("cpuset") == "15"
    # libvirt writes one <vcpusched> per vCPU back.
    assert {(s.get("vcpus"), s.get("scheduler"), s.get("priority"))
            for s in back.findall("cputune/vcpusched")} == {
        ("2", "fifo", "1"), ("3", "fifo", "1")}
    assert back.find("numatune/memory").attrib == {"mode": "strict", "nodeset": "1,3"}
    assert {m.get("cellid"): m.get("nodeset") for m in back.findall("numatune/memnode")} \
        == {"0": "3", "1": "1"}
    assert [(c.get("id"), c.get("cpus"), c.get("memory"))
            for c in back.findall("cpu/numa/cell")] == [
        ("0", "0-1", "2097152"), ("1", "2-3", "2097152")]
    page = back.find("memoryBacking/hugepages/page")
    assert (page.get("size"), page.get("unit"), page.get("nodeset")) == (
        "2048", "KiB", "0-1")
    assert back.find("memoryBacking/locked") is not None
    mdev = back.find("devices/hostdev[@type='mdev']")
    assert mdev.find("source/address").get("uuid") == MDEV_UUID
    vf = back.find("devices/interface[@type='hostdev']/source/address")
    assert (vf.get("bus"), vf.get("slot"), vf.get("function")) == ("0x5e", "0x10", "0x2")
    pci = back.find("devices/hostdev[@type='pci']/source/address")
    assert (pci.get("bus"), pci.get("slot")) == ("0x3b", "0x00")
    # The summary reads the same from ours and from libvirt's (which lists
    # interfaces before hostdevs).
    ours = guest.summary(xml).splitlines()
    theirs = guest.summary(ET.tostring(back, encoding="unicode")).splitlines()
    assert theirs[1:-1] == ours[1:-1]
    assert ours[-1].startswith("devices: ") and theirs[-1].startswith("devices: ")
    assert sorted(theirs[-1][9:].split("; ")) == sorted(ours[-1][9:].split("; "))


def test_unmerged_fragments_are_not_a_domain(conn):
    """Why same-tag fragments are merged: libvirt's schema allows one
    <cputune> (and one <memoryBacking>)."""
    xml = guest.assemble(FRAGMENTS, name=name(), vcpus=4, memory_mb=4096,
                         domain_type="test")
    root = ET.fromstring(xml)
    extra = ET.fromstring("<cputune><vcpusched vcpus='0' scheduler='fifo' "
                          "priority='1'/></cputune>")
    root.insert(list(root).index(root.find("cputune")) + 1, extra)
    with pytest.raises(libvirt.libvirtError, match="Extra element cputune"):
        define(conn, ET.tostring(root, encoding="unicode"))


def test_libvirt_drops_a_pin_of_a_missing_vcpu(conn):
    """Why the assembler refuses a <vcpupin> beyond the flavor's vCPUs:
    libvirt accepts the domain and silently forgets the pin."""
    xml = guest.assemble([("numa", [D("<cputune><vcpupin vcpu='0' cpuset='3'/>"
                                      "</cputune>")])],
                         name=name(), vcpus=2, memory_mb=512, domain_type="test")
    root = ET.fromstring(xml)
    ET.SubElement(root.find("cputune"), "vcpupin", vcpu="5", cpuset="4")
    back = define(conn, ET.tostring(root, encoding="unicode"))
    assert [p.get("vcpu") for p in back.findall("cputune/vcpupin")] == ["0"]
    with pytest.raises(guest.GuestConfigError, match="vcpupin vcpu='5'"):
        guest.assemble([("numa", [D("<cputune><vcpupin vcpu='0' cpuset='3'/>"
                                    "<vcpupin vcpu='5' cpuset='4'/></cputune>")])],
                       name=name(), vcpus=2, memory_mb=512, domain_type="test")


def test_vcpu_cpuset_and_uuid_survive(conn):
    domain_uuid = str(uuid.uuid4())
    back = define(conn, guest.assemble([("numa", [D("<vcpu cpuset='4-7'/>")])],
                                       name=name(), vcpus=2, memory_mb=512,
                                       domain_type="test", uuid=domain_uuid,
                                       arch="i686"))
    assert back.find("vcpu").get("cpuset") == "4-7"
    assert back.findtext("vcpu") == "2"
    assert back.findtext("uuid") == domain_uuid
    assert back.find("os/type").get("arch") == "i686"


def test_the_fit_of_test_plugins_on_the_test_driver_host(conn):
    """PluginSet.fit on the states of libvirt's own host, then the domain."""
    conf = cfg.ConfigOpts()
    plugins = PluginSet.of({"gadget": fit_plugins.Gadget(conf),
                            "slots": fit_plugins.Slots(conf)})
    host = discover_host(libvirt_uri="test:///default")
    states = {n: state_of(p, p.discover(host), (), nodename=host.hostname)
              for n, p in plugins.items()}
    spec = RequestSpec.build(plugins, RequestInput.from_dicts(
        {"vcpus": 6, "memory_mb": 1024, "extra_specs": {"slots:pin": "true"}}))
    result = plugins.fit(states, spec)
    assert result.fits, result.rejections
    back = define(conn, guest.domain_xml(spec, result.assignments, plugins,
                                         name=name(), domain_type="test"))
    pins = {int(p.get("vcpu")): int(p.get("cpuset"))
            for p in back.findall("cputune/vcpupin")}
    assert pins == dict(result.assignments["slots"].pinning)
    assert set(pins.values()) <= {cpu.id for cpu in host.cells[0].cpus}
    assert back.find("cpu/numa/cell").get("cpus") == "0-5"
