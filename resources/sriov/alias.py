"""Which PCI device a ``[pci] alias`` names (``pci_passthrough:alias``).

nova matches an alias against the devices of ``[pci] device_spec`` by the
fields the alias gives: ``vendor_id``, ``product_id`` and ``device_type``
(``type-PCI``, ``type-PF``, ``type-VF``, as nova's libvirt driver types a
device). The devices an alias may name are chosen by
:func:`resources.sriov.view.build_view`: with a ``device_spec``, the devices
it matches; without one, those a configured alias matches, less the SR-IOV
NICs' PFs and VFs (which serve ports) and the vGPU devices. An alias that
gives neither ``vendor_id`` nor ``product_id`` names devices by its
``resource_class``: a device's class is its ``device_spec``'s
``resource_class``, else ``CUSTOM_PCI_<VENDOR_ID>_<PRODUCT_ID>`` (nova's
default). An alias requiring ``traits`` names the devices whose
``device_spec`` gives them all (nova adds ``COMPUTE_MANAGED_PCI_DEVICE`` to
every device, ``HW_PCI_LIVE_MIGRATABLE`` to live-migratable ones); without a
``device_spec`` devices carry no traits.
"""

from __future__ import annotations

from typing import Optional, Protocol

import os_traits

from compute_plugins.conf import pci as pci_conf
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
    @property
    def live_migratable(self) -> Optional[str]: ...


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


def spec_resource_class(given: Optional[str], vendor_id: Optional[str],
                        product_id: Optional[str]) -> str:
    """A device's class: its ``device_spec``'s ``resource_class``
    (normalised as nova does), else :func:`resource_class`."""
    if given:
        return pci_conf.normalize_rc(given)
    return resource_class(vendor_id, product_id)


def spec_traits(given: str, live_migratable: bool = False) -> frozenset[str]:
    """A device's traits as nova's ``pci_placement_translator`` gives them:
    the ``device_spec``'s ``traits`` (normalised), ``COMPUTE_MANAGED_PCI_DEVICE``
    and ``HW_PCI_LIVE_MIGRATABLE`` when live-migratable."""
    traits = {pci_conf.normalize_trait(t) for t in given.split(",") if t.strip()}
    traits.add(os_traits.COMPUTE_MANAGED_PCI_DEVICE)
    if live_migratable:
        traits.add(os_traits.HW_PCI_LIVE_MIGRATABLE)
    return frozenset(traits)


def mismatch(alias: AliasSpec, vendor_id: Optional[str], product_id: Optional[str],
             dev_type: str, dev_class: Optional[str] = None,
             dev_traits: Optional[frozenset[str]] = None,
             dev_live_migratable: Optional[str] = None) -> Optional[str]:
    """Why a device of ``vendor_id:product_id`` and ``dev_type`` is not one
    of ``alias``'s (a clause), or None when it is.

    :param dev_class: / :param dev_traits: the device's class and traits
        from its ``device_spec`` (None: no device_spec, the default class
        and no trait).
    :param dev_live_migratable: its ``device_spec``'s ``live_migratable``
        (``"true"``/``"false"``; None: not said). An alias that says
        ``live_migratable`` names only devices whose spec says the same
        (nova matches the alias's tag against the device's).
    """
    if alias.traits:
        if dev_traits is None:
            return ("the alias requires traits %s and PCI devices carry none"
                    % ", ".join(sorted(alias.traits)))
        missing = alias.traits - dev_traits
        if missing:
            return "it lacks the alias's traits %s" % ", ".join(sorted(missing))
    if alias.vendor_id is None and alias.product_id is None:
        own = dev_class or resource_class(vendor_id, product_id)
        if own != alias.resource_class:
            return "its resource class is %s, the alias's %s" % (
                own, alias.resource_class)
    for what, wanted, got in (("vendor_id", alias.vendor_id, vendor_id),
                              ("product_id", alias.product_id, product_id)):
        if wanted is not None and wanted.lower() != (got or "").lower():
            return "its %s is %s, the alias's %s" % (what, got, wanted)
    if alias.device_type is not None and alias.device_type != dev_type:
        return "it is %s, the alias asks %s" % (dev_type, alias.device_type)
    if (alias.live_migratable is not None
            and alias.live_migratable != dev_live_migratable):
        return "its live_migratable is %s, the alias's %s" % (
            dev_live_migratable or "not set", alias.live_migratable)
    return None
