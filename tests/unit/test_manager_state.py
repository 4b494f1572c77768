"""What the manager remembers: commits, checkpoints, adoption, reshapes."""

from __future__ import annotations

import json

import pytest
from oslo_config import cfg
from oslo_config import fixture as config_fixture
from stevedore import extension

from compute_plugins import exception
from compute_plugins.host.model import CPU, DiskInfo, HostInfo, NUMACell
from compute_plugins.runtime.manager import PluginManager
from compute_plugins.tree.provider_tree import ProviderTree
from compute_plugins.tree.reshape import ReshapeImpossible
from tests.unit import fake_plugins

HOST = HostInfo(hostname="node1", source="test", memory_kb=64,
                disk=DiskInfo(total_gb=100, free_gb=50),
                cells=(NUMACell(0, cpus=(CPU(0), CPU(1))),
                       NUMACell(1, cpus=(CPU(2), CPU(3)))))
NO_WIDGETS = HostInfo(hostname="node1", source="test", memory_kb=0,
                      disk=DiskInfo(total_gb=100, free_gb=50), cells=HOST.cells)


@pytest.fixture
def conf():
    fixture = config_fixture.Config(cfg.ConfigOpts())
    fixture.setUp()
    yield fixture.conf
    fixture.cleanUp()


def make_manager(conf, *classes, **kwargs):
    extensions = [extension.Extension(c.name, None, c, c(conf)) for c in classes]
    mgr = extension.ExtensionManager.make_test_instance(extensions)
    return PluginManager(conf, extension_manager=mgr, **kwargs)


def run(manager, tree, host=HOST, allocations=None):
    manager.discover(host)
    manager.update_provider_tree(tree, host.hostname, allocations)
    return tree


def placement_copy(tree):
    """A fresh tree holding what Placement would hand back after a restart."""
    copy = ProviderTree()
    copy.restore(tree.snapshot())
    return copy


def test_checkpoint_lets_a_restarted_agent_remove_a_vanished_device(conf, tmp_path):
    first = make_manager(conf, fake_plugins.Widgets, fake_plugins.RootDisk,
                         checkpoint_dir=str(tmp_path))
    tree = run(first, ProviderTree())
    saved = json.loads((tmp_path / "node1.contributions.json").read_text())
    assert saved["nodename"] == "node1"
    assert [p["name"] for p in saved["plugins"]["widgets"]] == ["node1_widgets"]
    tree.add_traits("node1", "CUSTOM_OPERATOR")

    restarted = make_manager(conf, fake_plugins.Widgets, fake_plugins.RootDisk,
                             checkpoint_dir=str(tmp_path))
    tree = run(restarted, placement_copy(tree), NO_WIDGETS)
    assert not tree.exists("node1_widgets")
    assert tree.data("node1").traits == {"CUSTOM_LOCAL_DISK", "CUSTOM_OPERATOR"}


def test_stale_trait_is_removed_after_a_restart(conf, tmp_path):
    first = make_manager(conf, fake_plugins.RootDisk, checkpoint_dir=str(tmp_path))
    tree = run(first, ProviderTree())
    tree.add_traits("node1", "CUSTOM_OPERATOR")

    class NewTrait(fake_plugins.RootDisk):
        def provider_contributions(self, view, nodename):
            (item,) = super().provider_contributions(view, nodename)
            return [item.__class__(name=item.name, inventory=item.inventory,
                                   traits={"CUSTOM_REMOTE_DISK"})]

    restarted = make_manager(conf, NewTrait, checkpoint_dir=str(tmp_path))
    tree = run(restarted, placement_copy(tree))
    assert tree.data("node1").traits == {"CUSTOM_REMOTE_DISK", "CUSTOM_OPERATOR"}


def test_uncommitted_update_is_diffed_again(conf):
    manager = make_manager(conf, fake_plugins.Widgets, auto_commit=False)
    tree = run(manager, ProviderTree())
    manager.commit()
    in_placement = placement_copy(tree)
    # The device vanishes, but the sync of that periodic fails ...
    run(manager, tree, NO_WIDGETS)
    manager.discard()
    # ... so the next periodic, on the tree re-read from Placement, removes it.
    tree = run(manager, in_placement, NO_WIDGETS)
    assert not tree.exists("node1_widgets")


def test_without_checkpoint_the_tree_is_adopted(conf):
    tree = ProviderTree()
    tree.new_root("node1", "a6f6b4ad-8a2f-4a3f-9c4f-8a1ce3f9c001")
    tree.new_child("node1_gone", "node1", uuid="a6f6b4ad-8a2f-4a3f-9c4f-8a1ce3f9c002")
    tree.update_inventory("node1_gone", {"CUSTOM_GONE": {"total": 2}})
    tree.add_traits("node1", "CUSTOM_OPERATOR")
    manager = make_manager(conf, fake_plugins.Widgets, fake_plugins.RootDisk)
    run(manager, tree)
    assert not tree.exists("node1_gone")
    assert tree.exists("node1_widgets")
    # The root keeps its uuid and the operator's trait.
    assert tree.data("node1").uuid == "a6f6b4ad-8a2f-4a3f-9c4f-8a1ce3f9c001"
    assert "CUSTOM_OPERATOR" in tree.data("node1").traits


def test_adopted_providers_stay_while_a_plugin_fails(conf):
    tree = ProviderTree()
    tree.new_root("node1", "a6f6b4ad-8a2f-4a3f-9c4f-8a1ce3f9c001")
    tree.new_child("node1_flaky", "node1", uuid="a6f6b4ad-8a2f-4a3f-9c4f-8a1ce3f9c003")
    tree.update_inventory("node1_flaky", {"CUSTOM_FLAKE": {"total": 1}})
    manager = make_manager(conf, fake_plugins.Flaky, fake_plugins.Widgets)
    manager.plugins["flaky"].fail = True
    run(manager, tree)
    # flaky's provider from before the restart is kept while it fails ...
    assert tree.data("node1_flaky").inventory["CUSTOM_FLAKE"]["total"] == 1
    manager.plugins["flaky"].fail = False
    run(manager, tree)
    # ... and owned by it once it contributes again.
    assert tree.exists("node1_flaky") and not manager.degraded


def flat_tree():
    """A compute node as nova's flat layout left it: VCPU on the root."""
    tree = ProviderTree()
    tree.new_root("node1", "a6f6b4ad-8a2f-4a3f-9c4f-8a1ce3f9c001")
    tree.update_inventory("node1", {"VCPU": {"total": 4, "max_unit": 4},
                                    "DISK_GB": {"total": 100}})
    return tree


def test_moving_inventory_needs_a_reshape(conf):
    tree = flat_tree()
    before = tree.snapshot()
    manager = make_manager(conf, fake_plugins.Cells, fake_plugins.RootDisk)
    with pytest.raises(exception.ReshapeNeeded,
                       match="VCPU from node1 to node1_cell0, node1_cell1"):
        run(manager, tree)
    assert tree.snapshot() == before

    allocations = {
        "c1": {"allocations": {"a6f6b4ad-8a2f-4a3f-9c4f-8a1ce3f9c001":
                               {"resources": {"VCPU": 2, "DISK_GB": 10}}}},
        "c2": {"allocations": {"a6f6b4ad-8a2f-4a3f-9c4f-8a1ce3f9c001":
                               {"resources": {"VCPU": 2}}}},
    }
    run(manager, tree, allocations=allocations)
    cell0, cell1 = tree.data("node1_cell0").uuid, tree.data("node1_cell1").uuid
    assert "VCPU" not in tree.data("node1").inventory
    assert allocations == {
        "c1": {"allocations": {"a6f6b4ad-8a2f-4a3f-9c4f-8a1ce3f9c001":
                               {"resources": {"DISK_GB": 10}},
                               cell0: {"resources": {"VCPU": 2}}}},
        "c2": {"allocations": {cell1: {"resources": {"VCPU": 2}}}},
    }


def test_a_reshape_that_does_not_fit_is_refused(conf):
    tree = flat_tree()
    manager = make_manager(conf, fake_plugins.Cells)
    allocations = {"c1": {"allocations": {"a6f6b4ad-8a2f-4a3f-9c4f-8a1ce3f9c001":
                                          {"resources": {"VCPU": 4}}}}}
    with pytest.raises(ReshapeImpossible, match="cannot move 4 VCPU of consumer c1"):
        run(manager, tree, allocations=allocations)
    assert tree.data("node1").inventory["VCPU"]["total"] == 4


def test_a_provider_moving_parent_keeps_its_uuid(conf):
    manager = make_manager(conf, fake_plugins.Cells, fake_plugins.Parented)
    tree = run(manager, ProviderTree())
    uuid = tree.data("node1_dev").uuid
    assert tree.data("node1_dev").parent_uuid == tree.data("node1_cell0").uuid
    tree.add_traits("node1_dev", "CUSTOM_OPERATOR_DRAINED")
    manager.plugins["parented"].under_cell = False
    run(manager, tree)
    assert tree.data("node1_dev").uuid == uuid
    assert tree.data("node1_dev").traits == {"CUSTOM_OPERATOR_DRAINED"}
    assert tree.data("node1_dev").parent_uuid == tree.data("node1").uuid


def test_unreadable_checkpoint_falls_back_to_adoption(conf, tmp_path, caplog):
    (tmp_path / "node1.contributions.json").write_text("{not json")
    manager = make_manager(conf, fake_plugins.Widgets, checkpoint_dir=str(tmp_path))
    tree = run(manager, ProviderTree())
    assert tree.exists("node1_widgets")
    assert "ignoring the plugin checkpoint" in caplog.text
    assert json.loads((tmp_path / "node1.contributions.json").read_text())["plugins"]


def test_foreign_providers_in_the_tree_are_not_adopted(conf):
    """Neutron's bandwidth providers live in the compute tree too."""
    tree = ProviderTree()
    tree.new_root("node1", "a6f6b4ad-8a2f-4a3f-9c4f-8a1ce3f9c001")
    tree.new_child("node1:Open vSwitch agent", "node1",
                   uuid="a6f6b4ad-8a2f-4a3f-9c4f-8a1ce3f9c010")
    tree.new_child("node1:Open vSwitch agent:br-ex", "node1:Open vSwitch agent",
                   uuid="a6f6b4ad-8a2f-4a3f-9c4f-8a1ce3f9c011")
    tree.update_inventory("node1:Open vSwitch agent:br-ex",
                          {"NET_BW_EGR_KILOBIT_PER_SEC": {"total": 1000}})
    tree.new_child("node1_stale", "node1", uuid="a6f6b4ad-8a2f-4a3f-9c4f-8a1ce3f9c012")
    run(make_manager(conf, fake_plugins.Widgets), tree)
    assert tree.exists("node1:Open vSwitch agent:br-ex")
    assert not tree.exists("node1_stale")


def test_adopted_root_inventory_is_not_counted_twice_while_degraded(conf):
    """nova's VCPU on the root moves to the cells even while another plugin fails."""
    manager = make_manager(conf, fake_plugins.Cells, fake_plugins.Flaky)
    manager.plugins["flaky"].fail = True
    with pytest.raises(exception.ReshapeNeeded):
        run(manager, flat_tree())


def test_a_half_failed_sync_leaves_nothing_behind(conf):
    manager = make_manager(conf, fake_plugins.RootDisk, auto_commit=False)
    tree = run(manager, ProviderTree())
    manager.commit()
    # The widgets plugin appears; its provider reaches Placement, then the
    # sync fails half-way ...
    manager = make_manager(conf, fake_plugins.RootDisk, fake_plugins.Widgets,
                           auto_commit=False)
    manager._applied, manager._nodename = {"rootdisk": ()}, None
    tree = run(manager, tree)
    in_placement = placement_copy(tree)
    manager.discard()
    # ... and the device is gone by the next periodic: its provider is removed.
    tree = run(manager, in_placement, NO_WIDGETS)
    assert not tree.exists("node1_widgets")


def test_a_device_class_moving_between_devices_is_not_a_reshape(conf):
    """A guest's vGPU lives on one GPU: no allocation is moved to another."""
    manager = make_manager(conf, fake_plugins.Cells)
    tree = run(manager, ProviderTree())
    two_cells = HostInfo(hostname="node1", source="test", cells=(
        NUMACell(0, cpus=()), NUMACell(1, cpus=(CPU(0), CPU(1), CPU(2), CPU(3)))))
    run(manager, tree, two_cells)  # VCPU leaves cell0 for cell1: no ReshapeNeeded
    assert "VCPU" not in tree.data("node1_cell0").inventory


def test_checkpoint_of_another_root_is_ignored(conf, tmp_path, caplog):
    first = make_manager(conf, fake_plugins.Widgets, checkpoint_dir=str(tmp_path))
    run(first, ProviderTree())
    # The same node now reports to another Placement, where its root has
    # another uuid and holds nova's stale child.
    other = ProviderTree()
    other.new_root("node1", "a6f6b4ad-8a2f-4a3f-9c4f-8a1ce3f9c001")
    other.new_child("node1_old", "node1", uuid="a6f6b4ad-8a2f-4a3f-9c4f-8a1ce3f9c020")
    second = make_manager(conf, fake_plugins.Widgets, checkpoint_dir=str(tmp_path))
    run(second, other)
    assert "written for root provider" in caplog.text
    assert not other.exists("node1_old")


def test_invalid_checkpoint_contents_fall_back_to_adoption(conf, tmp_path, caplog):
    first = make_manager(conf, fake_plugins.Widgets, checkpoint_dir=str(tmp_path))
    tree = run(first, ProviderTree())
    path = tmp_path / "node1.contributions.json"
    document = json.loads(path.read_text())
    document["plugins"]["widgets"][0]["inventory"]["CUSTOM_WIDGET"]["total"] = -1
    path.write_text(json.dumps(document))
    second = make_manager(conf, fake_plugins.Widgets, checkpoint_dir=str(tmp_path))
    run(second, placement_copy(tree))
    assert "ignoring the plugin checkpoint" in caplog.text


def test_an_unchanged_checkpoint_is_not_rewritten(conf, tmp_path):
    manager = make_manager(conf, fake_plugins.Widgets, checkpoint_dir=str(tmp_path))
    tree = run(manager, ProviderTree())
    path = tmp_path / "node1.contributions.json"
    before = path.stat()
    run(manager, tree)
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".contributions-")]
