"""Guests without NUMA topology: which cells hold their vCPUs and memory."""

from __future__ import annotations

import pytest

from compute_plugins.plugin.contract import Rejection
from compute_plugins.scheduler import query
from resources.numa.fit import fit, verify
from resources.numa.floating import split_evenly
from resources.numa.request import NUMAAssignment
from tests.unit.resources.numa_fit.helpers import cell, floating, state


def parts(got):
    return [(c.host_cell, c.shared_vcpus, c.memory_mb) for c in got.cells]


def fits(st, req, placement=None):
    got = fit(st, req, placement)
    assert isinstance(got, NUMAAssignment), got
    assert verify(st, req, got) is None
    assert got.emulator_threads == frozenset()
    assert all(not c.pinning and not c.held_cpus and c.page_size_kb is None
               for c in got.cells)
    return got


def two_cells(**kwargs):
    return state(cell(0, shared=range(4), memory_mb=2048, **kwargs),
                 cell(1, shared=range(4, 8), memory_mb=8192), cpu_ratio=1.0)


def test_on_one_cell_when_one_has_room():
    got = fits(two_cells(), floating(2, 1024))
    assert parts(got) == [(0, 2, 1024)]
    assert got.cells[0].shared_cpus == {0, 1, 2, 3}


def test_packs_onto_the_most_loaded_cell():
    st = state(cell(0, shared=range(4)), cell(1, shared=range(4, 8), load=2))
    assert parts(fits(st, floating(2, 1024))) == [(1, 2, 1024)]
    st = state(cell(0, shared=range(4)), cell(1, shared=range(4, 8), load=2),
               pack=False)
    assert parts(fits(st, floating(2, 1024))) == [(0, 2, 1024)]


def test_vcpus_on_one_cell_memory_on_another():
    st = state(cell(0, shared=range(4), memory_mb=1024),
               cell(1, shared=[4], memory_mb=8192), cpu_ratio=1.0)
    assert parts(fits(st, floating(4, 4096))) == [(0, 4, 0), (1, 0, 4096)]


def test_split_evenly_over_two_cells():
    st = state(cell(0, shared=range(2), memory_mb=3000),
               cell(1, shared=range(2, 4), memory_mb=3000), cpu_ratio=1.0)
    assert parts(fits(st, floating(3, 4001))) == [(0, 2, 2001), (1, 1, 2000)]


def test_no_room_anywhere_says_so():
    st = state(cell(0, shared=range(2), memory_mb=1024),
               cell(1, shared=range(2, 4), memory_mb=1024), cpu_ratio=1.0)
    got = fit(st, floating(8, 512), None)
    assert isinstance(got, Rejection)
    assert got.reason.startswith("no host cell has room for the guest's 8 vCPUs "
                                 "and 512 MiB (host cells 0-1 each have 2 shared "
                                 "CPUs, the guest has 8 shared vCPUs)")


def test_placement_one_cell():
    st = two_cells()
    got = fits(st, floating(2, 1024), {"": ["root", "uuid-1"]})
    assert parts(got) == [(1, 2, 1024)]
    got = fit(st, floating(2, 4096), {"": ["uuid-0"]})
    assert isinstance(got, Rejection) and got.provider == "uuid-0"
    assert "host cell 0 has 2048 MiB of small-page memory, the guest needs 4096" \
        in got.reason


def test_placement_two_cells_tries_both_ways():
    st = state(cell(0, shared=range(4), memory_mb=1024),
               cell(1, shared=[4], memory_mb=8192), cpu_ratio=1.0)
    for mapped in (["uuid-0", "uuid-1"], ["uuid-1", "uuid-0"]):
        got = fits(st, floating(4, 4096), {"": mapped})
        assert parts(got) == [(0, 4, 0), (1, 0, 4096)]
    got = fit(st, floating(4, 9000), {"": ["uuid-0", "uuid-1"]})
    assert isinstance(got, Rejection)
    assert "do not fit host cells 0 and 1, where Placement put them" in got.reason


def test_placement_split_groups():
    st = state(*(cell(i, shared=range(2 * i, 2 * i + 2), memory_mb=2048)
                 for i in range(3)), cpu_ratio=1.0)
    got = fits(st, floating(3, 3001), {"_SPLIT0": ["uuid-2"], "_SPLIT1": ["uuid-0"],
                                       "": ["root"]})
    assert parts(got) == [(2, 2, 1501), (0, 1, 1500)]


@pytest.mark.parametrize("mapping, text", [
    ({"": ["root"]}, "names 0 NUMA cells of this host"),
    ({"_SPLIT1": ["uuid-0"]}, "not a split the query asks"),
])
def test_placement_that_names_no_cell(mapping, text):
    got = fit(two_cells(), floating(), mapping)
    assert isinstance(got, Rejection) and text in got.reason


@pytest.mark.parametrize("amount", range(0, 11))
@pytest.mark.parametrize("count", [1, 2, 3])
def test_split_is_the_query_split(amount, count):
    assert split_evenly(amount, count) == query._split(amount, count)


def test_verify_rejects_a_changed_host_and_a_wrong_total():
    st = two_cells()
    got = fits(st, floating(2, 1024))
    busy = two_cells(used_mb=1500)
    problem = verify(busy, floating(2, 1024), got)
    assert problem is not None and problem.provider == "uuid-0"
    assert "host cell 0 has 548 MiB of small-page memory left" in problem.reason
    assert "the guest has 3 vCPUs" in verify(st, floating(3, 1024), got).reason
