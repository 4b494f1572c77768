"""The vGPU plugin's guest XML: one mdev ``<hostdev>`` per assigned mdev.

As nova's ``LibvirtConfigGuestHostdevMDEV``::

    <hostdev mode="subsystem" type="mdev" model="vfio-pci" managed="no">
      <source><address uuid="..."/></source>
    </hostdev>

``managed="no"``: libvirt does not create mdevs; the compute host creates
the planned ones (:mod:`resources.vgpu.state`) before it defines the guest.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from compute_plugins.plugin.contract import GuestFragment
from resources.vgpu.request import VGPUAssignment

MODEL = "vfio-pci"


def mdev_hostdev(mdev_uuid: str) -> str:
    """The ``<hostdev>`` element of the mdev ``mdev_uuid``."""
    hostdev = ET.Element("hostdev", {"mode": "subsystem", "type": "mdev",
                                     "model": MODEL, "managed": "no"})
    source = ET.SubElement(hostdev, "source")
    ET.SubElement(source, "address", {"uuid": mdev_uuid})
    return ET.tostring(hostdev, encoding="unicode")


def fragments(assignment: VGPUAssignment) -> tuple[GuestFragment, ...]:
    """One ``devices`` fragment per mdev, in group then mdev order."""
    return tuple(GuestFragment("devices", mdev_hostdev(mdev))
                 for device in assignment.devices for mdev in device.mdev_uuids)
