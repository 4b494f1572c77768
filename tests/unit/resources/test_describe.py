"""Each built-in plugin's ``describe``: its assignment in lines for people."""

from __future__ import annotations

from oslo_config import cfg

from compute_plugins.request.inputs import RequestInput
from compute_plugins.request.types import FrozenMap
from resources.disk import DiskPlugin
from resources.disk.request import DiskAssignment
from resources.numa import NUMAPlugin
from resources.numa.request import CellAssignment, NUMAAssignment
from resources.sriov import SRIOVPlugin
from resources.sriov.request import SRIOVAssignment, VFAssignment
from resources.vgpu import VGPUPlugin
from resources.vgpu.request import MdevAssignment, VGPUAssignment


def parse(plugin, flavor, ports=()):
    return plugin.parse_request(
        RequestInput.from_dicts(flavor, None, list(ports), None).for_plugin(plugin.name))


def test_numa_a_line_per_guest_node_as_the_issue_writes_it():
    plugin = NUMAPlugin(cfg.ConfigOpts())
    request = parse(plugin, {"vcpus": 6, "memory_mb": 6144, "extra_specs": {
        "hw:cpu_policy": "dedicated", "hw:numa_nodes": "2",
        "hw:numa_cpus.0": "0-3", "hw:numa_mem.0": "4096",
        "hw:numa_cpus.1": "4-5", "hw:numa_mem.1": "2048",
        "hw:mem_page_size": "2048", "hw:emulator_threads_policy": "isolate"}})
    assignment = NUMAAssignment(cells=(
        CellAssignment(guest_cell=1, host_cell=0, pinning=FrozenMap({4: 1, 5: 2}),
                       page_size_kb=2048),
        CellAssignment(guest_cell=0, host_cell=3,
                       pinning=FrozenMap({0: 12, 1: 14, 2: 16, 3: 18}),
                       page_size_kb=2048),
    ), emulator_threads=frozenset({20}))
    assert plugin.describe(request, assignment) == [
        "guest node 0 -> host cell 3: CPUs 0-3 -> 12,14,16,18; 4096 MiB in 2048 KiB pages",
        "guest node 1 -> host cell 0: CPUs 4-5 -> 1,2; 2048 MiB in 2048 KiB pages",
        "emulator threads -> host CPUs 20",
    ]


def test_numa_mixed_and_small_pages():
    plugin = NUMAPlugin(cfg.ConfigOpts())
    request = parse(plugin, {"vcpus": 4, "memory_mb": 1024, "extra_specs": {
        "hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "2-3"}})
    assignment = NUMAAssignment(cells=(CellAssignment(
        guest_cell=0, host_cell=1, pinning=FrozenMap({2: 6, 3: 7}),
        shared_cpus=frozenset({4, 5})),))
    assert plugin.describe(request, assignment) == [
        "guest node 0 -> host cell 1: CPUs 2-3 -> 6,7; CPUs 0-1 float on 4-5; 1024 MiB"]
    assert plugin.describe(request, NUMAAssignment()) == [
        "no host cell chosen: CPUs and memory float"]


def test_vgpu_a_line_per_group():
    plugin = VGPUPlugin(cfg.ConfigOpts())
    request = parse(plugin, {"vcpus": 1, "memory_mb": 512, "extra_specs": {
        "resources:VGPU": "1", "resources1:VGPU": "2",
        "trait1:CUSTOM_MDEV_TYPE_NVIDIA_35": "required"}})
    groups = {g.requester_id: g.count for g in request.groups}
    assert sorted(groups.values()) == [1, 2]
    one, two = (rid for rid, _ in sorted(groups.items(), key=lambda x: x[1]))
    assignment = VGPUAssignment(devices=(
        MdevAssignment(one, "uuid-a", "0000:3b:00.0", "nvidia-35",
                       ("c2177883-f1bb-47f0-914d-32a22e3a8804",)),
        MdevAssignment(two, "uuid-b", "0000:af:00.0", "nvidia-35"),
    ))
    assert plugin.describe(request, assignment) == [
        "%s: 1 vGPU of type nvidia-35 on pGPU 0000:3b:00.0 "
        "(mdev c2177883-f1bb-47f0-914d-32a22e3a8804)" % (one or "vGPU group"),
        "%s: 2 vGPUs of type nvidia-35 on pGPU 0000:af:00.0" % two,
    ]


def test_sriov_a_line_per_port():
    plugin = SRIOVPlugin(cfg.ConfigOpts())
    request = parse(plugin, {"vcpus": 1, "memory_mb": 512},
                    [{"id": "port-a", "vnic_type": "direct", "physnet": "physnet1"}])
    port = request.ports[0]
    assignment = SRIOVAssignment(vfs=(VFAssignment(
        port.requester_id, "uuid-pf", "0000:5e:00.0", "0000:5e:10.2", "port-a"),))
    assert plugin.describe(request, assignment) == [
        "port port-a (physnet1) -> VF 0000:5e:10.2 of PF 0000:5e:00.0"]


def test_disk_where_disk_gb_comes_from():
    plugin = DiskPlugin(cfg.ConfigOpts())
    request = parse(plugin, {"vcpus": 1, "memory_mb": 512, "root_gb": 20,
                             "swap": 1536})
    assert plugin.describe(request, DiskAssignment(provider_uuid="u1")) == [
        "22 GB DISK_GB from the compute node (provider u1)"]
    assert plugin.describe(request, DiskAssignment(shared=True)) == [
        "22 GB DISK_GB from shared storage"]
