"""The SR-IOV plugin's guest XML: VF interfaces and alias ``<hostdev>``.

As nova's libvirt driver writes them (``vif.get_config_hw_veb``,
``LibvirtConfigGuestHostdevPCI``):

- a ``direct`` port's VF::

    <interface type="hostdev" managed="yes">
      <source><address type="pci" domain="0x0000" bus="0x5e" slot="0x10"
                       function="0x1"/></source>
    </interface>

- a ``macvtap`` port's VF, by its network interface::

    <interface type="direct">
      <source dev="ens1f0v1" mode="passthrough"/>
      <model type="virtio"/><driver name="vhost"/>
    </interface>

- a ``vdpa`` port's VF, by its vhost-vdpa device
  (``designer.set_vif_host_backend_vdpa_config``)::

    <interface type="vdpa">
      <source dev="/dev/vhost-vdpa-3"/>
    </interface>

- an alias device::

    <hostdev mode="subsystem" type="pci" managed="yes">
      <source><address domain="0x0000" bus="0x84" slot="0x00"
                       function="0x0"/></source>
    </hostdev>

The port's MAC address and VLAN are neutron's binding details, which the
request does not carry: libvirt generates a MAC, the VLAN is left unset.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from compute_plugins.plugin.contract import GuestFragment
from resources.sriov.request import VDPA, SRIOVAssignment, SRIOVRequest

MACVTAP = "macvtap"


def pci_address_fields(address: str) -> dict[str, str]:
    """``0000:5e:10.1`` -> libvirt's ``domain``/``bus``/``slot``/``function``."""
    domain, bus, rest = address.split(":")
    slot, function = rest.split(".")
    return {"domain": "0x" + domain, "bus": "0x" + bus, "slot": "0x" + slot,
            "function": "0x" + function}


def vf_interface(vf_address: str) -> str:
    """A ``direct`` port's ``<interface type="hostdev">``."""
    interface = ET.Element("interface", {"type": "hostdev", "managed": "yes"})
    source = ET.SubElement(interface, "source")
    ET.SubElement(source, "address", {"type": "pci", **pci_address_fields(vf_address)})
    return ET.tostring(interface, encoding="unicode")


def macvtap_interface(netdev: str) -> str:
    """A ``macvtap`` port's ``<interface type="direct">`` on the VF ``netdev``."""
    interface = ET.Element("interface", {"type": "direct"})
    ET.SubElement(interface, "source", {"dev": netdev, "mode": "passthrough"})
    ET.SubElement(interface, "model", {"type": "virtio"})
    ET.SubElement(interface, "driver", {"name": "vhost"})
    return ET.tostring(interface, encoding="unicode")


def vdpa_interface(vdpa_dev: str) -> str:
    """A ``vdpa`` port's ``<interface type="vdpa">`` on its vhost-vdpa device."""
    interface = ET.Element("interface", {"type": "vdpa"})
    ET.SubElement(interface, "source", {"dev": vdpa_dev})
    return ET.tostring(interface, encoding="unicode")


def pci_hostdev(address: str) -> str:
    """An alias device's ``<hostdev type="pci">``."""
    hostdev = ET.Element("hostdev", {"mode": "subsystem", "type": "pci",
                                     "managed": "yes"})
    source = ET.SubElement(hostdev, "source")
    ET.SubElement(source, "address", pci_address_fields(address))
    return ET.tostring(hostdev, encoding="unicode")


def fragments(request: SRIOVRequest,
              assignment: SRIOVAssignment) -> tuple[GuestFragment, ...]:
    """The ports' interfaces (port order), then the alias devices."""
    vnic = {p.requester_id: p.vnic_type for p in request.ports}
    result = []
    for vf in assignment.vfs:
        if vnic.get(vf.requester_id) == MACVTAP:
            xml = macvtap_interface(vf.vf_netdev)
        elif vnic.get(vf.requester_id) == VDPA:
            xml = vdpa_interface(vf.vdpa_dev)
        else:
            xml = vf_interface(vf.vf_address)
        result.append(GuestFragment("devices", xml))
    result.extend(GuestFragment("devices", pci_hostdev(d.address))
                  for d in assignment.devices)
    return tuple(result)
