"""Guest XML assembly: merging, placement and the checks against the flavor.

The combined domains are defined on real libvirt in
tests/functional/compute/test_guest_libvirt.py; here the structure.
"""

from __future__ import annotations

import dataclasses
import os
import xml.etree.ElementTree as ET

import pytest
from oslo_config import cfg

from compute_plugins.compute import guest
from compute_plugins.compute.guest import GuestConfigError
from compute_plugins.host.model import CPU, HostInfo, NUMACell, PCIDevice
from compute_plugins.plugin.contract import GuestFragment, describe_fields
from compute_plugins.request.groups import PluginAssignment
from compute_plugins.request.inputs import RequestInput
from compute_plugins.request.spec import RequestSpec
from compute_plugins.runtime import PluginSet
from tests.unit import fit_plugins
from tests.unit.resources.helpers import state_of


def dom(*fragments, plugin="p"):
    return guest.assemble([(plugin, list(fragments))], name="g", vcpus=4,
                          memory_mb=2048)


def D(xml):  # noqa: N802 - reads like the parent it names
    return GuestFragment("domain", xml)


def V(xml):  # noqa: N802
    return GuestFragment("devices", xml)


def test_framework_elements_from_the_flavor():
    root = ET.fromstring(guest.assemble([], name="vm1", vcpus=3, memory_mb=1536,
                                        domain_type="test", arch="i686",
                                        uuid="6695eb01-f6a4-8304-79aa-97f2502e193f"))
    assert root.tag == "domain" and root.get("type") == "test"
    assert root.findtext("name") == "vm1"
    assert root.findtext("uuid") == "6695eb01-f6a4-8304-79aa-97f2502e193f"
    assert root.find("memory").get("unit") == "KiB"
    assert root.findtext("memory") == str(1536 * 1024)
    assert root.findtext("vcpu") == "3"
    assert root.find("os/type").get("arch") == "i686"
    assert root.findtext("os/type") == "hvm"
    assert root.find("devices") is not None and len(root.find("devices")) == 0


def test_same_tag_from_two_plugins_is_one_element_with_all_children():
    xml = guest.assemble([
        ("numa", [D("<cputune><vcpupin vcpu='0' cpuset='4'/>"
                    "<vcpupin vcpu='1' cpuset='5'/><emulatorpin cpuset='6'/></cputune>")]),
        ("rt", [D("<cputune><vcpusched vcpus='1' scheduler='fifo' priority='1'/>"
                  "</cputune>"),
                D("<memoryBacking><locked/></memoryBacking>")]),
        ("numa2", [D("<memoryBacking><hugepages><page size='2048' unit='KiB'/>"
                     "</hugepages></memoryBacking>")]),
    ], name="g", vcpus=2, memory_mb=1024)
    root = ET.fromstring(xml)
    assert len(root.findall("cputune")) == 1
    assert [c.tag for c in root.find("cputune")] == [
        "vcpupin", "vcpupin", "emulatorpin", "vcpusched"]
    assert len(root.findall("memoryBacking")) == 1
    assert [c.tag for c in root.find("memoryBacking")] == ["locked", "hugepages"]


def test_devices_are_appended_in_plugin_order():
    xml = guest.assemble([
        ("vgpu", [V("<hostdev mode='subsystem' type='mdev' model='vfio-pci'>"
                    "<source><address uuid='c2177883-f1bb-47f0-914d-32a22e3a8804'/>"
                    "</source></hostdev>")]),
        ("sriov", [V("<interface type='hostdev' managed='yes'><source>"
                     "<address type='pci' domain='0x0000' bus='0x5e' slot='0x10' "
                     "function='0x2'/></source></interface>"),
                   V("<hostdev mode='subsystem' type='pci' managed='yes'><source>"
                     "<address domain='0x0000' bus='0x3b' slot='0x00' "
                     "function='0x0'/></source></hostdev>")]),
    ], name="g", vcpus=1, memory_mb=512)
    devices = ET.fromstring(xml).find("devices")
    assert [(d.tag, d.get("type")) for d in devices] == [
        ("hostdev", "mdev"), ("interface", "hostdev"), ("hostdev", "pci")]


def test_attributes_merge_and_conflicts_name_both_plugins():
    root = ET.fromstring(guest.assemble([
        ("a", [D("<cpu mode='host-passthrough'/>")]),
        ("b", [D("<cpu match='exact'><topology sockets='1' dies='1' cores='2' "
                 "threads='1'/></cpu>")]),
    ], name="g", vcpus=2, memory_mb=512))
    cpu = root.find("cpu")
    assert cpu.attrib == {"mode": "host-passthrough", "match": "exact"}
    assert cpu.find("topology") is not None
    with pytest.raises(GuestConfigError) as err:
        guest.assemble([("a", [D("<cpu mode='host-passthrough'/>")]),
                        ("b", [D("<cpu mode='host-model'/>")])],
                       name="g", vcpus=2, memory_mb=512)
    assert err.value.plugin == "b"
    assert "mode='host-model'" in str(err.value) and "plugin a" in str(err.value)


def test_vcpu_takes_attributes_not_a_count():
    root = ET.fromstring(dom(D("<vcpu cpuset='8-11'/>")))
    assert root.find("vcpu").get("cpuset") == "8-11"
    assert root.findtext("vcpu") == "4"
    assert len(root.findall("vcpu")) == 1
    with pytest.raises(GuestConfigError, match="vCPU count is the flavor's"):
        dom(D("<vcpu>8</vcpu>"))
    with pytest.raises(GuestConfigError, match="placement='auto'.*the flavor"):
        dom(D("<vcpu placement='auto'/>"))


@pytest.mark.parametrize("fragment, message", [
    (D("<cputune><vcpupin vcpu='0' cpuset='1'/>"), "not one well-formed"),
    (D("<cputune/><numatune/>"), "not one well-formed"),
    (D(""), "not one well-formed"),
    (D("<memory unit='KiB'>1</memory>"), "written by the framework"),
    (D("<devices/>"), "written by the framework"),
    (D("<name>x</name>"), "written by the framework"),
    (D("<hostdev mode='subsystem' type='pci'/>"), "is a device"),
    (V("<cputune/>"), "not a device"),
    (V("<numatune/>"), "not a device"),
    (D("<cputune><vcpupin vcpu='4' cpuset='1'/></cputune>"),
     "vCPU the flavor does not have"),
    (D("<cputune><vcpupin vcpu='x' cpuset='1'/></cputune>"), "not a number"),
    (D("<cputune><vcpupin vcpu='1'/></cputune>"), "no cpuset"),
    (D("<cputune><vcpupin vcpu='1' cpuset='1-'/></cputune>"), "Invalid range"),
    (D("<cputune><vcpupin vcpu='1' cpuset='2'/><vcpupin vcpu='1' cpuset='3'/>"
       "</cputune>"), "vCPU 1 is pinned twice"),
    (D("<cputune><emulatorpin cpuset='2'/><emulatorpin cpuset='3'/></cputune>"),
     "allowed once"),
])
def test_malformed_fragments_name_the_plugin(fragment, message):
    with pytest.raises(GuestConfigError, match=message) as err:
        dom(fragment, plugin="numa")
    assert err.value.plugin == "numa"
    assert str(err.value).startswith("guest XML of plugin numa: ")


def test_a_pin_twice_across_plugins_names_the_first():
    with pytest.raises(GuestConfigError) as err:
        guest.assemble([("numa", [D("<cputune><vcpupin vcpu='0' cpuset='1'/></cputune>")]),
                        ("other", [D("<cputune><vcpupin vcpu='0' cpuset='2'/></cputune>")])],
                       name="g", vcpus=2, memory_mb=512)
    assert err.value.plugin == "other"
    assert "also from plugin numa" in str(err.value)


def test_a_single_child_from_two_plugins_names_both():
    with pytest.raises(GuestConfigError) as err:
        guest.assemble([("numa", [D("<cputune><emulatorpin cpuset='1'/></cputune>")]),
                        ("rt", [D("<cputune><emulatorpin cpuset='2'/></cputune>")])],
                       name="g", vcpus=2, memory_mb=512)
    assert err.value.plugin == "rt"
    assert "<cputune><emulatorpin> is allowed once and plugin numa gives it" in str(err.value)


def test_not_a_fragment():
    with pytest.raises(GuestConfigError, match="is a str, not a GuestFragment"):
        guest.assemble([("p", ["<cputune/>"])], name="g", vcpus=1, memory_mb=1)
    with pytest.raises(ValueError, match="not one of domain, devices"):
        GuestFragment("cpu", "<numa/>")


def test_text_after_the_element_is_refused():
    with pytest.raises(GuestConfigError, match="not one well-formed.*junk after"):
        dom(D("<cputune/> trailing"))


# -- summary ---------------------------------------------------------------------


def test_summary_says_what_the_guest_gets():
    xml = guest.assemble([
        ("numa", [D("<cputune><vcpupin vcpu='1' cpuset='13'/><vcpupin vcpu='0' "
                    "cpuset='12'/><emulatorpin cpuset='14'/></cputune>"),
                  D("<numatune><memnode cellid='0' mode='strict' nodeset='3'/>"
                    "</numatune>"),
                  D("<cpu><numa><cell id='0' cpus='0-1' memory='4096' unit='MiB'/>"
                    "</numa></cpu>"),
                  D("<memoryBacking><hugepages><page size='2048' unit='KiB' "
                    "nodeset='0'/></hugepages></memoryBacking>")]),
        ("vgpu", [V("<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source>"
                    "<address uuid='c2177883-f1bb-47f0-914d-32a22e3a8804'/></source>"
                    "</hostdev>")]),
        ("sriov", [V("<interface type='hostdev'><source><address type='pci' "
                     "domain='0x0000' bus='0x5e' slot='0x10' function='0x2'/>"
                     "</source></interface>")]),
    ], name="web1", vcpus=2, memory_mb=4096)
    assert guest.summary(xml).splitlines() == [
        "domain web1 (kvm): 2 vCPUs, 4096 MiB",
        "vcpupin: 0->12 1->13",
        "emulator threads on host CPUs 14",
        "guest cell 0: vCPUs 0-1, 4096 MiB in 2048 KiB pages, memory on host node 3",
        "devices: hostdev mdev c2177883-f1bb-47f0-914d-32a22e3a8804; "
        "interface hostdev 0000:5e:10.2",
    ]


def test_summary_of_a_plain_guest_and_of_garbage():
    assert guest.summary(dom()) == "domain g (kvm): 4 vCPUs, 2048 MiB"
    with pytest.raises(ValueError, match="not a libvirt domain"):
        guest.summary("<cputune/>")
    with pytest.raises(ValueError, match="not XML"):
        guest.summary("<domain")


def test_pinning_lists_the_cputune_and_numatune_elements_in_order():
    xml = guest.assemble([
        ("numa", [D("<cputune><vcpupin vcpu='0' cpuset='12'/><emulatorpin "
                    "cpuset='14'/></cputune>"),
                  D("<numatune><memory mode='strict' nodeset='3'/><memnode "
                    "cellid='0' mode='strict' nodeset='3'/></numatune>")])],
        name="web1", vcpus=1, memory_mb=1024)
    assert guest.pinning(xml, ("cputune", "numatune")) == [
        '<vcpupin vcpu="0" cpuset="12" />', '<emulatorpin cpuset="14" />',
        '<memory mode="strict" nodeset="3" />',
        '<memnode cellid="0" mode="strict" nodeset="3" />']
    assert guest.pinning(dom(), ("cputune",)) == []
    with pytest.raises(ValueError, match="not XML"):
        guest.pinning("<domain", ("cputune",))


# -- domain_xml with plugins -------------------------------------------------------

HOST = HostInfo(
    hostname="node1", source="test",
    cells=(NUMACell(id=0, cpus=tuple(CPU(id=i) for i in range(2))),
           NUMACell(id=1, cpus=tuple(CPU(id=i) for i in range(2, 6)))),
    pci_devices=(PCIDevice(address="0000:3b:00.0", name="pci_0000_3b_00_0",
                           numa_node=0),
                 PCIDevice(address="0000:af:00.0", name="pci_0000_af_00_0",
                           numa_node=1)))


@pytest.fixture
def plugins():
    conf = cfg.ConfigOpts()
    return PluginSet.of({"gadget": fit_plugins.Gadget(conf),
                         "slots": fit_plugins.Slots(conf)})


def spec_for(plugins, vcpus, memory_mb, extra_specs):
    return RequestSpec.build(plugins, RequestInput.from_dicts(
        {"vcpus": vcpus, "memory_mb": memory_mb, "extra_specs": extra_specs}))


def states(plugins, host=HOST, usage=None):
    usage = usage or {}
    return {name: state_of(p, p.discover(host), usage.get(name, ()),
                           nodename=host.hostname)
            for name, p in plugins.items()}


def test_domain_xml_from_fit_results(plugins):
    spec = spec_for(plugins, 3, 1024, {"slots:pin": "true", "gadget:count": "1"})
    result = plugins.fit(states(plugins), spec)
    assert result.fits
    # slots fits first (gadget runs after it) and takes cell 1; the gadget
    # follows it there.
    assert result.assignments["slots"].host_cell == 1
    assert result.assignments["gadget"].addresses == ("0000:af:00.0",)
    root = ET.fromstring(guest.domain_xml(spec, result.assignments, plugins,
                                          name="g1", domain_type="test"))
    assert root.findtext("vcpu") == "3"
    assert root.findtext("memory") == str(1024 * 1024)
    assert {p.get("vcpu"): p.get("cpuset") for p in root.findall("cputune/vcpupin")} \
        == {"0": "2", "1": "3", "2": "4"}
    assert root.find("numatune/memnode").get("nodeset") == "1"
    assert root.find("devices/hostdev/source/address").get("bus") == "0xaf"


def test_domain_xml_refuses_an_assignment_without_request(plugins):
    spec = spec_for(plugins, 1, 512, {"slots:pin": "true"})
    with pytest.raises(GuestConfigError, match="gadget: an assignment without a request"):
        guest.domain_xml(spec, {"gadget": fit_plugins.GadgetAssignment(("0000:3b:00.0",))},
                         plugins, name="g")
    with pytest.raises(GuestConfigError, match="nosuch: the plugin is not loaded"):
        guest.domain_xml(spec, {"nosuch": fit_plugins.GadgetAssignment()}, plugins,
                         name="g")


def test_domain_xml_refuses_a_guest_config_that_is_not_a_list(plugins, monkeypatch):
    spec = spec_for(plugins, 1, 512, {"slots:pin": "true"})
    result = plugins.fit(states(plugins), spec)
    monkeypatch.setattr(plugins["slots"], "guest_config",
                        lambda request, assignment: "<cputune/>")
    with pytest.raises(GuestConfigError, match="returned a str, not a sequence"):
        guest.domain_xml(spec, result.assignments, plugins, name="g")


def test_describe_default_and_override(plugins):
    assert describe_fields(fit_plugins.GadgetAssignment(("0000:3b:00.0", "x"))) == [
        'addresses=["0000:3b:00.0", "x"]']
    spec = spec_for(plugins, 2, 512, {"slots:pin": "true"})
    result = plugins.fit(states(plugins), spec)
    assert plugins["slots"].describe(spec.requests["slots"],
                                     result.assignments["slots"]) == [
        "guest node 0 -> host cell 0: CPUs 0-1 -> 0,1"]


@dataclasses.dataclass(frozen=True)
class Port:
    port_id: str
    vf_address: str = ""


@dataclasses.dataclass(frozen=True)
class PortsAssignment(PluginAssignment):
    ports: tuple[Port, ...] = ()
    host_cells: frozenset[int] = frozenset()
    policy: str = ""


def test_describe_fields_lists_one_line_per_device():
    assignment = PortsAssignment(ports=(Port("port-a", "0000:5e:10.2"), Port("port-b")),
                                 host_cells=frozenset({1, 0}), policy="legacy")
    assert describe_fields(assignment) == [
        "host_cells=[0, 1], policy=legacy",
        "ports[0]: port_id=port-a, vf_address=0000:5e:10.2",
        "ports[1]: port_id=port-b, vf_address=",
    ]
    assert describe_fields(PortsAssignment()) == ["ports=[], host_cells=[], policy="]


@pytest.mark.parametrize("first, second, refused", [
    ("<numatune><memory mode='strict' nodeset='0'/></numatune>",
     "<numatune><memory mode='strict' nodeset='1'/></numatune>",
     "<numatune><memory> is allowed once"),
    ("<cpu><numa><cell id='0' cpus='0-1' memory='512' unit='MiB'/></numa></cpu>",
     "<cpu><numa><cell id='1' cpus='0-1' memory='512' unit='MiB'/></numa></cpu>",
     "<cpu><numa> is allowed once"),
    ("<features><hyperv mode='custom'/></features>",
     "<features><hyperv mode='passthrough'/></features>",
     "<features><hyperv> is allowed once"),
    # the same element twice is kept once (<memoryBacking><locked/> from the
    # numa and memenc plugins): test_the_same_flag_from_two_plugins_is_one
    ("<features><acpi/></features>", "<features><acpi/></features>", None),
    ("<numatune><memnode cellid='0' mode='strict' nodeset='0'/></numatune>",
     "<numatune><memnode cellid='1' mode='strict' nodeset='1'/></numatune>", None),
    ("<clock offset='utc'><timer name='rtc'/></clock>",
     "<clock><timer name='pit'/></clock>", None),
    ("<cpu><feature policy='require' name='vmx'/></cpu>",
     "<cpu><feature policy='disable' name='svm'/></cpu>", None),
    ("<metadata><a:x xmlns:a='urn:a'/></metadata>",
     "<metadata><a:x xmlns:a='urn:a'/></metadata>", None),
])
def test_children_libvirt_allows_once_by_its_schema(first, second, refused):
    contributions = [("one", [D(first)]), ("two", [D(second)])]
    if refused is None:
        guest.assemble(contributions, name="g", vcpus=2, memory_mb=1024)
        return
    with pytest.raises(GuestConfigError, match=refused + " and plugin one gives it"):
        guest.assemble(contributions, name="g", vcpus=2, memory_mb=1024)


def test_the_same_flag_from_two_plugins_is_one():
    """Two plugins asking the same thing (locked memory: the numa plugin
    for hw:locked_memory, the memenc plugin for SEV) give it once; a
    different one is still refused, naming both."""
    xml = guest.assemble(
        [("numa", [D("<memoryBacking><hugepages/><locked/></memoryBacking>")]),
         ("memenc", [D("<memoryBacking><locked/></memoryBacking>")])],
        name="g", vcpus=2, memory_mb=1024)
    backing = ET.fromstring(xml).find("memoryBacking")
    assert [e.tag for e in backing] == ["hugepages", "locked"]
    with pytest.raises(GuestConfigError, match="<memoryBacking><source> is allowed "
                       "once and plugin numa gives it too"):
        guest.assemble(
            [("numa", [D("<memoryBacking><source type='file'/></memoryBacking>")]),
             ("other", [D("<memoryBacking><source type='memfd'/></memoryBacking>")])],
            name="g", vcpus=2, memory_mb=1024)


RNG = "/usr/share/libvirt/schemas/domaincommon.rng"


def test_repeated_children_are_libvirts():
    """Each name of REPEATED_CHILDREN repeats (zeroOrMore/oneOrMore) in
    libvirt's domain schema."""
    # NOTE: libvirt0 (libvirt-dev in bindep.txt) ships it; missing is a failure.
    assert os.path.exists(RNG), "libvirt's domain schema %s is not installed" % RNG
    ns = "{http://relaxng.org/ns/structure/1.0}"
    root = ET.parse(RNG).getroot()
    repeating = set()
    for many in [*root.iter(ns + "zeroOrMore"), *root.iter(ns + "oneOrMore")]:
        repeating.update(e.get("name") for e in many.iter(ns + "element"))
        for ref in many.iter(ns + "ref"):
            repeating.add(ref.get("name"))
    assert guest.REPEATED_CHILDREN <= repeating, guest.REPEATED_CHILDREN - repeating
    assert not {"emulatorpin", "hugepages", "memory", "numa"} & repeating
