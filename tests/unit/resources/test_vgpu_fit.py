"""The vgpu plugin's decision: host state, fit, verify, guest XML."""

from __future__ import annotations

import dataclasses
import uuid
import xml.etree.ElementTree as ET

import pytest

from compute_plugins.host.model import MdevType
from compute_plugins.plugin import names
from compute_plugins.plugin.choice import Budget
from compute_plugins.plugin.contract import Rejection
from compute_plugins.plugin.state import AssignmentConflict
from compute_plugins.request.inputs import RequestInput
from resources.vgpu import VGPUPlugin
from resources.vgpu import fit as vgpu_fit
from resources.vgpu.request import MdevAssignment, VGPUAssignment
from resources.vgpu.state import new_mdev_uuid
from tests.unit.resources.helpers import (
    NODE,
    Mdev,
    cell,
    decoded,
    encoded,
    gpu,
    host,
    on_cells,
    parse,
    socket_cell,
    state_of,
)

CELLS = [cell(0, range(4)), cell(1, range(4, 8))]
GPU_A = "0000:84:00.0"
GPU_B = "0000:85:00.0"
M1 = "11111111-1111-4111-8111-111111111111"
M2 = "22222222-2222-4222-8222-222222222222"


def uuid_of(address):
    return names.provider_uuid(NODE, "pci", address)


@pytest.fixture
def plugin(conf):
    conf.set_override("enabled_mdev_types", ["nvidia-35"], "vgpu")
    return VGPUPlugin(conf)


def state(plugin, info, *assignments):
    return state_of(plugin, plugin.discover(info), assignments)


def vgpus(plugin, count=1, policy=None, **specs):
    extra = {"resources:VGPU": str(count), **specs}
    if policy:
        extra["hw:pci_numa_affinity_policy"] = policy
    return parse(plugin, extra)


def two_gpus(a=4, b=4, cells=(0, 1), mdevs=()):
    return host(CELLS, [gpu(GPU_A, cells[0], nvidia_35=a),
                        gpu(GPU_B, cells[1], nvidia_35=b)], mdevs=mdevs)


def assigned(address, *mdevs, group="_VGPU"):
    return VGPUAssignment(devices=(MdevAssignment(
        group, uuid_of(address), address, "nvidia-35", tuple(mdevs)),))


# -- host state ---------------------------------------------------------------

def test_state_per_pgpu_with_provider_uuids_of_the_tree(plugin):
    info = two_gpus(a=3, mdevs=[Mdev(M2, "nvidia-35", GPU_A),
                                Mdev(M1, "nvidia-35", GPU_A)])
    view = plugin.discover(info)
    got = state_of(plugin, view, [])
    contributed = {c.name: c.uuid for c in plugin.provider_contributions(view, NODE)}
    assert [(g.address, g.provider_uuid, g.cell, g.total, g.free) for g in got.pgpus] == [
        (GPU_A, contributed["node1_pci_0000_84_00_0"], 0, 5, 5),
        (GPU_B, contributed["node1_pci_0000_85_00_0"], 1, 4, 4)]
    a = got.pgpus[0]
    assert (a.free_mdevs, a.used_mdevs, a.planned_mdevs, a.creatable) == (
        (M1, M2), (), (), 3)


def test_state_counts_existing_and_planned_mdevs(plugin):
    planned = new_mdev_uuid(uuid_of(GPU_A), 0)
    info = two_gpus(a=3, mdevs=[Mdev(M1, "nvidia-35", GPU_A)])
    got = state(plugin, info, assigned(GPU_A, M1, planned))
    a = got.pgpus[0]
    assert (a.used_mdevs, a.planned_mdevs, a.free_mdevs) == ((M1,), (planned,), ())
    assert (a.total, a.used, a.free, a.creatable) == (4, 2, 2, 2)


def test_state_json_round_trip(plugin):
    info = host([socket_cell(0, 0, [0, 1]), socket_cell(1, None, [2, 3], sockets=[0, 1])],
                [gpu(GPU_A, 1, nvidia_35=2)], mdevs=[Mdev(M1, "nvidia-35", GPU_A)])
    got = state(plugin, info, assigned(GPU_A, M1, M2))
    doc = encoded(plugin, got)
    assert doc["version"] == plugin.version
    assert decoded(plugin, doc) == got
    assert got.sockets == {0: 0, 1: None}


@pytest.mark.parametrize("assignments, reason", [
    ([assigned(GPU_A, M1), assigned(GPU_B, M1)],
     "mdev 11111111-1111-4111-8111-111111111111 is assigned twice (groups _VGPU and _VGPU)"),
    ([assigned("0000:99:00.0", M1)],
     "group _VGPU uses pGPU 0000:99:00.0, which offers no vGPUs on this host"),
    ([assigned(GPU_B, M2)],
     "mdev 22222222-2222-4222-8222-222222222222 exists on pGPU 0000:84:00.0, "
     "group _VGPU puts it on pGPU 0000:85:00.0"),
    ([assigned(GPU_B, *(str(uuid.UUID(int=i)) for i in range(5)))],
     "pGPU 0000:85:00.0 offers 4 mdevs of type nvidia-35 of which 0 exist; "
     "the assignments create 5 more"),
    ([VGPUAssignment(devices=(MdevAssignment("_VGPU", "elsewhere", GPU_A,
                                             "nvidia-35", (M1,)),))],
     "group _VGPU names provider elsewhere for pGPU 0000:84:00.0, whose "
     "provider is %s" % names.provider_uuid(NODE, "pci", GPU_A)),
])
def test_state_conflicts_name_the_unit(plugin, assignments, reason):
    info = two_gpus(mdevs=[Mdev(M2, "nvidia-35", GPU_A)])
    with pytest.raises(AssignmentConflict) as err:
        state(plugin, info, *assignments)
    assert err.value.plugin == "vgpu"
    assert err.value.reason == reason


# -- fit offline --------------------------------------------------------------

def test_offline_takes_a_free_existing_mdev_then_creates(plugin):
    info = two_gpus(mdevs=[Mdev(M1, "nvidia-35", GPU_A)])
    got = plugin.fit(state(plugin, info), vgpus(plugin, 2), None, {})
    created = new_mdev_uuid(uuid_of(GPU_A), 0)
    assert got == VGPUAssignment(devices=(MdevAssignment(
        "_VGPU", uuid_of(GPU_A), GPU_A, "nvidia-35", (M1, created)),))
    # the decision is the same every time, and differs once it is in force
    assert plugin.fit(state(plugin, info), vgpus(plugin, 2), None, {}) == got
    after = plugin.fit(state(plugin, info, got), vgpus(plugin, 2), None, {})
    assert after.devices[0].mdev_uuids == tuple(
        new_mdev_uuid(uuid_of(GPU_A), i) for i in (1, 2))


def test_offline_moves_on_when_a_pgpu_is_full(plugin):
    info = two_gpus(a=1)
    full = assigned(GPU_A, M1)
    got = plugin.fit(state(plugin, info, full), vgpus(plugin), None, {})
    assert got.devices[0].parent_address == GPU_B


def test_full_host_names_every_pgpu_and_the_numbers(plugin):
    info = two_gpus(a=1, b=1)
    got = plugin.fit(state(plugin, info, assigned(GPU_A, M1), assigned(GPU_B, M2)),
                     vgpus(plugin), None, {})
    assert got == Rejection(
        "no pGPU can serve group _VGPU: pGPU 0000:84:00.0 has 0 of 1 mdevs of "
        "type nvidia-35 free, group _VGPU needs 1; pGPU 0000:85:00.0 has 0 of "
        "1 mdevs of type nvidia-35 free, group _VGPU needs 1")


def test_host_without_pgpus(plugin):
    got = plugin.fit(state(plugin, host(CELLS)), vgpus(plugin), None, {})
    assert got == Rejection("no pGPU of this host offers vGPUs; group _VGPU needs 1")


def test_two_groups_share_a_pgpu_and_see_each_other(plugin):
    info = two_gpus(a=3, b=1)
    request = parse(plugin, {"resources1:VGPU": "1", "resources2:VGPU": "2"})
    got = plugin.fit(state(plugin, info), request, None, {})
    assert [(d.requester_id, d.parent_address) for d in got.devices] == [
        ("1", GPU_A), ("2", GPU_A)]
    assert len({m for d in got.devices for m in d.mdev_uuids}) == 3
    # with one instance taken, group 2 no longer fits after group 1
    fuller = plugin.fit(state(plugin, info, assigned(GPU_A, M1)), request, None, {})
    assert [(d.requester_id, d.parent_address) for d in fuller.devices] == [
        ("1", GPU_B), ("2", GPU_A)]


def test_group_policy_isolate_puts_numbered_groups_on_different_pgpus(plugin):
    # nova's VGPUTests.test_create_server_with_two_vgpus_isolated: Placement
    # keeps the two groups apart; the offline fit (nova's own query) must too
    info = two_gpus(a=4, b=4)
    specs = {"resources1:VGPU": "1", "resources2:VGPU": "1"}
    shared = plugin.fit(state(plugin, info), parse(plugin, {
        **specs, "group_policy": "none"}), None, {})
    assert [d.parent_address for d in shared.devices] == [GPU_A, GPU_A]
    isolated = parse(plugin, {**specs, "group_policy": "isolate"})
    got = plugin.fit(state(plugin, info), isolated, None, {})
    assert [(d.requester_id, d.parent_address) for d in got.devices] == [
        ("1", GPU_A), ("2", GPU_B)]
    # the unsuffixed group may share with a numbered one
    mixed = parse(plugin, {"resources:VGPU": "1", "resources1:VGPU": "1",
                           "group_policy": "isolate"})
    assert [d.parent_address for d in plugin.fit(
        state(plugin, info), mixed, None, {}).devices] == [GPU_A, GPU_A]
    # one pGPU with room for both: refused, naming the rule
    one = host(CELLS, [gpu(GPU_A, 0, nvidia_35=4)])
    assert plugin.fit(state(plugin, one), isolated, None, {}) == Rejection(
        "no pGPU can serve group 2: pGPU 0000:84:00.0 serves group 1 already, "
        "group 2 needs another one (group_policy=isolate)")


def test_verify_refuses_two_isolated_groups_on_one_pgpu(plugin):
    info = two_gpus()
    isolated = parse(plugin, {"resources1:VGPU": "1", "resources2:VGPU": "1",
                              "group_policy": "isolate"})
    both_on_a = VGPUAssignment(devices=(
        MdevAssignment("1", uuid_of(GPU_A), GPU_A, "nvidia-35", (M1,)),
        MdevAssignment("2", uuid_of(GPU_A), GPU_A, "nvidia-35", (M2,))))
    assert plugin.verify(state(plugin, info), isolated, both_on_a) == Rejection(
        "pGPU 0000:84:00.0 serves group 1 already, group 2 needs another one "
        "(group_policy=isolate)", uuid_of(GPU_A))


def test_instances_of_one_request_never_take_an_mdev_twice(plugin):
    # nova's num_instances > 1: the filter fits each instance on the state
    # with the earlier ones' assignments consumed (VGPUTests.
    # test_multiple_instance_create): one pGPU with room for two vGPUs, one
    # of them an existing free mdev
    info = host(CELLS, [gpu(GPU_A, 0, nvidia_35=1)],
                mdevs=[Mdev(M1, "nvidia-35", GPU_A)])
    request = vgpus(plugin)
    published = state(plugin, info)
    first = plugin.fit(published, request, None, {})
    second_state = published.consumed(first)
    second = plugin.fit(second_state, request, None, {})
    assert [d.mdev_uuids for d in first.devices] == [(M1,)]
    assert [d.mdev_uuids for d in second.devices] == [(new_mdev_uuid(uuid_of(GPU_A), 0),)]
    # the state after both equals the one the host publishes with both
    both = second_state.consumed(second)
    assert both == state(plugin, info, first, second)
    assert plugin.fit(both, request, None, {}) == Rejection(
        "no pGPU can serve group _VGPU: pGPU 0000:84:00.0 has 0 of 2 mdevs of "
        "type nvidia-35 free, group _VGPU needs 1")


@pytest.mark.parametrize(("earlier", "reason"), [
    (lambda s: assigned(GPU_B, M1), "an earlier guest of the request uses pGPU "
     "0000:85:00.0, which offers no vGPUs on this host"),
    (lambda s: assigned(GPU_A, M1, M1), "mdev %s on pGPU 0000:84:00.0 is taken "
     "twice (an earlier guest of the request)" % M1),
    (lambda s: assigned(GPU_A, M1, M2, "33333333-3333-4333-8333-333333333333"),
     "pGPU 0000:84:00.0 offers 2 mdevs of type nvidia-35; with an earlier guest "
     "of the request it would hold 3"),
])
def test_consuming_what_does_not_hold_names_it(plugin, earlier, reason):
    published = state(plugin, host(CELLS, [gpu(GPU_A, 0, nvidia_35=2)]))
    with pytest.raises(AssignmentConflict) as err:
        published.consumed(earlier(published))
    assert err.value.reason == reason


def test_consuming_one_new_mdev_on_two_pgpus_is_a_conflict(plugin):
    # what the host's own state would refuse ("assigned twice"), consumed
    # refuses too: one uuid planned on two pGPUs would count it twice
    info = two_gpus()
    published = state(plugin, info)
    new = new_mdev_uuid(uuid_of(GPU_A), 0)
    both = VGPUAssignment(devices=(
        MdevAssignment("1", uuid_of(GPU_A), GPU_A, "nvidia-35", (new,)),
        MdevAssignment("2", uuid_of(GPU_B), GPU_B, "nvidia-35", (new,))))
    with pytest.raises(AssignmentConflict):
        state(plugin, info, both)
    with pytest.raises(AssignmentConflict) as err:
        published.consumed(both)
    assert err.value.reason == (
        "mdev %s is on pGPU 0000:84:00.0, an earlier guest of the request "
        "puts it on pGPU 0000:85:00.0" % new)


def test_offline_finds_the_fit_the_best_first_choice_misses(plugin):
    # group 1 on the first pGPU (the greedy choice) leaves group 2 nowhere
    info = two_gpus(a=2, b=1)
    request = parse(plugin, {"resources1:VGPU": "1", "resources2:VGPU": "2"})
    got = plugin.fit(state(plugin, info), request, None, {})
    assert [(d.requester_id, d.parent_address) for d in got.devices] == [
        ("1", GPU_B), ("2", GPU_A)]
    # nothing fits: the reason names the group that found no pGPU
    none = plugin.fit(state(plugin, info, assigned(GPU_B, M1)), request, None, {})
    assert none == Rejection(
        "no pGPU can serve group 2: pGPU 0000:84:00.0 has 1 of 2 mdevs of type "
        "nvidia-35 free, group 2 needs 2; pGPU 0000:85:00.0 has 0 of 1 mdevs "
        "of type nvidia-35 free, group 2 needs 2")


def test_the_search_for_pgpus_has_a_budget_and_says_when_it_ran_out(plugin):
    info = two_gpus(a=2, b=1)
    request = parse(plugin, {"resources1:VGPU": "1", "resources2:VGPU": "2"})
    budget = Budget()
    assert isinstance(vgpu_fit.fit(state(plugin, info), request, None, {}, budget),
                      VGPUAssignment)
    used = budget.used
    assert 0 < used <= 12
    got = vgpu_fit.fit(state(plugin, info), request, None, {}, Budget(used - 1))
    assert got == Rejection(
        "the search for pGPUs for 2 VGPU groups stopped after %d steps (its "
        "budget) without an answer; the host may still fit" % (used - 1))


def test_mdev_type_traits_choose_the_pgpu(conf):
    conf.set_override("enabled_mdev_types", ["nvidia-35", "nvidia-36"], "vgpu")
    plugin = VGPUPlugin(conf)
    plugin.discover(host())
    conf.set_override("device_addresses", [GPU_B], "mdev_nvidia-36")
    info = host(CELLS, [gpu(GPU_A, 0, nvidia_35=4),
                        gpu(GPU_B, 1, nvidia_35=4, nvidia_36=2)])
    now = state(plugin, info)
    wanted = parse(plugin, {"resources:VGPU": "1",
                            "trait:CUSTOM_MDEV_TYPE_NVIDIA_36": "required"})
    got = plugin.fit(now, wanted, None, {})
    assert (got.devices[0].parent_address, got.devices[0].mdev_type) == (
        GPU_B, "nvidia-36")
    avoid = parse(plugin, {"resources:VGPU": "1",
                           "trait:CUSTOM_MDEV_TYPE_NVIDIA_35": "forbidden"})
    assert plugin.fit(now, avoid, None, {}).devices[0].parent_address == GPU_B
    assert plugin.fit(now, avoid, {"_VGPU": [uuid_of(GPU_A)]}, {}) == Rejection(
        "pGPU 0000:84:00.0 offers mdev type nvidia-35, which group _VGPU forbids",
        uuid_of(GPU_A))


def mlx5_and_vgpu(conf):
    """nova's DifferentMdevClassesTests: [mdev_mlx5_core] mdev_class =
    CUSTOM_NOTVGPU on GPU_A, nvidia-12 (VGPU) on GPU_B: the plugin and host."""
    conf.set_override("enabled_mdev_types", ["mlx5_core", "nvidia-12"], "vgpu")
    plugin = VGPUPlugin(conf)
    conf.set_override("device_addresses", [GPU_A], "mdev_mlx5_core")
    conf.set_override("device_addresses", [GPU_B], "mdev_nvidia-12")
    conf.set_override("mdev_class", "CUSTOM_NOTVGPU", "mdev_mlx5_core")
    # nova's fakelibvirt GPUs offer both types (mlx5_core keeps its "_")
    info = host(CELLS, [dataclasses.replace(g, mdev_types=(
        MdevType("mlx5_core", available_instances=16, device_api="vfio-pci"),
        *g.mdev_types)) for g in (gpu(GPU_A, 0, nvidia_12=8),
                                   gpu(GPU_B, 1, nvidia_12=8))])
    return plugin, info


def test_a_custom_mdev_class_is_asked_and_decided_as_that_class(conf):
    plugin, info = mlx5_and_vgpu(conf)
    view = plugin.discover(info)
    assert {c.name: sorted(c.inventory) for c in plugin.provider_contributions(
        view, NODE)} == {"node1_pci_0000_84_00_0": ["CUSTOM_NOTVGPU"],
                         "node1_pci_0000_85_00_0": ["VGPU"]}
    published = state(plugin, info)
    custom = parse(plugin, {"resources:CUSTOM_NOTVGPU": "1"})
    assert [(rg.requester_id, dict(rg.resources))
            for rg in plugin.request_groups(custom)] == [
        ("_VGPU", {"CUSTOM_NOTVGPU": 1})]
    got = plugin.fit(published, custom, None, {})
    assert [(d.parent_address, d.mdev_type, len(d.mdev_uuids))
            for d in got.devices] == [(GPU_A, "mlx5_core", 1)]
    # the decision names the mdev: the guest XML gets its <hostdev>
    assert len(plugin.guest_config(custom, got)) == 1
    vgpu = plugin.fit(published, parse(plugin, {"resources:VGPU": "1"}), None, {})
    assert [d.parent_address for d in vgpu.devices] == [GPU_B]
    # a full GPU of the class: no VGPU GPU serves it instead
    assert plugin.fit(published, parse(plugin, {"resources:CUSTOM_NOTVGPU": "17"}),
                      None, {}) == Rejection(
        "no pGPU can serve group _VGPU: pGPU 0000:84:00.0 has 16 of 16 mdevs of "
        "type mlx5_core free, group _VGPU needs 17; pGPU 0000:85:00.0 offers "
        "its mdevs as VGPU, group _VGPU asks for CUSTOM_NOTVGPU")


def test_the_unsuffixed_group_takes_each_mdev_class_from_its_own_pgpu(conf):
    # Placement serves each resource class of the unsuffixed group from one
    # provider, different classes from different ones (nova's driver then
    # makes an mdev on each pGPU of its allocation): not one pGPU for both
    plugin, info = mlx5_and_vgpu(conf)
    both = parse(plugin, {"resources:CUSTOM_NOTVGPU": "1", "resources:VGPU": "2",
                          "trait:CUSTOM_MDEV_TYPE_NVIDIA_11": "forbidden"})
    assert [(rg.requester_id, dict(rg.resources), sorted(rg.forbidden_traits))
            for rg in plugin.request_groups(both)] == [
        ("_VGPU", {"VGPU": 2}, ["CUSTOM_MDEV_TYPE_NVIDIA_11"]),
        ("_VGPU1", {"CUSTOM_NOTVGPU": 1}, ["CUSTOM_MDEV_TYPE_NVIDIA_11"])]
    got = plugin.fit(state(plugin, info), both, None, {})
    assert [(d.requester_id, d.parent_address, len(d.mdev_uuids))
            for d in got.devices] == [("_VGPU", GPU_B, 2), ("_VGPU1", GPU_A, 1)]
    # neither group is a numbered one: group_policy=isolate does not apply
    assert not any(g.numbered for g in both.groups)
    # which of its groups a required mdev type is for cannot be told
    ri = RequestInput.from_dicts({"name": "f", "vcpus": 2, "memory_mb": 2048,
                                  "extra_specs": {
                                      "resources:CUSTOM_NOTVGPU": "1",
                                      "resources:VGPU": "1",
                                      "trait:CUSTOM_MDEV_TYPE_NVIDIA_12": "required"}}
                                 ).for_plugin(plugin.name)
    plugin.parse_request(ri)
    assert [str(p) for p in ri.problems] == [
        "flavor trait:CUSTOM_MDEV_TYPE_NVIDIA_12='required': the unsuffixed "
        "group asks several mdev classes (CUSTOM_NOTVGPU, VGPU): require the "
        "mdev type in a numbered group with its class"]


def test_a_group_asks_one_mdev_class_and_other_custom_classes_are_not_mdevs(conf):
    conf.set_override("enabled_mdev_types", ["nvidia-35"], "vgpu")
    plugin = VGPUPlugin(conf)
    conf.set_override("mdev_class", "CUSTOM_NOTVGPU", "mdev_nvidia-35")
    ri = RequestInput.from_dicts({"name": "f", "vcpus": 2, "memory_mb": 2048,
                                  "extra_specs": {"resources1:CUSTOM_NOTVGPU": "1",
                                                  "resources1:VGPU": "1"}}
                                 ).for_plugin(plugin.name)
    plugin.parse_request(ri)
    assert [str(p) for p in ri.problems] == [
        "flavor resources1:VGPU='1': a group's mdevs come from one "
        "physical GPU, which offers one mdev class: the group asks "
        "CUSTOM_NOTVGPU already"]
    # a custom class no mdev type names is left to the framework
    assert plugin.parse_request(RequestInput.from_dicts({
        "name": "f", "vcpus": 2, "memory_mb": 2048,
        "extra_specs": {"resources:CUSTOM_OTHER": "1"}}).for_plugin(plugin.name)) is None


def test_max_instances_is_honoured(conf):
    conf.set_override("enabled_mdev_types", ["nvidia-35"], "vgpu")
    plugin = VGPUPlugin(conf)
    plugin.discover(host())
    conf.set_override("max_instances", 5, "mdev_nvidia-35")
    now = state(plugin, two_gpus(a=4, b=4))
    assert [(g.address, g.total) for g in now.pgpus] == [(GPU_A, 4)]
    assert isinstance(plugin.fit(now, vgpus(plugin, 4), None, {}), VGPUAssignment)
    assert plugin.fit(now, vgpus(plugin, 5), None, {}) == Rejection(
        "no pGPU can serve group _VGPU: pGPU 0000:84:00.0 has 4 of 4 mdevs of "
        "type nvidia-35 free, group _VGPU needs 5")


# -- placement mappings -------------------------------------------------------

def test_the_mapped_pgpu_is_used(plugin):
    info = two_gpus()
    got = plugin.fit(state(plugin, info), vgpus(plugin),
                     {"_VGPU": [uuid_of(GPU_B)], "": ["root"]}, {})
    assert got.devices[0].parent_address == GPU_B
    assert got.devices[0].provider_uuid == uuid_of(GPU_B)


def test_a_full_mapped_pgpu_is_rejected_even_if_another_has_room(plugin):
    info = two_gpus(b=1)
    got = plugin.fit(state(plugin, info, assigned(GPU_B, M1)), vgpus(plugin),
                     {"_VGPU": [uuid_of(GPU_B)]}, {})
    assert got == Rejection("pGPU 0000:85:00.0 has 0 of 1 mdevs of type "
                            "nvidia-35 free, group _VGPU needs 1", uuid_of(GPU_B))


def test_mapping_to_another_provider_or_none(plugin):
    now = state(plugin, two_gpus())
    assert plugin.fit(now, vgpus(plugin), {"_VGPU": ["other"]}, {}) == Rejection(
        "VGPU group _VGPU is allocated from provider other, which is not a "
        "pGPU of this host", "other")
    assert plugin.fit(now, vgpus(plugin), {"": ["root"]}, {}) == Rejection(
        "the allocation maps no provider to VGPU group _VGPU")


# -- NUMA affinity ------------------------------------------------------------

def test_required_takes_the_pgpu_of_the_guests_cell(plugin):
    info = two_gpus()
    got = plugin.fit(state(plugin, info), vgpus(plugin, policy="required"),
                     None, on_cells(1))
    assert got.devices[0].parent_address == GPU_B
    assert got.host_cells == (1,)


def test_required_refuses_a_pgpu_elsewhere(plugin):
    info = host(CELLS, [gpu(GPU_A, 0, nvidia_35=4)])
    now = state(plugin, info)
    got = plugin.fit(now, vgpus(plugin, policy="required"), None, on_cells(1))
    assert got == Rejection(
        "no pGPU can serve group _VGPU: pGPU 0000:84:00.0 is on host cell 0; "
        "hw:pci_numa_affinity_policy=required needs a device on one of the "
        "guest's host cells (1)")
    mapped = plugin.fit(now, vgpus(plugin, policy="required"),
                        {"_VGPU": [uuid_of(GPU_A)]}, on_cells(1))
    assert mapped.provider == uuid_of(GPU_A)
    # without a NUMA topology nothing is constrained
    assert isinstance(plugin.fit(now, vgpus(plugin, policy="required"), None, {}),
                      VGPUAssignment)


def test_preferred_falls_back_and_no_policy_prefers_affine(plugin):
    info = host(CELLS, [gpu(GPU_A, 0, nvidia_35=4)])
    now = state(plugin, info)
    got = plugin.fit(now, vgpus(plugin, policy="preferred"), None, on_cells(1))
    assert got.devices[0].parent_address == GPU_A
    # legacy means no policy for vGPUs (as in nova); the affine pGPU first
    both = state(plugin, two_gpus())
    got = plugin.fit(both, vgpus(plugin, policy="legacy"), None, on_cells(1))
    assert got.devices[0].parent_address == GPU_B


def test_socket_policy(plugin):
    cells = [socket_cell(0, 0, [0, 1]), socket_cell(1, 0, [2, 3]),
             socket_cell(2, 1, [4, 5])]
    info = host(cells, [gpu(GPU_A, 0, nvidia_35=4), gpu(GPU_B, 2, nvidia_35=4)])
    now = state(plugin, info)
    got = plugin.fit(now, vgpus(plugin, policy="socket"), None, on_cells(1))
    assert got.devices[0].parent_address == GPU_A
    full = state(plugin, info, assigned(GPU_A, *(str(uuid.UUID(int=i)) for i in range(4))))
    assert "pGPU 0000:85:00.0 is on host cell 2; hw:pci_numa_affinity_policy=" \
        "socket needs a device on the socket of the guest's host cells (1): " \
        "host cells 0, 1" in plugin.fit(full, vgpus(plugin, policy="socket"),
                                        None, on_cells(1)).reason


# -- verify -------------------------------------------------------------------

def test_verify_accepts_the_fit_and_rejects_after_a_change(plugin):
    info = two_gpus(a=1, mdevs=[Mdev(M1, "nvidia-35", GPU_A)])
    request = vgpus(plugin, policy="required")
    now = state(plugin, info)
    decided = plugin.fit(now, request, None, on_cells(0))
    assert decided.devices[0].mdev_uuids == (M1,)
    assert plugin.verify(now, request, decided) is None
    # another guest took the mdev in between
    taken = state(plugin, info, assigned(GPU_A, M1))
    assert plugin.verify(taken, request, decided) == Rejection(
        "mdev 11111111-1111-4111-8111-111111111111 on pGPU 0000:84:00.0 (group "
        "_VGPU) is used by another guest", uuid_of(GPU_A))
    # and once the pGPU is full, by the numbers
    full = state(plugin, info, assigned(GPU_A, M1, M2))
    assert plugin.verify(full, request, decided) == Rejection(
        "pGPU 0000:84:00.0 has 0 of 2 mdevs of type nvidia-35 free, group "
        "_VGPU needs 1", uuid_of(GPU_A))


def test_verify_checks_affinity_against_the_recorded_cells(plugin):
    now = state(plugin, two_gpus())
    request = vgpus(plugin, policy="required")
    decided = plugin.fit(now, request, None, on_cells(0))
    moved = VGPUAssignment(devices=decided.devices, host_cells=(1,))
    assert plugin.verify(now, request, moved).reason == (
        "pGPU 0000:84:00.0 is on host cell 0; hw:pci_numa_affinity_policy="
        "required needs a device on one of the guest's host cells (1)")


def test_verify_rejects_an_assignment_that_does_not_answer_the_request(plugin):
    now = state(plugin, two_gpus(mdevs=[Mdev(M1, "nvidia-35", GPU_B)]))
    request = vgpus(plugin, 1)
    assert plugin.verify(now, request, assigned(GPU_A, M1, M2)) == Rejection(
        "group _VGPU gets 2 mdevs, it asks 1", uuid_of(GPU_A))
    assert plugin.verify(now, request, assigned(GPU_A, M1)) == Rejection(
        "mdev 11111111-1111-4111-8111-111111111111 of group _VGPU is on pGPU "
        "0000:85:00.0, not on pGPU 0000:84:00.0", uuid_of(GPU_A))
    assert plugin.verify(now, request, assigned(GPU_A, M2, group="1")).reason == (
        "the assignment serves VGPU groups 1, the request asks _VGPU")


def test_verify_counts_what_can_still_be_created(plugin):
    # 2 instances: one existing free mdev and room to create one more
    info = two_gpus(a=1, mdevs=[Mdev(M1, "nvidia-35", GPU_A)])
    now = state(plugin, info)
    assert now.pgpus[0].creatable == 1
    two_new = assigned(GPU_A, str(uuid.UUID(int=1)), str(uuid.UUID(int=2)))
    assert plugin.verify(now, vgpus(plugin, 2), two_new) == Rejection(
        "pGPU 0000:84:00.0 can create 1 more mdevs of type nvidia-35, group "
        "_VGPU needs 2 new", uuid_of(GPU_A))


# -- guest XML ----------------------------------------------------------------

def test_guest_config_one_mdev_hostdev_each(plugin):
    decided = plugin.fit(state(plugin, two_gpus()), vgpus(plugin, 2), None, {})
    fragments = plugin.guest_config(vgpus(plugin, 2), decided)
    assert [f.parent for f in fragments] == ["devices", "devices"]
    for fragment, mdev in zip(fragments, decided.devices[0].mdev_uuids, strict=True):
        element = ET.fromstring(fragment.xml)
        assert (element.tag, element.attrib) == ("hostdev", {
            "mode": "subsystem", "type": "mdev", "model": "vfio-pci",
            "managed": "no"})
        assert element.find("source/address").attrib == {"uuid": mdev}
