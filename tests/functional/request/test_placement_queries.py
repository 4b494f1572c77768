"""Derived queries against real Placement (embedded, in-process).

Every host is built by the REAL plugins' provider code and synced by the
report client (:mod:`tests.functional.request.hosts`), so a trait or
resource class that drifts between the providers and the query fails here.
Each test asserts that the candidates, after
:func:`compute_plugins.scheduler.query.accept`, are exactly the hosts
that can serve the request; :func:`test_every_alternative_is_accepted_by_placement`
sends every alternative of random valid requests and expects no 400.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compute_plugins.placement import embedded
from compute_plugins.request.errors import RequestInputError, RequestValidationError
from compute_plugins.scheduler.query import preview
from tests.functional.request.hosts import HEADERS, Placement, cell
from tests.unit.request.conftest import build, make_manager

PF0 = "0000:5e:00.0"


@pytest.fixture(scope="module")
def placement():
    emb = embedded.EmbeddedPlacement("sqlite://").start()
    service = Placement(emb)
    service.define("CUSTOM_X", "CUSTOM_Y", "CUSTOM_Z", "CUSTOM_PHYSNET_PHYSNET2",
                   "CUSTOM_PCI_8086_0443", "CUSTOM_BLUE", "CUSTOM_BIG",
                   # NOTE: the a16 alias's "blue, big": nova keeps the blank
                   # (os_traits.normalize_name(" big"), as its translator)
                   "CUSTOM__BIG")
    yield service
    emb.close()


@pytest.fixture(scope="module")
def manager():
    return make_manager()


def set_root_traits(placement, root, traits):
    """An operator's traits on the root (kept by the plugins, nova's rule)."""
    url = placement.emb_url("/resource_providers/%s/traits" % root)
    have = placement.session.request(url, "GET", headers=HEADERS).json()
    for trait in traits:
        if trait.startswith("CUSTOM_"):
            placement.session.request(placement.emb_url("/traits/" + trait), "PUT",
                                      headers=HEADERS)
    placement.session.request(url, "PUT", headers=HEADERS, json={
        "resource_provider_generation": have["resource_provider_generation"],
        "traits": sorted(set(have["traits"]) | set(traits))})


def test_floating_guest_fits_where_no_single_cell_has_room(placement, manager):
    roots = {}
    for name, cells in [
        ("one-cell", [cell(4, 4096)]),
        ("cpu-here-mem-there", [cell(4, 1024), cell(1, 4096)]),
        ("split-evenly", [cell(2, 2048), cell(2, 2048)]),
        ("too-small", [cell(2, 2048), cell(1, 2048)]),
        ("disabled", [cell(8, 8192)]),
    ]:
        roots[placement.host(name, cells)] = name
    set_root_traits(placement, next(r for r, n in roots.items() if n == "disabled"),
                    ["COMPUTE_STATUS_DISABLED"])
    spec = build(manager, {}, vcpus=4, memory_mb=4096, root_gb=10)
    assert placement.candidates(spec, roots) == {
        "one-cell", "cpu-here-mem-there", "split-evenly"}


def test_unsuffixed_traits_and_aggregates_without_disk(placement, manager):
    """Reviewer's 400s: the unsuffixed group left without resources."""
    agg = str(uuid.uuid4())
    avx, plain = placement.host("avx", [cell(2, 2048), cell(2, 2048)], disk_gb=0), \
        placement.host("plain", [cell(4, 4096)], disk_gb=0)
    set_root_traits(placement, avx, ["HW_CPU_X86_AVX2"])
    url = placement.emb_url("/resource_providers/%s/aggregates" % avx)
    gen = placement.session.request(url, "GET", headers=HEADERS).json()
    placement.session.request(url, "PUT", headers=HEADERS, json={
        "resource_provider_generation": gen["resource_provider_generation"],
        "aggregates": [agg]})
    roots = {avx: "avx", plain: "plain"}
    for specs in ({"trait:HW_CPU_X86_AVX2": "required"},
                  {"trait:HW_CPU_X86_AVX2": "required", "hw:numa_nodes": "1"},
                  {"member_of": agg, "hw:numa_nodes": "2"},
                  {"member_of": agg}):
        spec = build(manager, specs, vcpus=2, memory_mb=2048)
        assert placement.candidates(spec, roots) == {"avx"}, specs
    spec = build(manager, {"trait:HW_CPU_X86_AVX2": "forbidden"}, vcpus=2,
                 memory_mb=2048)
    assert placement.candidates(spec, roots) == {"plain"}


def test_numa_guest_gets_one_host_cell_per_guest_node(placement, manager):
    roots = {}
    for name, cells, dedicated in [
        ("two-cells", [cell(2, 2048), cell(2, 2048)], "0-3"),
        ("one-big-cell", [cell(8, 8192)], "0-7"),
        ("one-short-cell", [cell(2, 2048), cell(1, 4096)], "0-2"),
        ("shared-cpus-only", [cell(4, 2048), cell(4, 2048)], None),
    ]:
        roots[placement.host(name, cells, dedicated=dedicated)] = name
    spec = build(manager, {"hw:numa_nodes": "2", "hw:cpu_policy": "dedicated"},
                 vcpus=4, memory_mb=4096)
    assert placement.candidates(spec, roots) == {"two-cells"}


def test_huge_pages_large_tries_each_size(placement, manager):
    roots = {}
    for name, pages in [("2m", {2048: 1024}), ("1g", {1048576: 2}),
                        ("small-only", {})]:
        roots[placement.host(name, [cell(4, 8192 if not pages else 512, pages)])] = name
    large = build(manager, {"hw:mem_page_size": "large"}, vcpus=2, memory_mb=2048)
    assert preview(large).alternatives[0].description.endswith(
        "CUSTOM_MEMORY_PAGE_1048576KB")  # nova: largest page size first
    assert placement.candidates(large, roots) == {"2m", "1g"}
    any_size = build(manager, {"hw:mem_page_size": "any"}, vcpus=2, memory_mb=2048)
    assert placement.candidates(any_size, roots) == {"2m", "1g", "small-only"}
    sized = build(manager, {"hw:mem_page_size": "2MB"}, vcpus=2, memory_mb=2048)
    assert placement.candidates(sized, roots) == {"2m"}
    # 1026 MiB: 2 MiB pages divide it, 1 GiB pages do not
    odd = build(manager, {"hw:mem_page_size": "large"}, vcpus=2, memory_mb=1026)
    assert placement.candidates(odd, roots) == {"2m"}


@pytest.mark.parametrize("policy,expected", [
    ("required", {"pf-on-cell0"}),
    ("legacy", {"pf-on-cell0", "pf-without-numa"}),
    ("preferred", {"pf-on-cell0", "pf-on-cell1", "pf-without-numa"}),
])
def test_sriov_port_numa_affinity(placement, manager, policy, expected):
    cells = [cell(4, 4096), cell(1, 1024)]
    roots = {
        placement.host("pf0", cells, pfs=((0, 4),)): "pf-on-cell0",
        placement.host("pf1", cells, pfs=((1, 4),)): "pf-on-cell1",
        placement.host("pfnone", cells, pfs=((None, 4),)): "pf-without-numa",
    }
    spec = build(manager, {"hw:numa_nodes": "1", "hw:pci_numa_affinity_policy": policy},
                 vcpus=2, memory_mb=2048,
                 ports=[{"vnic_type": "direct", "physnet": "physnet1",
                         "min_kbps_egress": 1000}])
    assert placement.candidates(spec, roots) == expected
    wrong = build(manager, {"hw:numa_nodes": "1"}, vcpus=2, memory_mb=2048,
                  ports=[{"vnic_type": "direct", "physnet": "physnet2"}])
    assert placement.candidates(wrong, roots) == set()


def test_two_ports_on_one_pf_with_two_guest_nodes(placement, manager):
    """group_policy=isolate would keep the two ports on different PFs."""
    roots = {
        placement.host("one-pf", [cell(2, 2048), cell(2, 2048)], pfs=((0, 8),)):
            "one-pf",
        placement.host("one-cell", [cell(4, 4096)], pfs=((0, 8),)): "one-cell",
    }
    ports = [{"vnic_type": "direct", "physnet": "physnet1"}] * 2
    for policy in ("legacy", "required"):
        spec = build(manager, {"hw:numa_nodes": "2",
                               "hw:pci_numa_affinity_policy": policy},
                     vcpus=2, memory_mb=2048, ports=ports)
        assert placement.candidates(spec, roots) == {"one-pf"}, policy
    spec = build(manager, {"hw:numa_nodes": "2", "group_policy": "isolate"},
                 vcpus=2, memory_mb=2048, ports=ports)
    assert placement.candidates(spec, roots) == set()  # the user's choice


def test_vgpu_required_affinity_with_two_guest_nodes(placement, manager):
    cells = [cell(2, 2048), cell(2, 2048)]
    roots = {
        placement.host("gpu1", cells, gpus=((1, "nvidia-35", 4),)): "gpu-on-cell1",
        placement.host("other", cells, gpus=((0, "nvidia-36", 4),)): "other-type",
        placement.host("onecell", [cell(4, 4096)], gpus=((0, "nvidia-35", 4),)):
            "one-cell-host",
    }
    spec = build(manager, {"hw:numa_nodes": "2", "resources:VGPU": "1",
                           "trait:CUSTOM_MDEV_TYPE_NVIDIA_35": "required",
                           "hw:pci_numa_affinity_policy": "required"},
                 vcpus=4, memory_mb=4096)
    assert placement.candidates(spec, roots) == {"gpu-on-cell1"}


def test_shared_storage_aggregate(placement):
    agg, other = str(uuid.uuid4()), str(uuid.uuid4())
    for name, aggregate in (("nfs", agg), ("nfs2", other)):
        rp = str(uuid.uuid4())
        s = placement.session
        s.request(placement.emb_url("/resource_providers"), "POST", headers=HEADERS,
                  json={"name": "%s-%s" % (name, rp[:6]), "uuid": rp})
        s.request(placement.emb_url("/resource_providers/%s/inventories" % rp), "PUT",
                  headers=HEADERS, json={"resource_provider_generation": 0,
                                         "inventories": {"DISK_GB": {"total": 1000}}})
        s.request(placement.emb_url("/resource_providers/%s/traits" % rp), "PUT",
                  headers=HEADERS, json={"resource_provider_generation": 1,
                                         "traits": ["MISC_SHARES_VIA_AGGREGATE"]})
        s.request(placement.emb_url("/resource_providers/%s/aggregates" % rp), "PUT",
                  headers=HEADERS, json={"resource_provider_generation": 2,
                                         "aggregates": [aggregate]})
    roots = {}
    for name, aggregate in (("in-aggregate", agg), ("other-aggregate", other),
                            ("no-storage", None)):
        root = placement.host(name, [cell(4, 4096)], disk_gb=0)
        if aggregate:
            url = placement.emb_url("/resource_providers/%s/aggregates" % root)
            gen = placement.session.request(url, "GET", headers=HEADERS).json()
            placement.session.request(url, "PUT", headers=HEADERS, json={
                "resource_provider_generation": gen["resource_provider_generation"],
                "aggregates": [aggregate]})
        roots[root] = name
    # NOTE: DISK_GB in the unsuffixed group, as nova asks it, whatever the
    # scheduler's own [disk] option: each root in an aggregate with a
    # sharing provider gets its DISK_GB from that provider.
    spec = build(make_manager(shared_aggregate=agg), {}, vcpus=2, memory_mb=2048,
                 root_gb=20)
    assert placement.candidates(spec, roots) == {"in-aggregate", "other-aggregate"}


# -- every alternative of random valid requests is a query Placement accepts --

AGG = "7a9bd3a0-3a3c-4a5e-9f7c-6a1f1e5b1c2d"
SPEC_CHOICES = {
    "hw:numa_nodes": ["1", "2"],
    "hw:cpu_policy": ["dedicated", "shared", "mixed"],
    "hw:cpu_dedicated_mask": ["0"],
    "hw:mem_page_size": ["large", "any", "small", "2MB"],
    "hw:pci_numa_affinity_policy": ["required", "legacy", "preferred", "socket"],
    "trait:HW_CPU_X86_AVX2": ["required", "forbidden"],
    "trait:CUSTOM_X": ["required"],
    "member_of": ["in:" + AGG, "!" + AGG],
    "resources1:CUSTOM_Z": ["0", "1"],
    "trait1:CUSTOM_Y": ["required", "forbidden"],
    "member_of1": [AGG],
    "resources2:VGPU": ["1"],
    "resources:VGPU": ["1"],
    "pci_passthrough:alias": ["qat:1", "a16:1"],
    "group_policy": ["none", "isolate"],
    "resources:DISK_GB": ["0"],
}


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=st.dictionaries(st.sampled_from(sorted(SPEC_CHOICES)), st.just(None),
                             max_size=6).flatmap(lambda keys: st.fixed_dictionaries(
                                 {k: st.sampled_from(SPEC_CHOICES[k]) for k in keys})),
       vcpus=st.sampled_from([2, 4]), memory=st.sampled_from([1024, 2048, 1026]),
       root_gb=st.sampled_from([0, 10]), ports=st.integers(0, 2),
       image_traits=st.booleans())
def test_every_alternative_is_accepted_by_placement(placement, manager, specs, vcpus,
                                                    memory, root_gb, ports,
                                                    image_traits):
    try:
        spec = build(manager, specs, vcpus=vcpus, memory_mb=memory, root_gb=root_gb,
                     image={"traits_required": ["CUSTOM_X"]} if image_traits else None,
                     ports=[{"vnic_type": "direct", "physnet": "physnet1"}] * ports)
    except (RequestValidationError, RequestInputError):
        return
    for alt in preview(spec).alternatives:
        placement.define_resource_classes(*(
            rc for group in alt.groups for rc in group.resources if rc.startswith("CUSTOM_")))
        placement.answer(alt)  # asserts 200
