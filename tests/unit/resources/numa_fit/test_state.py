"""The NUMA host state: built from the view minus the assignments in force."""

from __future__ import annotations

import json

import pytest

from compute_plugins.host.model import CPU, HostInfo, NUMACell, PagePool
from compute_plugins.plugin.names import provider_uuid
from compute_plugins.plugin.state import AssignmentConflict
from compute_plugins.request.types import FrozenMap
from resources.numa import NUMAPlugin
from resources.numa.request import CellAssignment, NUMAAssignment
from resources.numa.state import NUMAState
from tests.unit.resources.helpers import decoded, encoded, state_of

GIB_KB = 1024 * 1024
NODE = "node1"


def smt_host() -> HostInfo:
    """Two cells of 4 cores x 2 threads (siblings n, n+8 as on Intel), 8 GiB,
    of which 1 GiB in 2 MiB pages on cell 0."""
    cells = []
    for c in range(2):
        cpus = []
        for core in range(4):
            a = c * 4 + core
            b = a + 8
            cpus += [CPU(id=a, socket_id=c, core_id=core, siblings=frozenset({a, b})),
                     CPU(id=b, socket_id=c, core_id=core, siblings=frozenset({a, b}))]
        pages = [PagePool(4, 7 * GIB_KB // 4)]
        if c == 0:
            pages.append(PagePool(2048, 512))
        cells.append(NUMACell(id=c, cpus=tuple(cpus), memory_kb=8 * GIB_KB,
                              pages=tuple(pages)))
    return HostInfo(hostname=NODE, source="test", cells=tuple(cells))


@pytest.fixture
def plugin(conf):
    conf.set_override("cpu_dedicated_set", "0-3,8-11,4-6,12-14", "compute")
    conf.set_override("cpu_shared_set", "7,15", "compute")
    conf.set_override("reserved_host_memory_mb", 512, "compute")
    conf.set_override("cpu_allocation_ratio", 2.0, "compute")
    return NUMAPlugin(conf)


def pinned(cell_id, pins, held=(), memory=0, page=None, shared=0, guest=0):
    return CellAssignment(guest_cell=guest, host_cell=cell_id,
                          pinning=FrozenMap(pins), held_cpus=frozenset(held),
                          memory_mb=memory, page_size_kb=page, shared_vcpus=shared)


def test_state_of_an_idle_host(plugin):
    st = state_of(plugin, plugin.discover(smt_host()), [])
    c0, c1 = st.cells
    assert c0.provider_uuid == provider_uuid(NODE, "numa", "0")
    assert c0.pcpus == {0, 1, 2, 3, 8, 9, 10, 11} and c0.pinned == set()
    assert c1.pcpus == {4, 5, 6, 12, 13, 14} and c1.shared_cpus == {7, 15}
    # Siblings are the view's, restricted to the cell's usable CPUs.
    assert set(c0.siblings) == {frozenset({n, n + 8}) for n in range(4)}
    assert c1.core_of[7] == {7, 15} and c1.has_threads
    assert (c0.memory_mb, c0.reserved_memory_mb) == (7168, 512)
    assert [(p.size_kb, p.total, p.used) for p in c0.pages] == [(2048, 512, 0)]
    assert c1.pages == ()
    assert (st.cpu_allocation_ratio, st.ram_allocation_ratio) == (2.0, 1.0)
    assert st.pack is True
    assert st.emulator_share_cpus == {7, 15}


def test_packing_option_and_unset_shared_set(conf):
    conf.set_override("packing_host_numa_cells_allocation_strategy", False,
                      "compute")
    plugin = NUMAPlugin(conf)
    st = state_of(plugin, plugin.discover(smt_host()), [])
    assert st.pack is False
    # Every CPU is shared when neither set is configured; "share" emulator
    # threads then have no cpu_shared_set to go to.
    assert st.emulator_share_cpus == frozenset()
    assert st.cells[0].shared_cpus == {0, 1, 2, 3, 8, 9, 10, 11}


def test_assignments_in_force_are_subtracted(plugin):
    view = plugin.discover(smt_host())
    a = NUMAAssignment(cells=(
        pinned(0, {0: 0, 1: 8}, held=[1], memory=1024, guest=0),
        pinned(1, {2: 4}, memory=512, page=None, shared=3, guest=1)))
    b = NUMAAssignment(cells=(pinned(0, {0: 2}, memory=512, page=2048),))
    st = state_of(plugin, view, [a, b])
    c0, c1 = st.cells
    assert c0.pinned == {0, 8, 1, 2} and c0.free_pcpus == {3, 9, 10, 11}
    assert c0.used_memory_mb == 1024 and c0.pages[0].used == 256
    assert c1.pinned == {4} and c1.shared_load == 3 and c1.used_memory_mb == 512


def test_consumed_is_the_state_built_with_the_assignment_in_force(plugin):
    """What a scheduler counts for an earlier guest of one request on the
    host (nova's num_instances > 1) is what the host publishes with it."""
    view = plugin.discover(smt_host())
    a = NUMAAssignment(cells=(
        pinned(0, {0: 0, 1: 8}, held=[1], memory=1024, guest=0),
        pinned(1, {2: 4}, memory=512, page=None, shared=3, guest=1)))
    b = NUMAAssignment(cells=(pinned(0, {0: 2}, memory=512, page=2048),))
    idle = state_of(plugin, view, [])
    assert idle.consumed(a).consumed(b) == state_of(plugin, view, [a, b])
    with pytest.raises(AssignmentConflict, match="CPU 8 of host cell 0 is pinned twice"):
        idle.consumed(a).consumed(NUMAAssignment(cells=(pinned(0, {0: 8}),)))
    with pytest.raises(AssignmentConflict, match="no 1048576 KiB pages"):
        idle.consumed(NUMAAssignment(cells=(pinned(0, {}, memory=1024,
                                                   page=1048576),)))


def test_state_json_round_trip(plugin):
    view = plugin.discover(smt_host())
    a = NUMAAssignment(cells=(pinned(0, {0: 0}, held=[8], memory=1024,
                                     page=2048, shared=0),))
    st = state_of(plugin, view, [a])
    doc = json.loads(json.dumps(encoded(plugin, st)))
    assert doc["plugin"] == "numa" and doc["version"] == plugin.version
    again = decoded(plugin, doc)
    assert isinstance(again, NUMAState) and again == st
    # Derived properties work on the decoded state too.
    assert again.cells[0].free_pcpus == st.cells[0].free_pcpus
    assert again.by_uuid.keys() == st.by_uuid.keys()


@pytest.mark.parametrize("assignments, text", [
    ([NUMAAssignment(cells=(pinned(0, {0: 0}),)),
      NUMAAssignment(cells=(pinned(0, {0: 0}),))],
     "CPU 0 of host cell 0 is pinned twice"),
    ([NUMAAssignment(cells=(pinned(0, {0: 1}, held=[1]),))],
     "CPU 1 of host cell 0 is pinned twice"),
    ([NUMAAssignment(cells=(pinned(0, {0: 4}),))],
     "takes CPU 4, which is not a dedicated CPU of host cell 0"),
    ([NUMAAssignment(cells=(pinned(1, {0: 7}),))],
     "takes CPU 7, which is not a dedicated CPU of host cell 1"),
    ([NUMAAssignment(cells=(pinned(5, {0: 0}),))],
     "names host cell 5; the host has cells 0-1"),
    ([NUMAAssignment(cells=(pinned(1, {}, memory=1024, page=2048),))],
     "takes 2048 KiB pages; host cell 1 has none"),
])
def test_conflicts_name_the_unit(plugin, assignments, text):
    view = plugin.discover(smt_host())
    with pytest.raises(AssignmentConflict) as info:
        state_of(plugin, view, assignments)
    assert info.value.plugin == "numa"
    assert text in info.value.reason, info.value.reason


def test_more_used_than_the_host_has_is_no_conflict(plugin):
    """A host that shrank keeps its guests: the cell just has no room."""
    view = plugin.discover(smt_host())
    big = NUMAAssignment(cells=(pinned(1, {}, memory=99999, shared=50),))
    st = state_of(plugin, view, [big])
    assert st.cells[1].used_memory_mb == 99999 and st.cells[1].shared_load == 50


def test_view_siblings_and_hyperthreading_trait(plugin):
    """Cores of the cell's usable CPUs; an SMT host owns HW_CPU_HYPERTHREADING
    on the root (the query asks it for require and forbids it for isolate)."""
    view = plugin.discover(smt_host())
    assert view.cells[1].siblings == (frozenset({4, 12}), frozenset({5, 13}),
                                      frozenset({6, 14}), frozenset({7, 15}))
    assert view.shared_set is True
    root = [c for c in plugin.provider_contributions(view, NODE) if c.name == NODE]
    assert [c.traits for c in root] == [frozenset({"HW_CPU_HYPERTHREADING"})]


def test_no_hyperthreading_without_siblings(conf):
    """Without sibling data (or with SMT off) every CPU is its own core."""
    cells = (NUMACell(id=0, cpus=tuple(CPU(id=i) for i in range(4)),
                      memory_kb=GIB_KB),)
    plugin = NUMAPlugin(conf)
    view = plugin.discover(HostInfo(hostname=NODE, source="t", cells=cells))
    assert view.cells[0].siblings == ()
    assert all(c.name != NODE for c in plugin.provider_contributions(view, NODE))
    st = state_of(plugin, view, [])
    assert [sorted(core) for core in st.cells[0].cores] == [[0], [1], [2], [3]]
    assert not st.cells[0].has_threads


def test_overlapping_sibling_data_is_merged_into_one_core(conf):
    cpus = (CPU(id=0, siblings=frozenset({0, 1})), CPU(id=1, siblings=frozenset({1, 2})),
            CPU(id=2), CPU(id=3, siblings=frozenset({3, 9})))
    plugin = NUMAPlugin(conf)
    view = plugin.discover(HostInfo(hostname=NODE, source="t", cells=(
        NUMACell(id=0, cpus=cpus, memory_kb=GIB_KB),)))
    # CPU 9 is not in the cell: core {3} alone.
    assert view.cells[0].siblings == (frozenset({0, 1, 2}),)


def test_a_cells_fit_class_counts_its_cores_by_threads_free_and_dedicated():
    """:attr:`CellState.fit_class` (the cells that take the same guest
    nodes) counts the cores as :attr:`CellState.cores` lists them (the
    sibling sets, then each other CPU alone) without building them: the
    same class for random cells of dedicated and shared CPUs, some pinned,
    some on cores of 2 or 4 threads."""
    import collections
    import random

    from resources.numa.state import CellState

    rng = random.Random(19)
    for _ in range(500):
        cpus = list(range(rng.randrange(1, 40)))
        rng.shuffle(cpus)
        cut = rng.randrange(len(cpus) + 1)
        pcpus, shared = frozenset(cpus[:cut]), frozenset(cpus[cut:])
        siblings, pool = [], list(cpus)
        while len(pool) >= 2 and rng.random() < 0.8:
            threads = rng.choice((2, 2, 4))
            siblings.append(frozenset(pool[:threads]))
            pool = pool[threads:]
        cell = CellState(id=0, provider_uuid="u", pcpus=pcpus, shared_cpus=shared,
                         pinned=frozenset(c for c in pcpus if rng.random() < 0.4),
                         siblings=tuple(sorted(siblings, key=min)))
        by_cores = collections.Counter(
            (len(core), len(core & cell.free_pcpus), len(core & cell.pcpus))
            for core in cell.cores)
        assert cell.fit_class[0] == tuple(sorted(by_cores.items())), cell
