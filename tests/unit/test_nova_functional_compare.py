"""``make nova-functional``'s check of a boot: the guest XML nova's libvirt
driver built against the decision PluginFitFilter kept
(tools/nova_functional/hooks.py ``compare``)."""

from __future__ import annotations

from compute_plugins.request.groups import Decision
from compute_plugins.request.types import FrozenMap
from resources.numa.request import CellAssignment, NUMAAssignment
from resources.sriov.request import DeviceAssignment, SRIOVAssignment, VFAssignment
from tools.nova_functional.hooks import compare

#: nova's guest XML of a 2-vCPU pinned guest on host cell 1, CPUs 4 and 5,
#: with a PCI device (the elements compare reads, as nova writes them).
XML = """<domain type="kvm">
  <cputune>
    <vcpupin vcpu="0" cpuset="4"/>
    <vcpupin vcpu="1" cpuset="5"/>
    <emulatorpin cpuset="4-5"/>
  </cputune>
  <numatune><memnode cellid="0" mode="strict" nodeset="1"/></numatune>
  <cpu><numa><cell id="0" cpus="0-1" memory="1048576"/></numa></cpu>
  <devices>
    <hostdev mode="subsystem" type="pci" managed="yes">
      <source><address domain="0x0000" bus="0x81" slot="0x00" function="0x2"/></source>
    </hostdev>
  </devices>
</domain>"""


def decision(pinning, host_cell=1, device="0000:81:00.2"):
    numa = NUMAAssignment(cells=(CellAssignment(
        guest_cell=0, host_cell=host_cell, pinning=FrozenMap(pinning),
        memory_mb=1024),))
    assignments = {"numa": numa}
    if device:
        assignments["sriov"] = SRIOVAssignment(devices=(DeviceAssignment(
            requester_id="_PCI_a", alias="a", address=device),))
    return Decision(host="compute1", assignments=FrozenMap(assignments))


def test_the_xml_nova_built_from_the_same_placement_matches():
    assert compare(decision({0: 4, 1: 5}), XML) == []


def test_another_cpu_cell_or_device_is_named():
    assert compare(decision({0: 4, 1: 6}), XML) == [
        "vCPU 1 on host CPU(s) [5], decision [6]"]
    assert compare(decision({0: 4, 1: 5}, host_cell=0), XML) == [
        "guest cell 0: memory on host cell(s) [1], decision 0"]
    assert compare(decision({0: 4, 1: 5}, device="0000:81:00.3"), XML) == [
        "PCI devices ['0000:81:00.2'] in the XML, decision ['0000:81:00.3'] (1)"]
    assert compare(decision({0: 4, 1: 5}, device=""), XML) == [
        "PCI devices ['0000:81:00.2'] in the XML, none in the decision"]


def test_a_guest_the_plugins_placed_nowhere_must_not_be_pinned_or_encrypted():
    empty = Decision(host="compute1")
    assert compare(empty, "<domain><devices/></domain>") == []
    problems = compare(empty, XML.replace(
        "<devices>", '<launchSecurity type="sev"/><devices>'))
    assert problems == [
        "the XML pins vCPUs, the decision has no NUMA placement",
        "PCI devices ['0000:81:00.2'] in the XML, none in the decision",
        "memory encryption sev in the XML, none in the decision"]


def test_a_macvtap_port_is_its_vfs_netdev_in_the_xml():
    """A ``macvtap`` port's VF is no hostdev: nova writes a direct
    interface on the VF's netdev, which names the decided VF or not."""
    macvtap = ("<domain><devices><interface type='direct'>"
               "<source dev='enp129s0f0v1' mode='passthrough'/>"
               "</interface></devices></domain>")
    vf = VFAssignment(requester_id="port", provider_uuid="rp",
                      pf_address="0000:81:00.0", vf_address="0000:81:00.1",
                      port_id="p1", vf_netdev="enp129s0f0v1")
    ours = Decision(host="compute1", assignments=FrozenMap(
        {"sriov": SRIOVAssignment(vfs=(vf,))}))
    assert compare(ours, macvtap) == []
    assert compare(ours, macvtap.replace("f0v1", "f0v2")) == [
        "PCI devices [] in the XML, decision ['0000:81:00.1'] (1)"]
