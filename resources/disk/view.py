"""The disk plugin's view: local ``DISK_GB`` or a shared-storage aggregate.

Where the size comes from:

1. ``HostInfo.disk`` when discovery gave it (a host snapshot's ``host.json``);
2. else, on a live local host (``HostInfo.source`` is a libvirt URI of a
   real driver on this machine, :func:`compute_plugins.host.uri.is_local_uri`;
   not ``test:///`` nor a remote ``qemu+ssh://`` host, whose disks are not
   this machine's), ``statvfs`` of ``[disk] instances_path``; a path that
   cannot be measured (missing, not a directory, no permission) is logged
   with the reason and gives no disk data;
3. else no disk data, and no ``DISK_GB``.

``total`` is the file system size in whole GiB (nova's ``local_gb``);
``reserved`` is ``[disk] reserved_host_disk_mb`` rounded up to GiB (nova's
``convert_mb_to_ceil_gb``), at most the total.

Shared storage: with ``[disk] shared_storage_aggregate`` set, the compute
root carries no ``DISK_GB`` and joins that aggregate. The operator creates a
sharing provider (trait ``MISC_SHARES_VIA_AGGREGATE``) with the ``DISK_GB``
inventory in the same aggregate, as nova's documentation on shared storage
says; this plugin does not create it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import uuid
from typing import Optional

from oslo_config import cfg

from compute_plugins.host.errors import HostDataError
from compute_plugins.host.model import DiskInfo, HostInfo
from compute_plugins.host.snapshot import disk_info
from compute_plugins.host.uri import is_local_uri
from compute_plugins.plugin.devices import InvalidOptionValue

LOG = logging.getLogger(__name__)

GROUP = "disk"


class InvalidDiskConfig(InvalidOptionValue):
    """A ``[disk]`` option value is malformed."""


@dataclasses.dataclass(frozen=True)
class DiskView:
    """``DISK_GB`` of the compute root, or the shared-storage aggregate."""

    total_gb: Optional[int] = None
    reserved_gb: int = 0
    allocation_ratio: float = 1.0
    shared_aggregate: Optional[str] = None
    #: The ephemeral encryption formats the host's instance disks support
    #: (``[disk] ephemeral_encryption_formats``).
    ephemeral_encryption_formats: frozenset[str] = frozenset()


def is_live_local(host: HostInfo) -> bool:
    """True when ``host`` is this machine, seen through a local libvirt."""
    return is_local_uri(host.source)


def measure(path: str) -> Optional[DiskInfo]:
    """Size of the file system holding ``path``; ``None`` with a warning."""
    try:
        return disk_info(path)
    except HostDataError as exc:
        LOG.warning("[disk] instances_path: %s: no DISK_GB reported", exc)
        return None


def _aggregate(conf: cfg.ConfigOpts) -> Optional[str]:
    value = conf[GROUP].shared_storage_aggregate
    if not value:
        return None
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidDiskConfig(
            "[disk] shared_storage_aggregate", value,
            "the uuid of a Placement aggregate is expected") from None


def build_view(conf: cfg.ConfigOpts, host: HostInfo) -> DiskView:
    """The :class:`DiskView` of ``host`` (see the module rules)."""
    group = conf[GROUP]
    formats = frozenset(group.ephemeral_encryption_formats)
    aggregate = _aggregate(conf)
    if aggregate is not None:
        return DiskView(shared_aggregate=aggregate, ephemeral_encryption_formats=formats)
    disk = host.disk
    if disk is None and is_live_local(host):
        disk = measure(group.instances_path)
    if disk is None or disk.total_gb <= 0:
        return DiskView(ephemeral_encryption_formats=formats)
    reserved = math.ceil(group.reserved_host_disk_mb / 1024)
    return DiskView(
        total_gb=disk.total_gb,
        reserved_gb=min(reserved, disk.total_gb),
        allocation_ratio=group.disk_allocation_ratio,
        ephemeral_encryption_formats=formats,
    )
