"""Derived queries against real Placement (embedded, in-process).

Provider trees are built the way the plugins build them (root, ``_NUMA<N>``
children with HW_NUMA_ROOT, PFs and pGPUs under their NUMA node, sharing
DISK_GB provider); each test asserts that the candidates are exactly the
hosts that can serve the request.
"""

from __future__ import annotations

import uuid

import pytest

from compute_plugins.placement import embedded
from tests.unit.request.conftest import build, make_manager

HEADERS = {"OpenStack-API-Version": "placement 1.39"}


class Placement:
    def __init__(self, emb):
        self.session = emb.session()

    def call(self, method, path, body=None, expect=(200, 201, 204)):
        resp = self.session.request(embedded.EMBEDDED_URL + path, method, json=body,
                                    headers=HEADERS, raise_exc=False)
        assert resp.status_code in expect, (method, path, resp.text)
        return resp.json() if resp.content else None

    def provider(self, name, parent=None, inventory=None, traits=(), aggregates=()):
        rp = str(uuid.uuid4())
        body = {"name": name, "uuid": rp}
        if parent:
            body["parent_provider_uuid"] = parent
        self.call("POST", "/resource_providers", body)
        gen = 0
        if inventory:
            for rc in inventory:
                if rc.startswith("CUSTOM_"):
                    self.call("PUT", "/resource_classes/%s" % rc)
            inv = {rc: {"total": n, "max_unit": n, "allocation_ratio": 1.0}
                   for rc, n in inventory.items()}
            gen = self.call("PUT", "/resource_providers/%s/inventories" % rp,
                            {"resource_provider_generation": gen,
                             "inventories": inv})["resource_provider_generation"]
        if traits:
            for trait in traits:
                if trait.startswith("CUSTOM_"):
                    self.call("PUT", "/traits/%s" % trait)
            gen = self.call("PUT", "/resource_providers/%s/traits" % rp,
                            {"resource_provider_generation": gen,
                             "traits": sorted(traits)})["resource_provider_generation"]
        if aggregates:
            self.call("PUT", "/resource_providers/%s/aggregates" % rp,
                      {"resource_provider_generation": gen, "aggregates": list(aggregates)})
        return rp

    def host(self, name, cells, pfs=(), gpus=(), root_traits=(), disk_gb=100,
             aggregates=()):
        """cells: [{rc: n}], pfs: [(cell, physnet, vfs)], gpus: [(cell, type, n)]."""
        root = self.provider(name, inventory={"DISK_GB": disk_gb} if disk_gb else None,
                             traits=root_traits, aggregates=aggregates)
        cell_rps = [self.provider("%s_NUMA%d" % (name, i), root, inv,
                                  traits=("HW_NUMA_ROOT",))
                    for i, inv in enumerate(cells)]
        for i, (cell, physnet, vfs) in enumerate(pfs):
            self.provider("%s_pf_0000_5e_00_%d" % (name, i), cell_rps[cell],
                          {"SRIOV_NET_VF": vfs, "NET_BW_EGR_KILOBIT_PER_SEC": 10000},
                          traits=("CUSTOM_VNIC_TYPE_DIRECT",
                                  "CUSTOM_PHYSNET_%s" % physnet.upper()))
        for i, (cell, mdev, count) in enumerate(gpus):
            self.provider("%s_pci_0000_3b_00_%d" % (name, i), cell_rps[cell],
                          {"VGPU": count}, traits=("CUSTOM_MDEV_TYPE_%s" % mdev,))
        return root

    def candidates(self, spec, roots):
        """Root uuids (of ``roots``) with a candidate for any alternative."""
        found = set()
        for alt in spec.placement_query().alternatives:
            answer = self.call("GET", "/allocation_candidates?" + alt.to_querystring())
            for rp, summary in answer["provider_summaries"].items():
                if rp in roots and rp == summary["root_provider_uuid"]:
                    if any(rp in [answer["provider_summaries"][a]["root_provider_uuid"]
                                  for a in req["allocations"]]
                           for req in answer["allocation_requests"]):
                        found.add(rp)
        return {roots[r] for r in found}


@pytest.fixture(scope="module")
def placement():
    emb = embedded.EmbeddedPlacement("sqlite://").start()
    yield Placement(emb)
    emb.close()


@pytest.fixture(scope="module")
def manager():
    return make_manager()


def names(prefix, *suffixes):
    return ["%s-%s" % (prefix, s) for s in suffixes]


def test_floating_guest_fits_where_no_single_cell_has_room(placement, manager):
    p = "float-" + uuid.uuid4().hex[:6]
    roots = {}
    for name, cells, traits in [
        ("one-cell", [{"VCPU": 4, "MEMORY_MB": 4096}], ()),
        ("cpu-here-mem-there", [{"VCPU": 4, "MEMORY_MB": 1024},
                                {"VCPU": 1, "MEMORY_MB": 4096}], ()),
        ("split-evenly", [{"VCPU": 2, "MEMORY_MB": 2048},
                          {"VCPU": 2, "MEMORY_MB": 2048}], ()),
        ("too-small", [{"VCPU": 2, "MEMORY_MB": 2048},
                       {"VCPU": 1, "MEMORY_MB": 2048}], ()),
        ("disabled", [{"VCPU": 8, "MEMORY_MB": 8192}], ("COMPUTE_STATUS_DISABLED",)),
    ]:
        rp = placement.host("%s-%s" % (p, name), cells, root_traits=traits)
        roots[rp] = name
    spec = build(manager, {}, vcpus=4, memory_mb=4096, root_gb=10)
    assert placement.candidates(spec, roots) == {
        "one-cell", "cpu-here-mem-there", "split-evenly"}


def test_numa_guest_gets_one_host_cell_per_guest_node(placement, manager):
    p = "numa-" + uuid.uuid4().hex[:6]
    roots = {}
    for name, cells in [
        ("two-cells", [{"PCPU": 2, "MEMORY_MB": 2048}, {"PCPU": 2, "MEMORY_MB": 2048}]),
        ("one-big-cell", [{"PCPU": 8, "MEMORY_MB": 8192}]),
        ("one-short-cell", [{"PCPU": 2, "MEMORY_MB": 2048}, {"PCPU": 1, "MEMORY_MB": 4096}]),
        ("shared-cpus-only", [{"VCPU": 4, "MEMORY_MB": 2048}, {"VCPU": 4, "MEMORY_MB": 2048}]),
    ]:
        roots[placement.host("%s-%s" % (p, name), cells)] = name
    spec = build(manager, {"hw:numa_nodes": "2", "hw:cpu_policy": "dedicated"},
                 vcpus=4, memory_mb=4096)
    assert placement.candidates(spec, roots) == {"two-cells"}


def test_huge_pages_large_tries_each_size(placement, manager):
    p = "pages-" + uuid.uuid4().hex[:6]
    roots = {}
    for name, cell in [
        ("2m", {"VCPU": 4, "MEMORY_MB": 512, "CUSTOM_MEMORY_PAGE_2048KB": 1024}),
        ("1g", {"VCPU": 4, "MEMORY_MB": 512, "CUSTOM_MEMORY_PAGE_1048576KB": 2}),
        ("small-only", {"VCPU": 4, "MEMORY_MB": 8192}),
    ]:
        roots[placement.host("%s-%s" % (p, name), [cell])] = name
    large = build(manager, {"hw:mem_page_size": "large"}, vcpus=2, memory_mb=2048)
    assert placement.candidates(large, roots) == {"2m", "1g"}
    any_size = build(manager, {"hw:mem_page_size": "any"}, vcpus=2, memory_mb=2048)
    assert placement.candidates(any_size, roots) == {"2m", "1g", "small-only"}
    sized = build(manager, {"hw:mem_page_size": "2MB"}, vcpus=2, memory_mb=2048)
    assert placement.candidates(sized, roots) == {"2m"}


@pytest.mark.parametrize("policy,expected", [
    ("required", {"pf-on-cell0"}),
    ("legacy", {"pf-on-cell0"}),
    ("preferred", {"pf-on-cell0", "pf-on-cell1"}),
])
def test_sriov_port_numa_affinity(placement, manager, policy, expected):
    p = "sriov-%s-%s" % (policy, uuid.uuid4().hex[:6])
    cells = [{"VCPU": 4, "MEMORY_MB": 4096}, {"VCPU": 1, "MEMORY_MB": 1024}]
    roots = {
        placement.host(p + "-a", cells, pfs=[(0, "physnet1", 4)]): "pf-on-cell0",
        placement.host(p + "-b", cells, pfs=[(1, "physnet1", 4)]): "pf-on-cell1",
        placement.host(p + "-c", cells, pfs=[(0, "physnet2", 4)]): "wrong-physnet",
    }
    spec = build(manager, {"hw:numa_nodes": "1", "hw:pci_numa_affinity_policy": policy},
                 vcpus=2, memory_mb=2048,
                 ports=[{"vnic_type": "direct", "physnet": "physnet1",
                         "min_kbps_egress": 1000}])
    assert placement.candidates(spec, roots) == expected


def test_vgpu_required_affinity_with_two_guest_nodes(placement, manager):
    p = "vgpu-" + uuid.uuid4().hex[:6]
    cells = [{"VCPU": 2, "MEMORY_MB": 2048}, {"VCPU": 2, "MEMORY_MB": 2048}]
    roots = {
        placement.host(p + "-a", cells, gpus=[(1, "NVIDIA_35", 4)]): "gpu-on-cell1",
        placement.host(p + "-b", cells, gpus=[(0, "NVIDIA_36", 4)]): "other-type",
        placement.host(p + "-c", [{"VCPU": 4, "MEMORY_MB": 4096}],
                       gpus=[(0, "NVIDIA_35", 4)]): "one-cell-host",
    }
    spec = build(manager, {"hw:numa_nodes": "2", "resources:VGPU": "1",
                           "trait:CUSTOM_MDEV_TYPE_NVIDIA_35": "required",
                           "hw:pci_numa_affinity_policy": "required"},
                 vcpus=4, memory_mb=4096)
    assert placement.candidates(spec, roots) == {"gpu-on-cell1"}


def test_shared_storage_aggregate(placement):
    p = "shared-" + uuid.uuid4().hex[:6]
    agg, other = str(uuid.uuid4()), str(uuid.uuid4())
    placement.provider(p + "-nfs", inventory={"DISK_GB": 1000},
                       traits=("MISC_SHARES_VIA_AGGREGATE",), aggregates=(agg,))
    placement.provider(p + "-nfs2", inventory={"DISK_GB": 1000},
                       traits=("MISC_SHARES_VIA_AGGREGATE",), aggregates=(other,))
    cells = [{"VCPU": 4, "MEMORY_MB": 4096}]
    roots = {
        placement.host(p + "-a", cells, disk_gb=0, aggregates=(agg,)): "in-aggregate",
        placement.host(p + "-b", cells, disk_gb=0, aggregates=(other,)): "other-aggregate",
        placement.host(p + "-c", cells, disk_gb=0): "no-storage",
    }
    spec = build(make_manager(shared_aggregate=agg), {}, vcpus=2, memory_mb=2048,
                 root_gb=20)
    assert placement.candidates(spec, roots) == {"in-aggregate"}
