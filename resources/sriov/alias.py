"""Which PCI device a ``[pci] alias`` names (``pci_passthrough:alias``).

nova matches an alias against the devices of ``[pci] device_spec`` by the
fields the alias gives: ``vendor_id``, ``product_id`` and ``device_type``
(``type-PCI``, ``type-PF``, ``type-VF``, as nova's libvirt driver types a
device). This project has no ``device_spec``: the devices an alias may name
are chosen by :func:`resources.sriov.view.build_view` (those a configured
alias matches, less the SR-IOV NICs' PFs and VFs, which serve ports, and the
vGPU devices). An alias that gives neither ``vendor_id`` nor
``product_id`` names devices by its ``resource_class``: a device's class is
``CUSTOM_PCI_<VENDOR_ID>_<PRODUCT_ID>``, nova's default for a device without
``resource_class`` in its ``device_spec``. An alias requiring ``traits``
names no device: devices carry no traits without a ``device_spec``.
"""

from __future__ import annotations

from typing import Optional, Protocol

from compute_plugins.host.model import PCIDevice
from compute_plugins.plugin import names

TYPE_PCI = "type-PCI"
TYPE_PF = "type-PF"
TYPE_VF = "type-VF"


class AliasSpec(Protocol):
    """What an alias says of its devices (``PciAlias``, ``AliasRequest``)."""

    @property
    def resource_class(self) -> str: ...
    @property
    def traits(self) -> frozenset[str]: ...
    @property
    def vendor_id(self) -> Optional[str]: ...
    @property
    def product_id(self) -> Optional[str]: ...
    @property
    def device_type(self) -> Optional[str]: ...


def device_type(device: PCIDevice) -> str:
    """nova's device type: a VF, an SR-IOV capable PF, or a plain device."""
    if device.is_vf:
        return TYPE_VF
    if device.is_pf:
        return TYPE_PF
    return TYPE_PCI


def resource_class(vendor_id: Optional[str], product_id: Optional[str]) -> str:
    """``CUSTOM_PCI_<VENDOR>_<PRODUCT>`` (nova's default device class)."""
    return names.custom_name("PCI", (vendor_id or "").upper(),
                             (product_id or "").upper())


def mismatch(alias: AliasSpec, vendor_id: Optional[str], product_id: Optional[str],
             dev_type: str) -> Optional[str]:
    """Why a device of ``vendor_id:product_id`` and ``dev_type`` is not one
    of ``alias``'s (a clause), or None when it is."""
    if alias.traits:
        return ("the alias requires traits %s and PCI devices carry none"
                % ", ".join(sorted(alias.traits)))
    if alias.vendor_id is None and alias.product_id is None:
        own = resource_class(vendor_id, product_id)
        if own != alias.resource_class:
            return "its resource class is %s, the alias's %s" % (
                own, alias.resource_class)
    for what, wanted, got in (("vendor_id", alias.vendor_id, vendor_id),
                              ("product_id", alias.product_id, product_id)):
        if wanted is not None and wanted.lower() != (got or "").lower():
            return "its %s is %s, the alias's %s" % (what, got, wanted)
    if alias.device_type is not None and alias.device_type != dev_type:
        return "it is %s, the alias asks %s" % (dev_type, alias.device_type)
    return None
