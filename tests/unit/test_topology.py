"""compute_plugins.plugin.topology: the guest's topology as a typed contract.

A plugin that places the guest publishes a GuestTopology through its
assignment (PlacesGuest); a plugin that needs it runs after it (``needs``
/ ``provides`` roles, resolved by fit_order) and reads it from ``earlier``
without naming it. (The affinity rules: test_affinity.py; a whole plugin
using them: tests/unit/resources/test_fpga_topology.py.)
"""

from __future__ import annotations

import dataclasses
from typing import cast

import pytest

from compute_plugins import exception
from compute_plugins.plugin.topology import (
    TOPOLOGY,
    GuestTopology,
    PlacesGuest,
    RecordsGuestCells,
    guest_host_cells,
    guest_topology,
    recorded_cells_problem,
    topology_provider,
)
from compute_plugins.request.types import FrozenMap
from compute_plugins.runtime import AnyPlugin, PluginSet
from resources.numa.request import CellAssignment, NUMAAssignment
from tests.unit.resources.helpers import on_cells


@dataclasses.dataclass(frozen=True)
class Placed:
    nodes: FrozenMap[int, int]

    def guest_topology(self) -> GuestTopology:
        return GuestTopology(nodes=self.nodes)


@dataclasses.dataclass(frozen=True)
class Device:
    host_cells: tuple[int, ...] = ()


def test_a_topology_is_frozen_and_says_its_host_cells():
    topology = GuestTopology(nodes={0: 3, 1: 1, 2: 3})
    assert isinstance(topology.nodes, FrozenMap)
    assert topology.host_cells == {1, 3}
    assert GuestTopology(nodes={0: 3}, floating=True).host_cells == frozenset()
    with pytest.raises(dataclasses.FrozenInstanceError):
        topology.floating = True  # type: ignore[misc]


def test_the_numa_assignment_places_the_guest():
    numa = NUMAAssignment(cells=(CellAssignment(guest_cell=0, host_cell=2),
                                 CellAssignment(guest_cell=1, host_cell=0)))
    assert isinstance(numa, PlacesGuest)
    assert numa.guest_topology() == GuestTopology(nodes=FrozenMap({0: 2, 1: 0}))
    floating = dataclasses.replace(numa, floating=True)
    assert floating.guest_topology().floating


def test_earlier_is_read_by_what_it_is_not_by_name():
    earlier = {"disk": object(), "cells": Placed(FrozenMap({0: 1}))}
    assert topology_provider(earlier) == ("cells", GuestTopology(FrozenMap({0: 1})))
    assert guest_topology(earlier) == GuestTopology(FrozenMap({0: 1}))
    assert guest_host_cells(earlier) == {1}
    assert guest_topology({"disk": object()}) is None
    assert guest_host_cells({}) == frozenset()
    assert guest_host_cells(on_cells(3, 1)) == {1, 3}


def test_recorded_cells_are_checked_against_the_provider():
    earlier = {"cells": Placed(FrozenMap({0: 1, 1: 2}))}
    assert isinstance(Device(), RecordsGuestCells)
    assert recorded_cells_problem(earlier, Device(host_cells=(2, 1))) is None
    assert recorded_cells_problem(earlier, Device(host_cells=(0,))) == (
        "the decision was made for the guest on host cells 0; the cells "
        "decision puts it on host cells 1, 2")
    assert recorded_cells_problem({}, Device(host_cells=(0,))) == (
        "the decision was made for the guest on host cells 0; the topology "
        "decision puts it on host cells (none)")
    assert recorded_cells_problem({}, Device()) is None
    assert recorded_cells_problem(earlier, object()) is None


class Plugin:
    """What the fit order reads of a plugin."""

    def __init__(self, fit_after=(), provides=(), needs=()):
        self.fit_after, self.provides, self.needs = fit_after, provides, needs


def plugin_set(plugins: dict[str, Plugin]) -> PluginSet:
    # NOTE: the order reads three class attributes; a stand-in is enough.
    return PluginSet.of(cast(dict[str, AnyPlugin], plugins))


def runs_after(plugins: dict[str, Plugin], name: str) -> list[str]:
    return list(plugin_set(plugins).runs_after(name))


def fit_order(plugins: dict[str, Plugin]) -> list[str]:
    return list(plugin_set(plugins).order)


def test_a_plugin_that_needs_the_topology_runs_after_its_provider():
    plugins = {"a_device": Plugin(needs=(TOPOLOGY,)), "z_cells": Plugin(provides=(TOPOLOGY,)),
               "disk": Plugin(), "b_device": Plugin(fit_after=("disk",), needs=(TOPOLOGY,))}
    assert runs_after(plugins, "a_device") == ["z_cells"]
    assert runs_after(plugins, "b_device") == ["disk", "z_cells"]
    assert runs_after(plugins, "z_cells") == []
    assert fit_order(plugins) == ["disk", "z_cells", "a_device", "b_device"]
    # without a provider loaded, nothing to wait for
    assert fit_order({"a_device": Plugin(needs=(TOPOLOGY,))}) == ["a_device"]


def test_roles_that_need_each_other_are_a_cycle():
    plugins = {"a": Plugin(provides=("x",), needs=("y",)),
               "b": Plugin(provides=("y",), needs=("x",))}
    with pytest.raises(exception.ConfigError, match="a, b run after each other"):
        fit_order(plugins)


# -- the provider's cell order by the consumers' free devices -----------------


class _Devices:
    def __init__(self, free):
        self.free = free

    def free_devices_by_cell(self):
        return self.free


class _Ordered:
    def __init__(self, free=None, wanted=None):
        self.free, self.wanted = free, wanted

    def with_cell_devices(self, free, wanted):
        return _Ordered(dict(free), wanted)


def test_order_by_cell_devices_sums_the_holders_and_says_if_one_is_asked():
    from compute_plugins.plugin.topology import order_by_cell_devices
    states = {"cells": _Ordered(), "nics": _Devices({0: 2, 1: 1}),
              "gpus": _Devices({1: 3}), "disk": object()}
    got = order_by_cell_devices(states, ["cells", "disk"])
    assert (got["cells"].free, got["cells"].wanted) == ({0: 2, 1: 4}, False)
    assert got["nics"] is states["nics"] and got["disk"] is states["disk"]
    assert order_by_cell_devices(states, ["cells", "gpus"])["cells"].wanted
    # nothing to order by: the same mapping
    plain = {"cells": _Ordered(), "disk": object()}
    assert order_by_cell_devices(plain, ["cells"]) is plain
    empty = {"cells": _Ordered(), "nics": _Devices({})}
    assert order_by_cell_devices(empty, ["cells", "nics"]) is empty
