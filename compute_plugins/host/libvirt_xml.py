"""Pure parsers of libvirt XML: capabilities and node devices.

Nothing here talks to libvirt; each function takes XML text and a ``source``
label (a file path or ``"<uri> nodedev <name>"``) that every
:class:`HostDataError` names. The live path (:mod:`.libvirt_host`) and the
snapshot path (:mod:`.snapshot`) feed the same functions, so a snapshot
replays exactly what a live host would have given.

Normalised forms:

* PCI addresses are ``dddd:bb:ss.f`` in lower-case hex (``0000:3b:00.0``);
* vendor/product ids are 4 lower-case hex digits without ``0x`` (``8086``),
  the class is 6 (``020000``), as in nova's PCI whitelist;
* memory and page sizes are KiB, whatever ``unit`` the document used.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from typing import Optional, Union

from compute_plugins.host.errors import HostDataError, HostInputError
from compute_plugins.host.model import (
    CPU,
    DiskInfo,
    DomainCaps,
    HostInfo,
    Mdev,
    MdevType,
    NUMACell,
    PagePool,
    PCIDevice,
    SEVCaps,
)
from compute_plugins.plugin.cpuset import MAX_CPU_ID, InvalidCPUSpec, parse_cpu_spec
from compute_plugins.plugin.names import provider_name_problem
from compute_plugins.util.text import ascii_int, printable

LOG = logging.getLogger(__name__)

#: Base (small) page size when the capabilities list no ``<cpu><pages>``:
#: 4 KiB, the base page of x86 (and of most aarch64 kernels).
DEFAULT_BASE_PAGE_KB = 4


@dataclasses.dataclass(frozen=True)
class NetInterface:
    """A ``<capability type='net'>`` node device: a kernel network interface.

    Only used to name the netdevs of its parent PCI device.
    """

    name: str
    interface: str
    #: Address of the parent PCI device, ``None`` when not a PCI device.
    parent: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class VDPADevice:
    """A ``<capability type='vdpa'>`` node device: a vDPA device on a VF
    (``vdpa_vdpa0``, its ``<chardev>`` ``/dev/vhost-vdpa-0``).

    Only used to mark its parent PCI device (the VF) as a vDPA device
    (``PCIDevice.vdpa_dev``), as nova's ``Host._get_pcidev_info`` does.
    """

    name: str
    chardev: str
    #: Address of the parent PCI device (the VF), ``None`` when not a PCI device.
    parent: Optional[str] = None


NodeDevice = Union[PCIDevice, Mdev, NetInterface, VDPADevice]

# libvirt's scaled-integer units (virScaleInteger), as bytes.
_UNITS = {
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "kb": 1000,
    "k": 1024,
    "kib": 1024,
    "mb": 1000**2,
    "m": 1024**2,
    "mib": 1024**2,
    "gb": 1000**3,
    "g": 1024**3,
    "gib": 1024**3,
    "tb": 1000**4,
    "t": 1024**4,
    "tib": 1024**4,
    "pb": 1000**5,
    "p": 1024**5,
    "pib": 1024**5,
    "eb": 1000**6,
    "e": 1024**6,
    "eib": 1024**6,
}

_PCI_NAME = re.compile(
    r"^pci_([0-9a-fA-F]{4})_([0-9a-fA-F]{2})_([0-9a-fA-F]{2})_([0-7])$"
)
_MDEV_NAME = re.compile(
    r"^mdev_([0-9a-fA-F]{8})_([0-9a-fA-F]{4})_([0-9a-fA-F]{4})_"
    r"([0-9a-fA-F]{4})_([0-9a-fA-F]{12})(?:_.*)?$"
)


# --------------------------------------------------------------- helpers


def _parse_document(text: Union[str, bytes], source: str, root: str) -> ET.Element:
    if not text or not str(text).strip():
        raise HostDataError(source, "empty document")
    try:
        element = ET.fromstring(text)
    except ET.ParseError as exc:
        raise HostDataError(source, f"not well-formed XML: {exc}") from None
    if element.tag != root:
        raise HostDataError(
            source, f"expected a <{root}> document, found <{element.tag}>"
        )
    return element


#: Highest NUMA node id: Linux has at most 1 << CONFIG_NODES_SHIFT nodes and
#: the largest NODES_SHIFT any architecture allows is 10 (x86_64, arm64:
#: ``range 1 10``), so ids are 0..1023.
MAX_NUMA_CELL_ID = 1023
#: PCI address fields, as the kernel and libvirt bound them
#: (``virPCIDeviceAddress``): domain 16 bits, bus 8, slot (device) 5,
#: function 3.
PCI_LIMITS = (("domain", 0xFFFF), ("bus", 0xFF), ("slot", 0x1F), ("function", 7))
#: An SR-IOV PF's TotalVFs is a 16-bit field of its capability.
MAX_VFS = 0xFFFF
#: Counts and other ids without a tighter bound (Placement's MAX_INT).
MAX_INT = 0x7FFFFFFF


def _int(value: Optional[str], source: str, what: str, base: int = 10,
         minimum: Optional[int] = None, maximum: Optional[int] = None) -> int:
    """``value`` as an integer in ASCII digits (:func:`.text.ascii_int`),
    within ``[minimum, maximum]`` when given; else a HostDataError naming
    ``what`` and the rule."""
    if value is None or not value.strip():
        raise HostDataError(source, f"{what} is missing")
    try:
        number = ascii_int(value, base)
    except ValueError:
        raise HostDataError(
            source, f"{what} is not an integer: {value!r} (ASCII digits only)"
        ) from None
    if (minimum is not None and number < minimum) or (
            maximum is not None and number > maximum):
        bounds = (f"{'' if minimum is None else minimum}.."
                  f"{'' if maximum is None else maximum}")
        raise HostDataError(
            source, f"{what} {value.strip()!r} is out of range {bounds}"
        )
    return number


def _opt_int(
    value: Optional[str], source: str, what: str, base: int = 10,
    minimum: Optional[int] = None, maximum: Optional[int] = None,
) -> Optional[int]:
    if value is None or not value.strip():
        return None
    return _int(value, source, what, base, minimum, maximum)


def scaled_kib(
    value: Optional[str], unit: Optional[str], source: str, what: str
) -> int:
    """Return ``value`` given in ``unit`` (libvirt's default KiB) as KiB."""
    amount = _int(value, source, what)
    name = (unit or "KiB").strip().lower()
    try:
        scale = _UNITS[name]
    except KeyError:
        raise HostDataError(
            source, f"{what} has an unknown unit {unit!r}"
        ) from None
    if amount < 0:
        raise HostDataError(source, f"{what} is negative: {amount}")
    return amount * scale // 1024


def parse_cpuset(text: str, source: str = "cpuset") -> frozenset[int]:
    """Parse a libvirt/kernel CPU list (``"0,16"``, ``"0-3"``, ``"0-7,^5"``).

    The one parser of :mod:`compute_plugins.plugin.cpuset` (bounded by its
    ``MAX_CPU_ID``, so ``0-999999999999`` is refused, not expanded).

    :raises HostDataError: naming ``source`` when the list does not parse.
    """
    try:
        return parse_cpu_spec(text)
    except InvalidCPUSpec as exc:
        raise HostDataError(source, f"bad CPU list {text!r}: {exc}") from None


def pci_address(domain: int, bus: int, slot: int, function: int) -> str:
    """Return the canonical ``dddd:bb:ss.f`` form."""
    return f"{domain:04x}:{bus:02x}:{slot:02x}.{function:x}"


def address_from_name(name: Optional[str]) -> Optional[str]:
    """``pci_0000_00_02_0`` -> ``0000:00:02.0``; ``None`` for other names."""
    match = _PCI_NAME.match((name or "").strip())
    if not match or int(match.group(3), 16) > PCI_LIMITS[2][1]:
        return None
    domain, bus, slot, function = match.groups()
    return f"{domain}:{bus}:{slot}.{function}".lower()


def _address_element(element: ET.Element, source: str, what: str) -> str:
    # <address domain='0x0000' bus='0x02' slot='0x00' function='0x2'/>
    parts = []
    for attr, limit in PCI_LIMITS:
        parts.append(_int(element.get(attr), source, f"{what} {attr}", 0,
                          0, limit))
    return pci_address(*parts)


def _hex_id(
    value: Optional[str], width: int, source: str, what: str
) -> Optional[str]:
    if value is None or not value.strip():
        return None
    number = _int(value, source, what, 16, 0, 16**width - 1)
    return f"{number:0{width}x}"


def _text(element: Optional[ET.Element]) -> Optional[str]:
    if element is None or element.text is None:
        return None
    text = element.text.strip()
    return text or None


# ---------------------------------------------------------- capabilities


def parse_capabilities(
    text: Union[str, bytes], source: str = "capabilities"
) -> tuple[NUMACell, ...]:
    """Return the host NUMA cells of a ``virsh capabilities`` document.

    A host without ``<topology>`` has no cells (``()``). CPU ids must be
    unique across the host: a document that lists one CPU twice cannot be
    pinned to and is rejected.

    :raises HostDataError: malformed or incomplete document.
    """
    root = _parse_document(text, source, "capabilities")
    host = root.find("host")
    if host is None:
        raise HostDataError(source, "no <host> element")
    cells_el = host.find("topology/cells")
    if cells_el is None:
        return ()
    cells = []
    seen_cells: set[int] = set()
    seen_cpus: dict[int, int] = {}
    for cell_el in cells_el.findall("cell"):
        cell_id = _int(cell_el.get("id"), source, "<cell> attribute id",
                       minimum=0, maximum=MAX_NUMA_CELL_ID)
        where = f"cell {cell_id}"
        if cell_id in seen_cells:
            raise HostDataError(source, f"{where} is listed twice")
        seen_cells.add(cell_id)
        cells.append(_parse_cell(cell_el, cell_id, source, seen_cpus))
    declared = cells_el.get("num")
    if declared is not None and _int(
        declared, source, "<cells> attribute num"
    ) != len(cells):
        raise HostDataError(
            source,
            f"<cells num='{declared}'> but {len(cells)} <cell> elements",
        )
    return tuple(sorted(cells, key=lambda c: c.id))


def _parse_cell(
    cell_el: ET.Element, cell_id: int, source: str, seen_cpus: dict[int, int]
) -> NUMACell:
    where = f"cell {cell_id}"
    memory_kb = None
    memory_el = cell_el.find("memory")
    if memory_el is not None:
        memory_kb = scaled_kib(
            memory_el.text, memory_el.get("unit"), source, f"{where} memory"
        )
    pages = []
    for page_el in cell_el.findall("pages"):
        size_kb = scaled_kib(
            page_el.get("size"),
            page_el.get("unit"),
            source,
            f"{where} <pages> size",
        )
        count = _int(page_el.text, source, f"{where} <pages> count")
        if size_kb <= 0:
            raise HostDataError(
                source, f"{where} <pages> size must be at least 1 KiB"
            )
        if count < 0:
            raise HostDataError(
                source, f"{where} <pages> count is negative: {count}"
            )
        pages.append(PagePool(size_kb=size_kb, count=count))
    distances = []
    for sibling in cell_el.findall("distances/sibling"):
        distances.append(
            (
                _int(
                    sibling.get("id"), source, f"{where} distance sibling id",
                    minimum=0, maximum=MAX_NUMA_CELL_ID,
                ),
                _int(sibling.get("value"), source, f"{where} distance value"),
            )
        )
    cpus = []
    for cpu_el in cell_el.findall("cpus/cpu"):
        cpu_id = _int(cpu_el.get("id"), source, f"{where} <cpu> id",
                      minimum=0, maximum=MAX_CPU_ID)
        if cpu_id in seen_cpus:
            raise HostDataError(
                source,
                f"{where} lists CPU {cpu_id}, already listed in cell "
                f"{seen_cpus[cpu_id]}; CPU ids must be unique",
            )
        seen_cpus[cpu_id] = cell_id
        what = f"{where} cpu {cpu_id}"
        siblings_text = cpu_el.get("siblings")
        siblings = (
            parse_cpuset(siblings_text, f"{source}: {what} siblings")
            if siblings_text
            else frozenset()
        )
        cpus.append(
            CPU(
                id=cpu_id,
                socket_id=_opt_int(
                    cpu_el.get("socket_id"), source, f"{what} socket_id"
                ),
                core_id=_opt_int(
                    cpu_el.get("core_id"), source, f"{what} core_id"
                ),
                siblings=siblings,
            )
        )
    return NUMACell(
        id=cell_id,
        cpus=tuple(sorted(cpus, key=lambda c: c.id)),
        memory_kb=memory_kb,
        pages=tuple(sorted(pages, key=lambda p: p.size_kb)),
        distances=tuple(sorted(distances)),
    )


# ----------------------------------------------------------- node devices


def parse_node_device(
    text: Union[str, bytes], source: str = "nodedev"
) -> Optional[NodeDevice]:
    """Parse ``virsh nodedev-dumpxml`` output.

    :returns: a :class:`PCIDevice` for ``<capability type='pci'>``, an
        :class:`Mdev` for ``<capability type='mdev'>``, a
        :class:`NetInterface` for ``<capability type='net'>``, a
        :class:`VDPADevice` for ``<capability type='vdpa'>``, ``None`` for
        every other kind of device (system, drm, scsi, ...).
    :raises HostDataError: malformed or incomplete document.
    """
    root = _parse_document(text, source, "device")
    name = _text(root.find("name"))
    if name is None:
        raise HostDataError(source, "node device has no <name>")
    for capability in root.findall("capability"):
        kind = capability.get("type")
        if kind == "pci":
            return _parse_pci(name, capability, f"{source} ({name})")
        if kind == "mdev":
            return _parse_mdev(
                name,
                _text(root.find("parent")),
                capability,
                f"{source} ({name})",
            )
        if kind in _CHILD_FIELD:
            field = _CHILD_FIELD[kind]
            value = _text(capability.find(field))
            if value is None:
                raise HostDataError(
                    f"{source} ({name})", f"{kind} capability has no <{field}>"
                )
            parent = address_from_name(_text(root.find("parent")))
            if kind == "net":
                return NetInterface(name=name, interface=value, parent=parent)
            return VDPADevice(name=name, chardev=value, parent=parent)
    return None


#: Capabilities of a PCI device's child node devices -> the element they
#: are read for: a net device's interface name, a vDPA device's char device.
_CHILD_FIELD = {"net": "interface", "vdpa": "chardev"}


def _parse_pci(name: str, cap: ET.Element, source: str) -> PCIDevice:
    parts = []
    for field, limit in PCI_LIMITS:
        element = cap.find(field)
        if element is None:
            raise HostDataError(source, f"PCI capability has no <{field}>")
        parts.append(_int(element.text, source, f"<{field}>", 0, 0, limit))
    address = pci_address(*parts)

    vendor_el = cap.find("vendor")
    product_el = cap.find("product")
    numa_el = cap.find("numa")
    numa_node = None
    if numa_el is not None:
        numa_node = _opt_int(numa_el.get("node"), source, "<numa> node",
                             maximum=MAX_NUMA_CELL_ID)
        if numa_node is not None and numa_node < 0:
            # NOTE: the kernel writes -1 when the platform does not say.
            numa_node = None
    iommu_el = cap.find("iommuGroup")
    iommu_group = None
    if iommu_el is not None:
        iommu_group = _int(
            iommu_el.get("number"), source, "<iommuGroup> number",
            minimum=0, maximum=MAX_INT,
        )

    mdev_types: list[MdevType] = []
    virt_functions: list[str] = []
    max_vfs = None
    phys_function = None
    card_serial_number = None
    for sub in cap.findall("capability"):
        kind = sub.get("type")
        if kind == "mdev_types":
            mdev_types.extend(_parse_mdev_types(sub, source))
        elif kind == "virt_functions":
            max_vfs = _opt_int(
                sub.get("maxCount"), source, "virt_functions maxCount",
                minimum=0, maximum=MAX_VFS,
            )
            for element in sub.findall("address"):
                vf = _address_element(element, source, "virt_functions address")
                # NOTE: a PF is not its own VF, and a VF listed twice is
                # one VF.
                if vf != address and vf not in virt_functions:
                    virt_functions.append(vf)
        elif kind == "phys_function":
            addresses = sub.findall("address")
            if len(addresses) != 1:
                raise HostDataError(
                    source,
                    f"phys_function has {len(addresses)} addresses, "
                    "expected 1",
                )
            phys_function = _address_element(
                addresses[0], source, "phys_function address"
            )
        elif kind == "vpd":
            card_serial_number = _vpd_serial_number(sub)

    return PCIDevice(
        address=address,
        name=name,
        vendor_id=_hex_id(
            None if vendor_el is None else vendor_el.get("id"),
            4,
            source,
            "<vendor> id",
        ),
        product_id=_hex_id(
            None if product_el is None else product_el.get("id"),
            4,
            source,
            "<product> id",
        ),
        vendor_name=_text(vendor_el),
        product_name=_text(product_el),
        class_code=_hex_id(_text(cap.find("class")), 6, source, "<class>"),
        numa_node=numa_node,
        iommu_group=iommu_group,
        mdev_types=tuple(mdev_types),
        virt_functions=tuple(virt_functions),
        max_vfs=max_vfs,
        phys_function=phys_function,
        card_serial_number=card_serial_number,
    )


def _vpd_serial_number(cap: ET.Element) -> Optional[str]:
    """The card serial number of a ``<capability type='vpd'>``: the
    ``<serial_number>`` of its ``<fields access='readonly'>`` (the last one,
    as nova's ``LibvirtConfigNodeDeviceVpdCap.card_serial_number`` reads
    it), None when absent or empty (nova filters an empty one out)."""
    serial: Optional[str] = None
    for fields in cap.findall("fields"):
        if fields.get("access") != "readonly":
            continue
        for element in fields.findall("serial_number"):
            serial = element.text
    return serial or None


def _parse_mdev_types(cap: ET.Element, source: str) -> Iterable[MdevType]:
    for type_el in cap.findall("type"):
        type_id = type_el.get("id")
        if not type_id:
            raise HostDataError(source, "mdev_types <type> has no id")
        available = _opt_int(
            _text(type_el.find("availableInstances")),
            source,
            f"mdev type {type_id} availableInstances",
            minimum=0,
            maximum=MAX_INT,
        )
        yield MdevType(
            id=type_id,
            name=_text(type_el.find("name")),
            available_instances=available or 0,
            device_api=_text(type_el.find("deviceAPI")),
        )


def _parse_mdev(name: str, parent: Optional[str], cap: ET.Element, source: str) -> Mdev:
    type_el = cap.find("type")
    type_id = None if type_el is None else type_el.get("id")
    if not type_id:
        raise HostDataError(source, "mdev capability has no <type id=...>")
    uuid = _text(cap.find("uuid"))
    if uuid is None:
        # NOTE: libvirt before 7.3 had no <uuid>; the name carried it.
        match = _MDEV_NAME.match(name)
        if not match:
            raise HostDataError(source, "mdev capability has no <uuid>")
        uuid = "-".join(match.groups())
    return Mdev(
        uuid=uuid.lower(), type=type_id, parent=address_from_name(parent)
    )


# ------------------------------------------------------------- assembly


def parse_base_page_kb(
    text: Union[str, bytes], source: str = "capabilities"
) -> int:
    """The host's base page size in KiB.

    The smallest ``<host><cpu><pages size=...>`` of the capabilities when
    they list any, else :data:`DEFAULT_BASE_PAGE_KB` (4 KiB, x86's). It is
    never guessed from the cells' page pools: a cell may list huge pages
    only.
    """
    root = _parse_document(text, source, "capabilities")
    sizes = [
        scaled_kib(
            page_el.get("size"),
            page_el.get("unit"),
            source,
            "<host><cpu><pages> size",
        )
        for page_el in root.findall("host/cpu/pages")
    ]
    sizes = [size for size in sizes if size > 0]
    return min(sizes) if sizes else DEFAULT_BASE_PAGE_KB


def host_info_from_xml(
    *,
    hostname: str,
    source: str,
    capabilities_xml: Union[str, bytes],
    nodedev_xmls: Mapping[str, Union[str, bytes]],
    capabilities_source: str = "capabilities.xml",
    memory_kb: Optional[int] = None,
    disk: Optional[DiskInfo] = None,
    online_cpus: Optional[frozenset[int]] = None,
    cpu_count: Optional[int] = None,
    skip_bad_devices: bool = True,
    hostname_source: str = "",
) -> HostInfo:
    """Build a :class:`HostInfo` from capabilities and node-device XML.

    A problem in the capabilities is always a :class:`HostDataError`. A node
    device that does not parse (or describes a PCI address already
    described) is skipped with a warning naming it and the reason when
    ``skip_bad_devices`` is true (the default, used for live hosts and for
    snapshots, which replay them): one odd device must not hide the rest of
    the host. With ``skip_bad_devices=False`` it is an error.

    ``<capability type='net'>`` devices name the netdevs of their parent PCI
    device (``PCIDevice.netdevs``); udev may add more later. A
    ``<capability type='vdpa'>`` device makes its parent PCI device, when a
    VF, a vDPA device (``PCIDevice.vdpa_dev``, its ``<chardev>``); nova
    gives ``dev_type`` ``vdpa`` to VFs only, another parent is unchanged.

    :param nodedev_xmls: ``{source label: XML}``, one entry per device.
    :param memory_kb: host memory; when ``None`` it is the sum of the cells'
        memory if every cell gives one.
    :param online_cpus: the host's online CPUs (libvirt ``getCPUMap``),
        ``None`` when unknown.
    :param cpu_count: the host's CPU count (libvirt ``getInfo``).
    :param hostname_source: where ``hostname`` came from (``host.json``),
        for the error when it cannot be a Placement provider name (empty,
        over 200 characters, a NUL or a lone surrogate:
        :func:`compute_plugins.plugin.names.provider_name_problem`); default
        ``source``. A valid name that is not a safe file name (``../x``)
        is accepted: the agent's files map it (:func:`.names.safe_file_name`).
    :raises HostInputError: the host name cannot be a provider name.
    """
    problem = provider_name_problem(hostname)
    if problem is not None:
        raise HostInputError(
            hostname_source or source,
            f"host name {hostname!r} cannot be the compute node's Placement "
            f"provider name: it {problem}")
    cells = parse_capabilities(capabilities_xml, capabilities_source)
    base_page_kb = parse_base_page_kb(capabilities_xml, capabilities_source)
    pci: dict[str, PCIDevice] = {}
    mdevs: dict[tuple[Optional[str], str], Mdev] = {}
    netdevs: dict[str, list[str]] = {}
    vdpa: dict[str, VDPADevice] = {}
    for label, text in sorted(nodedev_xmls.items()):
        bad: Optional[HostDataError] = None
        try:
            device = parse_node_device(text, label)
            if isinstance(device, PCIDevice) and device.address in pci:
                raise HostDataError(
                    label,
                    f"PCI device {device.address} is described twice "
                    f"(also by {pci[device.address].name})",
                )
        except HostDataError as exc:
            if not skip_bad_devices:
                raise
            bad = exc
        if bad is not None:
            # NOTE: logged outside the except block: oslo.log would append
            # the exception a second time.
            LOG.warning("%s; node device skipped", printable(bad))
            continue
        if isinstance(device, PCIDevice):
            pci[device.address] = device
        elif isinstance(device, Mdev):
            mdevs[(device.parent, device.uuid)] = device
        elif isinstance(device, NetInterface) and device.parent:
            names = netdevs.setdefault(device.parent, [])
            if device.interface not in names:
                names.append(device.interface)
        elif isinstance(device, VDPADevice) and device.parent:
            if device.parent in vdpa:
                LOG.warning("%s: PCI device %s has vDPA devices %s and %s; "
                            "%s kept", label, device.parent,
                            vdpa[device.parent].name, device.name,
                            vdpa[device.parent].name)
                continue
            vdpa[device.parent] = device
    for address, names in netdevs.items():
        if address in pci:
            known = pci[address].netdevs
            pci[address] = dataclasses.replace(
                pci[address],
                netdevs=known + tuple(n for n in names if n not in known),
            )
    for address, found in vdpa.items():
        # NOTE: as nova (Host._get_pcidev_info): only a VF is a vdpa device;
        # another parent stays what it is (a type-PCI device an alias names).
        if address in pci and pci[address].phys_function:
            pci[address] = dataclasses.replace(pci[address], vdpa_dev=found.chardev)
        elif address in pci:
            LOG.debug("%s: vDPA device %s on %s, not a VF: not a vdpa device "
                      "(as in nova)", source, found.name, address)
    if (
        memory_kb is None
        and cells
        and all(c.memory_kb is not None for c in cells)
    ):
        memory_kb = sum(c.memory_kb or 0 for c in cells)
    return HostInfo(
        hostname=hostname,
        source=source,
        cells=cells,
        pci_devices=tuple(pci[a] for a in sorted(pci)),
        mdevs=tuple(mdevs[k] for k in sorted(mdevs, key=lambda k: (k[0] or "", k[1]))),
        memory_kb=memory_kb,
        disk=disk,
        online_cpus=online_cpus,
        cpu_count=cpu_count,
        base_page_kb=base_page_kb,
    )


# ------------------------------------------------------ domain capabilities


def _supported(element: Optional[ET.Element]) -> bool:
    """``supported='yes'`` on ``element`` (libvirt's feature flag)."""
    return element is not None and element.get("supported") == "yes"


def _enum_values(parent: Optional[ET.Element], name: str) -> frozenset[str]:
    """The ``<value>``s of ``parent``'s ``<enum name=name>``."""
    if parent is None:
        return frozenset()
    return frozenset(
        (value.text or "").strip()
        for enum in parent.findall("enum") if enum.get("name") == name
        for value in enum.findall("value") if (value.text or "").strip())


def parse_domain_capabilities(text: Union[str, bytes],
                              source: str = "domaincapabilities.xml") -> DomainCaps:
    """The :class:`DomainCaps` of a ``<domainCapabilities>`` document
    (``virsh domcapabilities --machine q35``).

    Read as nova's ``LibvirtConfigDomainCaps`` reads it: ``<sev
    supported='yes'>`` with ``cbitpos``, ``reducedPhysBits``, ``maxGuests``
    and ``maxESGuests`` (absent counts are 0, as libvirt omits them when
    the kernel does not say), ``<tdx supported='yes'>``, the
    ``<launchSecurity>`` ``sectype`` values and the ``<os>`` firmware values.

    :raises HostDataError: not a domainCapabilities document, or a count
        that is not a non-negative integer (names ``source`` and the field).
    """
    root = _parse_document(text, source, "domainCapabilities")
    features = root.find("features")
    sev: Optional[SEVCaps] = None
    sev_el = features.find("sev") if features is not None else None
    if _supported(sev_el):
        assert sev_el is not None

        def field(tag: str) -> Optional[int]:
            return _opt_int(_text(sev_el.find(tag)), source, f"<sev><{tag}>",
                            minimum=0, maximum=MAX_INT)

        sev = SEVCaps(cbitpos=field("cbitpos"),
                      reduced_phys_bits=field("reducedPhysBits"),
                      max_guests=field("maxGuests") or 0,
                      max_es_guests=field("maxESGuests") or 0)
    launch = features.find("launchSecurity") if features is not None else None
    return DomainCaps(
        machine=_text(root.find("machine")) or "",
        arch=_text(root.find("arch")) or "",
        firmware=_enum_values(root.find("os"), "firmware"),
        sev=sev,
        tdx=_supported(features.find("tdx") if features is not None else None),
        launch_security=(_enum_values(launch, "sectype") if _supported(launch)
                         else frozenset()),
    )
