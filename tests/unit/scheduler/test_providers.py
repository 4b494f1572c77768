"""What the scheduler asks Placement: one filter per distinct group shape."""

from __future__ import annotations

import uuid

import pytest

from compute_plugins.scheduler import providers
from tests.unit.request.conftest import build, make_manager


@pytest.fixture(scope="module")
def manager():
    return make_manager()


def shapes(spec):
    root, needs = providers.needs(spec.groups)
    return root, needs, {s for n in needs for s in n.shapes}


def test_identical_guest_nodes_are_one_query(manager):
    spec = build(manager, {"hw:numa_nodes": "8", "hw:cpu_policy": "dedicated"},
                 vcpus=16, memory_mb=8192)
    root, needs, distinct = shapes(spec)
    assert len(needs) == 8 and len(distinct) == 1
    [shape] = distinct
    assert shape.short() == ("GET /resource_providers?resources=MEMORY_MB:1024,PCPU:2"
                             "&required=HW_NUMA_ROOT")
    assert root.forbidden == {"COMPUTE_STATUS_DISABLED"}


def test_floating_guest_asks_each_class_split(manager):
    spec = build(manager, {}, vcpus=4, memory_mb=4096, root_gb=10)
    _, needs, _ = shapes(spec)
    by_key = {n.key: n.shapes for n in needs}
    # Up to FLOATING_SPLIT cells may share the guest: a necessary share
    # per provider, each class on its own (Placement's unsuffixed group).
    assert set(by_key) == {("", "VCPU"), ("", "MEMORY_MB"), ("", "DISK_GB")}
    assert dict(by_key[("", "DISK_GB")][0].resources) == {"DISK_GB": 10}
    assert by_key[("", "VCPU")][0].resources["VCPU"] < 4


def test_page_size_choices_are_alternatives_and_root_traits_go_to_the_root(manager):
    spec = build(manager, {"hw:numa_nodes": "1", "hw:mem_page_size": "any",
                           "trait:HW_CPU_X86_AVX2": "required"},
                 vcpus=2, memory_mb=2048)
    root, needs, _ = shapes(spec)
    [need] = needs
    assert len(need.shapes) > 1
    assert {"MEMORY_MB"} <= {rc for s in need.shapes for rc in s.resources}
    assert root.required == {"HW_CPU_X86_AVX2"}
    assert all("HW_CPU_X86_AVX2" not in s.required for s in need.shapes)


def test_shared_storage_group_may_be_served_outside_the_tree():
    agg = str(uuid.uuid4())
    spec = build(make_manager(shared_aggregate=agg), {}, vcpus=2, memory_mb=1024,
                 root_gb=20)
    _, needs, _ = shapes(spec)
    [disk] = [n for n in needs if n.key == ("", "DISK_GB")]
    assert disk.shared_ok
    assert disk.shapes[0].member_of == ()
