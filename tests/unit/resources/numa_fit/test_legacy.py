"""nova's legacy CPU configuration: no ``cpu_dedicated_set``, and
``vcpu_pin_set`` or no ``cpu_shared_set``.

nova 34 (``LibvirtDriver._get_host_numa_topology``) sets such a host's
cells' ``pcpuset`` to their ``cpuset``: it reports no ``PCPU``, and a pinned
guest its scheduler places there with the fallback ``VCPU`` query is pinned
to the ``VCPU`` CPUs. nova's functional tests boot pinned guests on such
hosts (``*_old_configuration``, ``NUMALiveMigration*Tests``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from compute_plugins.host.model import CPU, HostInfo, NUMACell
from compute_plugins.request.spec import build_request_spec
from compute_plugins.request.types import FrozenMap
from resources.numa import InvalidCPUSet
from resources.numa.view import NUMAView
from tests.unit.resources.helpers import manager, state_of

NODE = "node1"
GIB_KB = 1024 * 1024


def two_cells(online: frozenset[int] | None = None) -> HostInfo:
    """Two cells of 4 CPUs (0-3, 4-7), 4 GiB each."""
    cells = tuple(NUMACell(id=c, cpus=tuple(CPU(id=c * 4 + i) for i in range(4)),
                           memory_kb=4 * GIB_KB) for c in range(2))
    return HostInfo(hostname=NODE, source="test", cells=cells, online_cpus=online)


def fit(conf, *guests: int, host: HostInfo | None = None,
        taken: list[Any] | None = None):
    """Fit pinned one-node guests of ``guests`` vCPUs one after the other
    on the host (each with the earlier ones, and ``taken``, in force); the
    assignments in force."""
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    mgr = manager(conf, ["numa"])
    plugin = mgr.plugins["numa"]
    view = plugin.discover(host or two_cells())
    taken = list(taken or [])
    for vcpus in guests:
        spec = build_request_spec(mgr.plugins, {
            "name": "f", "vcpus": vcpus, "memory_mb": 512, "root_gb": 0,
            "extra_specs": {"hw:cpu_policy": "dedicated"}})
        result = mgr.plugins.fit({"numa": state_of(plugin, view, taken)}, spec, None)
        if not result.fits:
            return taken, result.rejections
        taken.append(result.assignments["numa"])
    return taken, ()


def pins(assignment) -> set[int]:
    return {cpu for cell in assignment.cells for cpu in cell.pinning.values()}


def inventory(conf, host: HostInfo | None = None) -> dict[int, dict]:
    from resources.numa.provider import cell_inventory
    plugin = manager(conf, ["numa"]).plugins["numa"]
    view = plugin.discover(host or two_cells())
    assert isinstance(view, NUMAView)
    return {cell.id: cell_inventory(cell, view) for cell in view.cells}


def test_no_cpu_set_pins_guests_to_the_vcpus_and_reports_no_pcpu(conf):
    assert {c: set(inv) for c, inv in inventory(conf).items()} == {
        0: {"VCPU", "MEMORY_MB"}, 1: {"VCPU", "MEMORY_MB"}}
    taken, rejections = fit(conf, 3, 3, 1, 1)
    assert rejections == ()
    # Never the same CPU twice: the pinned CPUs are counted as nova counts
    # a legacy cell's pinned_cpus.
    assert set().union(*(pins(a) for a in taken)) == set(range(8))


def test_a_legacy_host_is_full_when_its_vcpus_are_pinned(conf):
    taken, rejections = fit(conf, 4, 4, 1)
    assert len(taken) == 2
    (rejection,) = rejections
    assert "0 free dedicated CPUs" in rejection.reason


def test_vcpu_pin_set_gives_the_cpus_as_nova(conf):
    conf.set_override("vcpu_pin_set", "1-2,5", "compute")
    got = inventory(conf)
    assert got[0]["VCPU"]["total"] == 2 and got[1]["VCPU"]["total"] == 1
    taken, rejections = fit(conf, 2, 1)
    assert rejections == ()
    assert pins(taken[0]) | pins(taken[1]) == {1, 2, 5}


def test_vcpu_pin_set_wins_over_cpu_shared_set_and_stays_legacy(conf):
    conf.set_override("cpu_shared_set", "0-7", "compute")
    conf.set_override("vcpu_pin_set", "4-7", "compute")
    assert set(inventory(conf)) == {0, 1}
    assert "VCPU" not in inventory(conf)[0]
    taken, rejections = fit(conf, 2)
    assert rejections == () and pins(taken[0]) <= {4, 5, 6, 7}


def test_cpu_shared_set_alone_is_not_legacy_pinned_guests_are_refused(conf):
    conf.set_override("cpu_shared_set", "0-7", "compute")
    taken, rejections = fit(conf, 1)
    assert taken == []
    (rejection,) = rejections
    assert "0 free dedicated CPUs" in rejection.reason


def test_vcpu_pin_set_with_cpu_dedicated_set_is_refused(conf):
    conf.set_override("cpu_dedicated_set", "0-3", "compute")
    conf.set_override("vcpu_pin_set", "4-7", "compute")
    with pytest.raises(InvalidCPUSet, match="cannot be combined with cpu_dedicated_set"):
        inventory(conf)


def test_vcpu_pin_set_is_read_from_default_as_in_nova_conf(conf, tmp_path):
    conf_file = tmp_path / "nova.conf"
    conf_file.write_text("[DEFAULT]\nvcpu_pin_set = 0-1\n")
    conf([f"--config-file={conf_file}"], project="compute-plugins-tests")
    assert conf.compute.vcpu_pin_set == "0-1"


def test_a_set_is_checked_against_the_online_cpus_as_nova(conf):
    """nova checks the sets against ``getCPUMap``'s online CPUs (its
    functional tests mock 16 online CPUs on smaller hosts, bug 1953359's
    test names CPU 2 of a 2-CPU host): an online CPU no cell lists is valid
    and offered nowhere; a CPU that is not online is still refused."""
    conf.set_override("cpu_dedicated_set", "0-8", "compute")
    got = inventory(conf, two_cells(online=frozenset(range(16))))
    assert got[0]["PCPU"]["total"] == 4 and got[1]["PCPU"]["total"] == 4
    with pytest.raises(InvalidCPUSet, match="CPU.s. 8 are not"):
        inventory(conf, two_cells(online=frozenset(range(8))))


def test_a_pinned_guest_on_a_legacy_host_is_allocated_vcpu(conf):
    """What nova's fallback query claims, never a PCPU the host lacks; the
    legacy state survives publishing (JSON)."""
    from tests.unit.resources.helpers import decoded, encoded
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    mgr = manager(conf, ["numa"])
    plugin = mgr.plugins["numa"]
    state = state_of(plugin, plugin.discover(two_cells()), [])
    assert state.legacy and decoded(plugin, encoded(plugin, state)) == state
    spec = build_request_spec(mgr.plugins, {
        "name": "f", "vcpus": 2, "memory_mb": 512, "root_gb": 0,
        "extra_specs": {"hw:cpu_policy": "dedicated"}})
    result = mgr.plugins.fit({"numa": state}, spec, None)
    (request,) = [r for name, r in spec.requests.items() if name == "numa"]
    (group,) = plugin.allocations(request, result.assignments["numa"], state)
    assert group.resources == {"VCPU": 2, "MEMORY_MB": 512}


def smt_host(cores: int = 4, threads: int = 2) -> HostInfo:
    """One cell of ``cores`` cores of ``threads`` threads (CPUs numbered
    core by core: 0-1 are core 0's), 4 GiB."""
    cpus = tuple(CPU(id=i, siblings=frozenset(range(i - i % threads,
                                                    i - i % threads + threads)))
                 for i in range(cores * threads))
    return HostInfo(hostname=NODE, source="test", cells=(
        NUMACell(id=0, cpus=cpus, memory_kb=4 * GIB_KB),))


def isolate_fit(conf, *guests: int, host: HostInfo | None = None,
                extra: dict[str, str] | None = None, taken: list[Any] | None = None):
    """Fit ``isolate`` guests of ``guests`` vCPUs one after the other on the
    legacy SMT host (each with the earlier ones, and ``taken``, in force);
    (plugin, view, assignments in force, rejections of the first refused)."""
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    mgr = manager(conf, ["numa"])
    plugin = mgr.plugins["numa"]
    view = plugin.discover(host or smt_host())
    taken = list(taken or [])
    for vcpus in guests:
        spec = build_request_spec(mgr.plugins, {
            "name": "f", "vcpus": vcpus, "memory_mb": 512, "root_gb": 0,
            "extra_specs": {"hw:cpu_policy": "dedicated",
                            "hw:cpu_thread_policy": "isolate", **(extra or {})}})
        result = mgr.plugins.fit({"numa": state_of(plugin, view, taken)}, spec, None)
        if not result.fits:
            return plugin, view, taken, result.rejections
        taken.append(result.assignments["numa"])
    return plugin, view, taken, ()


def held(assignment) -> set[int]:
    return {cpu for cell in assignment.cells for cpu in cell.held_cpus}


def test_isolate_on_an_smt_legacy_host_pins_a_core_per_vcpu_and_holds_its_siblings(conf):
    """nova's legacy ``isolate``
    (``test_create_server_with_isolate_thread_policy_old_configuration``):
    a vCPU per core, the cores' other threads held idle; 2 vCPUs take 4 of
    the host's 8 CPUs, and no other guest gets the held ones."""
    plugin, view, taken, rejections = isolate_fit(conf, 2)
    assert rejections == ()
    (guest,) = taken
    assert pins(guest) == {0, 2} and held(guest) == {1, 3}
    state = state_of(plugin, view, taken)
    assert state.cells[0].pinned == {0, 1, 2, 3}
    # A pinned guest without a policy gets the two cores left, not the
    # held siblings.
    others, none = fit(conf, 4, host=smt_host(), taken=taken)
    assert none == ()
    assert pins(others[-1]) == {4, 5, 6, 7}


def test_isolate_on_a_legacy_host_wants_whole_free_cores(conf):
    """A core with one thread taken is no core for ``isolate``: the
    refusal counts the whole free cores and says what the policy asks."""
    half, _ = fit(conf, 1, host=smt_host())  # CPU 0: core 0 half taken
    assert pins(half[0]) == {0}
    _, _, taken, rejections = isolate_fit(conf, 4, taken=half)
    assert taken == half
    (rejection,) = rejections
    assert "3 whole free cores (all 2 threads free), guest node 0 needs 4" in rejection.reason
    assert "holds its thread siblings idle" in rejection.reason


def test_isolate_siblings_are_released_with_the_guest(conf):
    """The host full of ``isolate`` guests (4 cores, 4 one-vCPU guests)
    takes a fifth once one of them is gone."""
    plugin, view, taken, rejections = isolate_fit(conf, 1, 1, 1, 1, 1)
    assert len(taken) == 4 and len(rejections) == 1
    assert state_of(plugin, view, taken).cells[0].free_pcpus == frozenset()
    _, _, again, rejections = isolate_fit(conf, 1, taken=taken[1:])
    assert rejections == () and pins(again[-1]) == {0} and held(again[-1]) == {1}


def test_isolate_legacy_emulator_threads_take_a_whole_core_too(conf):
    """``hw:emulator_threads_policy=isolate``: its CPU is the first thread
    of one more whole core, whose sibling is held as well (nova's
    ``pin_cpus_with_siblings`` on the reserved CPU); still ``VCPU`` = the
    flavor's vCPUs in Placement."""
    plugin, view, taken, rejections = isolate_fit(
        conf, 2, extra={"hw:emulator_threads_policy": "isolate"})
    assert rejections == ()
    (guest,) = taken
    assert pins(guest) == {0, 2} and guest.emulator_threads == {4}
    assert held(guest) == {1, 3, 4, 5}


@pytest.mark.parametrize("change,reason", [
    (lambda c: {"pinning": {0: 0, 1: 1}, "held_cpus": frozenset()}, "share a core"),
    (lambda c: {"held_cpus": frozenset({1})}, "must hold CPU(s) 1,3 of host cell 0 idle"),
    (lambda c: {"held_cpus": frozenset()}, "must hold CPU(s) 1,3 of host cell 0 idle"),
])
def test_a_recorded_legacy_isolate_pinning_is_verified(conf, change, reason):
    """``verify`` (the compute's check of the scheduler's decision) holds a
    recorded ``isolate`` pinning to the same rules: one vCPU per core, the
    siblings held."""
    plugin, view, (guest,), _ = isolate_fit(conf, 2)
    mgr = manager(conf, ["numa"])
    spec = build_request_spec(mgr.plugins, {
        "name": "f", "vcpus": 2, "memory_mb": 512, "root_gb": 0,
        "extra_specs": {"hw:cpu_policy": "dedicated",
                        "hw:cpu_thread_policy": "isolate"}})
    state = state_of(plugin, view, [])
    assert plugin.verify(state, spec.requests["numa"], guest) is None
    fields = change(guest.cells[0])
    if "pinning" in fields:
        fields["pinning"] = FrozenMap(fields["pinning"])
    bad = dataclasses.replace(guest, cells=(dataclasses.replace(guest.cells[0], **fields),))
    rejection = plugin.verify(state, spec.requests["numa"], bad)
    assert rejection is not None and reason in rejection.reason


def test_isolate_with_cpu_dedicated_set_on_smt_is_still_refused(conf):
    """Not legacy: nova's bug 1889633 refusal stays."""
    conf.set_override("cpu_dedicated_set", "0-7", "compute")
    _, _, taken, rejections = isolate_fit(conf, 1)
    assert taken == []
    (rejection,) = rejections
    assert "nova bug 1889633" in rejection.reason


def test_vcpu_pin_set_leaves_cpu_shared_set_to_shared_emulator_threads(conf):
    """nova with both ``vcpu_pin_set`` and ``cpu_shared_set``: the first
    gives the ``VCPU`` CPUs, the second still takes the emulator threads of
    ``hw:emulator_threads_policy=share`` guests (``_get_emulatorpin_cpuset``
    reads ``cpu_shared_set``), not the ``vcpu_pin_set`` CPUs."""
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    conf.set_override("vcpu_pin_set", "0-5", "compute")
    conf.set_override("cpu_shared_set", "6-7", "compute")
    mgr = manager(conf, ["numa"])
    plugin = mgr.plugins["numa"]
    view = plugin.discover(two_cells())
    spec = build_request_spec(mgr.plugins, {
        "name": "f", "vcpus": 2, "memory_mb": 512, "root_gb": 0,
        "extra_specs": {"hw:cpu_policy": "dedicated",
                        "hw:emulator_threads_policy": "share"}})
    result = mgr.plugins.fit({"numa": state_of(plugin, view, [])}, spec, None)
    assignment = result.assignments["numa"]
    assert pins(assignment) <= {0, 1, 2, 3, 4, 5}
    assert assignment.emulator_threads == {6, 7}
    # The guest holds on the host again (the agent's state of its claim).
    state_of(plugin, view, [assignment])


@pytest.mark.parametrize("extra_specs,vcpus", [
    ({"hw:cpu_policy": "dedicated", "hw:emulator_threads_policy": "isolate"}, 2),
    ({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "^0",
      "hw:emulator_threads_policy": "isolate"}, 3),
])
def test_a_legacy_hosts_vcpu_allocation_is_the_flavors_vcpus(conf, extra_specs, vcpus):
    """nova's fallback query (``enable_pinning_translate=False``) asks the
    flavor's vCPUs as ``VCPU``, without the emulator threads' extra CPU of
    ``hw:emulator_threads_policy=isolate`` (only the ``PCPU`` translation
    adds it): the allocation must ask the same, or none of nova's
    candidates carries the decision."""
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    mgr = manager(conf, ["numa"])
    plugin = mgr.plugins["numa"]
    state = state_of(plugin, plugin.discover(two_cells()), [])
    spec = build_request_spec(mgr.plugins, {
        "name": "f", "vcpus": vcpus, "memory_mb": 512, "root_gb": 0,
        "extra_specs": extra_specs})
    result = mgr.plugins.fit({"numa": state}, spec, None)
    assignment = result.assignments["numa"]
    # The emulator threads still hold a CPU of their own on the host.
    assert len(assignment.emulator_threads) == 1
    groups = plugin.allocations(spec.requests["numa"], assignment, state)
    assert sum(g.resources.get("VCPU", 0) for g in groups) == vcpus
    assert all("PCPU" not in g.resources for g in groups)


def test_a_legacy_hosts_cpus_count_once_in_its_utilization(conf):
    """A legacy host's CPUs are both its pinned guests' and its floating
    guests' (one set): counted once, a host whose CPUs are all pinned is
    full (the weighers' 1.0), not half full as if it had as many again."""
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    mgr = manager(conf, ["numa"])
    plugin = mgr.plugins["numa"]
    view = plugin.discover(two_cells())
    taken, rejections = fit(conf, 4, 4)
    assert rejections == ()
    state = state_of(plugin, view, taken)
    # Every CPU pinned; 1 GiB of the 8 GiB taken.
    assert plugin.utilization(state) == pytest.approx((1.0 + 1 / 8) / 2)
    # The same host idle: no CPU taken.
    assert plugin.utilization(state_of(plugin, view, [])) == 0.0
