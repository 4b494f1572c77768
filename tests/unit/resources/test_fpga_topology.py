"""A fifth topology-aware plugin needs no core edit: ``examples/fpga``.

The example declares ``needs = (TOPOLOGY,)`` and reads the guest's host
cells from ``earlier`` with the SDK's ``guest_host_cells``; it names no
other plugin, and the framework names neither it nor ``numa``. Through
``PluginSet.fit`` and ``PluginSet.verify`` (the scheduler's and the claim's paths):

- its card is placed on the guest's host cell, and with
  ``hw:pci_numa_affinity_policy=required`` refused off it;
- when the only free card is on another cell, ``fit`` moves the guest
  there (the numa plugin's alternatives), since the FPGA plugin runs after
  the topology provider;
- ``verify`` refuses a card decision made for other host cells than
  where the guest now sits;
- another plugin that places the guest (not ``numa``) serves it just as well.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from compute_plugins.host.model import PCIDevice
from compute_plugins.plugin.contract import ResourcePlugin
from compute_plugins.plugin.topology import TOPOLOGY, GuestTopology, PlacesGuest
from compute_plugins.request.groups import Decision, PluginAssignment, PluginRequest
from compute_plugins.request.spec import RequestSpec, build_request_spec
from compute_plugins.request.types import FrozenMap
from compute_plugins.runtime import PluginSet
from resources.numa import NUMAPlugin
from tests.unit.resources.helpers import NODE, cell, host, state_of

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "fpga"
CARD_0, CARD_1 = "0000:5e:00.0", "0000:d8:00.0"


def card(address: str, numa_node: int) -> PCIDevice:
    return PCIDevice(address=address, name=address, vendor_id="8086",
                     product_id="09c4", numa_node=numa_node)


INFO = host([cell(0, range(4)), cell(1, range(4, 8))],
            [card(CARD_0, 0), card(CARD_1, 1)])


@pytest.fixture(scope="module")
def fpga() -> Iterator[Any]:
    """The example package, imported from the source tree."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        yield importlib.import_module("compute_plugins_fpga")
    finally:
        sys.path.remove(str(EXAMPLE))


@pytest.fixture
def plugins(conf, fpga):
    return PluginSet.of({"numa": NUMAPlugin(conf), "fpga": fpga.FPGAPlugin(conf)})


def states(plugins, assignments=None):
    """Every plugin's state, through its JSON form (as published)."""
    assignments = assignments or {}
    result = {}
    for name, plugin in plugins.items():
        built = state_of(plugin, plugin.discover(INFO), assignments.get(name, ()))
        result[name] = plugins.decode_state(name, json.loads(json.dumps(
            plugins.encode_state(name, built))))
    return result


def flavor(**extra_specs):
    return {"name": "fpga", "vcpus": 2, "memory_mb": 1024,
            "extra_specs": {"accel:fpga": "1", **extra_specs}}


def cards(result):
    return [c.address for c in result.assignments["fpga"].cards]


def guest_cells(result):
    return sorted(c.host_cell for c in result.assignments["numa"].cells)


def decided(spec, result):
    return spec.with_decision(Decision(host=NODE, nodename=NODE,
                                       assignments=result.assignments))


def test_it_runs_after_the_plugin_that_places_the_guest(plugins):
    assert plugins["fpga"].needs == (TOPOLOGY,) and not plugins["fpga"].fit_after
    assert list(plugins.order) == ["numa", "fpga"]


@pytest.mark.parametrize("policy", [None, "required"])
def test_the_card_is_on_the_guests_cell(plugins, policy):
    specs = {"hw:numa_nodes": "1"}
    if policy:
        specs["hw:pci_numa_affinity_policy"] = policy
    spec = build_request_spec(plugins, flavor(**specs))
    result = plugins.fit(states(plugins), spec)
    assert result.fits, result.rejections
    on = guest_cells(result)
    assert cards(result) == [{0: CARD_0, 1: CARD_1}[on[0]]]
    assert result.assignments["fpga"].host_cells == tuple(on)
    again = RequestSpec.from_json(decided(spec, result).to_json(), plugins)
    assert plugins.verify(states(plugins), again) == ()


def test_the_guest_moves_to_the_only_free_card(plugins, fpga):
    """The card on the numa plugin's first choice is taken: the retry over
    its alternatives puts the guest on the other cell, where a card is."""
    spec = build_request_spec(plugins, flavor(**{
        "hw:numa_nodes": "1", "hw:pci_numa_affinity_policy": "required"}))
    first = plugins.fit(states(plugins), spec)
    taken_cell = guest_cells(first)[0]
    taken = fpga.FPGAAssignment(cards=(fpga.request.CardAssignment(
        "_FPGA0", "", {0: CARD_0, 1: CARD_1}[taken_cell]),))
    result = plugins.fit(states(plugins, {"fpga": [taken]}), spec)
    assert result.fits, result.rejections
    assert guest_cells(result) == [1 - taken_cell]
    assert cards(result) == [{0: CARD_0, 1: CARD_1}[1 - taken_cell]]


def test_required_refuses_a_card_off_the_guests_cell(plugins, fpga):
    spec = build_request_spec(plugins, flavor(**{
        "hw:numa_nodes": "1", "hw:pci_numa_affinity_policy": "required"}))
    result = plugins.fit(states(plugins), spec)
    on = guest_cells(result)[0]
    off = {0: CARD_1, 1: CARD_0}[on]
    state = states(plugins)["fpga"]
    moved = dataclasses.replace(result.assignments["fpga"], cards=(
        fpga.request.CardAssignment("_FPGA0", state.card(off).provider_uuid, off),))
    rejections = plugins.verify(states(plugins), decided(spec, dataclasses.replace(
        result, assignments=FrozenMap({**result.assignments, "fpga": moved}))))
    assert [(r.plugin, r.reason) for r in rejections] == [
        ("fpga", "FPGA %s is on host cell %d; hw:pci_numa_affinity_policy=required "
         "needs a device on one of the guest's host cells (%d)" % (off, 1 - on, on))]


def test_verify_all_refuses_a_card_decided_for_other_cells(plugins):
    # preferred: the card itself would do anywhere; its recorded cells not
    spec = build_request_spec(plugins, flavor(**{
        "hw:numa_nodes": "1", "hw:pci_numa_affinity_policy": "preferred"}))
    result = plugins.fit(states(plugins), spec)
    on = guest_cells(result)[0]
    stale = dataclasses.replace(result.assignments["fpga"], host_cells=(1 - on,))
    rejections = plugins.verify(states(plugins), decided(spec, dataclasses.replace(
        result, assignments=FrozenMap({**result.assignments, "fpga": stale}))))
    assert [(r.plugin, r.reason) for r in rejections] == [
        ("fpga", "the decision was made for the guest on host cells %d; the numa "
         "decision puts it on host cells %d" % (1 - on, on))]


def test_a_guest_without_topology_takes_any_card(plugins):
    spec = build_request_spec(plugins, flavor(**{
        "hw:pci_numa_affinity_policy": "required"}))
    result = plugins.fit(states(plugins), spec)
    assert result.fits, result.rejections
    assert result.assignments["numa"].floating
    assert result.assignments["fpga"].host_cells == ()
    assert cards(result) == [CARD_0]


# -- another plugin places the guest -------------------------------------------


@dataclasses.dataclass(frozen=True)
class PinRequest(PluginRequest):
    """The pinner asks nothing but to place the guest."""


@dataclasses.dataclass(frozen=True)
class OnCell(PluginAssignment):
    """Guest node 0 on ``host_cell``."""

    host_cell: int = 0

    def guest_topology(self) -> GuestTopology:
        return GuestTopology(nodes=FrozenMap({0: self.host_cell}))


class Pinner(ResourcePlugin[None, PinRequest, None, OnCell]):
    """A plugin that places every guest on host cell 1 (no ``numa``)."""

    name = "pinner"
    provides = (TOPOLOGY,)
    request_type = PinRequest
    assignment_type = OnCell

    def discover(self, host_info):
        return None

    def provider_contributions(self, view, nodename):
        return []

    def parse_request(self, request_input):
        return PinRequest()

    def fit(self, state, request, placement, earlier):
        return OnCell(host_cell=1)


def test_any_plugin_that_places_the_guest_serves_it(conf, fpga):
    plugins = PluginSet.of({"fpga": fpga.FPGAPlugin(conf), "pinner": Pinner(conf)})
    assert isinstance(OnCell(), PlacesGuest)
    assert list(plugins.order) == ["pinner", "fpga"]
    fpga_state = states(plugins.only(["fpga"]))
    spec = build_request_spec(plugins, flavor(**{
        "hw:pci_numa_affinity_policy": "required"}))
    result = plugins.fit(fpga_state, spec)
    assert result.fits, result.rejections
    assert cards(result) == [CARD_1]
    assert result.assignments["fpga"].host_cells == (1,)
    assert plugins.verify(fpga_state, decided(spec, result)) == ()
    # a card decided for the guest on cell 0 (any card would do: preferred)
    spec = build_request_spec(plugins, flavor(**{
        "hw:pci_numa_affinity_policy": "preferred"}))
    result = plugins.fit(fpga_state, spec)
    stale = dataclasses.replace(result.assignments["fpga"], host_cells=(0,))
    rejections = plugins.verify(fpga_state, spec.with_decision(Decision(
        host=NODE, nodename=NODE, assignments={**result.assignments, "fpga": stale})))
    assert [(r.plugin, r.reason) for r in rejections] == [
        ("fpga", "the decision was made for the guest on host cells 0; the "
         "pinner decision puts it on host cells 1")]
