"""The disk plugin's contribution: ``DISK_GB`` or an aggregate on root."""

from __future__ import annotations

import os_resource_classes as orc

from compute_plugins.plugin.devices import inventory_record
from compute_plugins.tree.contribution import ProviderContribution
from resources.disk.request import ephemeral_encryption_traits
from resources.disk.view import DiskView


def traits(view: DiskView) -> frozenset[str]:
    """The root's ephemeral encryption traits (nova's
    ``supports_ephemeral_encryption*`` capabilities): none, or
    ``COMPUTE_EPHEMERAL_ENCRYPTION`` and one per format."""
    if not view.ephemeral_encryption_formats:
        return frozenset()
    return frozenset().union(*(ephemeral_encryption_traits(f)
                               for f in view.ephemeral_encryption_formats))


def contributions(view: DiskView, nodename: str) -> list[ProviderContribution]:
    if view.shared_aggregate is not None:
        return [ProviderContribution(
            name=nodename, aggregates=frozenset({view.shared_aggregate}),
            traits=traits(view))]
    if view.total_gb is None:
        return ([ProviderContribution(name=nodename, traits=traits(view))]
                if traits(view) else [])
    return [ProviderContribution(
        name=nodename,
        inventory={orc.DISK_GB: inventory_record(
            view.total_gb, view.allocation_ratio,
            # NOTE: always sent, 0 included: [disk] reserved_host_disk_mb
            # wins over Placement, as in nova.
            view.reserved_gb, what=orc.DISK_GB)},
        traits=traits(view),
    )]
