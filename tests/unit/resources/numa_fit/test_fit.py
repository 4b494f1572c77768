"""The NUMA fit: nova's semantics per policy, completeness, packing, messages."""

from __future__ import annotations

import pytest

from compute_plugins.plugin.contract import Rejection
from resources.numa.fit import fit, verify
from resources.numa.request import NUMAAssignment
from tests.unit.resources.numa_fit.helpers import (
    cell,
    placed,
    request,
    smt_cell,
    state,
)


def fits(st, req, placement=None):
    got = fit(st, req, placement)
    assert isinstance(got, NUMAAssignment), got
    assert verify(st, req, got) is None
    return got


def rejects(st, req, placement=None):
    got = fit(st, req, placement)
    assert isinstance(got, Rejection), got
    return got


def pins_of(got, node=0):
    return dict(got.cells[node].pinning)


# -- completeness ---------------------------------------------------------------

@pytest.mark.parametrize("pack, cells", [(True, {0: 0, 1: 1}),
                                         (False, {0: 2, 1: 1})])
def test_nova_counterexample_fits(pack, cells):
    """nova 34 says no when spreading, its default (its fit cache is keyed
    by cell ids it overwrites); see tests/compat/test_nova_numa_fit.py."""
    st = state(cell(0, [0], memory_mb=2048), cell(1, [1, 2, 3], memory_mb=1024),
               cell(2, [4, 5], memory_mb=1024), cell(3, [6], memory_mb=4096),
               pack=pack)
    got = fits(st, request([(1, 1024), (3, 512)]))
    # Spreading, node 0 would prefer cell 1 (most free CPUs): it gives way.
    assert placed(got) == cells
    assert pins_of(got, 1) == {1: 1, 2: 2, 3: 3}


def test_a_node_gives_way_to_a_later_one():
    """Node 0's preferred cell is the only one node 1 fits: node 0 moves."""
    st = state(cell(0, range(4), memory_mb=8192), cell(1, range(4, 8), memory_mb=1024))
    got = fits(st, request([(2, 512), (2, 4096)]))
    assert placed(got) == {0: 1, 1: 0}


def test_more_nodes_than_cells():
    st = state(cell(0, range(4)), cell(1, range(4, 8)))
    got = rejects(st, request([(1, 256)] * 3))
    assert got.reason == "the guest has 3 NUMA nodes, the host only 2 NUMA cells"


def test_hall_violation_is_named():
    st = state(cell(0, range(4)), cell(1, range(4, 8)), cell(2, [8]), cell(3, [9]))
    got = rejects(st, request([(2, 256)] * 3))
    assert got.reason == ("guest nodes 0-2 need distinct host cells but only "
                          "2 host cells (0-1) can take any of them")


def test_a_node_that_fits_nowhere_is_named_with_numbers():
    st = state(cell(0, range(2)), cell(1, range(2, 4), pinned=[2]))
    got = rejects(st, request([(1, 256), (3, 256)]))
    assert got.reason == (
        "guest node 1 fits no host cell: host cell 0 has 2 free dedicated "
        "CPUs, guest node 1 needs 3; host cell 1 has 1 free dedicated CPU, "
        "guest node 1 needs 3")


def test_identical_cells_are_one_class_in_messages():
    st = state(*(cell(i, [2 * i, 2 * i + 1]) for i in range(4)))
    got = rejects(st, request([(3, 256)]))
    assert got.reason == ("guest node 0 fits no host cell: host cells 0-3 each "
                          "have 2 free dedicated CPUs, guest node 0 needs 3")


# -- placement ------------------------------------------------------------------

def test_placement_mappings_decide_the_cells():
    st = state(*(cell(i, range(4 * i, 4 * i + 4)) for i in range(4)))
    got = fits(st, request([(2, 512), (2, 512)]),
               {"_NUMA0": ["uuid-3"], "_NUMA1": ["uuid-1"], "": ["root"]})
    assert placed(got) == {0: 3, 1: 1}
    assert [c.provider_uuid for c in got.cells] == ["uuid-3", "uuid-1"]


def test_placement_on_a_cell_that_has_no_room_names_it():
    st = state(cell(0, range(4)), cell(1, range(4, 6)))
    got = rejects(st, request([(3, 512)]), {"_NUMA0": ["uuid-1"]})
    assert got.reason == (
        "guest node 0 does not fit host cell 1, where Placement put it: host "
        "cell 1 has 2 free dedicated CPUs, guest node 0 needs 3")
    assert got.provider == "uuid-1"


def test_placement_without_the_node_group_or_with_a_foreign_provider():
    st = state(cell(0, range(4)))
    assert rejects(st, request(), {"": ["x"]}).reason == (
        "Placement's mappings name no provider for guest node 0 (group _NUMA0)")
    got = rejects(st, request(), {"_NUMA0": ["elsewhere"]})
    assert "on provider elsewhere, which is no NUMA cell of this host" in got.reason


# -- packing ----------------------------------------------------------------------

def test_packing_prefers_the_most_used_cell():
    cells = (cell(0, range(8)), cell(1, range(8, 16), pinned=[8, 9, 10]),
             cell(2, range(16, 24), pinned=[16]))
    got = fits(state(*cells), request([(2, 512)]))
    assert placed(got) == {0: 1}
    got = fits(state(*cells, pack=False), request([(2, 512)]))
    assert placed(got) == {0: 0}


def test_packing_for_shared_guests_uses_the_shared_load():
    cells = (cell(0, shared=range(4), load=1), cell(1, shared=range(4, 8), load=6),
             cell(2, shared=range(8, 12)))
    got = fits(state(*cells), request([(2, 512)], policy="shared"))
    assert placed(got) == {0: 1}
    got = fits(state(*cells, pack=False), request([(2, 512)], policy="shared"))
    assert placed(got) == {0: 2}


def test_no_ordering_when_the_guest_takes_every_cell():
    """nova only sorts when the host has more cells than the guest nodes."""
    cells = (cell(0, range(8)), cell(1, range(8, 16), pinned=[8, 9, 10]))
    got = fits(state(*cells), request([(2, 512), (2, 512)]))
    assert placed(got) == {0: 0, 1: 1}


# -- dedicated, shared, mixed ---------------------------------------------------

def test_dedicated_pins_free_cpus_only():
    st = state(cell(0, range(4), pinned=[0, 2]))
    got = fits(st, request([(2, 512)]))
    assert pins_of(got) == {0: 1, 1: 3}
    assert got.cells[0].shared_cpus == frozenset()


def test_dedicated_needs_dedicated_cpus():
    st = state(cell(0, shared=range(8)))
    assert "has 0 free dedicated CPUs, guest node 0 needs 2" in rejects(
        st, request([(2, 512)])).reason


def test_shared_guest_with_topology_floats_on_the_cell_shared_cpus():
    st = state(cell(0, pcpus=[0, 1], shared=[2, 3]), cell(1, shared=[4, 5]))
    got = fits(st, request([(2, 512), (2, 512)], policy="shared"))
    assert got.cells[0].pinning == {} and got.cells[0].shared_cpus == {2, 3}
    assert got.cells[1].shared_cpus == {4, 5}
    assert [c.shared_vcpus for c in got.cells] == [2, 2]
    # Emulator threads run with the vCPUs (nova's default).
    assert got.emulator_threads == {2, 3, 4, 5}


def test_shared_cpus_are_counted_with_the_allocation_ratio():
    st = state(cell(0, shared=[0, 1, 2, 3], load=6), cpu_ratio=2.0)
    fits(st, request([(2, 256)], policy="shared"))
    got = rejects(st, request([(3, 256)], policy="shared"))
    assert got.reason == (
        "guest node 0 fits no host cell: host cell 0 has room for 2 more vCPUs "
        "on its 4 shared CPUs (6 running, cpu_allocation_ratio 2), guest node "
        "0 needs 3")


def test_a_node_may_not_have_more_shared_vcpus_than_the_cell_shared_cpus():
    st = state(cell(0, shared=[0, 1]), cpu_ratio=16.0)
    assert "host cell 0 has 2 shared CPUs, guest node 0 has 3 shared vCPUs" in \
        rejects(st, request([(3, 256)], policy=None)).reason


def test_mixed_pins_the_dedicated_and_floats_the_shared():
    st = state(cell(0, pcpus=range(4), shared=[8, 9]))
    got = fits(st, request([(4, 512)], policy="mixed", shared=[1]))
    assert pins_of(got) == {1: 0, 2: 1, 3: 2}
    assert got.cells[0].shared_cpus == {8, 9} and got.cells[0].shared_vcpus == 1
    st = state(cell(0, pcpus=range(4)))
    assert "has 0 shared CPUs" in rejects(
        st, request([(4, 512)], policy="mixed", shared=[1])).reason


# -- thread policies -------------------------------------------------------------

def test_prefer_packs_siblings_first():
    st = state(smt_cell(0, 4, pinned=[0, 4]))       # cores 0-1, 2-3, 4-5, 6-7
    got = fits(st, request([(2, 256)]))
    assert pins_of(got) == {0: 2, 1: 3}
    got = fits(st, request([(5, 256)]))
    # Two whole cores give 4; the fifth comes from a half-used core (nova's
    # fall back to single threads).
    assert sorted(pins_of(got).values()) == [1, 2, 3, 5, 6]


def test_isolate_on_smt_is_refused_as_nova_does_bug_1889633():
    """nova with cpu_dedicated_set refuses isolate on a cell with siblings
    (tests/compat: test_isolate_on_an_smt_cell_is_refused_as_nova_bug_1889633);
    a cell without them takes the guest."""
    st = state(smt_cell(0, 4, pinned=[0]))
    got = rejects(st, request([(2, 256)], thread="isolate"))
    assert ("host cell 0 has thread siblings (SMT) and guest node 0 asks "
            "hw:cpu_thread_policy=isolate") in got.reason
    assert "nova bug 1889633" in got.reason
    got = fits(state(smt_cell(0, 4), cell(1, range(8, 10))),
               request([(2, 256)], thread="isolate"))
    assert placed(got) == {0: 1} and got.cells[0].held_cpus == set()


def test_isolate_without_smt_is_plain_pinning():
    st = state(cell(0, range(4), pinned=[0]))
    got = fits(st, request([(3, 256)], thread="isolate"))
    assert pins_of(got) == {0: 1, 1: 2, 2: 3} and got.cells[0].held_cpus == set()


def test_require_needs_smt_and_free_siblings():
    assert "has no thread siblings (SMT), guest node 0 requires them" in rejects(
        state(cell(0, range(8))), request([(2, 256)], thread="require")).reason
    st = state(smt_cell(0, 4, pinned=[0, 2, 4]))    # one whole core: 6-7
    got = fits(st, request([(2, 256)], thread="require"))
    assert pins_of(got) == {0: 6, 1: 7}
    got = rejects(st, request([(3, 256)], thread="require"))
    assert ("host cell 0 has 2 free CPUs on cores with at least two free "
            "threads, guest node 0 needs 3") in got.reason


def test_require_uses_cores_of_different_free_counts():
    """Cores with 3 and 2 free threads take 5 vCPUs, every one beside a
    sibling (nova's uniform packing alone would refuse)."""
    st = state(cell(0, range(8), siblings=[range(0, 4), range(4, 6), range(6, 8)],
                    pinned=[0, 6]))
    got = fits(st, request([(5, 256)], thread="require"))
    assert sorted(pins_of(got).values()) == [1, 2, 3, 4, 5]


# -- emulator threads and realtime ------------------------------------------------

def test_emulator_isolate_takes_one_more_cpu_on_node_0s_cell():
    st = state(cell(0, range(2)), cell(1, range(2, 5)))
    got = fits(st, request([(2, 256)], emulator="isolate"))
    assert placed(got) == {0: 1}
    (emulator,) = got.emulator_threads
    assert emulator in {2, 3, 4} and emulator not in pins_of(got).values()
    assert got.cells[0].held_cpus == {emulator}
    # Only node 0 pays for it.
    got = fits(state(cell(0, range(3)), cell(1, range(3, 5))),
               request([(2, 256), (2, 256)], emulator="isolate"))
    assert placed(got) == {0: 0, 1: 1} and got.emulator_threads == {2}


def test_emulator_isolate_with_isolated_threads_on_smt_is_refused():
    st = state(smt_cell(0, 3))
    got = rejects(st, request([(2, 256)], thread="isolate", emulator="isolate"))
    assert "nova bug 1889633" in got.reason


def test_emulator_isolate_counts_in_the_message():
    got = rejects(state(cell(0, range(2))), request([(2, 256)], emulator="isolate"))
    assert ("host cell 0 has 2 free dedicated CPUs, guest node 0 needs 3 "
            "(2 vCPUs + 1 for emulator threads)") in got.reason


def test_emulator_share_runs_on_cpu_shared_set():
    st = state(cell(0, range(4), shared=[8, 9]), share=[8, 9, 10])
    got = fits(st, request([(2, 256)], emulator="share"))
    assert got.emulator_threads == {8, 9, 10}
    # Without cpu_shared_set: with the vCPUs, as no policy.
    got = fits(state(cell(0, range(4))), request([(2, 256)], emulator="share"))
    assert got.emulator_threads == set(pins_of(got).values())


def test_realtime_vcpus_keep_the_emulator_threads_off():
    st = state(cell(0, range(4)))
    got = fits(st, request([(3, 256)], realtime=[1, 2]))
    assert got.emulator_threads == {pins_of(got)[0]}


# -- memory and pages ------------------------------------------------------------

def test_pinned_guests_do_not_overcommit_memory():
    st = state(cell(0, range(4), memory_mb=4096, reserved_mb=512, used_mb=2048),
               ram_ratio=2.0)
    fits(st, request([(1, 1536)]))
    got = rejects(st, request([(1, 1537)]))
    assert ("host cell 0 has 1536 MiB of free small-page memory, guest node 0 "
            "needs 1537 MiB") in got.reason


def test_shared_guests_overcommit_up_to_the_ratio():
    st = state(cell(0, shared=range(4), memory_mb=4096, reserved_mb=512,
                    used_mb=4000), ram_ratio=1.5)
    fits(st, request([(1, 1376)], policy="shared"))   # 4000 + 1376 = 5376 = 3584 * 1.5
    got = rejects(st, request([(1, 1377)], policy="shared"))
    assert ("host cell 0 has 1376 MiB of small-page memory left (4000 of 5376 "
            "MiB used at ram_allocation_ratio 1.5), guest node 0 needs 1377 MiB"
            ) in got.reason
    # No node larger than the cell, ratio or not.
    st = state(cell(0, shared=range(4), memory_mb=4096), ram_ratio=4.0)
    assert "host cell 0 has 4096 MiB of small-page memory, guest node 0 needs 5000" \
        in rejects(st, request([(1, 5000)], policy="shared")).reason


def test_page_size_large_takes_the_largest_that_fits():
    pages = [(2048, 1024, 0), (1048576, 2, 1)]
    st = state(cell(0, range(4), pages=pages))
    assert fits(st, request([(1, 1024)], page="large")).cells[0].page_size_kb == 1048576
    assert fits(st, request([(1, 1536)], page="large")).cells[0].page_size_kb == 2048
    got = rejects(st, request([(1, 4096)], page="large"))
    # Every size the request allows is reported.
    assert "0 has 1 free 1048576 KiB page, guest node 0 needs 4" in got.reason
    assert "0 has 1024 free 2048 KiB pages, guest node 0 needs 2048" in got.reason


def test_page_size_large_without_huge_pages():
    got = rejects(state(cell(0, range(4))), request([(1, 1024)], page="large"))
    assert "host cell 0 has no huge pages, guest node 0 asks hw:mem_page_size=large" \
        in got.reason


def test_page_size_any_falls_back_to_small_pages_and_small_is_strict():
    st = state(cell(0, shared=range(4), memory_mb=2048, used_mb=1024,
                    pages=[(2048, 10, 0)]), ram_ratio=4.0)
    got = fits(st, request([(1, 1024)], policy="shared", page="any"))
    assert got.cells[0].page_size_kb is None and got.cells[0].memory_mb == 1024
    # A page size asked: small pages are not overcommitted either (nova).
    rejects(st, request([(1, 1025)], policy="shared", page="small"))
    fits(st, request([(1, 1025)], policy="shared"))


def test_explicit_page_size_and_huge_pages_counted_per_cell():
    st = state(cell(0, range(4), pages=[(2048, 100, 90)]),
               cell(1, range(4, 8), pages=[(2048, 600, 0)]),
               cell(2, range(8, 12)))
    got = fits(st, request([(1, 1024)], page_kb=2048))
    assert placed(got) == {0: 1} and got.cells[0].page_size_kb == 2048
    got = rejects(st, request([(1, 2048)], page_kb=2048))
    assert "host cell 0 has 10 free 2048 KiB pages, guest node 0 needs 1024" in got.reason
    assert "host cell 2 has no 2048 KiB pages, guest node 0 needs 2048 MiB in them" \
        in got.reason


def test_memory_must_be_whole_pages():
    st = state(cell(0, range(4), pages=[(1048576, 4, 0)]))
    got = rejects(st, request([(1, 1536)], page_kb=1048576))
    assert "guest node 0's 1536 MiB is not a whole number of 1048576 KiB pages" \
        in got.reason


# -- no state --------------------------------------------------------------------

def test_no_state_is_a_rejection():
    assert isinstance(fit(None, request(), None), Rejection)
    assert isinstance(verify(None, request(), NUMAAssignment()), Rejection)


@pytest.mark.parametrize("cells, first", [(8, 0), (16, 1)])
def test_wide_hosts_with_identical_cells(cells, first):
    st = state(*(smt_cell(i, 28, first=56 * i, pinned=[56 * i] if i else [])
                 for i in range(cells)))
    got = fits(st, request([(8, 1024)] * 8))
    assert len({c.host_cell for c in got.cells}) == 8
    # Packing (only with more cells than nodes): the used cells first.
    assert got.cells[0].host_cell == first


REALTIME_NOVA = ("Use of realtime CPUs requires either one or more non-realtime "
                 "CPU(s) or offloaded emulator threads.")


@pytest.mark.parametrize("realtime", [[1], [0, 1]])
def test_realtime_with_shared_emulator_threads_needs_cpu_shared_set(realtime):
    """nova's libvirt driver (``_get_guest_memory_backing_config``) refuses
    a realtime guest with ``hw:emulator_threads_policy=share`` on a host
    without ``[compute] cpu_shared_set``, mask or not."""
    req = request([(2, 256)], emulator="share", realtime=realtime)
    got = rejects(state(cell(0, range(4))), req)
    assert got.reason == (
        "hw:emulator_threads_policy=share with realtime vCPUs needs [compute] "
        "cpu_shared_set for the emulator threads, and this host sets none: "
        + REALTIME_NOVA)
    # With it, the emulator threads run there, even when every vCPU is realtime.
    got = fits(state(cell(0, range(4), shared=[8]), share=[8]), req)
    assert got.emulator_threads == {8}


def test_verify_applies_the_realtime_share_rule():
    req = request([(2, 256)], emulator="share", realtime=[0, 1])
    got = fits(state(cell(0, range(4), shared=[8]), share=[8]), req)
    assert verify(state(cell(0, range(4), shared=[8]), share=[8]), req, got) is None
    assert verify(state(cell(0, range(4), shared=[8])), req, got).reason.endswith(
        REALTIME_NOVA)
