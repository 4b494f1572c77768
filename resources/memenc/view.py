"""The memenc plugin's view: the memory encryption models the host offers.

As nova's libvirt driver finds them (``nova.virt.libvirt.host``:
``supports_amd_sev``, ``supports_amd_sev_es``, ``supports_amd_sev_snp``,
``supports_intel_tdx``, ``get_mem_encryption_inventories``), from the
domain capabilities of the q35 machine type (``HostInfo.domain_caps``):

- ``amd_sev``: ``<sev supported='yes'>`` on x86_64, ``maxGuests`` slots;
- ``amd_sev_snp``: SEV and ``sev-snp`` among the ``<launchSecurity>``
  types (and the kernel's ``sev_snp``), ``maxESGuests`` slots;
- ``amd_sev_es``: SEV with ``maxESGuests`` > 0, ``maxESGuests`` slots,
  unless the kernel enables SEV-SNP (nova's ``supports_amd_sev_es``
  ignores SEV-ES then, the two sharing the ES ASIDs, even where libvirt
  does not list ``sev-snp`` and SEV-SNP is not offered either);
- ``intel_tdx``: ``<tdx supported='yes'>`` on x86_64, with
  ``[libvirt] num_intel_tdx_guests`` slots (nova's option; nova also reads the misc cgroup's ``tdx``
  capacity on a live host, which discovery does not record); unset: 0 and
  no TDX, as nova.

Each AMD model also needs the kernel to enable it (nova's
``_kernel_supports_amd_sev``: ``HostInfo.kvm_amd_sev``, the ``kvm_amd``
module's ``sev``, ``sev_es``, ``sev_snp`` parameters): SEV-SNP is offered
when the kernel enables it and the domain capabilities list it. A host
whose kernel facts are unknown (a snapshot recorded without them) is
judged on its domain capabilities alone. A model with 0 slots has no
provider.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import os_traits

from compute_plugins.host.model import HostInfo

X86_64 = "x86_64"


@dataclasses.dataclass(frozen=True)
class Model:
    """One memory encryption model (nova's ``MemEncryptionConfig``).

    :param name: nova's ``MemEncryptionModel`` value (``amd-sev``), the
        value of ``hw:mem_encryption_model``.
    :param trait: the trait nova requires and reports.
    :param launch_security: the ``<launchSecurity type>`` of the guest.
    :param policy: the guest policy nova sets (None: libvirt's default).
    :param locked_memory: the guest's memory must be locked (nova's
        ``needs_locked_memory``).
    :param stateless_firmware: the image must say
        ``hw_firmware_stateless=true`` (nova's ``needs_stateless_firmware``).
    """

    name: str
    trait: str
    launch_security: str
    policy: Optional[int]
    locked_memory: bool
    stateless_firmware: bool = False

    @property
    def provider_suffix(self) -> str:
        """nova's provider name suffix (``amd_sev``: ``<nodename>_amd_sev``)."""
        return self.name.replace("-", "_")


#: nova's ``LibvirtConfigGuestSEVLaunchSecurity`` policies (NODBG, NOKS,
#: DOMAIN, SEV; ES adds 0x4) and ``LibvirtConfigGuestSEVSNPLaunchSecurity``'s.
SEV_POLICY = 0x0033
SEV_ES_POLICY = 0x0037
SEV_SNP_POLICY = 0x00030000

AMD_SEV = Model("amd-sev", os_traits.HW_CPU_X86_AMD_SEV, "sev", SEV_POLICY, True)
AMD_SEV_ES = Model("amd-sev-es", os_traits.HW_CPU_X86_AMD_SEV_ES, "sev",
                   SEV_ES_POLICY, True)
AMD_SEV_SNP = Model("amd-sev-snp", os_traits.HW_CPU_X86_AMD_SEV_SNP, "sev-snp",
                    SEV_SNP_POLICY, False, stateless_firmware=True)
INTEL_TDX = Model("intel-tdx", os_traits.HW_CPU_X86_INTEL_TDX, "tdx", None, False,
                  stateless_firmware=True)

#: nova's ``MemEncryptionModel.ALL``, in its order.
MODELS: dict[str, Model] = {m.name: m for m in (AMD_SEV, AMD_SEV_ES, AMD_SEV_SNP,
                                                 INTEL_TDX)}
#: nova's default model (``get_mem_encryption_constraint``).
DEFAULT_MODEL = AMD_SEV.name


@dataclasses.dataclass(frozen=True)
class Slots:
    """The slots (guests at once) of one model on this host."""

    model: str
    total: int


@dataclasses.dataclass(frozen=True)
class MemEncView:
    """The models this host offers, each with its slots (none: no model)."""

    slots: tuple[Slots, ...] = ()


def build_view(host: HostInfo, tdx_guests: Optional[int]) -> MemEncView:
    """The :class:`MemEncView` of ``host`` (the module's rules).

    :param tdx_guests: ``[libvirt] num_intel_tdx_guests``.
    """
    caps = host.domain_caps
    if caps is None or caps.arch != X86_64:
        return MemEncView()
    kernel = host.kvm_amd_sev

    def enabled(flavour: str) -> bool:
        return kernel is None or flavour in kernel

    found: list[Slots] = []
    if caps.sev is not None and enabled("sev"):
        found.append(Slots(AMD_SEV.name, caps.sev.max_guests))
        snp = "sev-snp" in caps.launch_security and enabled("sev-snp")
        kernel_snp = kernel is not None and "sev-snp" in kernel
        if snp:
            found.append(Slots(AMD_SEV_SNP.name, caps.sev.max_es_guests))
        elif enabled("sev-es") and not kernel_snp:
            found.append(Slots(AMD_SEV_ES.name, caps.sev.max_es_guests))
    if caps.tdx:
        found.append(Slots(INTEL_TDX.name, tdx_guests or 0))
    return MemEncView(slots=tuple(s for s in found if s.total > 0))
