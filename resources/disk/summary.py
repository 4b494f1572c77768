"""The disk assignment in words (``compute-plugins fit``)."""

from __future__ import annotations

from resources.disk.request import DiskAssignment, DiskRequest


def describe(request: DiskRequest, assignment: DiskAssignment) -> list[str]:
    """``<n> GB DISK_GB from <the compute node | shared storage> <uuid>``."""
    where = "shared storage" if assignment.shared else "the compute node"
    line = "%d GB DISK_GB from %s" % (request.disk_gb, where)
    if assignment.provider_uuid:
        line += " (provider %s)" % assignment.provider_uuid
    return [line]
