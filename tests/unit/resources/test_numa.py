"""The numa plugin: cells, CPU sets, memory, huge pages, bad config."""

from __future__ import annotations

import dataclasses

import pytest

from compute_plugins.exception import ComputePluginsError, ConfigError
from compute_plugins.plugin.devices import InvalidOptionValue
from resources.numa import InvalidCPUSet, NUMAPlugin, page_resource_class
from tests.unit.resources.helpers import (
    GIB_KB,
    NODE,
    cell,
    host,
    manager,
    record,
    totals,
    update,
)

TWO_CELLS = [cell(0, range(0, 4), memory_gb=4), cell(1, range(4, 8), 8)]


def contribs(conf, info):
    plugin = NUMAPlugin(conf)
    return {c.name: c for c in plugin.provider_contributions(
        plugin.discover(info), NODE)}


def test_every_cpu_is_vcpu_by_default(conf):
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    tree = update(manager(conf, ["numa"]), host(TWO_CELLS))
    assert totals(tree) == {
        NODE: {},
        "node1_NUMA0": {"VCPU": 4, "MEMORY_MB": 4096},
        "node1_NUMA1": {"VCPU": 4, "MEMORY_MB": 8192},
    }
    data = tree.data("node1_NUMA1")
    assert data.traits == {"HW_NUMA_ROOT"}
    assert data.parent_uuid == tree.data(NODE).uuid
    assert data.inventory["VCPU"] == record(4, 4.0)
    # NOTE: reserved is always sent for MEMORY_MB, 0 included (nova).
    assert data.inventory["MEMORY_MB"] == record(8192, 1.0, 0)


def test_dedicated_and_shared_sets_split_cpus_per_cell(conf):
    conf.set_override("cpu_dedicated_set", "2-7,^5", "compute")
    conf.set_override("cpu_shared_set", "0-1,5", "compute")
    conf.set_override("cpu_allocation_ratio", 16.0, "compute")
    conf.set_override("ram_allocation_ratio", 1.5, "compute")
    got = contribs(conf, host(TWO_CELLS))
    assert got["node1_NUMA0"].inventory["PCPU"] == record(2)
    assert got["node1_NUMA0"].inventory["VCPU"] == record(2, 16.0)
    assert got["node1_NUMA1"].inventory["PCPU"] == record(3)
    assert got["node1_NUMA1"].inventory["VCPU"] == record(1, 16.0)
    assert got["node1_NUMA1"].inventory["MEMORY_MB"]["allocation_ratio"] == 1.5


def test_only_dedicated_set_means_no_vcpu(conf):
    conf.set_override("cpu_dedicated_set", "0-3", "compute")
    got = contribs(conf, host(TWO_CELLS))
    assert set(got["node1_NUMA0"].inventory) == {"PCPU", "MEMORY_MB"}
    # NOTE: no CPU of cell 1 is in a set: no CPU inventory (total 0 is
    # refused by Placement), but the cell is still a provider.
    assert set(got["node1_NUMA1"].inventory) == {"MEMORY_MB"}


@pytest.mark.parametrize("option,value,rule", [
    ("cpu_dedicated_set", "0-9", "CPU(s) 8-9 are not"),
    ("cpu_shared_set", "64", "CPU(s) 64 are not"),
    ("cpu_dedicated_set", "0-3,^0-3", "no CPUs available"),
    ("cpu_shared_set", "3-1", "Invalid range expression '3-1'"),
    ("cpu_dedicated_set", "a", "Invalid inclusion expression 'a'"),
])
def test_bad_cpu_set_names_option_value_and_rule(conf, option, value, rule):
    conf.set_override(option, value, "compute")
    with pytest.raises(InvalidCPUSet) as err:
        NUMAPlugin(conf).discover(host(TWO_CELLS))
    assert isinstance(err.value, ConfigError)
    assert err.value.option == "[compute] " + option
    assert err.value.value == value
    assert "[compute] %s" % option in str(err.value)
    assert repr(value) in str(err.value)
    assert rule in str(err.value)


def test_cpu_in_both_sets_is_refused(conf):
    conf.set_override("cpu_dedicated_set", "0-4", "compute")
    conf.set_override("cpu_shared_set", "4-7", "compute")
    with pytest.raises(InvalidCPUSet, match="must be disjoint; CPU.s. 4 are"):
        NUMAPlugin(conf).discover(host(TWO_CELLS))


def test_reserved_memory_fills_cell0_then_the_next(conf):
    conf.set_override("reserved_host_memory_mb", 5000, "compute")
    got = contribs(conf, host(TWO_CELLS))
    assert got["node1_NUMA0"].inventory["MEMORY_MB"]["reserved"] == 4096
    assert got["node1_NUMA1"].inventory["MEMORY_MB"]["reserved"] == 904


def test_reserved_memory_beyond_host_is_capped(conf, caplog):
    conf.set_override("reserved_host_memory_mb", 20000, "compute")
    got = contribs(conf, host(TWO_CELLS))
    assert got["node1_NUMA0"].inventory["MEMORY_MB"]["reserved"] == 4096
    assert got["node1_NUMA1"].inventory["MEMORY_MB"]["reserved"] == 8192
    assert "7712 MiB could not be reserved" in caplog.text


def test_huge_pages_are_their_own_inventory(conf):
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    # 8 GiB: 2 GiB in 1 GiB pages, 1 GiB in 2 MiB pages, 5 GiB in 4 KiB.
    pages = [(4, 5 * GIB_KB // 4), (2048, 512), (1048576, 2), (64, 0)]
    got = contribs(conf, host([cell(0, range(4), 8, pages)]))
    inventory = got["node1_NUMA0"].inventory
    assert page_resource_class(2048) == "CUSTOM_MEMORY_PAGE_2048KB"
    assert dict(inventory["CUSTOM_MEMORY_PAGE_2048KB"]) == record(512)
    assert dict(inventory["CUSTOM_MEMORY_PAGE_1048576KB"]) == record(2)
    assert "CUSTOM_MEMORY_PAGE_64KB" not in inventory  # no page of that size
    assert inventory["MEMORY_MB"]["total"] == 5 * 1024


def test_one_bare_cell_takes_host_memory(conf):
    """caps-qemu-kvm.xml: one cell, 4 bare CPUs, no memory in the cell."""
    conf.set_override("reserved_host_memory_mb", 512, "compute")
    info = host([cell(0, range(4), memory_gb=None)], memory_kb=2 * GIB_KB)
    got = contribs(conf, info)
    assert got["node1_NUMA0"].inventory["VCPU"]["total"] == 4
    assert got["node1_NUMA0"].inventory["MEMORY_MB"] == record(2048, 1.0, 512)


def test_host_without_cells_gets_one_memory_cell(conf):
    got = contribs(conf, host([], memory_kb=GIB_KB))
    assert list(got) == ["node1_NUMA0"]
    assert set(got["node1_NUMA0"].inventory) == {"MEMORY_MB"}


def test_host_without_numa_data_gets_no_provider(conf):
    assert contribs(conf, host([])) == {}


def test_cpu_set_on_host_without_cpus_is_an_error(conf):
    conf.set_override("cpu_shared_set", "0", "compute")
    with pytest.raises(InvalidCPUSet, match="host CPUs: none"):
        NUMAPlugin(conf).discover(host([], memory_kb=GIB_KB))


def test_uuids_are_stable_and_distinct(conf):
    first = contribs(conf, host(TWO_CELLS))
    again = contribs(conf, host(TWO_CELLS))
    assert {c.uuid for c in first.values()} == {c.uuid for c in again.values()}
    # uuid5 of "node1/numa/<cell>": the same on every run and release.
    assert first["node1_NUMA0"].uuid == "bafde3bd-b62a-512d-97ab-72f4a91d521b"
    assert first["node1_NUMA1"].uuid == "d9e6c086-ad1b-513b-8de8-b559dc7b63d3"


def test_bad_config_degrades_only_numa(conf):
    conf.set_override("cpu_dedicated_set", "99", "compute")
    mgr = manager(conf, ["numa", "disk"])
    update(mgr, host(TWO_CELLS))
    assert mgr.degraded
    assert mgr.failures["numa"].stage == "discover"
    assert "[compute] cpu_dedicated_set" in mgr.failures["numa"].reason
    assert issubclass(InvalidCPUSet, InvalidOptionValue)
    assert issubclass(InvalidCPUSet, ComputePluginsError)


def _with(info, **fields):
    return dataclasses.replace(info, **fields)


def test_offline_cpus_are_not_offered(conf):
    info = _with(host(TWO_CELLS), online_cpus=frozenset({0, 1, 4, 5, 6}))
    got = contribs(conf, info)
    assert got["node1_NUMA0"].inventory["VCPU"]["total"] == 2
    assert got["node1_NUMA1"].inventory["VCPU"]["total"] == 3


def test_offline_cpu_in_a_set_is_refused(conf):
    conf.set_override("cpu_dedicated_set", "0-1", "compute")
    info = _with(host(TWO_CELLS), online_cpus=frozenset({0, 2, 3}))
    with pytest.raises(InvalidCPUSet, match="CPU\\(s\\) 1 are offline"):
        NUMAPlugin(conf).discover(info)


@pytest.mark.parametrize("online,count,vcpus", [
    (frozenset({0, 1, 3}), 16, 3),
    (None, 6, 6),
])
def test_host_without_cells_gets_its_cpus(conf, online, count, vcpus):
    """A test-driver custom host (<cells num='0'>) still offers CPUs."""
    info = _with(host([], memory_kb=GIB_KB), online_cpus=online,
                 cpu_count=count)
    got = contribs(conf, info)
    assert got["node1_NUMA0"].inventory["VCPU"]["total"] == vcpus
    assert got["node1_NUMA0"].inventory["MEMORY_MB"]["total"] == 1024


def test_cell_whose_pools_are_all_larger_takes_its_smallest_as_small(conf):
    """nova's ``_get_smallest_pagesize``: a cell that lists no pool of the
    host's base page (4 KiB) has its smallest pool as its small pages."""
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    # 4 GiB: 2 GiB in 2 MiB pages, 1 GiB in 1 GiB pages, no 4 KiB pool.
    info = host([cell(0, range(1), 4, [(2048, 1024), (1048576, 1)])])
    inventory = contribs(conf, info)["node1_NUMA0"].inventory
    assert inventory["MEMORY_MB"]["total"] == 2048
    assert "CUSTOM_MEMORY_PAGE_2048KB" not in inventory
    assert inventory["CUSTOM_MEMORY_PAGE_1048576KB"]["total"] == 1


def test_base_page_size_of_the_host_is_used(conf):
    """On a 64 KiB-page host the 64 KiB pool is the base memory."""
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    info = _with(host([cell(0, range(1), 4, [(64, 3 * GIB_KB // 64),
                                             (524288, 2)])]),
                 base_page_kb=64)
    inventory = contribs(conf, info)["node1_NUMA0"].inventory
    assert inventory["MEMORY_MB"]["total"] == 3072
    assert set(inventory) == {"VCPU", "MEMORY_MB",
                              "CUSTOM_MEMORY_PAGE_524288KB"}


def test_zero_reserved_memory_is_sent(conf):
    """Lowering reserved_host_memory_mb to 0 clears it in Placement."""
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    got = contribs(conf, host(TWO_CELLS))
    assert got["node1_NUMA0"].inventory["MEMORY_MB"]["reserved"] == 0
    assert "reserved" not in got["node1_NUMA0"].inventory["VCPU"]


def test_page_count_above_placement_max_is_clamped(conf, caplog):
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    info = host([cell(0, range(1), 4, [(4, 10), (2048, 99999999999)])])
    inventory = contribs(conf, info)["node1_NUMA0"].inventory
    page = inventory["CUSTOM_MEMORY_PAGE_2048KB"]
    assert page["total"] == page["max_unit"] == 2147483647
    assert "above Placement's maximum" in caplog.text
