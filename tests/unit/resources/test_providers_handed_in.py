"""A plugin's own providers are handed to its ``host_state`` (name -> uuid
as the tree has them), not derived again by convention."""

from __future__ import annotations

import pytest

from compute_plugins.host.model import DiskInfo
from compute_plugins.plugin import names
from compute_plugins.tree.contribution import ProviderContribution, Providers
from compute_plugins.tree.provider_tree import ProviderTree
from tests.unit.resources.helpers import NODE, cell, gpu, host, manager, update

#: The compute node's uuid when nova registered it (not the derived one).
NOVA_ROOT = "5a0b5f65-5f5a-4c43-8e0e-7b0d8a5b8f31"
GPU = "0000:84:00.0"


def test_the_root_is_always_there_and_the_tree_wins():
    child = ProviderContribution(name="n_dev", uuid="u-contributed")
    derived = Providers.of("n", [child])
    assert dict(derived) == {"n": names.provider_uuid("n"), "n_dev": "u-contributed"}
    from_tree = Providers.of("n", [child], {"n": "u-root", "n_dev": "u-tree",
                                            "n_other": "u-x"})
    assert dict(from_tree) == {"n": "u-root", "n_dev": "u-tree"}
    assert from_tree.root == "u-root" and from_tree.nodename == "n"
    with pytest.raises(KeyError, match="'n_gone' is not one of this plugin's "
                                       "providers on node n"):
        from_tree["n_gone"]


def test_the_manager_hands_each_plugin_its_providers_as_the_tree_has_them(conf):
    conf.set_override("enabled_mdev_types", ["nvidia-35"], "vgpu")
    info = host([cell(0, range(4)), cell(1, range(4, 8))],
                [gpu(GPU, 1, nvidia_35=2)], disk=DiskInfo(total_gb=100, free_gb=50))
    mgr = manager(conf)
    mgr.discover(info)
    # Before any tree (``compute-plugins fit``): the contributions' uuids.
    before = mgr.providers("numa", NODE)
    assert before.root == names.provider_uuid(NODE)
    assert before["node1_NUMA1"] == names.provider_uuid(NODE, "numa", "1")
    # A node nova registered: its root keeps nova's uuid in the tree.
    tree = ProviderTree()
    tree.new_root(NODE, NOVA_ROOT)
    update(mgr, info, tree)
    uuids = tree.uuids_by_name(NODE)
    for plugin in ("numa", "vgpu", "sriov", "disk"):
        given = mgr.providers(plugin, NODE)
        assert given.root == NOVA_ROOT
        assert all(uuids[name] == uuid for name, uuid in given.items())
    assert set(mgr.providers("vgpu", NODE)) == {NODE, "node1_pci_0000_84_00_0"}
    states, broken = mgr.host_states(NODE, {})
    assert not broken
    assert states["disk"].provider_uuid == NOVA_ROOT
    assert [c.provider_uuid for c in states["numa"].cells] == [
        uuids["node1_NUMA0"], uuids["node1_NUMA1"]]
    (pgpu,) = states["vgpu"].pgpus
    assert pgpu.provider_uuid == uuids["node1_pci_0000_84_00_0"]
