"""Where the guest sits on the host: a typed contract between plugins.

One plugin decides which host cells the guest's nodes run on (the built-in
``numa`` plugin: guest NUMA node -> host NUMA cell); others need that to
put a device near the guest (``vgpu``, ``sriov``, a third party's FPGA or
NVMe plugin). Neither names the other, and the framework names neither:

- the provider's class says ``provides = (TOPOLOGY,)`` and its assignment
  implements :class:`PlacesGuest`: ``guest_topology()`` returns a
  :class:`GuestTopology` (guest node -> host cell, whether the guest
  floats);
- a consumer's class says ``needs = (TOPOLOGY,)``: ``fit`` then runs the
  provider first (:attr:`compute_plugins.runtime.PluginSet.order`) and the consumer
  reads the value from its ``earlier`` with :func:`guest_topology` (or
  :func:`guest_host_cells`);
- a consumer's assignment that records the host cells its affinity was
  checked against (:class:`RecordsGuestCells`: ``host_cells``) is checked
  by :meth:`compute_plugins.runtime.PluginSet.verify` against the provider's
  decision (:func:`recorded_cells_problem`), since ``verify`` gets no
  ``earlier``.

Affinity rules (:class:`Affinity`) are one implementation for every
consumer, as ``nova.pci.stats.PciDeviceStats._filter_pools_for_numa_cells``
and ``_filter_pools_for_socket_affinity`` define nova's
``hw:pci_numa_affinity_policy``. A device is *affine* when its cell is one
of the host cells the guest's nodes run on (all of them, not one node's:
nova passes the instance's cells); then, by policy:

- ``required``: only affine devices;
- ``socket``: affine devices, else devices whose cell is on the socket of
  one of the guest's host cells; none when a host cell's socket is unknown
  (nova refuses then: a cell spanning sockets), nor for a device without a
  cell;
- ``legacy`` (nova's default for ports and aliases): affine devices, else
  devices without a cell;
- ``preferred``: affine devices, else any;
- ``None`` (no policy; nova has no mdev affinity): any device, affine ones
  first.

Which cells the provider prefers depends on the devices too (nova's
``numa_fit_instance_to_host`` sorts host cells by their free PCI devices
last: fewest first for a guest without PCI requests, keeping the cells
with devices for guests that need them; most first for one with PCI
requests). A consumer's state that :class:`HoldsCellDevices` says how many
devices are free per cell; :func:`order_by_cell_devices` hands their sum,
and whether the guest asks any of those consumers for devices, to a
provider's state that :class:`OrdersByCellDevices` before its ``fit``.

A guest without topology (no provider's assignment, one without nodes, or
one that floats) has no affinity constraint, as in nova. Affine devices
always rank first (nova takes them whenever there are enough), so
:meth:`Affinity.rank` orders a plugin's offline choice, and
:meth:`Affinity.problem` is the check ``fit`` and ``verify`` share. The
request key the policy came from, and what the cells are called, are the
consumer's (:class:`AffinityKey`): the rules do not depend on them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Optional, Protocol, cast, runtime_checkable

from compute_plugins.request.groups import AFFINITY_POLICIES
from compute_plugins.request.types import FrozenMap, enum_field

__all__ = ["AFFINE", "AFFINITY_POLICIES", "Affinity", "AffinityKey", "CellSockets",
           "FALLBACK", "GuestTopology", "HoldsCellDevices", "OrdersByCellDevices",
           "PlacesGuest", "RecordsGuestCells", "TOPOLOGY", "cell_sockets",
           "guest_host_cells", "guest_topology", "order_by_cell_devices",
           "recorded_cells_problem", "topology_provider"]

#: The role of the plugin whose assignment places the guest on host cells
#: (``provides``), and of those that need it (``needs``).
TOPOLOGY = "topology"
#: Rank of an affine device (or of any device when nothing constrains).
AFFINE = 0
#: Rank of a device the policy allows when no affine one is taken.
FALLBACK = 1

#: Host cell id -> its socket (None: unknown, or several).
CellSockets = FrozenMap[int, Optional[int]]


@dataclasses.dataclass(frozen=True)
class GuestTopology:
    """Where the guest's nodes run on the host.

    :param nodes: guest node -> the host cell it runs on.
    :param floating: the guest has no topology of its own: ``nodes`` then
        only say where its CPUs and memory are kept, and devices are not
        tied to them (nova filters no device by cell for such a guest).
    """

    nodes: FrozenMap[int, int] = dataclasses.field(default_factory=FrozenMap)
    floating: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.nodes, FrozenMap):
            object.__setattr__(self, "nodes", FrozenMap(self.nodes))

    @property
    def host_cells(self) -> frozenset[int]:
        """The host cells devices are affine to: those of the guest's nodes;
        none for a floating guest."""
        return frozenset() if self.floating else frozenset(self.nodes.values())


@runtime_checkable
class PlacesGuest(Protocol):
    """An assignment that says where the guest sits (the assignment of a
    plugin that ``provides`` :data:`TOPOLOGY`)."""

    def guest_topology(self) -> GuestTopology:
        """The guest's nodes on the host's cells, as this decision puts them."""
        ...


@runtime_checkable
class RecordsGuestCells(Protocol):
    """An assignment that records the guest's host cells its affinity was
    decided against (``verify`` gets no ``earlier``)."""

    @property
    def host_cells(self) -> Collection[int]:
        ...


@runtime_checkable
class HoldsCellDevices(Protocol):
    """A consumer's host state whose devices sit on host cells, of the
    kind nova's PCI pools count (PCI devices; not mediated devices)."""

    def free_devices_by_cell(self) -> Mapping[int, int]:
        """Host cell -> devices free on it (cells without any left out)."""
        ...


@runtime_checkable
class OrdersByCellDevices(Protocol):
    """A provider's host state that orders the host cells by the free
    devices on them, as nova's NUMA fit does."""

    def with_cell_devices(self, free: Mapping[int, int],
                          wanted: bool) -> object:
        """This state with ``free`` (host cell -> free devices of every
        :class:`HoldsCellDevices` consumer) and ``wanted`` (the guest asks
        one of them for devices) for the cell order."""
        ...


#: How :func:`order_by_cell_devices` calls a plugin's method: ``(plugin
#: name, method name, method, *arguments)``; the runtime's guards a
#: plugin's failure (a rejection naming it).
CallPlugin = Callable[..., Any]


def _call(plugin: str, hook: str, fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def _free_devices(state: HoldsCellDevices) -> dict[int, int]:
    """The state's free devices per cell, checked: a mapping of host cell
    ids to counts (:class:`ReturnedGarbage` otherwise)."""
    free = state.free_devices_by_cell()
    if not isinstance(free, Mapping) or not all(
            type(cell) is int and type(count) is int and count >= 0
            for cell, count in free.items()):
        raise ReturnedGarbage(free, "a mapping of host cell to free devices")
    return dict(free)


class ReturnedGarbage(TypeError):
    """A device method (:class:`HoldsCellDevices`, :class:`OrdersByCellDevices`)
    returned what its protocol does not allow: the runtime reports it as the
    plugin's wrong value."""

    def __init__(self, value: object, expected: str) -> None:
        super().__init__("returned %s, not %s" % (
            "a %s" % type(value).__name__, expected))
        self.value = value
        self.expected = expected


def order_by_cell_devices(states: Mapping[str, object],
                          requested: Collection[str],
                          call: CallPlugin = _call) -> Mapping[str, object]:
    """``states`` with every :class:`OrdersByCellDevices` state told the free
    devices per cell of the :class:`HoldsCellDevices` states, and whether a
    plugin among ``requested`` (those with a request) holds them; the same
    mapping when no state holds any.

    :param call: calls a plugin's method (``call(name, hook, method,
        *args)``): the runtime passes one that turns a plugin's exception
        into its failure; a holder whose count is not a mapping of host
        cell ids to counts raises :class:`ReturnedGarbage` there, and so
        does a provider whose ``with_cell_devices`` returns another type
        than its state's.
    """
    # NOTE: a class attribute test, not isinstance() on the runtime
    # protocols: this runs for every host of every request.
    holders = [(name, state) for name, state in states.items()
               if hasattr(type(state), "free_devices_by_cell")]
    if not holders:
        return states
    free: dict[int, int] = {}
    for name, state in holders:
        for cell, count in call(name, "free_devices_by_cell", _free_devices,
                                cast(HoldsCellDevices, state)).items():
            free[cell] = free.get(cell, 0) + count
    if not free:
        return states
    wanted = any(name in requested for name, _ in holders)
    counts: FrozenMap[int, int] = FrozenMap(free)
    return {name: (call(name, "with_cell_devices", _ordered, state, counts, wanted)
                   if hasattr(type(state), "with_cell_devices") else state)
            for name, state in states.items()}


def _ordered(state: OrdersByCellDevices, free: FrozenMap[int, int],
             wanted: bool) -> object:
    """``state.with_cell_devices(free, wanted)``, checked: a state of the
    same type."""
    ordered = state.with_cell_devices(free, wanted)
    if type(ordered) is not type(state):
        raise ReturnedGarbage(ordered, "its host state")
    return ordered


def topology_provider(earlier: Mapping[str, object]
                      ) -> Optional[tuple[str, GuestTopology]]:
    """The plugin in ``earlier`` whose assignment places the guest, and
    its topology (the first in fit order); None when none does."""
    # NOTE: a class attribute test, not isinstance() on the runtime
    # protocol (~10 us each): this runs for every fit of every host.
    for name, assignment in earlier.items():
        if hasattr(type(assignment), "guest_topology"):
            return name, cast(PlacesGuest, assignment).guest_topology()
    return None


def guest_topology(earlier: Mapping[str, object]) -> Optional[GuestTopology]:
    """The guest's topology decided before this plugin's ``fit`` (None: no
    plugin that ran before places the guest)."""
    found = topology_provider(earlier)
    return None if found is None else found[1]


def guest_host_cells(earlier: Mapping[str, object]) -> frozenset[int]:
    """The host cells of the guest's nodes (:attr:`GuestTopology.host_cells`);
    empty for a guest without topology or a floating one."""
    topology = guest_topology(earlier)
    return frozenset() if topology is None else topology.host_cells


def recorded_cells_problem(earlier: Mapping[str, object],
                           assignment: object) -> Optional[str]:
    """Why an assignment's recorded ``host_cells`` (the guest's host cells
    its affinity was checked against) are not where the decision in
    ``earlier`` puts the guest; None when they are, or when the assignment
    records none (:meth:`compute_plugins.runtime.PluginSet.verify`)."""
    if not isinstance(assignment, RecordsGuestCells):
        return None
    found = topology_provider(earlier)
    provider, actual = (TOPOLOGY, frozenset[int]()) if found is None else (
        found[0], found[1].host_cells)
    if frozenset(assignment.host_cells) == actual:
        return None
    return ("the decision was made for the guest on host cells %s; the %s "
            "decision puts it on host cells %s"
            % (_cells_text(assignment.host_cells) or "(none)", provider,
               _cells_text(actual) or "(none)"))


class _CPU(Protocol):
    @property
    def socket_id(self) -> Optional[int]:
        ...


class _HostCell(Protocol):
    @property
    def id(self) -> int:
        ...

    @property
    def cpus(self) -> Sequence[_CPU]:
        ...


def cell_sockets(cells: Iterable[_HostCell]) -> CellSockets:
    """Host cell id -> its socket, as nova's libvirt driver sets
    ``NUMACell.socket``: the one ``socket_id`` of the cell's CPUs, ``None``
    when they name several or none (``cells``: ``HostInfo.cells``)."""
    result: dict[int, Optional[int]] = {}
    for cell in sorted(cells, key=lambda c: c.id):
        sockets = {cpu.socket_id for cpu in cell.cpus}
        result[cell.id] = sockets.pop() if len(sockets) == 1 else None
    return FrozenMap(result)


def _cells_text(cells: Iterable[int]) -> str:
    return ", ".join(str(c) for c in sorted(cells))


@dataclasses.dataclass(frozen=True)
class AffinityKey:
    """How a consumer's rejections name its affinity policy.

    :param name: the request key the policy is read from, as the user
        writes it (``hw:pci_numa_affinity_policy``).
    :param cells: what the host cells are, in "has no ... affinity"
        (``NUMA``).
    """

    name: str = "affinity"
    cells: str = "topology"


@dataclasses.dataclass(frozen=True)
class Affinity:
    """The affinity a device of one request group must have.

    :param policy: ``required``, ``socket``, ``legacy``, ``preferred`` or
        None (no policy: any device, affine first).
    :param guest_cells: host cells of the guest's nodes (empty: the guest
        has no topology, nothing is constrained).
    :param sockets: host cell -> socket (:func:`cell_sockets`) for
        ``socket``.
    :param key: how rejections name the policy.
    """

    policy: Optional[str] = enum_field(AFFINITY_POLICIES)
    guest_cells: frozenset[int] = frozenset()
    sockets: CellSockets = dataclasses.field(default_factory=FrozenMap)
    key: AffinityKey = dataclasses.field(default=AffinityKey(), kw_only=True)

    def _socket_cells(self) -> Optional[frozenset[int]]:
        """Host cells on the guest's sockets; None when a host cell's socket
        is unknown (nova's ``_filter_pools_for_socket_affinity`` bails)."""
        if not self.sockets or any(s is None for s in self.sockets.values()):
            return None
        wanted = {self.sockets.get(c) for c in self.guest_cells}
        return frozenset(c for c, s in self.sockets.items() if s in wanted)

    def rank(self, device_cell: Optional[int]) -> Optional[int]:
        """:data:`AFFINE` (0), :data:`FALLBACK` (1), or None: the policy
        forbids a device on ``device_cell`` (None: the device has no cell)."""
        if not self.guest_cells or device_cell in self.guest_cells:
            return AFFINE
        if self.policy == "required":
            return None
        if self.policy == "socket":
            allowed = self._socket_cells()
            if allowed is None or device_cell not in allowed:
                return None
            return FALLBACK
        if self.policy == "legacy":
            return FALLBACK if device_cell is None else None
        return FALLBACK

    def problem(self, device_cell: Optional[int]) -> Optional[str]:
        """Why a device on ``device_cell`` breaks the policy (a clause to
        follow the device's name), or None when it does not."""
        if self.rank(device_cell) is not None:
            return None
        where = ("has no %s affinity" % self.key.cells if device_cell is None
                 else "is on host cell %d" % device_cell)
        guest = _cells_text(self.guest_cells)
        if self.policy == "required":
            rule = "needs a device on one of the guest's host cells (%s)" % guest
        elif self.policy == "legacy":
            rule = ("needs a device on one of the guest's host cells (%s) or "
                    "one without %s affinity" % (guest, self.key.cells))
        else:
            allowed = self._socket_cells()
            if allowed is None:
                unknown = _cells_text(c for c, s in self.sockets.items() if s is None)
                rule = ("needs the socket of every host cell, and host cell(s) "
                        "%s span several sockets or none"
                        % (unknown or "(none known)"))
            else:
                rule = ("needs a device on the socket of the guest's host "
                        "cells (%s): host cells %s" % (guest, _cells_text(allowed)))
        return "%s; %s=%s %s" % (where, self.key.name, self.policy, rule)
