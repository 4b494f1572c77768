"""Moving allocations when inventory moves between providers (a reshape).

When plugins move a resource class from one provider to others (nova's flat
layout, VCPU and MEMORY_MB on the compute root, becomes this project's NUMA
cells), the consumers' allocations must move in the same ``POST /reshaper``
as the inventory, or Placement refuses to delete inventory in use. The plugin
manager finds the moves (:class:`Move`) and, when called with the
allocations, rewrites them in place with :func:`move_allocations`, as nova's
drivers do in ``update_provider_tree``.

Placement of each consumer's moved resources is first fit over the new
providers, preferring one where the consumer already has resources (so a
guest's CPUs and memory stay on one NUMA cell when they fit there), within
each provider's capacity ``(total - reserved) * allocation_ratio`` and
``max_unit``. It does not know where a guest really runs (the CPUs it is
pinned to): each move is logged at WARNING so an operator can check it.
Only inventory leaving the compute root is moved (see
``compute_plugins.tree.contribution``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from oslo_log import log as logging

from compute_plugins import exception
from compute_plugins.tree.provider_tree import ProviderTree

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Move:
    """``resource_class`` leaves provider ``source`` for the ``targets``."""

    resource_class: str
    source: str
    source_uuid: str
    targets: tuple[str, ...]

    def __str__(self) -> str:
        return "%s from %s to %s" % (self.resource_class, self.source, ", ".join(self.targets))


class ReshapeImpossible(exception.ComputePluginsError):
    """The allocations on moved inventory do not fit its new providers."""


def _capacity(record: Mapping[str, Any]) -> int:
    return int((record["total"] - record.get("reserved", 0))
               * record.get("allocation_ratio", 1.0))


def move_allocations(
    tree: ProviderTree, moves: Sequence[Move], allocations: dict[str, Any]
) -> None:
    """Rewrite ``allocations`` (nova's ``{consumer: {"allocations": {rp:
    {"resources": {rc: n}}}}}``) so nothing stays on moved inventory.

    ``tree`` already holds the new inventory.
    """
    targets = {name: tree.data(name) for move in moves for name in move.targets}
    used: dict[tuple[str, str], int] = {}
    for consumer in allocations.values():
        for rp_uuid, alloc in consumer.get("allocations", {}).items():
            for rc, amount in alloc.get("resources", {}).items():
                used[(rp_uuid, rc)] = used.get((rp_uuid, rc), 0) + amount
    for move in moves:
        rc = move.resource_class
        for consumer_uuid, consumer in sorted(allocations.items()):
            per_rp = consumer.get("allocations", {})
            on_source = per_rp.get(move.source_uuid, {}).get("resources", {})
            amount = on_source.get(rc)
            if not amount:
                continue
            ordered = sorted(move.targets, key=lambda n: targets[n].uuid not in per_rp)
            for name in ordered:
                data = targets[name]
                record = data.inventory[rc]
                free = _capacity(record) - used.get((data.uuid, rc), 0)
                if amount <= free and amount <= record.get("max_unit", record["total"]):
                    break
            else:
                raise ReshapeImpossible(
                    "cannot move %d %s of consumer %s from %s: no provider of %s "
                    "has room" % (amount, rc, consumer_uuid, move.source,
                                  ", ".join(move.targets)))
            # NOTE: first fit does not know where the guest runs (which NUMA
            # cell its CPUs are pinned to): say what was decided.
            LOG.warning("reshape: moving %d %s of consumer %s from %s to %s",
                        amount, rc, consumer_uuid, move.source, name)
            del on_source[rc]
            if not on_source:
                del per_rp[move.source_uuid]
            target = per_rp.setdefault(data.uuid, {"resources": {}})
            target.setdefault("resources", {})[rc] = (
                target["resources"].get(rc, 0) + amount)
            used[(data.uuid, rc)] = used.get((data.uuid, rc), 0) + amount
            used[(move.source_uuid, rc)] -= amount
