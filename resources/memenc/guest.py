"""The memenc plugin's guest XML: ``<launchSecurity>`` as nova writes it.

nova's ``_guest_configure_sev_mem_encryption`` /
``_guest_configure_tdx_mem_encryption`` (``LibvirtConfigGuest*LaunchSecurity``):

- SEV: ``<launchSecurity type="sev"><policy>0x0033</policy>``; SEV-ES the
  same with policy ``0x0037``. ``cbitpos`` and ``reducedPhysBits`` are left
  to libvirt, which fills them from the host's domain capabilities, as
  nova does;
- SEV-SNP: ``<launchSecurity type="sev-snp" authorKey="no" vcek="yes"
  kernelHashes="no"><policy>0x00030000</policy>`` (nova sets kernelHashes
  for a guest booted from a kernel image, which no request here asks);
- TDX: ``<launchSecurity type="tdx"><quoteGenerationService/>``;
- SEV and SEV-ES guests' memory is locked (``<memoryBacking><locked/>``,
  nova's ``needs_locked_memory``: encrypted pages cannot be swapped).

The q35 machine type and UEFI firmware the model needs are checked on the
request (the image's ``hw_machine_type`` and ``hw_firmware_type``); the
``<os>`` element is the framework's.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from compute_plugins.plugin.contract import GuestFragment
from resources.memenc.request import MemEncAssignment
from resources.memenc.view import MODELS


def launch_security(model_name: str) -> str:
    """The ``<launchSecurity>`` element of ``model_name`` (nova's name)."""
    model = MODELS[model_name]
    element = ET.Element("launchSecurity", {"type": model.launch_security})
    if model.launch_security == "sev-snp":
        element.attrib.update(authorKey="no", vcek="yes", kernelHashes="no")
    if model.policy is not None:
        ET.SubElement(element, "policy").text = (
            "0x%08x" if model.launch_security == "sev-snp" else "0x%04x") % model.policy
    if model.launch_security == "tdx":
        ET.SubElement(element, "quoteGenerationService")
    return ET.tostring(element, encoding="unicode")


def fragments(assignment: MemEncAssignment) -> tuple[GuestFragment, ...]:
    """``<launchSecurity>``, and ``<memoryBacking><locked/>`` when the
    model needs locked memory."""
    out = [GuestFragment("domain", launch_security(assignment.model))]
    if MODELS[assignment.model].locked_memory:
        out.append(GuestFragment("domain", "<memoryBacking><locked/></memoryBacking>"))
    return tuple(out)
