"""The vGPU assignment in words (``compute-plugins fit``): a line per group."""

from __future__ import annotations

from resources.vgpu.request import VGPUAssignment, VGPURequest


def describe(request: VGPURequest, assignment: VGPUAssignment) -> list[str]:
    """``<group>: <n> vGPU(s) of type <t> on pGPU <address> (<mdevs>)``."""
    counts = {group.requester_id: group.count for group in request.groups}
    lines = []
    for device in assignment.devices:
        count = counts.get(device.requester_id, len(device.mdev_uuids))
        line = "%s: %d vGPU%s" % (device.requester_id or "vGPU group", count,
                                  "" if count == 1 else "s")
        if device.mdev_type:
            line += " of type %s" % device.mdev_type
        line += " on pGPU %s" % device.parent_address
        if device.mdev_uuids:
            line += " (mdev %s)" % ", ".join(device.mdev_uuids)
        lines.append(line)
    return lines
