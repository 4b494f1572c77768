"""Guest XML: every plugin's fragments in one libvirt domain.

Each plugin turns its assignment into libvirt domain XML fragments
(:meth:`~compute_plugins.plugin.contract.ResourcePlugin.guest_config`, a list of
:class:`~compute_plugins.plugin.contract.GuestFragment`). :func:`domain_xml` asks every
plugin that has an assignment, in fit order, and :func:`assemble` combines
the fragments into one complete domain:

- the framework owns ``<name>``, ``<uuid>``, ``<memory>``, ``<os>``,
  ``<devices>`` and the vCPU count (``<vcpu>``'s text), from the flavor;
  a plugin may add attributes to ``<vcpu>`` (e.g. ``cpuset``);
- ``parent="domain"`` fragments of the same tag from several plugins are
  merged into one element: attributes united (two different values of one
  attribute are an error), children concatenated (two ``<cputune>`` give one
  ``<cputune>`` with every ``<vcpupin>``). A child libvirt allows once (an
  ``<emulatorpin>``, a ``<hugepages>``: any but :data:`REPEATED_CHILDREN`)
  given twice is an error, unless the two are the same element (a flag
  such as ``<memoryBacking><locked/>``, which the numa plugin gives for
  ``hw:locked_memory`` and the memenc plugin for SEV): that is kept once;
- ``parent="devices"`` fragments are appended under ``<devices>``.

A fragment that is not one well-formed element, sits under the wrong parent
or contradicts the flavor (a ``<vcpupin>`` of a vCPU the flavor does not
have, which libvirt drops with a mere warning) is a :class:`GuestConfigError`
naming the plugin. A plugin checks what only it knows the rules of against
its own request (the numa plugin: its guest cells cover the flavor's vCPUs
and memory, which libvirt would quietly accept otherwise).

:func:`summary` turns a domain into a few lines for people.
"""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from compute_plugins import exception
from compute_plugins.plugin.contract import GuestFragment, Rejection
from compute_plugins.plugin.cpuset import InvalidCPUSpec, parse_cpu_spec
from compute_plugins.request.groups import PluginAssignment
from compute_plugins.request.spec import RequestSpec
from compute_plugins.runtime import PluginSet

__all__ = ["DEVICE_TAGS", "FRAMEWORK_TAGS", "MEMORY_UNITS", "GuestConfigError",
           "assemble", "domain_xml", "pinning", "summary"]

#: Elements of ``<devices>`` (libvirt's ``domaincommon.rng`` ``devices``,
#: plus ``crypto`` and ``pstore`` of newer libvirt).
DEVICE_TAGS = frozenset({
    "emulator", "disk", "controller", "lease", "filesystem", "interface",
    "input", "sound", "audio", "hostdev", "graphics", "video", "console",
    "parallel", "serial", "channel", "smartcard", "hub", "redirdev",
    "redirfilter", "rng", "tpm", "shmem", "memory", "watchdog", "memballoon",
    "nvram", "panic", "iommu", "vsock", "crypto", "pstore"})

#: ``<domain>`` children the framework writes from the flavor; a plugin may
#: not give them (``vcpu`` is the exception: attributes only).
FRAMEWORK_TAGS = frozenset({
    "name", "uuid", "memory", "currentMemory", "maxMemory", "os", "devices",
    "on_poweroff", "on_reboot", "on_crash"})

#: Children that libvirt's schema (``domaincommon.rng``) lets repeat in a
#: ``<domain>`` child (``<cputune>``'s ``<vcpupin>``, ``<clock>``'s
#: ``<timer>``, ``<cpu>``'s ``<feature>``...). Every other child is allowed
#: once: two plugins giving one each (or one plugin twice) is an error (a
#: concatenation would not be a domain, or libvirt would take one). Children
#: in a namespace (``<metadata>``'s, ``<qemu:commandline>``'s) are not
#: libvirt's schema's and may repeat.
REPEATED_CHILDREN = frozenset({
    "vcpupin", "vcpusched", "iothreadpin", "iothreadsched", "cachetune",
    "memorytune", "memnode", "feature", "timer", "device", "event",
    "baseBoard", "entry", "uid", "gid", "cipher", "iothread", "vcpu", "label"})

#: libvirt's memory units, in bytes.
MEMORY_UNITS: Mapping[str, int] = {
    "b": 1, "bytes": 1, "KB": 10**3, "k": 2**10, "KiB": 2**10, "MB": 10**6,
    "M": 2**20, "MiB": 2**20, "GB": 10**9, "G": 2**30, "GiB": 2**30,
    "TB": 10**12, "T": 2**40, "TiB": 2**40}

_FLAVOR = "the flavor"


class GuestConfigError(exception.ComputePluginsError):
    """A plugin's guest XML cannot be part of a domain.

    :param plugin: the plugin whose fragment is wrong.
    :param reason: what is wrong with it.
    """

    def __init__(self, plugin: str, reason: str) -> None:
        self.plugin = plugin
        self.reason = reason
        super().__init__("guest XML of plugin %s: %s" % (plugin, reason))


@dataclasses.dataclass
class _Merged:
    """One ``<domain>`` child being merged, and who gave what in it."""

    element: ET.Element
    owner: str
    #: attribute -> the plugin that set it.
    attributes: dict[str, str]
    #: id(child) -> the plugin that gave it.
    children: dict[int, str]


def _parse(plugin: str, index: int, fragment: Any) -> ET.Element:
    if not isinstance(fragment, GuestFragment):
        raise GuestConfigError(plugin, "fragment %d is a %s, not a GuestFragment"
                               % (index, type(fragment).__name__))
    if not isinstance(fragment.xml, str):
        raise GuestConfigError(plugin, "fragment %d: xml is a %s, not a str"
                               % (index, type(fragment.xml).__name__))
    try:
        element = ET.fromstring(fragment.xml)
    except ET.ParseError as err:
        raise GuestConfigError(
            plugin, "fragment %d (under <%s>) is not one well-formed XML "
            "element: %s" % (index, fragment.parent, err)) from None
    return element


def _text(element: ET.Element) -> str:
    return (element.text or "").strip()


def _merge_into(merged: _Merged, element: ET.Element, plugin: str) -> None:
    tag = element.tag
    for name, value in element.attrib.items():
        have = merged.element.get(name)
        if have is not None and have != value:
            raise GuestConfigError(
                plugin, "<%s %s='%s'> contradicts %s's %s='%s'"
                % (tag, name, value, _who(merged.attributes[name]), name, have))
        merged.element.set(name, value)
        merged.attributes.setdefault(name, plugin)
    if _text(element):
        if _text(merged.element) and _text(merged.element) != _text(element):
            raise GuestConfigError(
                plugin, "<%s> text %r contradicts %s's %r"
                % (tag, _text(element), _who(merged.owner), _text(merged.element)))
        merged.element.text = element.text
    for child in element:
        if _once(child.tag):
            for other in merged.element:
                if other.tag == child.tag and _same(other, child):
                    break  # NOTE: the same element twice is one (a flag)
                if other.tag == child.tag:
                    raise GuestConfigError(
                        plugin, "<%s><%s> is allowed once and %s gives it too"
                        % (tag, child.tag, _who(merged.children[id(other)])))
            else:
                merged.element.append(child)
                merged.children[id(child)] = plugin
            continue
        merged.element.append(child)
        merged.children[id(child)] = plugin


def _same(one: ET.Element, other: ET.Element) -> bool:
    """``one`` and ``other`` are the same element (tag, attributes, text
    and children alike)."""
    return (ET.canonicalize(ET.tostring(one), strip_text=True)
            == ET.canonicalize(ET.tostring(other), strip_text=True))


def _once(tag: str) -> bool:
    """libvirt allows one ``tag`` child (see :data:`REPEATED_CHILDREN`)."""
    return tag not in REPEATED_CHILDREN and not tag.startswith("{")


def _who(plugin: str) -> str:
    return plugin if plugin == _FLAVOR else "plugin %s" % plugin


def assemble(
    contributions: Iterable[tuple[str, Sequence[GuestFragment]]],
    *,
    name: str,
    vcpus: int,
    memory_mb: int,
    domain_type: str = "kvm",
    uuid: Optional[str] = None,
    arch: Optional[str] = None,
    machine: Optional[str] = None,
    os_type: str = "hvm",
) -> str:
    """One libvirt domain from every plugin's fragments.

    :param contributions: ``(plugin name, its fragments)`` in the order
        their elements should appear.
    :param name: the domain's name.
    :param vcpus: the flavor's vCPUs (``<vcpu>``).
    :param memory_mb: the flavor's memory (``<memory>``, in KiB).
    :param domain_type: ``kvm``, ``qemu``, ``test`` (libvirt's test driver)...
    :param uuid: the domain's uuid (None: libvirt chooses at define time).
    :param arch: ``<os><type arch=...>`` (None: the host's default).
    :param machine: ``<os><type machine=...>`` (None: the default).
    :param os_type: ``<os><type>`` (``hvm``).
    :returns: the domain, serialised.
    :raises GuestConfigError: a fragment is malformed, misplaced or
        contradicts the flavor or another plugin's (names the plugin).
    """
    domain = ET.Element("domain", type=domain_type)
    ET.SubElement(domain, "name").text = name
    if uuid:
        ET.SubElement(domain, "uuid").text = uuid
    ET.SubElement(domain, "memory", unit="KiB").text = str(memory_mb * 1024)
    vcpu = ET.SubElement(domain, "vcpu", placement="static")
    vcpu.text = str(vcpus)
    merged: dict[str, _Merged] = {
        "vcpu": _Merged(vcpu, _FLAVOR, {"placement": _FLAVOR}, {})}
    devices: list[ET.Element] = []
    for plugin, fragments in contributions:
        for index, fragment in enumerate(fragments):
            element = _parse(plugin, index, fragment)
            if fragment.parent == "devices":
                if element.tag not in DEVICE_TAGS:
                    raise GuestConfigError(
                        plugin, "<%s> is not a device: it cannot go under "
                        "<devices>" % element.tag)
                devices.append(element)
                continue
            if element.tag in FRAMEWORK_TAGS:
                raise GuestConfigError(
                    plugin, "<%s> is written by the framework from the flavor; "
                    "a plugin may not give it" % element.tag)
            if element.tag in DEVICE_TAGS:
                raise GuestConfigError(
                    plugin, "<%s> is a device: give it with parent='devices'"
                    % element.tag)
            if element.tag == "vcpu" and (_text(element) or len(element)):
                raise GuestConfigError(
                    plugin, "<vcpu> may only carry attributes (cpuset...): the "
                    "vCPU count is the flavor's")
            have = merged.get(element.tag)
            if have is None:
                merged[element.tag] = _Merged(
                    element, plugin, dict.fromkeys(element.attrib, plugin),
                    {id(child): plugin for child in element})
                _check_single_children(element, plugin)
                domain.append(element)
            else:
                _merge_into(have, element, plugin)
    _check_vcpupins(merged.get("cputune"), vcpus)
    _max_memory(domain, devices, memory_mb)
    os_el = ET.SubElement(domain, "os")
    type_el = ET.SubElement(os_el, "type")
    if arch:
        type_el.set("arch", arch)
    if machine:
        type_el.set("machine", machine)
    type_el.text = os_type
    devices_el = ET.SubElement(domain, "devices")
    devices_el.extend(devices)
    ET.indent(domain)
    return ET.tostring(domain, encoding="unicode")


def _max_memory(domain: ET.Element, devices: Sequence[ET.Element],
                memory_mb: int) -> None:
    """``<maxMemory>`` when plugins give ``<memory>`` devices (NVDIMMs):
    libvirt refuses memory devices without it. As nova's
    ``_guest_add_vpmems``: the flavor's memory plus every device's target
    size, one slot per device."""
    memories = [d for d in devices if d.tag == "memory"]
    if not memories:
        return
    total_kib = memory_mb * 1024
    for device in memories:
        size = device.find("target/size")
        scale = MEMORY_UNITS.get(size.get("unit", "KiB"), 0) if size is not None else 0
        text = _text(size) if size is not None else ""
        if not scale or not text.isdigit():
            raise GuestConfigError(
                "framework", "a <memory> device has no <target><size> in a libvirt "
                "unit: %s" % ET.tostring(device, encoding="unicode"))
        total_kib += int(text) * scale // 1024
    element = ET.Element("maxMemory", slots=str(len(memories)), unit="KiB")
    element.text = str(total_kib)
    position = next(i for i, child in enumerate(domain) if child.tag == "memory")
    domain.insert(position + 1, element)


def _check_single_children(element: ET.Element, plugin: str) -> None:
    seen: set[str] = set()
    for child in element:
        if _once(child.tag):
            if child.tag in seen:
                raise GuestConfigError(plugin, "<%s><%s> is allowed once"
                                       % (element.tag, child.tag))
            seen.add(child.tag)


def _int_attr(element: ET.Element, name: str, plugin: str, where: str) -> int:
    value = element.get(name)
    if value is None or not value.strip().isdigit():
        raise GuestConfigError(plugin, "%s: %s=%r is not a number"
                               % (where, name, value))
    return int(value)


def _check_vcpupins(cputune: Optional[_Merged], vcpus: int) -> None:
    """Each ``<vcpupin>`` names a vCPU of the flavor, once, with a cpuset."""
    if cputune is None:
        return
    pinned: dict[int, str] = {}
    for child in cputune.element:
        plugin = cputune.children.get(id(child), cputune.owner)
        if child.tag not in ("vcpupin", "emulatorpin"):
            continue
        if not child.get("cpuset"):
            raise GuestConfigError(plugin, "<%s> has no cpuset" % child.tag)
        try:
            parse_cpu_spec(child.get("cpuset", ""))
        except InvalidCPUSpec as err:
            raise GuestConfigError(plugin, "<%s cpuset='%s'>: %s"
                                   % (child.tag, child.get("cpuset"), err)) from None
        if child.tag != "vcpupin":
            continue
        vcpu = _int_attr(child, "vcpu", plugin, "<vcpupin>")
        if vcpu >= vcpus:
            raise GuestConfigError(
                plugin, "<vcpupin vcpu='%d'> names a vCPU the flavor does not "
                "have (vcpus %d: 0-%d)" % (vcpu, vcpus, vcpus - 1))
        if vcpu in pinned:
            raise GuestConfigError(
                plugin, "vCPU %d is pinned twice (<vcpupin vcpu='%d'> also from "
                "%s)" % (vcpu, vcpu, _who(pinned[vcpu])))
        pinned[vcpu] = plugin


def domain_xml(spec: RequestSpec, assignments: Mapping[str, PluginAssignment],
               plugins: PluginSet, *, name: str, domain_type: str = "kvm",
               uuid: Optional[str] = None, arch: Optional[str] = None,
               machine: Optional[str] = None) -> str:
    """The complete domain for ``spec`` with ``assignments``.

    Every plugin that has an assignment gives its fragments (its
    ``guest_config(request, assignment)``, through
    :meth:`PluginSet.guest_fragments
    <compute_plugins.runtime.PluginSet.guest_fragments>`), in fit order;
    vCPUs and memory are the flavor's. A plugin with a request but no
    assignment (its ``fit`` had nothing to decide) gives none.

    :param assignments: plugin name -> its assignment (a FitResult's, or the
        spec's decision's).
    :raises GuestConfigError: see :func:`assemble`; also an assignment of a
        plugin that is not loaded or has no request in ``spec``, or a
        ``guest_config`` that fails or does not return a sequence of
        fragments.
    """
    contributions = plugins.guest_fragments(spec.requests, assignments)
    if isinstance(contributions, Rejection):
        raise GuestConfigError(contributions.plugin, contributions.reason)
    return assemble(contributions, name=name, vcpus=spec.flavor.vcpus,
                    memory_mb=spec.flavor.memory_mb, domain_type=domain_type,
                    uuid=uuid, arch=arch, machine=machine)


# -- for people ------------------------------------------------------------------


def _memory_mib(element: Optional[ET.Element]) -> Optional[int]:
    if element is None or not _text(element).isdigit():
        return None
    scale = MEMORY_UNITS.get(element.get("unit", "KiB"), 1024)
    return int(_text(element)) * scale // 2**20


def _address(element: ET.Element) -> str:
    address = element.find("source/address")
    if address is None:
        return "?"
    if address.get("uuid"):
        return address.get("uuid", "")
    try:
        return "%04x:%02x:%02x.%x" % tuple(
            int(address.get(part, "0"), 0)
            for part in ("domain", "bus", "slot", "function"))
    except ValueError:
        return "?"


def _device(element: ET.Element) -> str:
    if element.tag == "hostdev":
        return "hostdev %s %s" % (element.get("type", "?"), _address(element))
    if element.tag == "interface" and element.get("type") == "hostdev":
        return "interface hostdev %s" % _address(element)
    kind = element.get("type") or element.get("model") or ""
    return ("%s %s" % (element.tag, kind)).strip()


def summary(xml: str) -> str:
    """A few lines saying what a domain gets: vCPUs, memory, pinning, guest
    cells (NUMA) and page sizes, devices.

    :raises ValueError: ``xml`` is not a domain.
    """
    try:
        domain = ET.fromstring(xml)
    except ET.ParseError as err:
        raise ValueError("not XML: %s" % err) from None
    if domain.tag != "domain":
        raise ValueError("not a libvirt domain: <%s>" % domain.tag)
    vcpu = domain.find("vcpu")
    count = _text(vcpu) if vcpu is not None else "?"
    lines = ["domain %s (%s): %s vCPU%s, %s MiB" % (
        domain.findtext("name", "?"), domain.get("type", "?"), count,
        "" if count == "1" else "s", _memory_mib(domain.find("memory")))]
    if vcpu is not None and vcpu.get("cpuset"):
        lines.append("vCPUs float on host CPUs %s" % vcpu.get("cpuset"))
    pins = domain.findall("cputune/vcpupin")
    if pins:
        lines.append("vcpupin: " + " ".join(
            "%s->%s" % (p.get("vcpu"), p.get("cpuset"))
            for p in sorted(pins, key=lambda p: int(p.get("vcpu", "0")))))
    emulator = domain.find("cputune/emulatorpin")
    if emulator is not None:
        lines.append("emulator threads on host CPUs %s" % emulator.get("cpuset"))
    # NOTE: libvirt's domain schema has <cell> only in the guest's topology
    # (<cpu><numa>) and <memnode> only in <numatune>.
    cells = list(domain.iter("cell"))
    memnodes = {m.get("cellid"): m.get("nodeset") for m in domain.iter("memnode")}
    pages: dict[Optional[str], str] = {}
    for page_el in domain.findall("memoryBacking/hugepages/page"):
        size = "%s %s" % (page_el.get("size"), page_el.get("unit", "KiB"))
        nodeset = page_el.get("nodeset")
        for node in (parse_cpu_spec(nodeset) if nodeset else [None]):
            pages[None if node is None else str(node)] = size
    for cell in cells:
        cell_id = cell.get("id")
        memory = _memory_mib_attr(cell)
        line = "guest cell %s: vCPUs %s, %s MiB" % (cell_id, cell.get("cpus"), memory)
        page = pages.get(cell_id, pages.get(None))
        if page:
            line += " in %s pages" % page
        if cell_id in memnodes:
            line += ", memory on host node %s" % memnodes[cell_id]
        lines.append(line)
    if not cells and None in pages:
        lines.append("memory in %s pages" % pages[None])
    devices = [_device(d) for d in domain.findall("devices/*")]
    if devices:
        lines.append("devices: " + "; ".join(devices))
    return "\n".join(lines)


def pinning(xml: str, parents: Sequence[str]) -> list[str]:
    """The children of a domain's ``parents`` elements (e.g. ``cputune``),
    one line each as libvirt reads them, in order: what a move changes when
    the destination's decision pins the guest elsewhere (the demo shows
    both sides of a live migration, naming the elements its plugins write).

    :raises ValueError: ``xml`` is not XML.
    """
    try:
        domain = ET.fromstring(xml)
    except ET.ParseError as err:
        raise ValueError("not XML: %s" % err) from None
    return [ET.tostring(element, encoding="unicode").strip()
            for parent in parents
            for element in domain.findall(parent + "/*")]


def _memory_mib_attr(cell: ET.Element) -> Optional[int]:
    value = cell.get("memory", "")
    if not value.isdigit():
        return None
    return int(value) * MEMORY_UNITS.get(cell.get("unit", "KiB"), 1024) // 2**20
