"""The FPGA plugin's guest XML: one PCI ``<hostdev>`` per card::

    <hostdev mode="subsystem" type="pci" managed="yes">
      <source><address domain="0x0000" bus="0x5e" slot="0x00" function="0x0"/></source>
    </hostdev>
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from compute_plugins.api import GuestFragment
from compute_plugins_fpga.request import FPGAAssignment


def hostdev(address: str) -> str:
    """The ``<hostdev>`` of the PCI device at ``address`` (``dddd:bb:ss.f``)."""
    domain, bus, slot_function = address.split(":")
    slot, function = slot_function.split(".")
    element = ET.Element("hostdev", {"mode": "subsystem", "type": "pci",
                                     "managed": "yes"})
    source = ET.SubElement(element, "source")
    ET.SubElement(source, "address", {"domain": "0x" + domain, "bus": "0x" + bus,
                                      "slot": "0x" + slot, "function": "0x" + function})
    return ET.tostring(element, encoding="unicode")


def fragments(assignment: FPGAAssignment) -> tuple[GuestFragment, ...]:
    return tuple(GuestFragment("devices", hostdev(card.address))
                 for card in assignment.cards)
