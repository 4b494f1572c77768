"""Device-to-guest NUMA affinity: nova's ``hw:pci_numa_affinity_policy``.

One rule for every device plugin (``vgpu``, ``sriov`` ports and PCI
aliases, third-party ones), as ``nova.pci.stats.PciDeviceStats.
_filter_pools_for_numa_cells`` and ``_filter_pools_for_socket_affinity``
define it. A device is *affine* when its NUMA cell is one of the host cells
the guest's NUMA nodes run on (all of them, not one node's: nova passes the
instance's cells); then, by policy:

- ``required``: only affine devices;
- ``socket``: affine devices, else devices whose cell is on the socket of
  one of the guest's host cells; none when a host cell's socket is unknown
  (nova refuses then: a cell spanning sockets), nor for a device without a
  NUMA cell;
- ``legacy`` (nova's default for ports and aliases): affine devices, else
  devices without NUMA information;
- ``preferred``: affine devices, else any;
- ``None`` (no policy; nova has no mdev affinity, see
  :mod:`resources.vgpu.request`): any device, affine ones first.

A guest without NUMA topology (no ``numa`` assignment, one without cells,
or one whose ``floating`` is set) has no affinity constraint, as in nova.

Affine devices always rank first (nova takes them whenever there are
enough), so :meth:`Affinity.rank` orders a plugin's offline choice, and
:meth:`Affinity.problem` is the check ``fit`` and ``verify`` share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Optional, Protocol

from compute_plugins.host.model import NUMACell
from compute_plugins.request.groups import AFFINITY_POLICIES
from compute_plugins.request.types import FrozenMap, enum_field

__all__ = ["AFFINE", "Affinity", "NUMA_PLUGIN", "cell_sockets",
           "guest_host_cells", "recorded_cells_problem"]

#: The plugin whose assignment says where the guest's NUMA nodes run.
NUMA_PLUGIN = "numa"
#: Rank of an affine device (or of any device when nothing constrains).
AFFINE = 0
#: Rank of a device the policy allows when no affine one is taken.
FALLBACK = 1


class _CellPlacement(Protocol):
    host_cell: int


def cell_sockets(cells: Iterable[NUMACell]) -> FrozenMap[int, Optional[int]]:
    """Host cell id -> its socket, as nova's libvirt driver sets
    ``NUMACell.socket``: the one ``socket_id`` of the cell's CPUs, ``None``
    when they name several or none."""
    result: dict[int, Optional[int]] = {}
    for cell in sorted(cells, key=lambda c: c.id):
        sockets = {cpu.socket_id for cpu in cell.cpus}
        result[cell.id] = sockets.pop() if len(sockets) == 1 else None
    return FrozenMap(result)


def guest_host_cells(earlier: Mapping[str, object]) -> frozenset[int]:
    """The host cells the guest's NUMA nodes were placed on by the ``numa``
    plugin's ``fit`` (``earlier["numa"].cells[i].host_cell``); empty for a
    guest without NUMA topology: no ``numa`` assignment, one without cells,
    or one that says the guest floats (its cells then only say where its
    vCPUs and memory are kept; nova filters no device by NUMA for such a
    guest)."""
    numa = earlier.get(NUMA_PLUGIN)
    if numa is None or getattr(numa, "floating", False):
        return frozenset()
    cells: Iterable[_CellPlacement] = getattr(numa, "cells", ())
    return frozenset(cell.host_cell for cell in cells)


def recorded_cells_problem(earlier: Mapping[str, object],
                           assignment: object) -> Optional[str]:
    """Why a device assignment's recorded ``host_cells`` (the guest's host
    cells its affinity was checked against) are not where the ``numa``
    decision in ``earlier`` puts the guest; None when they are, or when the
    assignment records none (:meth:`compute_plugins.runtime.PluginSet.verify`)."""
    recorded = getattr(assignment, "host_cells", None)
    if recorded is None:
        return None
    actual = guest_host_cells(earlier)
    if frozenset(recorded) == actual:
        return None
    return ("the decision was made for the guest on host cells %s; the numa "
            "decision puts it on host cells %s"
            % (_cells_text(recorded) or "(none)", _cells_text(actual) or "(none)"))


def _cells_text(cells: Iterable[int]) -> str:
    return ", ".join(str(c) for c in sorted(cells))


@dataclasses.dataclass(frozen=True)
class Affinity:
    """The affinity a device of one request group must have.

    :param policy: ``required``, ``socket``, ``legacy``, ``preferred`` or
        None (no policy: any device, affine first).
    :param guest_cells: host cells of the guest's NUMA nodes (empty: the
        guest has no NUMA topology, nothing is constrained).
    :param sockets: host cell -> socket (:func:`cell_sockets`) for
        ``socket``.
    """

    policy: Optional[str] = enum_field(AFFINITY_POLICIES)
    guest_cells: frozenset[int] = frozenset()
    sockets: FrozenMap[int, Optional[int]] = dataclasses.field(
        default_factory=FrozenMap)

    def _socket_cells(self) -> Optional[frozenset[int]]:
        """Host cells on the guest's sockets; None when a host cell's socket
        is unknown (nova's ``_filter_pools_for_socket_affinity`` bails)."""
        if not self.sockets or any(s is None for s in self.sockets.values()):
            return None
        wanted = {self.sockets.get(c) for c in self.guest_cells}
        return frozenset(c for c, s in self.sockets.items() if s in wanted)

    def rank(self, device_cell: Optional[int]) -> Optional[int]:
        """:data:`AFFINE` (0), :data:`FALLBACK` (1), or None: the policy
        forbids a device on ``device_cell`` (None: no NUMA information)."""
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
        where = ("has no NUMA affinity" if device_cell is None
                 else "is on host cell %d" % device_cell)
        guest = _cells_text(self.guest_cells)
        if self.policy == "required":
            rule = "needs a device on one of the guest's host cells (%s)" % guest
        elif self.policy == "legacy":
            rule = ("needs a device on one of the guest's host cells (%s) or "
                    "one without NUMA affinity" % guest)
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
        return "%s; hw:pci_numa_affinity_policy=%s %s" % (where, self.policy, rule)
