"""The device plugins through the framework: PluginSet.fit, the spec, verify.

One request (a guest NUMA node, a vGPU, an SR-IOV port, a PCI alias, a
root disk) parsed once into a RequestSpec; ``PluginSet.fit`` runs the devices
after ``numa`` (``fit_after``) so they see where the guest's node runs; the
decision goes through the spec's JSON and ``PluginSet.verify`` tests it on the
host's states, as the compute host's claim will.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import libvirt
import pytest

from compute_plugins.host.model import PCIDevice
from compute_plugins.plugin import names
from compute_plugins.request.groups import Decision
from compute_plugins.request.spec import RequestSpec, build_request_spec
from compute_plugins.runtime import PluginSet
from resources.disk import DiskPlugin
from resources.numa import NUMAPlugin
from resources.numa.request import CellAssignment, NUMAAssignment
from resources.sriov import SRIOVPlugin
from resources.vgpu import VGPUPlugin
from resources.vgpu.request import MdevAssignment, VGPUAssignment
from tests.unit.resources.helpers import (
    NODE,
    DiskInfo,
    cell,
    gpu,
    host,
    pf,
    state_of,
)

GPU_A, GPU_B = "0000:84:00.0", "0000:85:00.0"
PF_A, PF_B = "0000:5e:00.0", "0000:af:00.0"
QAT_A, QAT_B = "0000:88:00.0", "0000:89:00.0"


class NUMAOnCell1(NUMAPlugin):
    """The numa plugin, its decision fixed: guest node 0 on host cell 1
    (its own fit is another part of the project)."""

    def fit(self, state, request, placement, earlier):
        return NUMAAssignment(cells=(CellAssignment(guest_cell=0, host_cell=1),))

    def verify(self, state, request, assignment):
        return None


@pytest.fixture
def plugins(conf):
    conf.set_override("enabled_mdev_types", ["nvidia-35"], "vgpu")
    conf.set_override("physical_device_mappings",
                      ["physnet1:%s" % PF_A, "physnet1:%s" % PF_B], "sriov")
    conf.set_override("alias", [json.dumps({
        "name": "qat", "vendor_id": "8086", "product_id": "0443",
        "device_type": "type-PCI"})], "pci")
    return PluginSet.of({"disk": DiskPlugin(conf), "numa": NUMAOnCell1(conf),
                         "sriov": SRIOVPlugin(conf), "vgpu": VGPUPlugin(conf)})


def qat(address, numa_node):
    return PCIDevice(address=address, name=address, vendor_id="8086",
                     product_id="0443", numa_node=numa_node)


INFO = host([cell(0, range(4)), cell(1, range(4, 8))],
            [gpu(GPU_A, 0, nvidia_35=2), gpu(GPU_B, 1, nvidia_35=2),
             pf(PF_A, 4, 0), pf(PF_B, 4, 1), qat(QAT_A, 0), qat(QAT_B, 1)],
            disk=DiskInfo(total_gb=100, free_gb=100))

FLAVOR = {"name": "f", "vcpus": 2, "memory_mb": 2048, "root_gb": 20,
          "extra_specs": {"hw:numa_nodes": "1", "resources:VGPU": "1",
                          "pci_passthrough:alias": "qat:1"}}
PORTS = [{"id": "p1", "vnic_type": "direct", "physnet": "physnet1"}]


def states(plugins, assignments=None):
    """Every device plugin's state, through its JSON form (as published)."""
    assignments = assignments or {}
    result = {}
    for name in ("vgpu", "sriov", "disk"):
        plugin = plugins[name]
        built = state_of(plugin, plugin.discover(INFO),
                                  assignments.get(name, ()))
        result[name] = plugins.decode_state(name, json.loads(json.dumps(
            plugins.encode_state(name, built))))
    return result


def test_devices_fit_after_numa_near_the_guests_cell(plugins):
    assert plugins.order == ("disk", "numa", "sriov", "vgpu")
    spec = build_request_spec(plugins, FLAVOR, ports=PORTS)
    result = plugins.fit(states(plugins), spec)
    assert result.fits, result.rejections
    got = result.assignments
    # hw:pci_numa_affinity_policy unset: legacy for the port and the alias
    # (nova's default), none for the vGPU: all on the guest's host cell 1
    assert got["vgpu"].devices[0].parent_address == GPU_B
    assert got["sriov"].vfs[0].pf_address == PF_B
    assert got["sriov"].devices[0].address == QAT_B
    assert got["sriov"].host_cells == got["vgpu"].host_cells == (1,)
    assert got["disk"].disk_gb == 20


def test_the_decision_survives_the_spec_json_and_verifies(plugins):
    spec = build_request_spec(plugins, FLAVOR, ports=PORTS)
    result = plugins.fit(states(plugins), spec)
    decided = spec.with_decision(Decision(host=NODE, nodename=NODE,
                                          assignments=result.assignments))
    again = RequestSpec.from_json(decided.to_json(), plugins)
    assert again.decision.assignments == result.assignments
    assert plugins.verify(states(plugins), again) == ()
    # another guest got the same mdev and VF in between: both plugins say so
    taken = {"vgpu": [result.assignments["vgpu"]],
             "sriov": [result.assignments["sriov"]]}
    rejections = plugins.verify(states(plugins, taken), again)
    assert [(r.plugin, r.reason.split(" is used")[0]) for r in rejections] == [
        ("sriov", "VF 0000:b0:10.0 of PF 0000:af:00.0 (port p1)"),
        ("vgpu", "mdev %s on pGPU %s (group _VGPU)"
         % (result.assignments["vgpu"].devices[0].mdev_uuids[0], GPU_B))]


def test_fit_all_gives_every_plugins_reasons(plugins):
    flavor = {**FLAVOR, "root_gb": 500, "extra_specs": {
        **FLAVOR["extra_specs"], "hw:pci_numa_affinity_policy": "required"}}
    spec = build_request_spec(plugins, flavor, ports=PORTS)
    gpu_b = names.provider_uuid(NODE, "pci", GPU_B)
    full = {"vgpu": [VGPUAssignment(devices=(MdevAssignment(
        "_VGPU", gpu_b, GPU_B, "nvidia-35",
        ("00000000-0000-4000-8000-000000000001",
         "00000000-0000-4000-8000-000000000002")),))]}
    result = plugins.fit(states(plugins, full), spec)
    assert not result.fits
    assert [(r.plugin, r.reason) for r in result.rejections] == [
        ("disk", "host root %s has 100 GB of DISK_GB in all, the guest needs "
         "500 GB" % names.provider_uuid(NODE)),
        ("vgpu", "no pGPU can serve group _VGPU: pGPU 0000:84:00.0 is on host "
         "cell 0; hw:pci_numa_affinity_policy=required needs a device on one "
         "of the guest's host cells (1); pGPU 0000:85:00.0 has 0 of 2 mdevs of "
         "type nvidia-35 free, group _VGPU needs 1")]


def test_guest_fragments_of_every_device(plugins):
    spec = build_request_spec(plugins, FLAVOR, ports=PORTS)
    got = plugins.fit(states(plugins), spec).assignments
    xml = [f.xml for name in ("vgpu", "sriov")
           for f in plugins[name].guest_config(spec.requests[name], got[name])]
    assert [x.split(" ")[0:2] for x in xml] == [
        ["<hostdev", 'mode="subsystem"'], ["<interface", 'type="hostdev"'],
        ["<hostdev", 'mode="subsystem"']]


def test_libvirt_defines_the_device_fragments(plugins):
    spec = build_request_spec(plugins, FLAVOR, ports=PORTS)
    got = plugins.fit(states(plugins), spec).assignments
    devices = "".join(f.xml for name in ("vgpu", "sriov")
                      for f in plugins[name].guest_config(spec.requests[name], got[name]))
    conn = libvirt.open("test:///default")
    try:
        domain = conn.defineXML(
            "<domain type='test'><name>devices-fit</name><memory>1048576</memory>"
            "<vcpu>1</vcpu><os><type arch='x86_64'>hvm</type></os>"
            "<devices>%s</devices></domain>" % devices)
        back = ET.fromstring(domain.XMLDesc())
        domain.undefine()
    finally:
        conn.close()
    mdev = got["vgpu"].devices[0].mdev_uuids[0]
    assert [a.get("uuid") for a in back.findall(
        "devices/hostdev[@type='mdev']/source/address")] == [mdev]
    assert [a.attrib for a in back.findall(
        "devices/interface[@type='hostdev']/source/address")] == [
        {"type": "pci", "domain": "0x0000", "bus": "0xb0", "slot": "0x10",
         "function": "0x0"}]
    assert [a.get("bus") for a in back.findall(
        "devices/hostdev[@type='pci']/source/address")] == ["0x89"]
