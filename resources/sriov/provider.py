"""The SR-IOV plugin's providers: one ``<nodename>_pf_<address>`` per PF.

Parent: the provider of the PF's NUMA cell (see :mod:`compute_plugins.plugin.devices`)
or the root. Inventory ``SRIOV_NET_VF`` (one per VF) and, when configured,
``NET_BW_EGR_KILOBIT_PER_SEC`` / ``NET_BW_IGR_KILOBIT_PER_SEC``. Traits
``CUSTOM_VNIC_TYPE_DIRECT`` (some VF is not a vDPA device),
``CUSTOM_VNIC_TYPE_VDPA`` (some VF is) and ``CUSTOM_PHYSNET_<PHYSNET>``
when mapped; a PF whose VFs are remote-managed
``CUSTOM_VNIC_TYPE_REMOTE_MANAGED`` instead of ``CUSTOM_VNIC_TYPE_DIRECT``,
and ``CUSTOM_NETWORK_TUNNEL_PROVIDER`` when it has no physnet (its VFs
serve tunneled networks).

With ``[pci] report_in_placement`` the alias devices get nova's providers
too (:mod:`resources.sriov.placement`).
"""

from __future__ import annotations

from typing import Any

import os_resource_classes as orc

from compute_plugins.plugin import names
from compute_plugins.plugin.devices import inventory_record, parent_name
from compute_plugins.tree.contribution import ProviderContribution
from resources.sriov import placement
from resources.sriov.view import PFView, SRIOVView

KIND = "pf"
EGRESS = orc.NET_BW_EGR_KILOBIT_PER_SEC
INGRESS = orc.NET_BW_IGR_KILOBIT_PER_SEC


def pf_inventory(pf: PFView) -> dict[str, dict[str, Any]]:
    inventory = {orc.SRIOV_NET_VF: inventory_record(pf.vfs)}
    if pf.egress_kbps:
        inventory[EGRESS] = inventory_record(pf.egress_kbps)
    if pf.ingress_kbps:
        inventory[INGRESS] = inventory_record(pf.ingress_kbps)
    return inventory


def contributions(view: SRIOVView,
                  nodename: str) -> list[ProviderContribution]:
    result = []
    result.extend(placement.contributions(view.devices, nodename))
    for pf in view.pfs:
        # NOTE: a PF serves direct (and macvtap) ports with its VFs that are
        # not vDPA devices, vdpa ports with the others; a remote-managed
        # PF's VFs serve remote-managed ports only.
        traits = set()
        if pf.remote_managed:
            traits.add(names.VNIC_TYPE_REMOTE_MANAGED)
        elif pf.vfs > pf.vdpa_vfs:
            traits.add(names.VNIC_TYPE_DIRECT)
        if pf.vdpa_vfs:
            traits.add(names.VNIC_TYPE_VDPA)
        if pf.physnet:
            traits.add(names.physnet_trait(pf.physnet))
        elif pf.remote_managed:
            traits.add(names.NETWORK_TUNNEL_PROVIDER)
        result.append(ProviderContribution(
            name=names.device_provider_name(nodename, KIND, pf.address),
            uuid=names.provider_uuid(nodename, KIND, pf.address),
            parent=parent_name(nodename, pf.cell),
            inventory=pf_inventory(pf),
            traits=frozenset(traits),
        ))
    return result
