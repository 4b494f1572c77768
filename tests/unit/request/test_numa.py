"""The numa plugin's keys: nova's syntax, rules and messages."""

from __future__ import annotations

import pytest

from compute_plugins.scheduler.query import preview
from tests.unit.request.conftest import build, problems


def group_of(alternative, suffix):
    return next(g for g in alternative.groups if g.requester_id == suffix)


def numa(spec):
    return spec.request("numa")


def rules_of(found):
    return {(p.key, p.rule) for p in found}


def assert_problem(found, key, text):
    assert any(p.key == key and text in p.rule for p in found), found


# -- valid --------------------------------------------------------------------

def test_floating_guest_has_no_topology(manager):
    req = numa(build(manager))
    assert req.cells == () and req.cpu_policy is None


@pytest.mark.parametrize("policy", ["shared", "dedicated", "mixed"])
def test_cpu_policy(manager, policy):
    specs = {"hw:cpu_policy": policy}
    if policy == "mixed":
        specs["hw:cpu_dedicated_mask"] = "0-1"
    req = numa(build(manager, specs))
    assert req.cpu_policy == policy
    if policy == "dedicated":
        assert req.cells[0].pcpus == frozenset(range(4))
    elif policy == "mixed":
        assert req.cells[0].pcpus == {0, 1} and req.cells[0].cpus == {2, 3}
    else:
        assert req.cells == ()


def test_dedicated_mask_with_exclusion(manager):
    req = numa(build(manager, {"hw:cpu_policy": "mixed",
                               "hw:cpu_dedicated_mask": "^0"}))
    assert req.cells[0].pcpus == {1, 2, 3}


@pytest.mark.parametrize("thread", ["prefer", "isolate", "require"])
def test_thread_policy(manager, thread):
    spec = build(manager, {"hw:cpu_policy": "dedicated",
                           "hw:cpu_thread_policy": thread})
    assert numa(spec).cpu_thread_policy == thread
    root = preview(spec).alternatives[0]
    if thread == "isolate":
        assert "HW_CPU_HYPERTHREADING" in root.root_forbidden
    elif thread == "require":
        assert "HW_CPU_HYPERTHREADING" in root.root_required


def test_emulator_threads_isolate_adds_a_pcpu(manager):
    spec = build(manager, {"hw:cpu_policy": "dedicated",
                           "hw:emulator_threads_policy": "isolate"})
    assert numa(spec).extra_pcpus == 1
    group = group_of(preview(spec).alternatives[0], "_NUMA0")
    assert group.resources["PCPU"] == 5


def test_numa_nodes_auto(manager):
    req = numa(build(manager, {"hw:numa_nodes": "2"}))
    assert [(c.cpus, c.memory_mb) for c in req.cells] == [
        ({0, 1}, 2048), ({2, 3}, 2048)]


def test_numa_nodes_manual(manager):
    req = numa(build(manager, {"hw:numa_nodes": "2", "hw:numa_cpus.0": "0",
                               "hw:numa_cpus.1": "1-3", "hw:numa_mem.0": "1024",
                               "hw:numa_mem.1": "3072"}))
    assert [(c.cpus, c.memory_mb) for c in req.cells] == [
        ({0}, 1024), ({1, 2, 3}, 3072)]


def test_image_numa_properties(manager):
    req = numa(build(manager, image={"hw_numa_nodes": 2, "hw_cpu_policy": "dedicated"}))
    assert len(req.cells) == 2 and req.cpu_policy == "dedicated"


@pytest.mark.parametrize("value,alias,size", [
    ("small", "small", None), ("large", "large", None), ("any", "any", None),
    ("2048", None, 2048), ("2MB", None, 2048), ("1GB", None, 1048576),
    # nova keeps an explicit size: 4 KiB is the small pages only on a host
    # whose small pages are 4 KiB (test_plugin: ..._hosts_smallest_page)
    ("4", None, 4), ("64KiB", None, 64)])
def test_mem_page_size(manager, value, alias, size):
    req = numa(build(manager, {"hw:mem_page_size": value}))
    assert (req.mem_page_size, req.page_size_kb) == (alias, size)
    assert len(req.cells) == 1


def test_image_page_size_allowed_against_large(manager):
    req = numa(build(manager, {"hw:mem_page_size": "large"},
                     image={"hw_mem_page_size": "2048"}))
    assert req.page_size_kb == 2048


@pytest.mark.parametrize("size,order", [
    ("large", ["CUSTOM_MEMORY_PAGE_1048576KB", "CUSTOM_MEMORY_PAGE_2048KB"]),
    ("any", ["CUSTOM_MEMORY_PAGE_1048576KB", "CUSTOM_MEMORY_PAGE_2048KB", "MEMORY_MB"]),
])
def test_largest_page_size_first(manager, size, order):
    spec = build(manager, {"hw:mem_page_size": size}, vcpus=2, memory_mb=2048)
    got = [next(rc for rc in group_of(a, "_NUMA0").resources if "MEM" in rc)
           for a in preview(spec).alternatives]
    assert got == order


@pytest.mark.parametrize("size,order", [
    ("4", ["MEMORY_MB"]), ("16", ["MEMORY_MB"]),
    ("64", ["MEMORY_MB", "CUSTOM_MEMORY_PAGE_64KB"])])
def test_a_base_page_size_asks_small_pages_first(manager, size, order):
    """4, 16 or 64 KiB are some host's small pages (MEMORY_MB); 64 KiB is a
    huge page of 4 KiB-page aarch64 hosts too. The fit checks the cell."""
    spec = build(manager, {"hw:mem_page_size": size}, vcpus=2, memory_mb=2048)
    got = [next(rc for rc in group_of(a, "_NUMA0").resources if "MEM" in rc)
           for a in preview(spec).alternatives]
    assert got == order


def test_pcpu_resources_means_dedicated(manager):
    req = numa(build(manager, {"resources:PCPU": "4"}))
    assert req.cpu_policy == "dedicated"


def test_realtime_with_mask(manager):
    req = numa(build(manager, {"hw:cpu_policy": "dedicated", "hw:cpu_realtime": "yes",
                               "hw:cpu_realtime_mask": "^0"}))
    assert req.realtime_cpus == {1, 2, 3}


def test_nova_keys_no_plugin_schedules_are_accepted(manager):
    """nova's guest-shape keys that do not affect scheduling are kept for
    the driver and change neither the NUMA request nor the query; a key
    nova does not know in the same namespace is refused."""
    keys = {"hw:hide_hypervisor_id": "true", "hw:watchdog_action": "reset"}
    spec = build(manager, keys)
    plain = build(manager, {})
    assert dict(spec.flavor.extra_specs) == keys
    assert numa(spec) == numa(plain)
    assert preview(spec) == preview(plain)
    # hw:cpu_sockets shapes the guest (<cpu><topology>), not the query
    spec = build(manager, {"hw:cpu_sockets": "2"})
    assert numa(spec).cpu_topology == (2, 2, 1)
    assert preview(spec) == preview(plain)
    assert_problem(problems(manager, {"hw:cpu_sokets": "2"}), "hw:cpu_sokets",
                   "does not appear to be a valid extra spec")


def test_a_huge_vcpu_count_stays_a_count(manager):
    """10^8 vCPUs without pinning is a number in the spec and in the query,
    never a set of numbered guest CPUs; numbering that many is refused."""
    spec = build(manager, {}, vcpus=100000000, memory_mb=4096)
    assert [[dict(g.resources) for g in alt.groups]
            for alt in preview(spec).alternatives] == [
        [{"VCPU": 100000000, "MEMORY_MB": 4096}],
        [{"VCPU": 50000000, "MEMORY_MB": 2048}, {"VCPU": 50000000, "MEMORY_MB": 2048}]]
    req = numa(spec)
    assert (req.vcpus, req.cells, req.realtime_cpus) == (100000000, (), frozenset())
    # what travels to the host is a count, not 10^8 CPU ids
    assert len(spec.to_json()) < 4096
    for specs, key in [({"hw:cpu_policy": "dedicated"}, "vcpus"),
                       ({"hw:numa_nodes": "2"}, "vcpus"),
                       ({"hw:cpu_policy": "dedicated", "hw:cpu_realtime": "yes"},
                        "hw:cpu_realtime")]:
        assert_problem(problems(manager, specs, vcpus=100000000), key,
                       "at most 65536 vCPUs")


# -- invalid --------------------------------------------------------------------

@pytest.mark.parametrize("specs,key,text", [
    ({"hw:cpu_policy": "pinned"}, "hw:cpu_policy",
     "Validation failed; 'pinned' is not one of: dedicated, shared, mixed."),
    ({"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "never"},
     "hw:cpu_thread_policy", "is not one of: prefer, isolate, require"),
    ({"hw:emulator_threads_policy": "nope"}, "hw:emulator_threads_policy",
     "is not one of: share, isolate"),
    ({"hw:numa_nodes": "0"}, "hw:numa_nodes", "less than the min value of '1'"),
    ({"hw:numa_nodes": "two"}, "hw:numa_nodes", "is not a valid integer value"),
    ({"hw:numa_nodes": "3"}, "hw:numa_nodes", "cannot be evenly distributed"),
    ({"hw:mem_page_size": "huge"}, "hw:mem_page_size", "is not of the format"),
    ({"hw:mem_page_size": "2M"}, "hw:mem_page_size", "Invalid memory page size '2M'"),
    ({"hw:cpu_thread_policy": "isolate"}, "hw:cpu_thread_policy",
     "Cannot set cpu thread pinning policy in a non dedicated cpu pinning policy"),
    ({"hw:emulator_threads_policy": "isolate"}, "hw:emulator_threads_policy",
     "An isolated CPU emulator threads option requires a dedicated CPU policy"),
    ({"hw:cpu_dedicated_mask": "0"}, "hw:cpu_dedicated_mask",
     "Cannot specify 'hw:cpu_dedicated_mask' without the 'mixed' policy."),
    ({"hw:cpu_policy": "mixed"}, "hw:cpu_dedicated_mask",
     "Dedicated CPU set can be specified from either"),
    ({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0-3"},
     "hw:cpu_dedicated_mask", "Mixed instance must have at least 1 pinned vCPU"),
    ({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0,7"},
     "hw:cpu_dedicated_mask", "not a subset of vCPUs in the flavor"),
    ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-1"}, "hw:numa_nodes",
     "CPU and memory allocation must be provided for all NUMA nodes"),
    ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-2", "hw:numa_cpus.1": "2-3",
      "hw:numa_mem.0": "2048", "hw:numa_mem.1": "2048"}, "hw:numa_cpus.1",
     "CPU number 2 is assigned to two nodes"),
    ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-1", "hw:numa_cpus.1": "2-5",
      "hw:numa_mem.0": "2048", "hw:numa_mem.1": "2048"}, "hw:numa_cpus.1",
     "CPU number 4 is larger than max 3"),
    ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0", "hw:numa_cpus.1": "1",
      "hw:numa_mem.0": "2048", "hw:numa_mem.1": "2048"}, "hw:numa_cpus.N",
     "CPU number 2,3 is not assigned to any node"),
    ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-1", "hw:numa_cpus.1": "2-3",
      "hw:numa_mem.0": "2048", "hw:numa_mem.1": "1024"}, "hw:numa_mem.N",
     "3072 MB of memory assigned, but expected 4096 MB"),
    ({"hw:numa_cpus.1": "0-3", "hw:numa_mem.1": "4096"}, "hw:numa_cpus.N",
     "must be provided for all NUMA nodes"),
    ({"hw:cpu_policy": "dedicated", "resources:PCPU": "4"}, "resources:PCPU",
     "It is not possible to use the 'resources:VCPU' or 'resources:PCPU'"),
    ({"resources:PCPU": "2"}, "resources:PCPU", "There is a mismatch between"),
    ({"resources:PCPU": "4", "resources:VCPU": "4"}, "resources:PCPU",
     "It is not possible to specify both"),
    ({"resources1:VCPU": "2"}, "resources1:VCPU", "use hw:numa_nodes"),
    ({"hw:cpu_realtime": "true"}, "hw:cpu_realtime",
     "Use of realtime CPUs requires either one or more non-realtime"),
    ({"hw:cpu_realtime": "maybe"}, "hw:cpu_realtime", "not a valid boolean-like"),
    ({"hw:numa_bogus": "1"}, "hw:numa_bogus",
     "Validation failed; extra spec 'hw:numa_bogus' does not appear to be a "
     "valid extra spec."),
])
def test_invalid_flavor(manager, specs, key, text):
    assert_problem(problems(manager, specs), key, text)


def test_memory_not_a_multiple_of_the_page_size(manager):
    found = problems(manager, {"hw:mem_page_size": "1GB", "hw:numa_nodes": "2"},
                     memory_mb=3072)
    assert_problem(found, "hw:mem_page_size", "not a multiple of the page size")


@pytest.mark.parametrize("specs,memory", [
    ({"hw:mem_page_size": "large"}, 513),
    ({"hw:mem_page_size": "large", "hw:numa_nodes": "2"}, 1026),
    ({"hw:mem_page_size": "1GB"}, 1536),
])
def test_memory_no_page_size_divides_is_a_problem(manager, specs, memory):
    assert_problem(problems(manager, specs, vcpus=2, memory_mb=memory),
                   "hw:mem_page_size", "is not a multiple of")


def test_numa_nodes_bounded(manager):
    assert_problem(problems(manager, {"hw:numa_nodes": "129"}),
                   "hw:numa_nodes", "max value of '128'")


@pytest.mark.parametrize("specs,key", [
    ({"hw:numa_cpus." + "1" * 5000: "0"}, "hw:numa_cpus." + "1" * 5000),
    ({"hw:mem_page_size": "1" * 5000}, "hw:mem_page_size"),
    ({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "1" * 5000},
     "hw:cpu_dedicated_mask"),
    ({"hw:numa_nodes": "1" * 5000}, "hw:numa_nodes"),
])
def test_thousands_of_digits_are_problems(manager, specs, key):
    assert_problem(problems(manager, specs), key, "")


def test_cell_maps_without_numa_nodes(manager):
    assert_problem(problems(manager, {
        "hw:numa_cpus.0": "0-1", "hw:numa_cpus.1": "2-3", "hw:numa_mem.0": "2048",
        "hw:numa_mem.1": "2048"}), "hw:numa_cpus.N", "set hw:numa_nodes")
    # dedicated: one node (nova's nodes = nodes or 1), so two maps are wrong
    assert_problem(problems(manager, {
        "hw:cpu_policy": "dedicated", "hw:numa_cpus.0": "0-1", "hw:numa_cpus.1": "2-3",
        "hw:numa_mem.0": "2048", "hw:numa_mem.1": "2048"}), "hw:numa_nodes",
        "must be provided for all NUMA nodes")


def test_resources_vcpu_zero_is_refused(manager):
    assert_problem(problems(manager, {"resources:VCPU": "0"}), "resources:VCPU",
                   "not supported")


@pytest.mark.parametrize("specs,image,key,text", [
    ({"hw:cpu_policy": "shared"}, {"hw_cpu_policy": "dedicated"}, "hw_cpu_policy",
     "Image property 'hw_cpu_policy' is not permitted to override CPU pinning "
     "policy set against the flavor"),
    ({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0"},
     {"hw_cpu_policy": "dedicated"}, "hw_cpu_policy", "not permitted to override"),
    ({}, {"hw_cpu_policy": "bogus"}, "hw_cpu_policy",
     "CPU policy requested from 'image properties' is invalid, given: 'bogus'"),
    ({"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate"},
     {"hw_cpu_thread_policy": "require"}, "hw_cpu_thread_policy",
     "Image property 'hw_cpu_thread_policy' is not permitted to override"),
    ({"hw:numa_nodes": "2"}, {"hw_numa_nodes": "1"}, "hw_numa_nodes",
     "Image property 'hw_numa_nodes' is not permitted to override NUMA"),
    ({}, {"hw_numa_nodes": "0"}, "hw_numa_nodes",
     "The property 'numa_nodes' cannot be '0'. It must be a number greater than 0"),
    ({}, {"hw_mem_page_size": "large"}, "hw_mem_page_size",
     "Page size large forbidden against '<empty>'"),
    ({"hw:mem_page_size": "small"}, {"hw_mem_page_size": "large"},
     "hw_mem_page_size", "Page size large forbidden against 'small'"),
    ({"hw:numa_nodes": "1", "hw:numa_cpus.0": "0-3", "hw:numa_mem.0": "4096"},
     {"hw_numa_cpus.0": "0-3", "hw_numa_mem.0": "4096"}, "hw_numa_cpus",
     "Image property 'hw_numa_cpus' is not permitted to override NUMA"),
])
def test_invalid_flavor_image(manager, specs, image, key, text):
    assert_problem(problems(manager, specs, image=image), key, text)


def test_one_error_lists_every_problem(manager):
    found = problems(manager, {"hw:cpu_policy": "pinned", "hw:numa_nodes": "x",
                               "hw:wat": "1", "resources:VGPU": "-1"},
                     image={"hw_cpu_thread_policy": "bad"})
    keys = {p.key for p in found}
    assert {"hw:cpu_policy", "hw:numa_nodes", "hw:wat", "resources:VGPU",
            "hw_cpu_thread_policy"} <= keys
    for problem in found:
        assert problem.rule and problem.source in ("flavor", "image")


# -- hw:locked_memory and the guest CPU topology (resources.numa.options) -----


def test_locked_memory_needs_a_page_size_as_in_nova(manager):
    assert_problem(problems(manager, {"hw:locked_memory": "true"}),
                   "hw:locked_memory", "forbidden when mem_page_size is not set")
    assert numa(build(manager, {"hw:locked_memory": "true",
                                "hw:mem_page_size": "small"})).locked_memory
    assert not numa(build(manager, {"hw:locked_memory": "false"})).locked_memory
    assert_problem(problems(manager, {"hw:locked_memory": "true",
                                      "hw:mem_page_size": "small"},
                            image={"hw_locked_memory": False}),
                   "hw_locked_memory", "conflict")


def test_cpu_topology_limits_are_checked_as_in_nova(manager):
    assert numa(build(manager, {"hw:cpu_max_sockets": "1"})).cpu_topology == (
        1, 4, 1)
    assert numa(build(manager, {"hw:cpu_threads": "2"})).cpu_topology == (2, 1, 2)
    assert_problem(problems(manager, {"hw:cpu_max_sockets": "1",
                                      "hw:cpu_max_cores": "1",
                                      "hw:cpu_max_threads": "2"}),
                   "hw:cpu_max_sockets", "Requested vCPU limits 1:1:2 are "
                   "impossible to satisfy for vcpus count 4")
    assert_problem(problems(manager, {"hw:cpu_max_sockets": "2"},
                            image={"hw_cpu_max_sockets": 4}),
                   "hw_cpu_max_sockets", "exceeds the limits of the flavor")
    assert_problem(problems(manager, {"hw:cpu_sockets": "x"}),
                   "hw:cpu_sockets", "not a valid")


@pytest.mark.parametrize("flavor_specs, image, key, source, value", [
    # the image's limits alone make 4 vCPUs impossible: the image's key
    ({}, {"hw_cpu_max_sockets": 1, "hw_cpu_max_cores": 1, "hw_cpu_max_threads": 1},
     "hw_cpu_max_sockets", "image", 1),
    # the flavor's threads and the image's sockets and cores: the image's
    ({"hw:cpu_max_threads": "1"}, {"hw_cpu_max_sockets": 1, "hw_cpu_max_cores": 2},
     "hw_cpu_max_sockets", "image", 1),
    # the flavor's alone
    ({"hw:cpu_max_sockets": "1", "hw:cpu_max_cores": "1", "hw:cpu_max_threads": "3"},
     None, "hw:cpu_max_sockets", "flavor", "1"),
    # the image lowers the flavor's cores beyond it: the image's cores
    ({"hw:cpu_max_cores": "2"}, {"hw_cpu_max_cores": 4},
     "hw_cpu_max_cores", "image", 4),
    # the image's preferred threads exceed the flavor's limit: its threads
    ({"hw:cpu_max_threads": "1"}, {"hw_cpu_threads": 2},
     "hw_cpu_threads", "image", 2),
])
def test_cpu_topology_problems_name_the_key_that_set_them(
        manager, flavor_specs, image, key, source, value):
    """Each topology problem names the flavor or image key (and value) that
    makes it, where the user set it: an image's impossible limits were
    said of the flavor's hw:cpu_max_sockets, which the flavor did not set."""
    found = problems(manager, flavor_specs, image=image)
    assert [(p.source, p.key, p.value) for p in found] == [(source, key, value)], found
