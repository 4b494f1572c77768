"""Behaviour of compute_plugins.tree.provider_tree.ProviderTree."""

import copy
import pickle
import threading

import os_traits
import pytest

from compute_plugins.tree import provider_tree as pt_mod
from compute_plugins.tree.provider_tree import (
    MissingParents,
    ProviderData,
    ProviderExists,
    ProviderNotFound,
    ProviderSubTree,
    ProviderTree,
)

ROOT = "11111111-1111-1111-1111-111111111111"
NUMA0 = "22222222-2222-2222-2222-222222222222"
NUMA1 = "33333333-3333-3333-3333-333333333333"
GPU = "44444444-4444-4444-4444-444444444444"
OTHER = "55555555-5555-5555-5555-555555555555"
AGG1 = "aaaaaaaa-0000-0000-0000-000000000001"
AGG2 = "aaaaaaaa-0000-0000-0000-000000000002"

VCPU = {"total": 8, "reserved": 0, "min_unit": 1, "max_unit": 8,
        "step_size": 1, "allocation_ratio": 16.0}


@pytest.fixture
def tree():
    """cn1 -> (cn1_NUMA0 -> cn1_GPU, cn1_NUMA1)."""
    t = ProviderTree()
    t.new_root("cn1", ROOT, generation=0)
    t.new_child("cn1_NUMA0", ROOT, uuid=NUMA0, generation=1)
    t.new_child("cn1_GPU", "cn1_NUMA0", uuid=GPU)
    t.new_child("cn1_NUMA1", "cn1", uuid=NUMA1)
    return t


class TestBuilding:
    def test_shape_and_order(self, tree):
        assert tree.get_provider_uuids() == [ROOT, NUMA0, GPU, NUMA1]
        assert tree.get_provider_uuids(NUMA0) == [NUMA0, GPU]
        assert tree.get_provider_uuids_in_tree("cn1_GPU") == [
            ROOT, NUMA0, GPU, NUMA1]
        assert tree.data(GPU).parent_uuid == NUMA0
        assert tree.data("cn1").parent_uuid is None

    def test_lookup_by_name_and_uuid(self, tree):
        for name, uuid in (("cn1", ROOT), ("cn1_GPU", GPU)):
            assert tree.exists(name) and tree.exists(uuid)
            assert tree.data(name) == tree.data(uuid)
        assert not tree.exists("nope")

    def test_generated_uuid(self):
        t = ProviderTree()
        root = t.new_root("r", None)
        child = t.new_child("c", root)
        assert t.exists(root) and t.data(child).parent_uuid == root
        assert root != child

    @pytest.mark.parametrize("args", [
        ("cn1", OTHER),        # name taken
        ("cnX", ROOT),         # uuid taken
        ("cnX", "cn1_GPU"),    # uuid equal to an existing name
    ])
    def test_new_root_duplicate(self, tree, args):
        with pytest.raises(ProviderExists) as exc:
            tree.new_root(*args)
        assert isinstance(exc.value, ValueError)

    def test_new_child_duplicate_and_missing_parent(self, tree):
        with pytest.raises(ProviderExists):
            tree.new_child("cn1_GPU", ROOT)
        with pytest.raises(ProviderExists):
            tree.new_child("new", ROOT, uuid=GPU)
        with pytest.raises(ProviderNotFound) as exc:
            tree.new_child("new", "nope")
        assert exc.value.name_or_uuid == "nope"
        assert not tree.exists("new")

    def test_not_found_is_value_error(self, tree):
        for call in (tree.data, tree.remove, tree.get_provider_uuids,
                     tree.get_provider_uuids_in_tree, tree.has_inventory):
            with pytest.raises(ValueError, match="No such provider nope"):
                call("nope")

    def test_remove_subtree_updates_indexes(self, tree):
        tree.remove("cn1_NUMA0")
        assert tree.get_provider_uuids() == [ROOT, NUMA1]
        for gone in (NUMA0, GPU, "cn1_NUMA0", "cn1_GPU"):
            assert not tree.exists(gone)
        # names and uuids are free again
        tree.new_child("cn1_GPU", NUMA1, uuid=GPU)
        assert tree.get_provider_uuids(NUMA1) == [NUMA1, GPU]

    def test_remove_root(self, tree):
        tree.new_root("cn2", OTHER)
        tree.remove(ROOT)
        assert tree.get_provider_uuids() == [OTHER]
        assert [r.uuid for r in tree.roots] == [OTHER]
        assert tree.roots_by_name.keys() == {"cn2"}

    def test_roots_are_data(self, tree):
        tree.new_root("cn2", OTHER)
        tree.add_traits("cn2", os_traits.COMPUTE_NODE)
        roots = tree.roots
        assert [r.name for r in roots] == ["cn1", "cn2"]
        # nova's resource tracker pattern
        assert [r.data().uuid for r in roots
                if os_traits.COMPUTE_NODE in r.traits] == [OTHER]
        roots[1].traits.clear()
        assert tree.has_traits("cn2", [os_traits.COMPUTE_NODE])


class TestInventory:
    def test_update_and_change_detection(self, tree):
        assert not tree.has_inventory(ROOT)
        assert tree.update_inventory(ROOT, {"VCPU": VCPU}, generation=5)
        assert tree.has_inventory(ROOT)
        assert tree.data(ROOT).generation == 5
        assert not tree.has_inventory_changed(ROOT, {"VCPU": dict(VCPU)})

    def test_absent_fields_ignored(self, tree):
        tree.update_inventory(ROOT, {"VCPU": VCPU})
        assert not tree.has_inventory_changed(ROOT, {"VCPU": {"total": 8}})
        assert not tree.update_inventory(ROOT, {"VCPU": {"total": 8}})
        # the stored record keeps its other fields
        assert tree.data(ROOT).inventory["VCPU"] == VCPU
        assert tree.has_inventory_changed(ROOT, {"VCPU": {"total": 9}})

    def test_new_field_or_class_is_a_change(self, tree):
        tree.update_inventory(ROOT, {"VCPU": {"total": 8}})
        assert tree.has_inventory_changed(
            ROOT, {"VCPU": {"total": 8, "reserved": 0}})
        assert tree.has_inventory_changed(
            ROOT, {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 1}})
        assert tree.has_inventory_changed(ROOT, {})

    def test_generation_rules(self, tree):
        tree.update_inventory(ROOT, {"VCPU": VCPU}, generation=1)
        # no change, generation still stored
        assert not tree.update_inventory(ROOT, {"VCPU": VCPU}, generation=7)
        assert tree.data(ROOT).generation == 7
        # None leaves it alone
        assert not tree.update_inventory(ROOT, {"VCPU": VCPU})
        assert tree.data(ROOT).generation == 7
        assert not tree.update_traits(ROOT, [], generation=8)
        assert not tree.update_aggregates(ROOT, [], generation=9)
        assert tree.data(ROOT).generation == 9
        tree.add_traits(ROOT, "CUSTOM_A")
        tree.add_aggregates(ROOT, AGG1)
        tree.update_resources(ROOT, {"VGPU": {"r1"}})
        assert tree.data(ROOT).generation == 9

    def test_caller_cannot_change_stored_inventory(self, tree):
        inv = {"VCPU": dict(VCPU)}
        tree.update_inventory(ROOT, inv)
        inv["VCPU"]["total"] = 1
        assert tree.data(ROOT).inventory["VCPU"]["total"] == 8

    def test_has_sharing_provider(self, tree):
        tree.update_inventory(NUMA1, {"DISK_GB": {"total": 100}})
        assert not tree.has_sharing_provider("DISK_GB")
        tree.add_traits(NUMA1, os_traits.MISC_SHARES_VIA_AGGREGATE)
        assert tree.has_sharing_provider("DISK_GB")
        assert not tree.has_sharing_provider("VCPU")


class TestTraitsAndAggregates:
    def test_traits(self, tree):
        assert tree.has_traits(GPU, [])
        tree.add_traits(GPU, "CUSTOM_A", "CUSTOM_B")
        assert tree.has_traits(GPU, ["CUSTOM_A"])
        assert not tree.has_traits(GPU, ["CUSTOM_A", "CUSTOM_C"])
        assert not tree.have_traits_changed(GPU, ["CUSTOM_B", "CUSTOM_A"])
        assert tree.have_traits_changed(GPU, ["CUSTOM_A"])
        tree.remove_traits(GPU, "CUSTOM_A", "CUSTOM_MISSING")
        assert tree.data(GPU).traits == {"CUSTOM_B"}
        assert tree.update_traits(GPU, ["CUSTOM_C"])
        assert not tree.update_traits(GPU, iter(["CUSTOM_C"]))
        tree.add_traits(GPU)
        tree.remove_traits(GPU)
        assert tree.data(GPU).traits == {"CUSTOM_C"}

    def test_aggregates(self, tree):
        assert tree.in_aggregates(ROOT, [])
        tree.add_aggregates(ROOT, AGG1)
        assert tree.in_aggregates(ROOT, [AGG1])
        assert not tree.in_aggregates(ROOT, [AGG1, AGG2])
        assert tree.have_aggregates_changed(ROOT, [AGG1, AGG2])
        assert tree.update_aggregates(ROOT, [AGG1, AGG2], generation=3)
        assert not tree.have_aggregates_changed(ROOT, {AGG2, AGG1})
        tree.remove_aggregates(ROOT, AGG1)
        assert tree.data(ROOT).aggregates == {AGG2}
        assert tree.data(ROOT).generation == 3

    def test_resources(self, tree):
        assert tree.update_resources(GPU, {"VGPU": {"dev1", "dev2"}})
        assert not tree.update_resources(GPU, {"VGPU": {"dev2", "dev1"}})
        assert tree.data(GPU).resources == {"VGPU": {"dev1", "dev2"}}


class TestPopulate:
    def test_add_and_replace(self, tree):
        tree.update_inventory(NUMA1, {"VCPU": VCPU})
        tree.add_traits(NUMA1, "CUSTOM_X")
        tree.populate_from_iterable([
            {"uuid": OTHER, "name": "cn1_NUMA1_child", "generation": 2,
             "parent_provider_uuid": NUMA1},
            {"uuid": NUMA1, "name": "cn1_NUMA1", "generation": 4,
             "parent_provider_uuid": ROOT},
        ])
        numa1 = tree.data(NUMA1)
        # replaced: new generation, data dropped (nova's rule)
        assert (numa1.generation, numa1.inventory, numa1.traits) == (
            4, {}, set())
        assert tree.get_provider_uuids(NUMA1) == [NUMA1, OTHER]
        assert tree.data("cn1_NUMA1_child").generation == 2

    def test_replacing_parent_drops_unlisted_descendants(self, tree):
        tree.populate_from_iterable([
            {"uuid": NUMA0, "name": "cn1_NUMA0",
             "parent_provider_uuid": ROOT}])
        assert not tree.exists(GPU) and not tree.exists("cn1_GPU")
        assert tree.get_provider_uuids() == [ROOT, NUMA1, NUMA0]

    def test_orphans(self, tree):
        before = tree.snapshot()
        with pytest.raises(MissingParents) as exc:
            tree.populate_from_iterable([
                {"uuid": OTHER, "name": "x", "parent_provider_uuid": "p1"},
                {"uuid": "u2", "name": "y", "parent_provider_uuid": "p2"}])
        assert exc.value.parent_uuids == {"p1", "p2"}
        assert "The following parents were not found" in str(exc.value)
        assert isinstance(exc.value, ValueError)
        assert tree.snapshot() == before

    def test_parent_only_in_replaced_subtree_is_missing(self, tree):
        with pytest.raises(MissingParents):
            tree.populate_from_iterable([
                {"uuid": NUMA0, "name": "cn1_NUMA0",
                 "parent_provider_uuid": ROOT},
                {"uuid": OTHER, "name": "x", "parent_provider_uuid": GPU}])

    def test_name_taken_by_a_kept_provider(self, tree):
        with pytest.raises(ProviderExists):
            tree.populate_from_iterable([{"uuid": OTHER, "name": "cn1_GPU"}])
        with pytest.raises(ProviderExists):
            tree.populate_from_iterable([{"uuid": OTHER, "name": "n"},
                                         {"uuid": "u2", "name": "n"}])
        assert not tree.exists(OTHER)

    def test_name_freed_by_a_replaced_subtree(self, tree):
        # cn1_GPU goes away with its replaced parent, so the name is free,
        # even though the new holder is added before the parent is replaced.
        tree.populate_from_iterable([
            {"uuid": OTHER, "name": "cn1_GPU"},
            {"uuid": NUMA0, "name": "cn1_NUMA0",
             "parent_provider_uuid": ROOT}])
        assert tree.data("cn1_GPU").uuid == OTHER
        assert not tree.exists(GPU)

    def test_empty_is_noop(self, tree):
        tree.populate_from_iterable([])
        assert len(tree.get_provider_uuids()) == 4


class TestCopies:
    def test_data_is_a_safe_copy(self, tree):
        tree.update_inventory(ROOT, {"VCPU": VCPU})
        tree.add_traits(ROOT, "CUSTOM_A")
        tree.add_aggregates(ROOT, AGG1)
        tree.update_resources(ROOT, {"VGPU": {"dev1"}})
        d = tree.data(ROOT)
        assert isinstance(d, ProviderData) and isinstance(d, tuple)
        d.inventory["VCPU"]["total"] = 0
        d.inventory["NEW"] = {}
        d.traits.add("CUSTOM_B")
        d.aggregates.clear()
        d.resources["VGPU"].add("dev2")
        again = tree.data(ROOT)
        assert again.inventory == {"VCPU": VCPU}
        assert again.traits == {"CUSTOM_A"}
        assert again.aggregates == {AGG1}
        assert again.resources == {"VGPU": {"dev1"}}

    def test_subtree(self, tree):
        tree.new_root("cn2", OTHER)
        tree.update_inventory(GPU, {"VGPU": {"total": 4}})
        sub = tree.subtree("cn1")
        assert isinstance(sub, ProviderSubTree)
        assert sub.scope_rp_uuid == ROOT
        assert sub.get_provider_uuids() == [ROOT, NUMA0, GPU, NUMA1]
        assert not sub.exists(OTHER)
        assert sub.lock is not tree.lock
        sub.update_inventory(GPU, {"VGPU": {"total": 1}})
        sub.remove(NUMA1)
        assert tree.data(GPU).inventory == {"VGPU": {"total": 4}}
        assert tree.exists(NUMA1)
        with pytest.raises(ValueError, match="not a root"):
            tree.subtree(GPU)
        with pytest.raises(ProviderNotFound):
            tree.subtree("nope")

    def test_deepcopy_and_pickle(self, tree):
        tree.update_inventory(GPU, {"VGPU": {"total": 4}})
        for clone in (copy.deepcopy(tree), pickle.loads(pickle.dumps(tree))):
            assert clone.snapshot() == tree.snapshot()
            assert clone.lock is not tree.lock
            clone.update_inventory(GPU, {"VGPU": {"total": 1}})
            clone.remove("cn1_NUMA1")
            assert tree.data(GPU).inventory == {"VGPU": {"total": 4}}
            assert tree.exists("cn1_NUMA1")


class TestSnapshotRestore:
    def _fill(self, tree):
        tree.update_inventory(NUMA0, {"PCPU": {"total": 4}}, generation=3)
        tree.add_traits(GPU, "CUSTOM_MDEV_A")
        tree.add_aggregates(ROOT, AGG1)
        tree.update_resources(GPU, {"VGPU": {"dev1"}})

    def test_order_and_read_only(self, tree):
        self._fill(tree)
        snap = tree.snapshot()
        assert isinstance(snap, tuple)
        assert [p.uuid for p in snap] == tree.get_provider_uuids()
        numa0 = snap[1]
        assert numa0 == tree.data(NUMA0)
        with pytest.raises(TypeError):
            numa0.inventory["PCPU"]["total"] = 0
        with pytest.raises(TypeError):
            numa0.inventory["X"] = {}
        with pytest.raises(AttributeError):
            snap[2].traits.add("CUSTOM_Z")
        with pytest.raises(TypeError):
            snap[2].resources["X"] = set()

    def test_snapshot_unaffected_by_later_changes(self, tree):
        self._fill(tree)
        snap = tree.snapshot()
        tree.update_inventory(NUMA0, {"PCPU": {"total": 8}})
        tree.update_resources(GPU, {"VGPU": {"dev9"}})
        tree.remove_traits(GPU, "CUSTOM_MDEV_A")
        assert snap[1].inventory["PCPU"]["total"] == 4
        assert snap[2].traits == {"CUSTOM_MDEV_A"}
        assert snap[2].resources == {"VGPU": {"dev1"}}

    def test_round_trip(self, tree):
        self._fill(tree)
        tree.new_root("cn2", OTHER, generation=12)
        snap = tree.snapshot()
        datas = [tree.data(u) for u in tree.get_provider_uuids()]
        # a failed plugin's partial work
        tree.remove(NUMA0)
        tree.new_child("cn1_NUMA0", "cn2", uuid="new-numa0")
        tree.update_inventory(ROOT, {"VCPU": VCPU}, generation=99)
        tree.update_traits(OTHER, ["CUSTOM_Q"], generation=13)
        tree.restore(snap)
        assert [tree.data(u) for u in tree.get_provider_uuids()] == datas
        assert not tree.exists("new-numa0")
        assert tree.get_provider_uuids_in_tree("cn1_GPU") == [
            ROOT, NUMA0, GPU, NUMA1]
        assert [r.uuid for r in tree.roots] == [ROOT, OTHER]
        # the snapshot is still good for a second restore
        tree.remove(ROOT)
        tree.restore(snap)
        assert tree.snapshot() == snap

    def test_restore_is_isolated_from_the_snapshot(self, tree):
        self._fill(tree)
        snap = tree.snapshot()
        tree.restore(snap)
        tree.update_inventory(NUMA0, {"PCPU": {"total": 1}})
        tree.update_resources(GPU, {"VGPU": set()})
        assert snap[1].inventory["PCPU"]["total"] == 4
        assert snap[2].resources == {"VGPU": {"dev1"}}

    def test_restore_empty_and_from_data(self, tree):
        datas = [tree.data(u) for u in tree.get_provider_uuids()]
        tree.restore(())
        assert tree.get_provider_uuids() == [] and not tree.exists(ROOT)
        tree.restore(datas)
        assert tree.get_provider_uuids() == [ROOT, NUMA0, GPU, NUMA1]

    def test_bad_snapshot_leaves_tree_unchanged(self, tree):
        before = tree.snapshot()
        child_first = (before[1], before[0])
        with pytest.raises(ValueError):
            tree.restore(child_first)
        with pytest.raises(ProviderExists):
            tree.restore(before + before[:1])
        assert tree.snapshot() == before


class TestLocking:
    def test_lock_per_tree(self):
        a, b = ProviderTree(), ProviderTree()
        assert a.lock is not b.lock
        b.new_root("b", OTHER)
        held = threading.Event()
        release = threading.Event()

        def hold_a():
            with a.lock:
                held.set()
                release.wait(5)

        t = threading.Thread(target=hold_a)
        t.start()
        held.wait(5)
        try:
            # b is usable while a's lock is held by another thread
            assert b.update_inventory("b", {"VCPU": {"total": 1}})
            assert not a.lock.acquire(blocking=False)
        finally:
            release.set()
            t.join()

    def test_no_module_level_lock(self):
        assert not any(isinstance(v, type(threading.RLock()))
                       for v in vars(pt_mod).values())

    def test_threads_mutating_one_tree(self):
        tree = ProviderTree()
        tree.new_root("cn", ROOT, generation=0)
        n_threads, n_children = 8, 50
        errors = []

        def work(i):
            try:
                for j in range(n_children):
                    name = f"cn_{i}_{j}"
                    tree.new_child(name, "cn", uuid=name)
                    tree.update_inventory(name, {"VCPU": {"total": j}})
                    tree.add_traits("cn", f"CUSTOM_T{i}_{j}")
                    tree.add_aggregates(name, AGG1)
                    if j % 2:
                        tree.remove(name)
                    tree.snapshot()
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,))
                   for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        uuids = tree.get_provider_uuids()
        assert len(uuids) == 1 + n_threads * n_children // 2
        assert len(tree.data("cn").traits) == n_threads * n_children
        for u in uuids[1:]:
            assert tree.data(u).inventory["VCPU"]["total"] % 2 == 0
            assert tree.in_aggregates(u, [AGG1])
        snap = tree.snapshot()
        assert {p.uuid for p in snap} == set(uuids)
        assert all(tree.exists(p.name) for p in snap)
