"""verify: a recorded decision, checked with the fit's own per-cell checks."""

from __future__ import annotations

import dataclasses

from compute_plugins.request.types import FrozenMap
from resources.numa.fit import fit, verify
from resources.numa.request import NUMAAssignment
from resources.numa.state import CellState
from tests.unit.resources.numa_fit.helpers import cell, request, smt_cell, state


def decided(st, req, placement=None):
    got = fit(st, req, placement)
    assert isinstance(got, NUMAAssignment), got
    assert verify(st, req, got) is None
    return got


def with_cell(st, index, **changes):
    cells = list(st.cells)
    cells[index] = dataclasses.replace(cells[index], **changes)
    return dataclasses.replace(st, cells=tuple(cells))


def edit(assignment, index=0, **changes):
    cells = list(assignment.cells)
    cells[index] = dataclasses.replace(cells[index], **changes)
    return dataclasses.replace(assignment, cells=tuple(cells))


def reason(st, req, assignment):
    problem = verify(st, req, assignment)
    assert problem is not None
    return problem.reason


def test_the_host_changed_in_between():
    st = state(cell(0, range(4)), cell(1, range(4, 8)))
    req = request([(2, 1024)])
    got = decided(st, req)
    (host_cpu, *_) = got.cells[0].pinning.values()
    taken = with_cell(st, got.cells[0].host_cell, pinned=frozenset({host_cpu}))
    assert "CPU(s) %d of host cell" % host_cpu in reason(taken, req, got)
    assert "are taken by other guests" in reason(taken, req, got)
    full = with_cell(st, got.cells[0].host_cell, used_memory_mb=3500)
    assert "has 596 MiB of free small-page memory, guest node 0 needs 1024" in \
        reason(full, req, got)
    home = st.by_id[got.cells[0].host_cell]
    shrunk = with_cell(st, home.id, pcpus=home.pcpus - {host_cpu} | {99})
    assert "CPU(s) %d are not dedicated CPUs of host cell %d" % (
        host_cpu, home.id) in reason(shrunk, req, got)
    gone = with_cell(st, home.id, pcpus=frozenset())
    assert "has 0 free dedicated CPUs, guest node 0 needs 2" in reason(gone, req, got)


def test_a_decision_already_in_force_does_not_verify_twice():
    """verify runs on the state without the guest; with it, its CPUs are taken."""
    from compute_plugins.tree.contribution import Providers
    from resources.numa import provider
    from resources.numa.state import build_state
    from resources.numa.view import CellView, NUMAView
    view = NUMAView(cells=(CellView(0, pcpus=frozenset(range(4)), memory_mb=4096),),
                    cpu_allocation_ratio=1.0, ram_allocation_ratio=1.0)
    providers = Providers.of("n", provider.contributions(view, "n"))
    st = build_state(view, providers, [])
    req = request([(2, 1024)])
    got = decided(st, req)
    assert verify(build_state(view, providers, [got]), req, got) is not None
    assert verify(build_state(view, providers, []), req, got) is None


def test_thread_policy_is_checked():
    st = state(smt_cell(0, 4, pinned=[0]))
    req = request([(2, 256)], thread="require")
    got = decided(st, req)
    bad = edit(got, pinning=FrozenMap({0: 1, 1: 2}))      # CPU 1's sibling is taken
    assert "CPU(s) 1 of host cell 0 have no free thread sibling" in reason(st, req, bad)
    # A decision recorded with isolate on SMT (held siblings, as before
    # issue 17) no longer verifies: nova refuses it (bug 1889633).
    req = request([(2, 256)], thread="isolate")
    recorded = edit(decided(st, request([(2, 256)])),
                    pinning=FrozenMap({0: 2, 1: 4}), held_cpus=frozenset({3, 5}))
    assert "nova bug 1889633" in reason(st, req, recorded)
    assert "idle beside its emulator threads' CPU" in reason(
        st, request([(2, 256)]), recorded)


def test_shape_of_the_decision_is_checked():
    st = state(cell(0, range(4)), cell(1, range(4, 8)))
    req = request([(2, 512), (2, 512)])
    got = decided(st, req)
    assert "the guest has nodes 0-1" in reason(
        st, req, dataclasses.replace(got, cells=got.cells[:1]))
    assert "two guest nodes on one host cell" in reason(
        st, req, edit(got, 1, host_cell=got.cells[0].host_cell))
    assert "host has cells 0-1" in reason(st, req, edit(got, host_cell=7))
    assert "recorded on provider x" in reason(st, req, edit(got, provider_uuid="x"))
    assert "recorded with 100 MiB; it has 512" in reason(st, req, edit(got, memory_mb=100))
    assert "recorded in 2048 KiB pages; on host cell 0 it may use small pages" in \
        reason(st, req, edit(got, page_size_kb=2048))
    assert "pinned vCPUs are recorded as 0; its dedicated vCPUs are 0-1" in reason(
        st, req, edit(got, pinning=FrozenMap({0: 0})))
    assert "emulator threads to CPUs 9" in reason(
        st, req, dataclasses.replace(got, emulator_threads=frozenset({9})))


def test_emulator_cpu_must_be_held():
    st = state(cell(0, range(4)))
    req = request([(2, 256)], emulator="isolate")
    got = decided(st, req)
    assert "must hold 1 CPU for emulator threads" in reason(
        st, req, edit(got, held_cpus=frozenset()))
    (emulator,) = got.emulator_threads
    other = next(iter(set(range(4)) - set(got.cells[0].pinning.values()) - {emulator}))
    moved = dataclasses.replace(edit(got, held_cpus=frozenset({other})),
                                emulator_threads=frozenset({other}))
    assert verify(st, req, moved) is None      # any free CPU is valid


def test_pages_are_rechecked():
    st = state(cell(0, range(4), pages=[(2048, 600, 0)]))
    req = request([(1, 1024)], page="large")
    got = decided(st, req)
    assert got.cells[0].page_size_kb == 2048
    used = with_cell(st, 0, pages=(dataclasses.replace(st.cells[0].pages[0], used=100),))
    assert "has 500 free 2048 KiB pages, guest node 0 needs 512" in reason(used, req, got)


def test_shared_cpus_recorded_must_be_the_cells():
    st = state(cell(0, shared=range(4)))
    req = request([(2, 256)], policy="shared")
    got = decided(st, req)
    moved: CellState = dataclasses.replace(st.cells[0], shared_cpus=frozenset({0, 1}))
    assert "shared vCPUs are recorded on CPUs 0-3; host cell 0's shared CPUs are 0-1" \
        in reason(dataclasses.replace(st, cells=(moved,)), req, got)


def test_network_affinity_is_rechecked():
    """A decision whose guest ports' networks are affine to other host cells
    (a decision edited, or the affinity configured since) does not verify:
    verify re-checks what the fit checks (resources.numa.networks)."""
    st = state(cell(0, range(4)), cell(1, range(4, 8)))
    req = dataclasses.replace(request([(2, 512)]), physnets=frozenset({"foo"}))
    assert decided(st, req).cells[0].host_cell == 0      # foo has no affinity
    affine = with_cell(st, 1, physnets=frozenset({"foo"}))
    got = decided(affine, req)
    assert got.cells[0].host_cell == 1
    moved = edit(got, host_cell=0, provider_uuid="uuid-0")
    assert ("the guest's ports on physnet foo need one of its NUMA nodes on host "
            "cell(s) 1 ([neutron_physnet_foo] numa_nodes), it is on 0"
            ) in reason(affine, req, moved)
    tunneled = dataclasses.replace(req, physnets=frozenset(), tunneled=True)
    tunnel_on_1 = with_cell(st, 1, tunneled=True)
    assert "tunneled networks need one of its NUMA nodes on host cell(s) 1" in \
        reason(tunnel_on_1, tunneled, moved)
