"""The agent's side of ``host disable``: the root's COMPUTE_STATUS_DISABLED
trait follows the store's record around the plugins' own update of the
provider tree (:func:`compute_plugins.compute.agent.status_trait_update`),
on the real ProviderTree."""

from __future__ import annotations

import pytest

from compute_plugins.compute.agent import status_trait_update
from compute_plugins.tree.provider_tree import ProviderTree

TRAIT = "COMPUTE_STATUS_DISABLED"


def plugins_update(seen: list):
    """The plugins' update: creates the root when missing, adds a trait,
    and records the root's traits it was handed."""
    def update(tree, nodename, allocations):
        if not tree.exists(nodename):
            tree.new_root(nodename, None)
        seen.append(set(tree.data(nodename).traits))
        tree.add_traits(nodename, "HW_CPU_X86_AVX2")
    return update


def tree_with_root(*traits: str) -> ProviderTree:
    tree = ProviderTree()
    tree.new_root("node1", None)
    tree.add_traits("node1", *traits)
    return tree


def test_disabled_sets_the_trait_before_the_plugins_see_the_tree():
    seen: list = []
    tree = tree_with_root("HW_CPU_X86_SSE")
    status_trait_update(plugins_update(seen), True)(tree, "node1", None)
    assert seen == [{"HW_CPU_X86_SSE", TRAIT}]
    assert tree.data("node1").traits == {"HW_CPU_X86_SSE", "HW_CPU_X86_AVX2", TRAIT}


def test_a_root_the_plugins_create_gets_it_after():
    seen: list = []
    tree = ProviderTree()
    status_trait_update(plugins_update(seen), True)(tree, "node1", None)
    assert seen == [set()]
    assert TRAIT in tree.data("node1").traits


@pytest.mark.parametrize("disabled, expected", [
    (False, {"HW_CPU_X86_AVX2"}),
    (None, {"HW_CPU_X86_AVX2", TRAIT}),  # the store unreadable: left as it is
])
def test_enabled_removes_it_unknown_leaves_it(disabled, expected):
    tree = tree_with_root(TRAIT)
    status_trait_update(plugins_update([]), disabled)(tree, "node1", None)
    assert tree.data("node1").traits == expected
