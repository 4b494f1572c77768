"""The disk plugin's contribution: ``DISK_GB`` or an aggregate on root."""

from __future__ import annotations

import os_resource_classes as orc

from compute_plugins.plugin.devices import inventory_record
from compute_plugins.tree.contribution import ProviderContribution
from resources.disk.view import DiskView


def contributions(view: DiskView, nodename: str) -> list[ProviderContribution]:
    if view.shared_aggregate is not None:
        return [ProviderContribution(
            name=nodename, aggregates=frozenset({view.shared_aggregate}))]
    if view.total_gb is None:
        return []
    return [ProviderContribution(
        name=nodename,
        inventory={orc.DISK_GB: inventory_record(
            view.total_gb, view.allocation_ratio,
            # NOTE: always sent, 0 included: [disk] reserved_host_disk_mb
            # wins over Placement, as in nova.
            view.reserved_gb, what=orc.DISK_GB)},
    )]
