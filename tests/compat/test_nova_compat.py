"""Our ProviderTree against nova's, scenario by scenario.

Each scenario is a list of calls. Every call runs on a fresh pair of trees
(ours and ``nova.compute.provider_tree.ProviderTree``); return values,
exception types and messages must match, and after each call so must the
whole tree (every provider's ``data()`` fields, in traversal order).

Without nova installed these tests are skipped, except when the environment
variable ``COMPUTE_PLUGINS_COMPAT`` is set (the tox ``compat`` env sets it):
then a missing nova is an import error, never a silent pass.
"""

import os

import os_traits
import pytest

from compute_plugins.tree import provider_tree as ours

if os.environ.get("COMPUTE_PLUGINS_COMPAT"):
    import nova.compute.provider_tree as nova_pt
else:
    nova_pt = pytest.importorskip("nova.compute.provider_tree")

FIELDS = ("uuid", "name", "generation", "parent_uuid", "inventory",
          "traits", "aggregates", "resources")

CN = "c0000000-0000-0000-0000-000000000000"
CN2 = "c2000000-0000-0000-0000-000000000000"
N0 = "00000000-0000-0000-0000-0000000000a0"
N1 = "00000000-0000-0000-0000-0000000000a1"
GPU = "00000000-0000-0000-0000-0000000000b0"
PF = "00000000-0000-0000-0000-0000000000c0"
SHR = "00000000-0000-0000-0000-0000000000d0"
AGG1 = "a0000000-0000-0000-0000-000000000001"
AGG2 = "a0000000-0000-0000-0000-000000000002"
MISSING = "ffffffff-0000-0000-0000-000000000000"

VCPU = {"total": 8, "reserved": 0, "min_unit": 1, "max_unit": 8,
        "step_size": 1, "allocation_ratio": 16.0}
MEM = {"total": 4096, "reserved": 512, "allocation_ratio": 1.5}


def call(method, *args, **kwargs):
    return (method, args, kwargs)


BUILD = [
    call("new_root", "cn1", CN, generation=0),
    call("new_child", "cn1_NUMA0", CN, uuid=N0, generation=1),
    call("new_child", "cn1_NUMA1", "cn1", uuid=N1),
    call("new_child", "cn1_pci_0000_3b_00_0", "cn1_NUMA0", uuid=GPU),
    call("new_child", "cn1_pf_0000_5e_00_0", N1, PF, 4),
]

SCENARIOS = {
    "build_and_query": BUILD + [
        call("get_provider_uuids"),
        call("get_provider_uuids", "cn1_NUMA0"),
        call("get_provider_uuids", GPU),
        call("get_provider_uuids_in_tree", "cn1_pf_0000_5e_00_0"),
        call("get_provider_uuids_in_tree", CN),
        call("exists", "cn1_NUMA1"),
        call("exists", GPU),
        call("exists", MISSING),
        call("data", "cn1_pci_0000_3b_00_0"),
        call("roots"),
        call("new_root", "cn2", CN2, 7),
        call("roots"),
        call("get_provider_uuids"),
    ],
    "errors": BUILD + [
        call("new_root", "cnX", CN),
        call("new_child", "cn1_NUMA0", CN),        # name taken, no uuid
        call("new_child", "other", N1, uuid=GPU),  # uuid taken
        call("new_child", "other", MISSING),
        call("data", MISSING),
        call("remove", "nope"),
        call("get_provider_uuids", "nope"),
        call("get_provider_uuids_in_tree", MISSING),
        call("has_inventory", "nope"),
        call("has_inventory_changed", "nope", {}),
        call("update_inventory", "nope", {}),
        call("has_traits", "nope", []),
        call("update_traits", "nope", []),
        call("add_traits", "nope", "CUSTOM_A"),
        call("add_traits", "nope"),                # no traits: no lookup
        call("remove_traits", "nope"),
        call("in_aggregates", "nope", []),
        call("add_aggregates", "nope", AGG1),
        call("update_resources", "nope", {}),
        call("subtree", "nope"),
        call("subtree", N0),
    ],
    "remove": BUILD + [
        call("remove", "cn1_NUMA0"),
        call("exists", GPU),
        call("exists", "cn1_pci_0000_3b_00_0"),
        call("new_child", "cn1_pci_0000_3b_00_0", N1, uuid=GPU),
        call("remove", PF),
        call("remove", CN),
        call("get_provider_uuids"),
        call("roots"),
    ],
    "inventory": BUILD + [
        call("has_inventory", CN),
        call("update_inventory", CN, {"VCPU": VCPU, "MEMORY_MB": MEM}, 3),
        call("has_inventory", CN),
        call("has_inventory_changed", CN, {"VCPU": VCPU, "MEMORY_MB": MEM}),
        # fields absent from the new records are ignored
        call("has_inventory_changed", CN,
             {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}}),
        call("update_inventory", CN,
             {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}}, 4),
        call("has_inventory_changed", CN,
             {"VCPU": {"total": 8, "reserved": 1}, "MEMORY_MB": MEM}),
        call("update_inventory", CN, {"VCPU": {"total": 8}}, None),
        call("update_inventory", CN, {"VCPU": {"total": 8, "foo": 1}}),
        call("update_inventory", CN, {"VCPU": {"total": 9}}, generation=4),
        call("update_inventory", CN, {}, 5),
        call("update_inventory", N0, {"PCPU": {"total": 4}}, generation=1),
        call("has_inventory_changed", N0, {"PCPU": {"total": 4},
                                           "VCPU": {"total": 4}}),
    ],
    "traits": BUILD + [
        call("has_traits", GPU, []),
        call("add_traits", GPU, "CUSTOM_MDEV_A", "CUSTOM_MDEV_B"),
        call("has_traits", GPU, ["CUSTOM_MDEV_A"]),
        call("has_traits", GPU, ["CUSTOM_MDEV_A", "CUSTOM_X"]),
        call("have_traits_changed", GPU, ["CUSTOM_MDEV_B", "CUSTOM_MDEV_A"]),
        call("have_traits_changed", GPU, ["CUSTOM_MDEV_A"]),
        call("remove_traits", GPU, "CUSTOM_MDEV_A", "CUSTOM_GONE"),
        call("update_traits", GPU, ["CUSTOM_MDEV_B"], 6),
        call("update_traits", GPU, ("CUSTOM_C",)),
        call("update_traits", GPU, ["CUSTOM_C"], generation=7),
        call("add_traits", GPU),
        call("remove_traits", GPU),
        call("update_traits", CN, [os_traits.COMPUTE_NODE]),
    ],
    "aggregates": BUILD + [
        call("in_aggregates", CN, []),
        call("add_aggregates", CN, AGG1),
        call("add_aggregates", CN),
        call("in_aggregates", CN, [AGG1]),
        call("in_aggregates", CN, [AGG1, AGG2]),
        call("have_aggregates_changed", CN, [AGG1, AGG2]),
        call("update_aggregates", CN, [AGG1, AGG2], generation=2),
        call("have_aggregates_changed", CN, {AGG2, AGG1}),
        call("update_aggregates", CN, [AGG2, AGG1], 3),
        call("remove_aggregates", CN, AGG1, MISSING),
        call("remove_aggregates", CN),
        call("update_aggregates", CN, []),
    ],
    "resources": BUILD + [
        call("update_resources", GPU, {"VGPU": {"dev1", "dev2"}}),
        call("update_resources", GPU, {"VGPU": {"dev2", "dev1"}}),
        call("update_resources", GPU, {"VGPU": ["dev1"]}),
        call("update_resources", GPU, {"VGPU": ["dev1"]}),
        call("update_resources", GPU, {}),
    ],
    "sharing": BUILD + [
        call("new_root", "shared", SHR, 0),
        call("update_inventory", SHR, {"DISK_GB": {"total": 100}}),
        call("has_sharing_provider", "DISK_GB"),
        call("add_traits", SHR, os_traits.MISC_SHARES_VIA_AGGREGATE),
        call("has_sharing_provider", "DISK_GB"),
        call("has_sharing_provider", "VCPU"),
    ],
    "populate": [
        call("populate_from_iterable", []),
        # children before parents in the input
        call("populate_from_iterable", [
            {"uuid": GPU, "name": "gpu", "generation": 3,
             "parent_provider_uuid": N0},
            {"uuid": N1, "name": "numa1", "parent_provider_uuid": CN},
            {"uuid": N0, "name": "numa0", "generation": 2,
             "parent_provider_uuid": CN},
            {"uuid": CN, "name": "cn1", "generation": 1},
            {"uuid": CN2, "name": "cn2"},
        ]),
        call("get_provider_uuids"),
        call("update_inventory", N0, {"PCPU": {"total": 4}}),
        call("add_traits", N1, "CUSTOM_A"),
        # orphan: nothing changes
        call("populate_from_iterable", [
            {"uuid": PF, "name": "pf", "parent_provider_uuid": MISSING}]),
        # replace a child (drops its data), add under an existing provider
        call("populate_from_iterable", [
            {"uuid": PF, "name": "pf", "parent_provider_uuid": N1},
            {"uuid": N0, "name": "numa0", "generation": 9,
             "parent_provider_uuid": CN},
        ]),
        call("get_provider_uuids", CN),
        call("exists", GPU),
        # replacing a root moves it to the end of the roots
        call("populate_from_iterable", [{"uuid": CN, "name": "cn1",
                                         "generation": 5},
                                        {"uuid": N1, "name": "numa1",
                                         "parent_provider_uuid": CN}]),
        call("roots"),
        call("get_provider_uuids"),
    ],
    "subtree": BUILD + [
        call("new_root", "cn2", CN2),
        call("update_inventory", GPU, {"VGPU": {"total": 4}}, 2),
        call("add_traits", GPU, "CUSTOM_MDEV_A"),
        call("add_aggregates", CN, AGG1),
        call("subtree", CN),
        call("subtree", CN2),
    ],
}


def _data(pdata):
    return {f: getattr(pdata, f) for f in FIELDS}


def _state(tree):
    return [_data(tree.data(u)) for u in tree.get_provider_uuids()]


def _normalize(method, result):
    if method == "data":
        return _data(result)
    if method == "roots":
        return [_data(r.data()) for r in result]
    if method == "subtree":
        return (result.scope_rp_uuid, _state(result))
    return result


def _run(tree, method, args, kwargs):
    try:
        if method == "roots":
            result = tree.roots
        else:
            result = getattr(tree, method)(*args, **kwargs)
    except Exception as exc:
        return "raised", exc
    return "returned", _normalize(method, result)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_same_as_nova(name):
    mine, theirs = ours.ProviderTree(), nova_pt.ProviderTree()
    for step, (method, args, kwargs) in enumerate(SCENARIOS[name]):
        where = f"{name} step {step}: {method}{args}"
        got_kind, got = _run(mine, method, args, kwargs)
        want_kind, want = _run(theirs, method, args, kwargs)
        assert got_kind == want_kind, (where, got, want)
        if got_kind == "raised":
            # ours may raise a subclass; `except <nova's type>` still works
            assert isinstance(got, type(want)), (where, got, want)
            assert str(got) == str(want), where
        else:
            assert got == want, where
        assert _state(mine) == _state(theirs), where


def test_scenarios_touch_the_whole_api():
    used = {m for steps in SCENARIOS.values() for m, _, _ in steps}
    public = {m for m in dir(nova_pt.ProviderTree) if not m.startswith("_")}
    assert public - {"lock", "roots_by_uuid", "roots_by_name"} <= used
