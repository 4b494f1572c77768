"""The vGPU plugin's providers: one ``<nodename>_pci_<address>`` per GPU.

Named as nova names them; the parent is the provider of the GPU's NUMA cell
(see :mod:`compute_plugins.plugin.devices`) or the root. Inventory ``VGPU`` with the
GPU's total (``max_unit`` = total, ratio 1.0: vGPUs cannot be
overcommitted), or the type's ``[mdev_<type>] mdev_class`` instead of
``VGPU``; trait ``CUSTOM_MDEV_TYPE_<TYPE>`` names the type it offers.
"""

from __future__ import annotations

from compute_plugins.plugin import names
from compute_plugins.plugin.devices import inventory_record, parent_name
from compute_plugins.tree.contribution import ProviderContribution
from resources.vgpu.view import VGPUView

KIND = "pci"


def mdev_type_trait(mdev_type: str) -> str:
    """``nvidia-35`` -> ``CUSTOM_MDEV_TYPE_NVIDIA_35``."""
    return names.custom_name("MDEV_TYPE", mdev_type)


def contributions(view: VGPUView,
                  nodename: str) -> list[ProviderContribution]:
    return [
        ProviderContribution(
            name=names.device_provider_name(nodename, KIND, gpu.address),
            uuid=names.provider_uuid(nodename, KIND, gpu.address),
            parent=parent_name(nodename, gpu.cell),
            inventory={gpu.resource_class: inventory_record(
                gpu.total, what=f"GPU {gpu.address} {gpu.resource_class}")},
            traits=frozenset({mdev_type_trait(gpu.mdev_type)}),
        )
        for gpu in view.gpus
    ]
