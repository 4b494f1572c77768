"""The pmem plugin's guest XML: one NVDIMM ``<memory>`` device per namespace.

As nova's ``LibvirtConfigGuestVPMEM`` (``_guest_add_vpmems``)::

    <memory model="nvdimm" access="shared">
      <source><path>/dev/dax0.0</path><alignsize>2048</alignsize><pmem/></source>
      <target><size>4192256</size><node>0</node><label><size>2048</size></label></target>
    </memory>

sizes in KiB (libvirt's default unit). ``<node>`` is the guest NUMA node
the assignment records (an assignment recorded without one, before ``fit``
refused guests without topology, gets none). The domain's ``<maxMemory>`` (memory plus
every device, one slot each, as nova) is the framework's, from the
``<memory>`` devices (:func:`compute_plugins.compute.guest.assemble`).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Optional

from compute_plugins.plugin.contract import GuestFragment
from resources.pmem.request import NamespaceAssignment, PMEMAssignment

#: nova's ``label_size`` (2 MiB, in KiB).
LABEL_SIZE_KIB = 2048


def nvdimm(namespace: NamespaceAssignment, node: Optional[int]) -> str:
    """The ``<memory model="nvdimm">`` device of ``namespace``."""
    memory = ET.Element("memory", {"model": "nvdimm", "access": "shared"})
    source = ET.SubElement(memory, "source")
    ET.SubElement(source, "path").text = namespace.devpath
    ET.SubElement(source, "alignsize").text = str(namespace.align_kib)
    ET.SubElement(source, "pmem")
    target = ET.SubElement(memory, "target")
    ET.SubElement(target, "size").text = str(namespace.size_kib)
    if node is not None:
        ET.SubElement(target, "node").text = str(node)
    label = ET.SubElement(target, "label")
    ET.SubElement(label, "size").text = str(LABEL_SIZE_KIB)
    return ET.tostring(memory, encoding="unicode")


def fragments(assignment: PMEMAssignment) -> tuple[GuestFragment, ...]:
    """An NVDIMM device per assigned namespace, in the flavor's order."""
    return tuple(GuestFragment("devices", nvdimm(n, assignment.guest_node))
                 for n in assignment.namespaces)
