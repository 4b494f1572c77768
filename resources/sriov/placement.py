"""nova's ``[pci] report_in_placement`` layout of the alias devices.

With the option set, the sriov plugin reports the devices of ``[pci]
device_spec`` without ``physical_network`` exactly as nova's
``nova.compute.pci_placement_translator`` does, so that nova's resource
tracker, which runs its translator after the driver's
``update_provider_tree``, finds every provider already there and changes
nothing:

- one provider per PF or plain device, ``<nodename>_<ADDRESS>`` (the
  address upper-cased, nova's name), child of the compute node; a VF is
  counted on its PF's provider (nova: a PF's provider holds the PF or its
  VFs, never both);
- inventory one resource class, ``total`` and ``max_unit`` the number of
  devices: the spec's ``resource_class`` (normalised) or
  ``CUSTOM_PCI_<VENDOR_ID>_<PRODUCT_ID>``;
- traits: the spec's ``traits`` (normalised), ``COMPUTE_MANAGED_PCI_DEVICE``,
  ``HW_PCI_LIVE_MIGRATABLE`` for a live-migratable device and
  ``HW_PCI_ONE_TIME_USE`` for a ``one_time_use`` PF or plain device (the
  device's traits, :func:`resources.sriov.view.spec_devices`).

nova's rules are checked with nova's messages: a PF together with its VFs,
VFs of one PF with different resource classes or traits, a VF saying
``one_time_use`` and a ``devname`` spec (:func:`resources.sriov.devspec.check_placement`)
are errors. NOTE: nova reserves an allocated one-time-use device's inventory
(``reserved`` = total, never lowered by nova). The plugin's record leaves
``reserved`` out (a device class, :func:`compute_plugins.plugin.devices.inventory_record`),
so in nova nova's translator, which runs after the driver, sets it and it
stays once the device is freed (nova's ``ProviderTree`` and report client
compare only the fields a record has). The plugin cannot set it itself:
its providers come from the host's view, which does not know which devices
are allocated; the compute agent, without nova's translator, does not
reserve a used one-time-use device (doc/source/nova-compat.md).

The provider's uuid is the plugin's stable uuid (nova generates a random
one only for a provider it has to create). The decision of an alias device
names its provider: the provider nova's ``pci_in_placement`` request group
(one group of one device each) is allocated from, and nova's PCI claim
takes the device from the pool of that provider.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Optional

from compute_plugins.plugin import names
from compute_plugins.plugin.devices import inventory_record
from compute_plugins.tree.contribution import ProviderContribution
from resources.sriov.devspec import PlacementPciError
from resources.sriov.view import DeviceView

#: Kind of the stable uuid of a device's provider.
KIND = "pci"
OPTION = "[pci] device_spec"


__all__ = ["PlacementPciError", "PciProvider", "contributions", "layout",
           "provider_name", "provider_uuid"]


def provider_name(nodename: str, address: str) -> str:
    """nova's ``<nodename>_<ADDRESS>`` (``pci_placement_translator``)."""
    return "%s_%s" % (nodename, address.upper())


def provider_uuid(nodename: str, address: str) -> str:
    return names.provider_uuid(nodename, KIND, address)


@dataclasses.dataclass(frozen=True)
class PciProvider:
    """One provider of nova's layout: the PF or plain device at
    ``address``, or the VFs of the PF at ``address``."""

    address: str
    resource_class: str
    traits: frozenset[str]
    devices: tuple[str, ...]


def _dependent(device: str, others: Sequence[DeviceView]) -> PlacementPciError:
    return PlacementPciError(
        device, "Configuring both %s and %s in [pci]device_spec is not "
        "supported. Either the parent PF or its children VFs can be "
        "configured." % (device, ",".join(d.address for d in others)),
        prefixed=False)


def _check_child(device: DeviceView, children: Sequence[DeviceView],
                 name: str) -> None:
    """nova's ``add_child`` checks of a VF joining ``children``."""
    if children:
        rc = children[0].resource_class or ""
        traits = children[0].traits or frozenset()
        current = ",".join(d.address for d in children)
        if (device.resource_class or "") != rc:
            raise PlacementPciError(
                device.address, "VFs from the same PF cannot be configured "
                "with different 'resource_class' values in [pci]device_spec. "
                "We got %s for %s and %s for %s."
                % (device.resource_class, device.address, rc, current),
                prefixed=False)
        if (device.traits or frozenset()) != traits:
            raise PlacementPciError(
                device.address, "VFs from the same PF cannot be configured "
                "with different set of 'traits' in [pci]device_spec. We got "
                "%s for %s and %s for %s."
                % (",".join(sorted(device.traits or ())), device.address,
                   ",".join(sorted(traits)), current), prefixed=False)
    if device.one_time_use is not None:
        raise PlacementPciError(
            device.address, "Only type-PCI and type-PF devices may set "
            "one_time_use and %s does not qualify" % name)


def layout(devices: Sequence[DeviceView], nodename: str = "") -> list[PciProvider]:
    """nova's providers for ``devices`` (those with ``placed_on``) of the
    compute node ``nodename``.

    :raises PlacementPciError: a PF with its VFs, VFs of one PF with
        different resource classes or traits, or a VF saying
        ``one_time_use``.
    """
    groups: dict[str, list[DeviceView]] = {}
    for device in devices:
        if device.placed_on is not None:
            groups.setdefault(device.placed_on, []).append(device)
    result = []
    for address, members in sorted(groups.items()):
        # NOTE: nova's PciResourceProvider, fed in address order (its
        # tracker's), so that the first conflict and its message are nova's
        parent: Optional[DeviceView] = None
        children: list[DeviceView] = []
        for device in sorted(members, key=lambda d: d.address):
            if device.address == address:
                if children:
                    raise _dependent(device.address, children)
                parent = device
                continue
            if parent is not None:
                raise _dependent(device.address, [parent])
            _check_child(device, children, provider_name(nodename, address))
            children.append(device)
        first = parent or children[0]
        rc = first.resource_class or ""
        traits = first.traits or frozenset()
        result.append(PciProvider(address=address, resource_class=rc,
                                  traits=traits,
                                  devices=tuple(d.address for d in members)))
    return result


def contributions(devices: Sequence[DeviceView],
                  nodename: str) -> list[ProviderContribution]:
    """One provider per :class:`PciProvider`, under the compute node."""
    return [ProviderContribution(
        name=provider_name(nodename, p.address),
        uuid=provider_uuid(nodename, p.address),
        parent=None,
        inventory={p.resource_class: inventory_record(len(p.devices))},
        traits=p.traits,
    ) for p in layout(devices, nodename)]
