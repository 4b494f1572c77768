"""The real ``numa`` plugin's decision with the device plugins after it.

A device's NUMA affinity follows where the ``numa`` plugin put the guest
(``earlier["numa"]``): a guest without NUMA topology floats (no affinity,
as in nova), and when the packing choice of host cells leaves a device
out of reach, ``PluginSet.fit`` tries the numa plugin's other cell choices.
"""

from __future__ import annotations

import json

import pytest

from compute_plugins.plugin.contract import Rejection
from compute_plugins.request.groups import Decision
from compute_plugins.request.spec import RequestSpec, build_request_spec
from compute_plugins.runtime import PluginSet
from resources.numa import NUMAPlugin
from resources.sriov import SRIOVPlugin
from resources.vgpu import VGPUPlugin
from tests.unit.resources.helpers import NODE, cell, gpu, host, pf, state_of

GPU = "0000:85:00.0"
PF = "0000:af:00.0"


@pytest.fixture
def plugins(conf):
    conf.set_override("enabled_mdev_types", ["nvidia-35"], "vgpu")
    conf.set_override("physical_device_mappings", ["physnet1:%s" % PF], "sriov")
    return PluginSet.of({"numa": NUMAPlugin(conf), "sriov": SRIOVPlugin(conf),
                         "vgpu": VGPUPlugin(conf)})


def states(plugins, info):
    """Every plugin's state through its published JSON."""
    result = {}
    for name, plugin in plugins.items():
        built = state_of(plugin, plugin.discover(info), ())
        result[name] = plugins.decode_state(name, json.loads(json.dumps(
            plugins.encode_state(name, built))))
    return result


def decide(plugins, info, flavor, ports=()):
    spec = build_request_spec(plugins, flavor, ports=list(ports))
    result = plugins.fit(states(plugins, info), spec)
    return spec, result


def verified(plugins, info, spec, result):
    """The decision through the spec's JSON, verified on the same host."""
    decided = spec.with_decision(Decision(host=NODE, nodename=NODE,
                                          assignments=result.assignments))
    again = RequestSpec.from_json(decided.to_json(), plugins)
    return plugins.verify(states(plugins, info), again)


# Cell 0 is the only one with room for the whole guest; the device is on
# cell 1.
SMALL_CELL_1 = host([cell(0, range(4)), cell(1, range(4, 6), memory_gb=1)],
                    [gpu(GPU, 1, nvidia_35=2), pf(PF, 4, 1)])
PORT = [{"id": "p1", "vnic_type": "direct", "physnet": "physnet1"}]


@pytest.mark.parametrize("policy", [None, "legacy", "required"])
def test_floating_guest_gets_a_vf_on_any_cell(plugins, policy):
    specs = {} if policy is None else {"hw:pci_numa_affinity_policy": policy}
    flavor = {"name": "f", "vcpus": 4, "memory_mb": 2048, "extra_specs": specs}
    spec, result = decide(plugins, SMALL_CELL_1, flavor, PORT)
    assert result.fits, result.rejections
    numa = result.assignments["numa"]
    assert numa.floating
    assert [c.host_cell for c in numa.cells] == [0]
    assert result.assignments["sriov"].vfs[0].pf_address == PF
    assert result.assignments["sriov"].host_cells == ()
    assert verified(plugins, SMALL_CELL_1, spec, result) == ()


def test_floating_guest_gets_a_vgpu_on_any_cell(plugins):
    flavor = {"name": "f", "vcpus": 4, "memory_mb": 2048, "extra_specs": {
        "resources:VGPU": "1", "hw:pci_numa_affinity_policy": "required"}}
    spec, result = decide(plugins, SMALL_CELL_1, flavor)
    assert result.fits, result.rejections
    assert result.assignments["vgpu"].devices[0].parent_address == GPU
    assert verified(plugins, SMALL_CELL_1, spec, result) == ()


def test_guest_with_topology_is_still_held_to_its_cell(plugins):
    flavor = {"name": "f", "vcpus": 4, "memory_mb": 2048, "extra_specs": {
        "hw:numa_nodes": "1", "hw:pci_numa_affinity_policy": "required"}}
    _, result = decide(plugins, SMALL_CELL_1, flavor, PORT)
    assert not result.fits
    assert [r.plugin for r in result.rejections] == ["sriov"]
    assert "needs a device on one of the guest's host cells (0)" in (
        result.rejections[0].reason)


def test_an_older_numa_assignment_without_floating_still_reads(plugins):
    flavor = {"name": "f", "vcpus": 4, "memory_mb": 2048, "extra_specs": {}}
    spec, result = decide(plugins, SMALL_CELL_1, flavor, PORT)
    decided = json.loads(spec.with_decision(Decision(
        host=NODE, nodename=NODE, assignments=result.assignments)).to_json())
    decided["plugins"]["numa"] = "1.0"
    numa = decided["decision"]["assignments"]["numa"]
    numa.pop("floating")
    again = RequestSpec.from_json(json.dumps(decided), plugins)
    assert again.decision.assignments["numa"].cells == result.assignments["numa"].cells


# Cell 0 is the packing choice for a 1-node guest (the lower id, both
# empty); the only free VF and pGPU are on cell 1.
DEVICES_ON_CELL_1 = host([cell(0, range(4)), cell(1, range(4, 8))],
                         [gpu(GPU, 1, nvidia_35=2), pf(PF, 4, 1)])


@pytest.fixture
def pinning(conf, plugins):
    """Plugins on a host whose CPUs are all dedicated (``PCPU``)."""
    conf.set_override("cpu_dedicated_set", "0-7", "compute")
    return plugins


PINNED = {"name": "f", "vcpus": 2, "memory_mb": 1024, "extra_specs": {
    "hw:numa_nodes": "1", "hw:cpu_policy": "dedicated",
    "hw:pci_numa_affinity_policy": "required"}}


def test_numa_first_choice_is_cell_0(pinning):
    plugins = pinning
    _, result = decide(plugins, DEVICES_ON_CELL_1, PINNED)
    assert result.fits
    assert [c.host_cell for c in result.assignments["numa"].cells] == [0]


@pytest.mark.parametrize("extra,ports", [
    ({}, PORT), ({"resources:VGPU": "1"}, ()),
    ({"resources:VGPU": "1"}, PORT)])
def test_a_device_off_the_first_cell_choice_moves_the_guest(pinning, extra, ports):
    plugins = pinning
    flavor = {**PINNED, "extra_specs": {**PINNED["extra_specs"], **extra}}
    spec, result = decide(plugins, DEVICES_ON_CELL_1, flavor, ports)
    assert result.fits, result.rejections
    numa = result.assignments["numa"]
    assert [c.host_cell for c in numa.cells] == [1]
    assert sorted(numa.cells[0].pinning.values()) == [4, 5]
    for name in ("sriov", "vgpu"):
        if name in result.assignments:
            assert result.assignments[name].host_cells == (1,)
    assert verified(plugins, DEVICES_ON_CELL_1, spec, result) == ()


def test_an_exhausted_budget_says_so(pinning):
    # NOTE: a vGPU, not a port: with a PCI request nova's (and our) cell
    # order puts the cell with the VF first, and no alternative is needed
    plugins = pinning
    spec = build_request_spec(plugins, {**PINNED, "extra_specs": {
        **PINNED["extra_specs"], "resources:VGPU": "1"}})
    result = plugins.fit(states(plugins, DEVICES_ON_CELL_1), spec, budget=2)
    assert not result.fits
    assert [(r.plugin, r.reason) for r in result.rejections][-1] == (
        "numa", "stopped after trying 2 decisions (fit_all's budget) of numa "
        "and the plugins after it without one every plugin accepts; the host "
        "may still fit with another")


def test_no_fit_anywhere_still_gives_the_first_reasons(pinning):
    plugins = pinning
    flavor = {**PINNED, "extra_specs": {**PINNED["extra_specs"],
                                        "resources:VGPU": "3"}}
    _, result = decide(plugins, DEVICES_ON_CELL_1, flavor)
    assert [(r.plugin, r.reason) for r in result.rejections] == [
        ("vgpu", "no pGPU can serve group _VGPU: pGPU %s has 2 of 2 mdevs of "
         "type nvidia-35 free, group _VGPU needs 3" % GPU)]


def test_numa_alternatives_are_distinct_cell_sets_one_per_cell(pinning):
    plugins = pinning
    info = host([cell(i, range(2 * i, 2 * i + 2)) for i in range(4)])
    numa = plugins["numa"]
    state = state_of(numa, numa.discover(info), ())
    flavor = {"name": "f", "vcpus": 2, "memory_mb": 2048, "extra_specs": {
        "hw:numa_nodes": "2", "hw:cpu_policy": "dedicated"}}
    request = build_request_spec(plugins, flavor).requests["numa"]
    got = [frozenset(c.host_cell for c in a.cells)
           for a in numa.alternatives(state, request, None, {})]
    assert got[0] == frozenset({0, 1})
    assert len(got) == len(set(got)) <= 4
    assert frozenset().union(*got) == frozenset(range(4))


def test_verify_after_the_host_lost_a_cpu_names_it(pinning, conf):
    """The decision (moved to cell 1 for its VF) verifies on the host it was
    made on; once CPU 4 is no longer a dedicated CPU there, the claim's
    verify says which CPU and which cell."""
    spec, result = decide(pinning, DEVICES_ON_CELL_1, PINNED, PORT)
    assert result.fits
    assert verified(pinning, DEVICES_ON_CELL_1, spec, result) == ()
    pinned = sorted(result.assignments["numa"].cells[0].pinning.values())
    assert pinned == [4, 5]
    conf.set_override("cpu_dedicated_set", "0-3,5-7", "compute")
    rejections = verified(pinning, DEVICES_ON_CELL_1, spec, result)
    assert [(r.plugin, r.reason) for r in rejections] == [
        ("numa", "CPU(s) 4 are not dedicated CPUs of host cell 1 (dedicated: 5-7)")]


def test_verify_refuses_a_device_decision_made_for_other_host_cells(pinning):
    """A device's affinity was checked against the host cells it recorded;
    they must be where the numa decision puts the guest."""
    plugins = pinning
    spec, result = decide(plugins, DEVICES_ON_CELL_1, PINNED, PORT)
    numa = result.assignments["numa"]
    on_cell_0 = plugins.only(["numa"]).fit(states(plugins, DEVICES_ON_CELL_1),
                                           spec).assignments["numa"]
    assert [c.host_cell for c in on_cell_0.cells] == [0] != [
        c.host_cell for c in numa.cells]
    mixed = spec.with_decision(Decision(host=NODE, nodename=NODE, assignments={
        **result.assignments, "numa": on_cell_0}))
    rejections = plugins.verify(states(plugins, DEVICES_ON_CELL_1), mixed)
    assert [(r.plugin, r.reason) for r in rejections] == [
        ("sriov", "the decision was made for the guest on host cells 1; the numa "
         "decision puts it on host cells 0")]


class NamesAnother(SRIOVPlugin):
    """An sriov plugin whose rejection names another plugin (one it wraps)."""

    def fit(self, state, request, placement, earlier):
        return Rejection("the wrapped plugin refuses", plugin="wrapped")


def test_a_rejection_naming_another_plugin_is_reported(pinning, conf):
    plugins = PluginSet.of({**pinning, "sriov": NamesAnother(conf)})
    _, result = decide(plugins, DEVICES_ON_CELL_1, PINNED, PORT)
    assert [(r.plugin, r.reason) for r in result.rejections] == [
        ("wrapped", "the wrapped plugin refuses")]


def test_a_device_on_the_last_of_many_cells_is_found(pinning, conf):
    conf.set_override("cpu_dedicated_set", "0-63", "compute")
    info = host([cell(i, range(2 * i, 2 * i + 2), memory_gb=2) for i in range(32)],
                [pf(PF, 4, 31)])
    spec, result = decide(pinning, info, PINNED, PORT)
    assert result.fits, result.rejections
    assert [c.host_cell for c in result.assignments["numa"].cells] == [31]
    assert verified(pinning, info, spec, result) == ()


# -- PCI-aware cell order (nova's numa_fit_instance_to_host with pci_stats) -----

PF2 = "0000:b0:00.0"


def test_a_guest_without_pci_devices_keeps_the_cells_with_them_free(pinning):
    """nova sorts the host cells by their free PCI devices last: fewest first
    for a guest without PCI requests. Packing alone takes cell 0 (both
    empty); its VFs leave it for guests that need them."""
    plugins = pinning
    info = host([cell(0, range(4)), cell(1, range(4, 8))], [pf(PF, 4, 0)])
    _, result = decide(plugins, info, PINNED)
    assert [c.host_cell for c in result.assignments["numa"].cells] == [1]
    # a vGPU is no PCI request of nova's, and a pGPU no PCI device of its pools
    info = host([cell(0, range(4)), cell(1, range(4, 8))],
                [pf(PF, 4, 0), gpu(GPU, 1, nvidia_35=2)])
    flavor = {**PINNED, "extra_specs": {**PINNED["extra_specs"],
                                        "hw:pci_numa_affinity_policy": "preferred",
                                        "resources:VGPU": "1"}}
    _, result = decide(plugins, info, flavor)
    assert [c.host_cell for c in result.assignments["numa"].cells] == [1]


def test_a_guest_with_pci_devices_prefers_the_cells_with_most(pinning, conf):
    """With PCI requests nova sorts the other way: most free devices first
    (here cell 1's 4 VFs over cell 0's 2, though packing takes cell 0 and
    cell 0's VFs would do)."""
    plugins = pinning
    conf.set_override("physical_device_mappings",
                      ["physnet1:%s" % PF, "physnet1:%s" % PF2], "sriov")
    info = host([cell(0, range(4)), cell(1, range(4, 8))],
                [pf(PF, 2, 0), pf(PF2, 4, 1)])
    flavor = {**PINNED, "extra_specs": {**PINNED["extra_specs"],
                                        "hw:pci_numa_affinity_policy": "preferred"}}
    spec, result = decide(plugins, info, flavor, PORT)
    assert [c.host_cell for c in result.assignments["numa"].cells] == [1]
    assert result.assignments["sriov"].vfs[0].pf_address == PF2
    assert verified(plugins, info, spec, result) == ()


def test_alternatives_keep_the_networks_numa_affinity(pinning, conf):
    """A guest of 2 nodes with a port on physnet foo (affine to cell 2) and
    a vGPU that must be on one of its cells (on cell 3): nova's first
    permutation meeting both is cells 2 and 3. The numa plugin's first
    answer (cells 0 and 2) leaves the vGPU out; its alternatives must still
    meet the network (they offered only placements whose *unconstrained*
    preferred matching did, so cells 2 and 3 never came and the host was
    refused)."""
    from resources.numa import networks

    conf.set_override("physnets", ["foo"], "neutron")
    networks.register_dynamic_opts(conf)
    conf.set_override("numa_nodes", [2], "neutron_physnet_foo")
    info = host([cell(i, range(2 * i, 2 * i + 2)) for i in range(4)],
                [gpu(GPU, 3, nvidia_35=2)])
    flavor = {"name": "f", "vcpus": 2, "memory_mb": 2048, "extra_specs": {
        "hw:numa_nodes": "2", "hw:cpu_policy": "dedicated",
        "hw:pci_numa_affinity_policy": "required", "resources:VGPU": "1"}}
    spec, result = decide(pinning, info, flavor, [{"id": "p1", "physnet": "foo"}])
    assert result.fits, result.rejections
    assert sorted(c.host_cell for c in result.assignments["numa"].cells) == [2, 3]
    assert result.assignments["vgpu"].host_cells == (2, 3)
    assert verified(pinning, info, spec, result) == ()



@pytest.mark.parametrize("hook, fault, plugin, text", [
    ("free_devices_by_cell", "raise", "sriov",
     "the plugin failed while counting its free devices per host cell on host "
     "%s: RuntimeError: bug" % NODE),
    ("free_devices_by_cell", "garbage", "sriov",
     "the plugin's free_devices_by_cell on host %s returned a str, not a "
     "mapping of host cell to free devices" % NODE),
    ("with_cell_devices", "raise", "numa",
     "the plugin failed while ordering its cells by free devices on host %s: "
     "RuntimeError: bug" % NODE),
    ("with_cell_devices", "garbage", "numa",
     "the plugin's with_cell_devices on host %s returned a str, not its host "
     "state" % NODE),
])
def test_a_failing_device_count_rejects_the_host_naming_the_plugin(
        pinning, monkeypatch, hook, fault, plugin, text):
    """The framework's cell order by free PCI devices calls the plugins'
    ``HoldsCellDevices``/``OrdersByCellDevices`` methods: a bug there is
    one rejection naming the plugin, as in any hook (it was an exception
    out of ``PluginSet.fit``, for every host the filter asked)."""
    from resources.numa.state import NUMAState
    from resources.sriov.state import SRIOVState

    def bug(*args):
        if fault == "raise":
            raise RuntimeError("bug")
        return "garbage"

    monkeypatch.setattr(SRIOVState if hook == "free_devices_by_cell" else NUMAState,
                        hook, bug)
    info = host([cell(0, range(4)), cell(1, range(4, 8))], [pf(PF, 4, 0)])
    spec = build_request_spec(pinning, PINNED)
    result = pinning.fit(states(pinning, info), spec, host=NODE)
    assert not result.fits
    assert [(r.plugin, r.reason.split(" (class ")[0]) for r in result.rejections] == [
        (plugin, text)]
