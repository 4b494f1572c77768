"""Immutable facts about a compute host, as discovery found them.

Every discovery backend (live libvirt, a recorded host snapshot, udev
enrichment) produces one :class:`HostInfo`. Plugins read it and never talk to
libvirt or udev themselves, so the same plugin code runs on a live host, on a
snapshot and in tests. All classes are frozen dataclasses holding tuples, so a
``HostInfo`` can be shared between threads and cached without copying.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional


@dataclasses.dataclass(frozen=True)
class CPU:
    """One logical host CPU of a NUMA cell (``<cpu id=... socket_id=...>``)."""

    id: int
    socket_id: Optional[int] = None
    core_id: Optional[int] = None
    #: Thread siblings including this CPU itself; empty when libvirt did
    #: not say.
    siblings: frozenset[int] = frozenset()


@dataclasses.dataclass(frozen=True)
class PagePool:
    """A pool of pages of one size in a NUMA cell (``<pages size=...>``)."""

    size_kb: int
    count: int


@dataclasses.dataclass(frozen=True)
class NUMACell:
    """One host NUMA cell."""

    id: int
    cpus: tuple[CPU, ...] = ()
    #: Cell memory in KiB; ``None`` when the capabilities do not give it.
    memory_kb: Optional[int] = None
    pages: tuple[PagePool, ...] = ()
    #: Distance to every cell id (``{own id: 10, other: 20}``); empty if
    #: unknown.
    distances: tuple[tuple[int, int], ...] = ()

    @property
    def cpu_ids(self) -> frozenset[int]:
        return frozenset(cpu.id for cpu in self.cpus)


@dataclasses.dataclass(frozen=True)
class MdevType:
    """A mediated-device type a physical device offers (``<type id=...>``)."""

    id: str
    name: Optional[str] = None
    available_instances: int = 0
    device_api: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class PCIDevice:
    """A PCI device (a libvirt node device with capability ``pci``).

    ``address`` is the canonical ``dddd:bb:ss.f`` form; ``name`` is libvirt's
    node-device name (``pci_dddd_bb_ss_f``).
    """

    address: str
    name: str
    vendor_id: Optional[str] = None
    product_id: Optional[str] = None
    vendor_name: Optional[str] = None
    product_name: Optional[str] = None
    class_code: Optional[str] = None
    numa_node: Optional[int] = None
    iommu_group: Optional[int] = None
    mdev_types: tuple[MdevType, ...] = ()
    #: Addresses of the VFs when this is an SR-IOV physical function.
    virt_functions: tuple[str, ...] = ()
    #: ``maxCount`` of ``virt_functions`` or udev's ``sriov_totalvfs``.
    max_vfs: Optional[int] = None
    #: udev's ``sriov_numvfs`` (VFs enabled now), when udev said.
    num_vfs: Optional[int] = None
    #: Address of the parent PF when this is an SR-IOV virtual function.
    phys_function: Optional[str] = None
    #: Kernel network interface name(s) of the device (``ens1f0``): from
    #: libvirt's ``<capability type='net'>`` node devices, then udev.
    netdevs: tuple[str, ...] = ()
    #: The vhost-vdpa character device (``/dev/vhost-vdpa-0``) of a VF bound
    #: to a vDPA driver: the ``<chardev>`` of the ``<capability type='vdpa'>``
    #: node device whose parent this device is. nova calls such a VF a
    #: ``vdpa`` device (``PciDeviceType.VDPA``): only a ``vdpa`` port gets it.
    vdpa_dev: Optional[str] = None
    #: The card serial number of the device's PCI VPD (libvirt's
    #: ``<capability type='vpd'>``, read-only ``<serial_number>``), None when
    #: the device has no VPD or no serial number in it. nova gives
    #: ``remote_managed`` devices only when they (or a VF's PF) have one.
    card_serial_number: Optional[str] = None

    @property
    def is_pf(self) -> bool:
        return bool(self.virt_functions) or bool(self.max_vfs)

    @property
    def is_vf(self) -> bool:
        return self.phys_function is not None


@dataclasses.dataclass(frozen=True)
class Mdev:
    """An existing mediated device (``<capability type='mdev'>``)."""

    uuid: str
    type: str
    #: Address of the parent PCI device, ``None`` when unknown.
    parent: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class DiskInfo:
    """Size of the file system that holds instance disks."""

    total_gb: int
    free_gb: int
    #: The path that was measured (``[disk] instances_path``) or the snapshot.
    path: str = ""


@dataclasses.dataclass(frozen=True)
class SEVCaps:
    """AMD SEV as the domain capabilities give it (``<features><sev>``).

    :param cbitpos: the C-bit position in guest page table entries.
    :param reduced_phys_bits: physical address bits lost to encryption.
    :param max_guests: SEV guests the platform can run at once
        (``maxGuests``; nova's SEV slots).
    :param max_es_guests: SEV-ES (and SEV-SNP) guests (``maxESGuests``).
    """

    cbitpos: Optional[int] = None
    reduced_phys_bits: Optional[int] = None
    max_guests: int = 0
    max_es_guests: int = 0


@dataclasses.dataclass(frozen=True)
class DomainCaps:
    """What ``virConnectGetDomainCapabilities`` says about guests of one
    emulator and machine type, the part plugins schedule on.

    :param machine: the machine type the capabilities are for
        (``pc-q35-10.0``).
    :param arch: the guest architecture (``x86_64``).
    :param firmware: the ``<os><enum name='firmware'>`` values (``efi``).
    :param sev: AMD SEV when ``<sev supported='yes'>``, else None.
    :param tdx: ``<tdx supported='yes'>`` (Intel TDX).
    :param launch_security: the ``<launchSecurity><enum name='sectype'>``
        values (``sev``, ``sev-snp``, ``tdx``) when supported.
    """

    machine: str = ""
    arch: str = ""
    firmware: frozenset[str] = frozenset()
    sev: Optional[SEVCaps] = None
    tdx: bool = False
    launch_security: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class PMEMNamespace:
    """A persistent memory namespace in devdax mode (``ndctl list -X``).

    :param name: the namespace's name (``ndctl create-namespace --name``),
        which ``[libvirt] pmem_namespaces`` refers to.
    :param dev: ndctl's device name (``namespace0.0``).
    :param devpath: the DAX character device (``/dev/dax0.0``).
    :param size: bytes.
    :param align: the DAX region's alignment, bytes.
    :param numa_node: the host cell it is attached to, if known.
    """

    name: str
    dev: str
    devpath: str
    size: int
    align: int
    numa_node: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class HostInfo:
    """Everything discovery learnt about one host."""

    hostname: str
    #: Where the facts came from (a libvirt URI or a snapshot directory).
    source: str
    cells: tuple[NUMACell, ...] = ()
    pci_devices: tuple[PCIDevice, ...] = ()
    mdevs: tuple[Mdev, ...] = ()
    #: Total host memory in KiB (libvirt ``getInfo``/capabilities), if known.
    memory_kb: Optional[int] = None
    disk: Optional[DiskInfo] = None
    #: CPUs online now (libvirt ``getCPUMap``); ``None`` when unknown (a
    #: snapshot recorded without it): then every CPU of the cells counts.
    online_cpus: Optional[frozenset[int]] = None
    #: Number of host CPUs (libvirt ``getInfo``), ``None`` when unknown.
    cpu_count: Optional[int] = None
    #: Base (small) page size in KiB: the smallest ``<host><cpu><pages>``
    #: of the capabilities, else 4 (x86's).
    base_page_kb: int = 4
    #: The domain capabilities of the host's q35 machine type (memory
    #: encryption, firmware); None when discovery had none.
    domain_caps: Optional[DomainCaps] = None
    #: Named devdax persistent memory namespaces (``ndctl list -X``).
    pmem_namespaces: tuple[PMEMNamespace, ...] = ()
    #: The AMD SEV flavours the kernel enables (``sev``, ``sev-es``,
    #: ``sev-snp``: ``/sys/module/kvm_amd/parameters/sev*``, what nova's
    #: ``_kernel_supports_amd_sev`` reads); None when discovery did not
    #: read them (a snapshot recorded without them).
    kvm_amd_sev: Optional[frozenset[str]] = None

    @functools.cached_property
    def _pci_by_address(self) -> dict[str, PCIDevice]:
        # NOTE: built once per (immutable) HostInfo; plugins look up every VF
        # of every PF, thousands on a large host.
        return {device.address: device for device in self.pci_devices}

    def pci_device(self, address: str) -> Optional[PCIDevice]:
        """Return the PCI device at ``address`` or ``None`` (O(1))."""
        return self._pci_by_address.get(address)
