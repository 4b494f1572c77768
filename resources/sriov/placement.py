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
- traits: the spec's ``traits`` (normalised), ``COMPUTE_MANAGED_PCI_DEVICE``
  and ``HW_PCI_LIVE_MIGRATABLE`` for a live-migratable device.

nova's rules are checked with nova's messages: a PF together with its VFs,
and VFs of one PF with different resource classes or traits, are errors.

The provider's uuid is the plugin's stable uuid (nova generates a random
one only for a provider it has to create). The decision of an alias device
names its provider: the provider nova's ``pci_in_placement`` request group
(one group of one device each) is allocated from, and nova's PCI claim
takes the device from the pool of that provider.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from compute_plugins.plugin import names
from compute_plugins.plugin.devices import InvalidOptionValue, inventory_record
from compute_plugins.tree.contribution import ProviderContribution
from resources.sriov.view import DeviceView

#: Kind of the stable uuid of a device's provider.
KIND = "pci"
OPTION = "[pci] device_spec"


class PlacementPciError(InvalidOptionValue):
    """The device_spec cannot be reported as nova does (nova's message)."""

    def __init__(self, value: str, reason: str) -> None:
        super().__init__(OPTION, value, reason)
        self.args = ("Failed to gather or report PCI resources to Placement: "
                     "%s" % reason,)

    def __str__(self) -> str:
        return str(self.args[0])


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


def layout(devices: Sequence[DeviceView]) -> list[PciProvider]:
    """nova's providers for ``devices`` (those with ``placed_on``).

    :raises PlacementPciError: a PF with its VFs, or VFs of one PF with
        different resource classes or traits.
    """
    groups: dict[str, list[DeviceView]] = {}
    for device in devices:
        if device.placed_on is not None:
            groups.setdefault(device.placed_on, []).append(device)
    result = []
    for address, members in sorted(groups.items()):
        parent = [d for d in members if d.address == address]
        children = [d for d in members if d.address != address]
        if parent and children:
            raise PlacementPciError(
                address, "Configuring both %s and %s in [pci]device_spec is "
                "not supported. Either the parent PF or its children VFs can "
                "be configured." % (address, ",".join(d.address for d in children)))
        first = members[0]
        rc = first.resource_class or ""
        traits = first.traits or frozenset()
        for other in members[1:]:
            if (other.resource_class or "") != rc:
                raise PlacementPciError(
                    other.address, "VFs from the same PF cannot be configured "
                    "with different 'resource_class' values in "
                    "[pci]device_spec. We got %s for %s and %s for %s."
                    % (other.resource_class, other.address, rc, first.address))
            if (other.traits or frozenset()) != traits:
                raise PlacementPciError(
                    other.address, "VFs from the same PF cannot be configured "
                    "with different set of 'traits' in [pci]device_spec. We "
                    "got %s for %s and %s for %s."
                    % (",".join(sorted(other.traits or ())), other.address,
                       ",".join(sorted(traits)), first.address))
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
    ) for p in layout(devices)]
