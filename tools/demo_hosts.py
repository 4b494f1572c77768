#!/usr/bin/env python3
"""Generate the demo's host snapshots (``compute_plugins/demo/hosts/``).

Every file is derived from a real capture of libvirt's own test suite
(``tests/fixtures/hosts/libvirt/``, a verbatim copy of
``../shared/hostdata/libvirt/``; its ``SOURCES.md`` gives the upstream path
and commit of each):

- ``capabilities.xml``: ``capabilityschemadata/caps-qemu-real-full.xml``, a
  real AMD host (16 cores x 2 threads, 4K/2M/1G pages). Its ``<host>`` and
  the ``x86_64`` ``<guest>`` are kept as captured; the ``<topology>`` (cells,
  CPUs with Linux's numbering across sockets: thread 0 of every core first,
  then thread 1), the page counts, ``<cache>`` (one L2 bank per core and one
  L3 per cell, as captured) and the ``<topology sockets=...>`` of the host
  CPU are rewritten for each demo host's shape;
- PCI devices: ``nodedevschemadata/pci_0000_02_10_7_mdev_types.xml`` (a GPU
  offering mdev types), ``pci_0000_02_10_7_sriov_vfs.xml`` (an SR-IOV PF and
  its ``virt_functions``), ``pci_0000_02_10_7_sriov.xml`` (a VF with its
  ``phys_function``) and ``net_00_13_02_b9_f9_d3.xml`` (a PF's netdev): the
  structure as captured, with the address, ids, names, NUMA node, class and
  mdev types of the card each demo host has;
- ``computer.xml``: ``nodedevschemadata/computer.xml`` as captured.

``host.json`` (name, memory, disk) and ``compute-plugins.conf`` (the
host's own configuration: CPU sets, devices, physnets, bandwidth, shared
storage) are written here. Run from the repository root::

    python3 tools/demo_hosts.py            # rewrites compute_plugins/demo/hosts
    python3 tools/demo_hosts.py --check    # exit 1 when the tree is stale

The output is deterministic (no time, no random): ``--check`` in the tests
proves the shipped snapshots are what this script makes.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import sys
import tempfile
import uuid
import xml.etree.ElementTree as ET
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAPTURES = os.path.join(ROOT, "tests", "fixtures", "hosts", "libvirt")
OUTPUT = os.path.join(ROOT, "compute_plugins", "demo", "hosts")

CAPS = "capabilityschemadata/caps-qemu-real-full.xml"
GPU = "nodedevschemadata/pci_0000_02_10_7_mdev_types.xml"
PF = "nodedevschemadata/pci_0000_02_10_7_sriov_vfs.xml"
VF = "nodedevschemadata/pci_0000_02_10_7_sriov.xml"
NET = "nodedevschemadata/net_00_13_02_b9_f9_d3.xml"
COMPUTER = "nodedevschemadata/computer.xml"

KIB_2M = 2048
KIB_1G = 1048576
#: The aggregate of the demo's shared storage (``[disk]
#: shared_storage_aggregate`` of the host on it; the demo creates the
#: sharing provider in it, as an operator would).
SHARED_AGGREGATE = str(uuid.uuid5(uuid.NAMESPACE_URL, "compute-plugins:demo:shared-storage"))
SHARED_DISK_GB = 10240

#: The FPGA cards of the accelerator host (examples/fpga's default
#: ``[fpga] devices``): Intel PAC with Arria 10 GX.
FPGA_VENDOR, FPGA_PRODUCT = "8086", "09c4"
FPGA_NAME = "PAC with Intel Arria 10 GX FPGA"


@dataclasses.dataclass(frozen=True)
class Shape:
    """A host's NUMA shape: ``cells`` cells of ``cores`` cores x 2 threads,
    ``cells_per_socket`` cells on each socket."""

    cells: int
    cores: int
    memory_kb: int
    pages_2m: int = 0
    pages_1g: int = 0
    cells_per_socket: int = 1


@dataclasses.dataclass(frozen=True)
class Card:
    """A PCI card of a demo host."""

    kind: str  # gpu, pf, fpga
    bus: int
    numa: int
    product_id: str
    product: str
    vendor_id: str = "8086"
    vendor: str = "Intel Corporation"
    class_code: str = "0x020000"
    mdev_types: tuple[tuple[str, str, int], ...] = ()
    vfs: int = 0
    max_vfs: int = 0
    netdev: str = ""


@dataclasses.dataclass(frozen=True)
class Host:
    dirname: str
    hostname: str
    shape: Shape
    summary: str
    disk_total_gb: int
    disk_free_gb: int
    cards: tuple[Card, ...] = ()
    conf: str = ""


def _t4(bus: int, numa: int) -> Card:
    return Card("gpu", bus, numa, "1eb8", "TU104GL [Tesla T4]", "10de",
                "NVIDIA Corporation", "0x030200",
                (("nvidia-222", "GRID T4-1B", 16), ("nvidia-223", "GRID T4-2B", 8)))


def _e810(bus: int, numa: int, netdev: str) -> Card:
    return Card("pf", bus, numa, "159b", "Ethernet Controller E810-C for SFP",
                vfs=8, max_vfs=64, netdev=netdev)


def _fpga(bus: int, numa: int) -> Card:
    return Card("fpga", bus, numa, FPGA_PRODUCT, FPGA_NAME, class_code="0x120000")


HOSTS = (
    Host("numa", "demo-numa-01",
         Shape(cells=2, cores=16, memory_kb=64 * KIB_1G, pages_2m=4096, pages_1g=16),
         "2 sockets, 1 cell each, 16 cores x 2 threads per cell; dedicated "
         "and shared CPUs; 8 GiB of 2 MiB and 16 GiB of 1 GiB pages per cell",
         893, 800,
         conf="""[compute]
# Pinned guests on 12 cores x 2 threads per cell, floating ones on 4.
cpu_dedicated_set = 4-15,20-31,36-47,52-63
cpu_shared_set = 0-3,16-19,32-35,48-51
reserved_host_memory_mb = 4096
"""),
    Host("gpu", "demo-gpu-01",
         Shape(cells=2, cores=8, memory_kb=32 * KIB_1G),
         "2 cells of 8 cores x 2 threads; a Tesla T4 on each cell, one "
         "offering nvidia-222 (T4-1B), the other nvidia-223 (T4-2B); two "
         "FPGA cards (examples/fpga)",
         893, 800,
         cards=(_t4(0x3B, 0), _t4(0xAF, 1), _fpga(0x5E, 0), _fpga(0xD8, 1)),
         conf="""[vgpu]
enabled_mdev_types = nvidia-222, nvidia-223

[mdev_nvidia-222]
device_addresses = 0000:3b:00.0

[mdev_nvidia-223]
device_addresses = 0000:af:00.0
"""),
    Host("sriov", "demo-sriov-01",
         Shape(cells=2, cores=8, memory_kb=32 * KIB_1G),
         "2 cells of 8 cores x 2 threads; an E810 PF with 8 VFs on each "
         "cell, ens1f0 on physnet1 (10 Gbit/s), ens2f0 on physnet2 (25 Gbit/s)",
         893, 800,
         cards=(_e810(0x5E, 0, "ens1f0"), _e810(0xD8, 1, "ens2f0")),
         conf="""[sriov]
physical_device_mappings = physnet1:ens1f0, physnet2:ens2f0
bandwidth = ens1f0:10000000:10000000, ens2f0:25000000:25000000
"""),
    Host("shared", "demo-shared-01",
         Shape(cells=1, cores=16, memory_kb=64 * KIB_1G),
         "1 cell of 16 cores x 2 threads; instance disks on shared storage "
         "(the demo creates its sharing provider with %d GB)" % SHARED_DISK_GB,
         200, 180,
         conf="""[disk]
# DISK_GB comes from the sharing provider in this aggregate.
shared_storage_aggregate = %s
""" % SHARED_AGGREGATE),
    Host("numa8", "demo-numa8-01",
         Shape(cells=8, cores=4, memory_kb=16 * KIB_1G, cells_per_socket=2),
         "4 sockets, 2 cells each: 8 cells of 4 cores x 2 threads, 16 GiB each",
         893, 800),
)


# ------------------------------------------------------------- helpers


def _read(name: str) -> ET.Element:
    return ET.parse(os.path.join(CAPTURES, name)).getroot()


def _xml(element: ET.Element) -> str:
    ET.indent(element, "  ")
    return ET.tostring(element, encoding="unicode") + "\n"


def _hex(value: int) -> str:
    return "0x%02x" % value


def _addr(bus: int, slot: int, function: int) -> dict[str, str]:
    return {"domain": "0x0000", "bus": _hex(bus), "slot": _hex(slot),
            "function": "0x%x" % function}


def _pci_name(bus: int, slot: int = 0, function: int = 0) -> str:
    return "pci_0000_%02x_%02x_%x" % (bus, slot, function)


# ---------------------------------------------------------- capabilities


def capabilities(host: Host) -> str:
    """The capture's capabilities with ``host``'s cells, CPUs and pages."""
    root = _read(CAPS)
    shape = host.shape
    host_el = root.find("host")
    assert host_el is not None
    uuid_el = host_el.find("uuid")
    assert uuid_el is not None
    uuid_el.text = str(uuid.uuid5(uuid.NAMESPACE_DNS, host.hostname))
    sockets = shape.cells // shape.cells_per_socket
    topology = host_el.find("cpu/topology")
    assert topology is not None
    topology.set("sockets", str(sockets))
    topology.set("cores", str(shape.cores * shape.cells_per_socket))
    # NOTE: keep one x86_64 guest of the capture's 17 (the rest is noise here).
    for guest in root.findall("guest"):
        arch = guest.find("arch")
        if arch is None or arch.get("name") != "x86_64":
            root.remove(guest)

    cells_el = host_el.find("topology/cells")
    assert cells_el is not None
    template = cells_el.find("cell")
    assert template is not None
    cells_el.clear()
    cells_el.set("num", str(shape.cells))
    all_cores = shape.cells * shape.cores
    for cell in range(shape.cells):
        cell_el = copy.deepcopy(template)
        cell_el.set("id", str(cell))
        memory = cell_el.find("memory")
        assert memory is not None
        memory.text = str(shape.memory_kb)
        huge = shape.pages_2m * KIB_2M + shape.pages_1g * KIB_1G
        counts = {"4": (shape.memory_kb - huge) // 4, "2048": shape.pages_2m,
                  "1048576": shape.pages_1g}
        for pages in cell_el.findall("pages"):
            pages.text = str(counts[pages.get("size", "")])
        distances = cell_el.find("distances")
        assert distances is not None
        distances.clear()
        for other in range(shape.cells):
            same_socket = other // shape.cells_per_socket == cell // shape.cells_per_socket
            value = 10 if other == cell else 12 if same_socket else 21
            ET.SubElement(distances, "sibling", {"id": str(other), "value": str(value)})
        cpus = cell_el.find("cpus")
        assert cpus is not None
        cpus.clear()
        cpus.set("num", str(shape.cores * 2))
        socket = cell // shape.cells_per_socket
        for thread in range(2):
            for core in range(shape.cores):
                first = cell * shape.cores + core
                cpu_id = thread * all_cores + first
                ET.SubElement(cpus, "cpu", {
                    "id": str(cpu_id), "socket_id": str(socket),
                    "die_id": str(cell % shape.cells_per_socket),
                    "cluster_id": "65535",
                    "core_id": str(first % (shape.cores * shape.cells_per_socket)),
                    "siblings": "%d,%d" % (first, first + all_cores)})
        cells_el.append(cell_el)

    cache = host_el.find("cache")
    assert cache is not None
    l2, l3 = cache.find("bank[@level='2']"), cache.find("bank[@level='3']")
    assert l2 is not None and l3 is not None
    cache.clear()
    bank = 0
    for first in range(all_cores):
        element = copy.deepcopy(l2)
        element.set("id", str(bank))
        element.set("cpus", "%d,%d" % (first, first + all_cores))
        cache.append(element)
        bank += 1
    for cell in range(shape.cells):
        element = copy.deepcopy(l3)
        element.set("id", str(cell))
        lo = cell * shape.cores
        hi = lo + shape.cores - 1
        element.set("cpus", "%d-%d,%d-%d" % (lo, hi, lo + all_cores, hi + all_cores))
        cache.append(element)
    return _xml(root)


# ---------------------------------------------------------- node devices


def _pci_device(template: str, card: Card, slot: int = 0, function: int = 0,
                parent_bus: Optional[int] = None) -> ET.Element:
    """A PCI node device shaped as ``template``, describing ``card``."""
    root = _read(template)
    name = root.find("name")
    parent = root.find("parent")
    cap = root.find("capability[@type='pci']")
    assert name is not None and parent is not None and cap is not None
    name.text = _pci_name(card.bus, slot, function)
    parent.text = _pci_name((card.bus if parent_bus is None else parent_bus) - 1)
    class_el = cap.find("class")
    if class_el is None:
        class_el = ET.Element("class")
        cap.insert(0, class_el)
    class_el.text = card.class_code
    for field, value in (("domain", 0), ("bus", card.bus), ("slot", slot),
                         ("function", function)):
        element = cap.find(field)
        assert element is not None
        element.text = str(value)
    product, vendor = cap.find("product"), cap.find("vendor")
    assert product is not None and vendor is not None
    product.set("id", "0x" + card.product_id)
    product.text = card.product
    vendor.set("id", "0x" + card.vendor_id)
    vendor.text = card.vendor
    iommu = cap.find("iommuGroup")
    assert iommu is not None
    iommu.set("number", str(card.bus * 256 + slot * 8 + function))
    address = iommu.find("address")
    assert address is not None
    address.attrib = _addr(card.bus, slot, function)
    numa = cap.find("numa")
    assert numa is not None
    numa.set("node", str(card.numa))
    for sub in cap.findall("capability"):
        cap.remove(sub)
    return root


def _insert_capability(root: ET.Element, sub: ET.Element) -> None:
    """Put ``sub`` where the captures have it: before ``<iommuGroup>``."""
    cap = root.find("capability[@type='pci']")
    assert cap is not None
    index = list(cap).index(cap.find("iommuGroup"))
    cap.insert(index, sub)


def gpu_devices(card: Card) -> dict[str, str]:
    root = _pci_device(GPU, card)
    types = ET.Element("capability", {"type": "mdev_types"})
    for type_id, type_name, instances in card.mdev_types:
        type_el = ET.SubElement(types, "type", {"id": type_id})
        ET.SubElement(type_el, "name").text = type_name
        ET.SubElement(type_el, "deviceAPI").text = "vfio-pci"
        ET.SubElement(type_el, "availableInstances").text = str(instances)
    _insert_capability(root, types)
    link = root.find("capability/pci-express/link[@validity='cap']")
    if link is not None:
        link.set("speed", "8")
        link.set("width", "16")
    return {_pci_name(card.bus): _xml(root)}


def fpga_devices(card: Card) -> dict[str, str]:
    return {_pci_name(card.bus): _xml(_pci_device(GPU, card))}


def pf_devices(card: Card) -> dict[str, str]:
    devices = {}
    root = _pci_device(PF, card)
    vfs = ET.Element("capability", {"type": "virt_functions",
                                    "maxCount": str(card.max_vfs)})
    vf_slots = [(0x02 + index // 8, index % 8) for index in range(card.vfs)]
    for slot, function in vf_slots:
        ET.SubElement(vfs, "address", _addr(card.bus, slot, function))
    _insert_capability(root, vfs)
    devices[_pci_name(card.bus)] = _xml(root)
    vf_card = dataclasses.replace(card, product_id="1889",
                                  product="Ethernet Adaptive Virtual Function")
    for slot, function in vf_slots:
        vf = _pci_device(VF, vf_card, slot, function, parent_bus=card.bus + 1)
        parent = vf.find("parent")
        assert parent is not None
        parent.text = _pci_name(card.bus)
        phys = ET.Element("capability", {"type": "phys_function"})
        ET.SubElement(phys, "address", _addr(card.bus, 0, 0))
        _insert_capability(vf, phys)
        devices[_pci_name(card.bus, slot, function)] = _xml(vf)
    net = _read(NET)
    mac = "3c:fd:fe:%02x:00:00" % card.bus
    name, parent = net.find("name"), net.find("parent")
    cap = net.find("capability[@type='net']")
    assert name is not None and parent is not None and cap is not None
    name.text = "net_%s_%s" % (card.netdev, mac.replace(":", "_"))
    parent.text = _pci_name(card.bus)
    interface, address = cap.find("interface"), cap.find("address")
    assert interface is not None and address is not None
    interface.text = card.netdev
    address.text = mac
    for sub in cap.findall("capability"):
        cap.remove(sub)  # NOTE: the capture is a wireless NIC (80211)
    devices[name.text] = _xml(net)
    return devices


def nodedevs(host: Host) -> dict[str, str]:
    devices = {"computer": _xml(_read(COMPUTER))}
    makers = {"gpu": gpu_devices, "pf": pf_devices, "fpga": fpga_devices}
    for card in host.cards:
        devices.update(makers[card.kind](card))
    return devices


# ----------------------------------------------------------------- files


def host_json(host: Host) -> str:
    shape = host.shape
    data = {
        "format_version": 1,
        "hostname": host.hostname,
        "memory_kb": shape.memory_kb * shape.cells,
        "cpu_count": shape.cells * shape.cores * 2,
        "libvirt_uri": "qemu:///system",
        "disk": {"total_gb": host.disk_total_gb, "free_gb": host.disk_free_gb,
                 "path": "/var/lib/nova/instances"},
    }
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def host_files(host: Host) -> dict[str, str]:
    """Relative path -> content of one host's snapshot directory."""
    out = {"capabilities.xml": capabilities(host), "host.json": host_json(host),
           "compute-plugins.conf": "# %s: %s\n%s" % (host.hostname, host.summary,
                                                    host.conf)}
    for name, text in nodedevs(host).items():
        out["nodedev/%s.xml" % name] = text
    return out


def readme() -> str:
    lines = [
        "# Demo hosts",
        "",
        "Generated by `tools/demo_hosts.py` from real captures of libvirt's test",
        "suite (`tests/fixtures/hosts/libvirt/`, see its `SOURCES.md`); do not",
        "edit by hand: change the script and run it. Each directory is a host",
        "snapshot (`--host-snapshot DIR`) with its own `compute-plugins.conf`.",
        "",
        "| Directory | Host | What it has |",
        "| --- | --- | --- |",
    ]
    lines += ["| `%s/` | `%s` | %s |" % (h.dirname, h.hostname, h.summary)
              for h in HOSTS]
    lines += ["", "Shared storage: aggregate `%s`, %d GB." % (SHARED_AGGREGATE,
                                                            SHARED_DISK_GB), ""]
    return "\n".join(lines)


def all_files() -> dict[str, str]:
    out = {"README.md": readme()}
    for host in HOSTS:
        for path, text in host_files(host).items():
            out["%s/%s" % (host.dirname, path)] = text
    return out


def existing(directory: str) -> dict[str, str]:
    found = {}
    for base, _dirs, names in os.walk(directory):
        for name in names:
            path = os.path.join(base, name)
            with open(path, encoding="utf-8") as handle:
                found[os.path.relpath(path, directory)] = handle.read()
    return found


def write(directory: str, files: dict[str, str]) -> None:
    for path in existing(directory) if os.path.isdir(directory) else {}:
        if path not in files:
            os.remove(os.path.join(directory, path))
    for path, text in files.items():
        target = os.path.join(directory, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=os.path.dirname(target))
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temp, 0o644)
        os.replace(temp, target)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=OUTPUT, help="default: %(default)s")
    parser.add_argument("--check", action="store_true",
                        help="compare instead of writing; exit 1 when they differ")
    args = parser.parse_args(argv)
    files = all_files()
    if args.check:
        found = existing(args.output) if os.path.isdir(args.output) else {}
        stale = sorted(p for p in set(files) | set(found) if files.get(p) != found.get(p))
        for path in stale:
            print("stale: %s" % os.path.join(args.output, path), file=sys.stderr)
        return 1 if stale else 0
    write(args.output, files)
    print("wrote %d files under %s" % (len(files), args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
