"""The NUMA plugin's request: CPU policies, guest NUMA topology, page size.

Parsing follows ``nova.virt.hardware.numa_get_constraints`` and nova's
messages, but reports every problem instead of stopping at the first:

- ``hw:cpu_policy`` (shared|dedicated|mixed), ``hw:cpu_thread_policy``
  (prefer|isolate|require) and their image twins ``hw_cpu_policy``,
  ``hw_cpu_thread_policy`` (nova's override rules);
- ``hw:cpu_dedicated_mask``, ``hw:cpu_realtime``/``hw:cpu_realtime_mask``
  (``hw_cpu_realtime_mask``), ``hw:emulator_threads_policy`` (share|isolate);
- ``resources:VCPU`` / ``resources:PCPU`` / ``resources:MEMORY_MB`` and
  ``trait:HW_CPU_HYPERTHREADING`` with nova's conflict rules (suffixed
  CPU/memory groups are refused: use ``hw:numa_*``);
- ``hw:numa_nodes``, ``hw:numa_cpus.N``, ``hw:numa_mem.N`` (image:
  ``hw_numa_nodes``, ``hw_numa_cpus.N``, ``hw_numa_mem.N``; setting them in
  both is nova's ``ImageNUMATopologyForbidden``);
- ``hw:mem_page_size`` (small|large|any|<size>[KMGT][i][B]) and
  ``hw_mem_page_size`` (allowed only against ``large``/``any``).

A guest gets a NUMA topology (nova's four triggers) when it asks for NUMA
nodes, a page size, vPMEM (``hw:pmem``, the pmem plugin's key) or a
dedicated/mixed CPU policy; otherwise its
CPUs and memory *float* (see :func:`request_groups`). As in nova, the
topology has ``hw:numa_nodes`` nodes, else one, and ``hw:numa_cpus.N`` /
``hw:numa_mem.N`` must then describe exactly those nodes. Where this parser
differs from nova, it refuses instead of ignoring:

- ``hw:numa_cpus.N``/``hw:numa_mem.N`` without any trigger (nova ignores
  them silently);
- ``resources:VCPU=0``/``resources:MEMORY_MB=0`` (nova drops the class; here
  the guest always takes its CPUs and memory from a NUMA node);
- a page size request that no allowed page size divides, per guest node
  (the node would otherwise ask Placement for no memory);
- ``hw:numa_nodes`` above ``NUMA_NODES_MAX``, and more than
  ``MAX_GUEST_CPUS`` vCPUs for a guest whose CPUs are numbered (no CPU set
  is built before that check, so a huge floating ``vcpus`` costs nothing).

``large``/``any`` try the largest page size first, as nova does.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

import os_resource_classes as orc
import os_traits
from oslo_utils import strutils

from compute_plugins.plugin import names
from compute_plugins.plugin.cpuset import MAX_CPU_ID, InvalidCPUSpec, parse_cpu_spec
from compute_plugins.plugin.topology import GuestTopology
from compute_plugins.request import rules
from compute_plugins.request.groups import (
    KIND_FLOATING,
    KIND_GUEST_NODE,
    KIND_ROOT,
    PluginAssignment,
    PluginRequest,
    RequestGroup,
    granular_key_re,
    per_request,
)
from compute_plugins.request.inputs import MAX_AMOUNT, RequestInput
from compute_plugins.request.types import FrozenMap, enum_field, min_field

PLUGIN = "numa"

CPU_POLICIES = ("dedicated", "shared", "mixed")
THREAD_POLICIES = ("prefer", "isolate", "require")
EMULATOR_POLICIES = ("share", "isolate")
# nova's patterns with every number bounded (``\d{1,6}``, not ``\d+``): a
# value of thousands of digits is then a plain validation problem instead
# of Python's int-digit limit (or a huge CPU set) deep in the parser.
CPU_MASK_PATTERN = r"\^?\d{1,6}((-\d{1,6})?(,\^?\d{1,6}(-\d{1,6})?)?)*"
REALTIME_MASK_PATTERN = r"(\^)?\d{1,6}((-\d{1,6})?(,\^?\d{1,6}(-\d{1,6})?)?)*"
#: Both masks' language without nested quantifiers (nova's patterns, which
#: the messages name, backtrack exponentially on ``1-2,1-2,...,x``): a
#: number, then ``-<number>`` or ``,[^]<number>`` any number of times.
CPU_MASK_MATCH = r"\^?\d{1,6}(?:-\d{1,6}|,\^?\d{1,6})*"
PAGE_SIZE_PATTERN = r"(large|small|any|\d{1,15}([kKMGT]i?)?(b|bit|B)?)"
PAGE_ALIASES = ("small", "large", "any")
#: Huge page sizes tried for ``large``/``any`` (x86: 2 MiB and 1 GiB).
LARGE_PAGE_SIZES_KB = (2048, 1048576)
#: Base (small) page sizes of the hosts nova runs on: 4 KiB (x86, and
#: aarch64/ppc64le with 4 KiB pages), 16 KiB and 64 KiB (aarch64,
#: ppc64le). An explicit request of one of them is a host's small pages
#: where that is its base page (``MEMORY_MB``), else that pool.
BASE_PAGE_SIZES_KB = (4, 16, 64)
#: Of those, the huge page sizes of other hosts (64 KiB: contiguous pages
#: of 4 KiB-page aarch64 hosts).
BASE_AND_HUGE_PAGE_SIZES_KB = (64,)
#: nova's ``ImageMetaProps.NUMA_NODES_MAX``.
NUMA_NODES_MAX = 128
#: How many NUMA cells a floating guest may be spread over by the query.
FLOATING_SPLIT = 2
#: At most this many vCPUs for a guest whose CPUs are numbered (a NUMA
#: topology, CPU masks): guest CPU ids are host-CPU-id sized. Checked before
#: any CPU set is built so a huge ``vcpus`` costs nothing.
MAX_GUEST_CPUS = MAX_CPU_ID + 1

# Node ids are below NUMA_NODES_MAX (128): three digits at most; a longer
# key is not one of these (and is reported as an unknown ``hw:`` key).
_CELL_KEY = re.compile(r"^hw:numa_(cpus|mem)\.([0-9]{1,3})$")
_IMAGE_CELL_KEY = re.compile(r"^hw_numa_(cpus|mem)\.([0-9]{1,3})$")
_CPU_RC_KEY = granular_key_re("resources", "(VCPU|PCPU|MEMORY_MB)")
_HT_KEY = granular_key_re("trait", os_traits.HW_CPU_HYPERTHREADING)


@dataclasses.dataclass(frozen=True)
class GuestCell:
    """One guest NUMA node: its shared and dedicated guest CPUs, its memory."""

    id: int
    cpus: frozenset[int]
    pcpus: frozenset[int]
    memory_mb: int


@dataclasses.dataclass(frozen=True)
class NUMARequest(PluginRequest):
    """What the guest asks of host CPUs and memory.

    :param mem_page_size: ``small``, ``large``, ``any`` or None (unset, or
        an explicit size: see ``page_size_kb``).
    :param page_size_kb: an explicit page size in KiB.
    :param cells: the guest NUMA topology; empty for a floating guest.
    :param extra_pcpus: PCPUs for emulator threads
        (``hw:emulator_threads_policy=isolate``).
    :param locked_memory: ``hw:locked_memory`` (:mod:`resources.numa.options`).
    :param cpu_topology: the guest's ``(sockets, cores, threads)``
        (:mod:`resources.numa.options`); empty when nothing constrains it
        (or in a request recorded before it was read): the guest XML then
        uses nova's default, a socket per vCPU.
    :param physnets: physnets of the guest's ports, and
    :param tunneled: whether one is on a tunneled network, for a guest with
        a NUMA topology (:mod:`resources.numa.networks`).
    """

    vcpus: int = min_field(1)
    memory_mb: int = min_field(1)
    cpu_policy: Optional[str] = enum_field(CPU_POLICIES)
    cpu_thread_policy: Optional[str] = enum_field(THREAD_POLICIES)
    emulator_threads_policy: Optional[str] = enum_field(EMULATOR_POLICIES)
    realtime_cpus: frozenset[int] = frozenset()
    mem_page_size: Optional[str] = enum_field(PAGE_ALIASES)
    page_size_kb: Optional[int] = None
    cells: tuple[GuestCell, ...] = ()
    extra_pcpus: int = 0
    locked_memory: bool = False
    cpu_topology: tuple[int, ...] = ()
    physnets: frozenset[str] = frozenset()
    tunneled: bool = False

@dataclasses.dataclass(frozen=True)
class CellAssignment:
    """Where one guest NUMA node runs on the host.

    Self-contained: the host's state is rebuilt from assignments alone
    (``compute-plugins fit --usage``), so each says all it takes.

    :param guest_cell: the guest NUMA node; for a guest without NUMA
        topology, the number of the part (its CPUs and memory may be taken
        from up to ``FLOATING_SPLIT`` host cells).
    :param pinning: guest CPU -> host CPU (dedicated guest CPUs).
    :param shared_cpus: host CPUs the shared guest CPUs float on.
    :param page_size_kb: the huge page size of the memory; None: small pages.
    :param memory_mb: the memory taken on the host cell (MiB).
    :param shared_vcpus: guest vCPUs floating on ``shared_cpus`` (their
        load, counted against ``cpu_allocation_ratio``).
    :param held_cpus: dedicated host CPUs taken without a vCPU on them: the
        emulator threads' CPU (``hw:emulator_threads_policy=isolate``), and
        on nova's legacy host the thread siblings ``hw:cpu_thread_policy=isolate``
        holds idle (:mod:`resources.numa.pinning`; with
        ``cpu_dedicated_set`` that policy is refused on SMT, as in nova:
        :data:`resources.numa.pinning.ISOLATE_ON_SMT`).
    """

    guest_cell: int
    host_cell: int
    provider_uuid: str = ""
    pinning: FrozenMap[int, int] = dataclasses.field(default_factory=FrozenMap)
    shared_cpus: frozenset[int] = frozenset()
    page_size_kb: Optional[int] = None
    memory_mb: int = 0
    shared_vcpus: int = 0
    held_cpus: frozenset[int] = frozenset()


@dataclasses.dataclass(frozen=True)
class NUMAAssignment(PluginAssignment):
    """The NUMA plugin's part of the decision.

    :param cells: one per guest NUMA node (or part of a floating guest),
        by ``guest_cell``.
    :param emulator_threads: host CPUs the emulator threads are pinned to
        (``<emulatorpin>``); empty when they float.
    :param floating: the guest has no NUMA topology (``cells`` are the
        parts of it each host cell holds, not guest nodes): devices then
        have no NUMA affinity to honour, as in nova (data version 1.1; a
        1.0 payload reads as False).
    """

    cells: tuple[CellAssignment, ...] = ()
    emulator_threads: frozenset[int] = frozenset()
    floating: bool = False

    def guest_topology(self) -> GuestTopology:
        """Guest node -> host cell, for the plugins that need the guest's
        topology (:class:`compute_plugins.plugin.topology.PlacesGuest`)."""
        return GuestTopology(
            nodes=FrozenMap((cell.guest_cell, cell.host_cell) for cell in self.cells),
            floating=self.floating)


# --------------------------------------------------------------------------
# parsing


#: Where a problem is: ``(key, source)``, e.g. ``("hw_numa_nodes", "image")``.
Where = tuple[str, str]


def _where(flavor_key: str, from_image: bool) -> Where:
    """``hw:<x>`` in the flavor, or ``hw_<x>`` in the image when the value
    a problem is about came from the image (nova's twin keys)."""
    if from_image:
        return "hw_" + flavor_key.removeprefix("hw:"), "image"
    return flavor_key, "flavor"


def _policy(ri: RequestInput, key: str, allowed: tuple[str, ...], what: str
            ) -> tuple[Optional[str], Optional[str]]:
    """Flavor and image values of ``hw:<key>``, each validated (nova's
    message for a wrong image value)."""
    image_value = ri.image_properties.get("hw_" + key)
    return rules.flavor_image_enum(
        ri, key, allowed, "%s requested from 'image properties' is invalid, "
        "given: '%s', available: '%s'." % (what, image_value, allowed))


def _cpu_policy(ri: RequestInput) -> Optional[str]:
    """nova's ``get_cpu_policy_constraint``."""
    flavor_policy, image_policy = _policy(ri, "cpu_policy", CPU_POLICIES, "CPU policy")
    forbidden = ("Image property 'hw_cpu_policy' is not permitted to override "
                 "CPU pinning policy set against the flavor")
    if flavor_policy == "dedicated":
        return flavor_policy
    if flavor_policy == "mixed":
        if image_policy == "dedicated":
            ri.report("hw_cpu_policy", image_policy, forbidden, source="image")
        return flavor_policy
    if flavor_policy == "shared":
        if image_policy in ("mixed", "dedicated"):
            ri.report("hw_cpu_policy", image_policy, forbidden, source="image")
        return flavor_policy
    return image_policy


def _thread_policy(ri: RequestInput) -> tuple[Optional[str], bool]:
    """nova's ``get_cpu_thread_policy_constraint``: ``(policy, from image)``."""
    flavor_policy, image_policy = _policy(
        ri, "cpu_thread_policy", THREAD_POLICIES, "CPU thread policy")
    if flavor_policy in (None, "prefer"):
        return flavor_policy or image_policy, not flavor_policy and bool(image_policy)
    if image_policy and image_policy != flavor_policy:
        ri.report("hw_cpu_thread_policy", image_policy,
                  "Image property 'hw_cpu_thread_policy' is not permitted to "
                  "override CPU thread pinning policy set against the flavor",
                  source="image")
    return flavor_policy, False


def _mask(ri: RequestInput, key: str, mask: str, vcpus: int,
          source: str = "flavor") -> Optional[frozenset[int]]:
    if not _cpus_numbered(ri, key, mask, vcpus, source):
        return None
    try:
        if mask.strip().startswith("^"):
            return parse_cpu_spec("0-%d,%s" % (vcpus - 1, mask))
        return parse_cpu_spec(mask)
    except InvalidCPUSpec as err:
        ri.report(key, mask, str(err), source)
        return None


def _cpus_numbered(ri: RequestInput, key: str, value: object, vcpus: int,
                   source: str = "flavor") -> bool:
    """False (and a problem) when ``vcpus`` is too many to number guest CPUs."""
    if vcpus <= MAX_GUEST_CPUS:
        return True
    ri.report(key, value, "a guest with pinned, realtime or NUMA-placed CPUs "
              "may have at most %d vCPUs (flavor vcpus: %d)"
              % (MAX_GUEST_CPUS, vcpus), source)
    return False


def _realtime_cpus(ri: RequestInput, vcpus: int, emulator: Optional[str]
                   ) -> Optional[frozenset[int]]:
    """nova's ``get_realtime_cpu_constraint``."""
    enabled = rules.check_bool(ri, "hw:cpu_realtime",
                               ri.extra_specs.get("hw:cpu_realtime"))
    ri.claim("hw:cpu_realtime")
    flavor_mask, image_mask = ri.flavor_image("cpu_realtime_mask")
    flavor_mask = rules.check_pattern(ri, "hw:cpu_realtime_mask", flavor_mask,
                                      CPU_MASK_MATCH, shown=REALTIME_MASK_PATTERN)
    image_mask = rules.check_pattern(ri, "hw_cpu_realtime_mask", image_mask,
                                     CPU_MASK_MATCH, source="image",
                                     shown=REALTIME_MASK_PATTERN)
    if not enabled:
        return None
    mask = image_mask or flavor_mask
    key, source = _where("hw:cpu_realtime_mask", bool(image_mask))
    if not _cpus_numbered(ri, key if mask else "hw:cpu_realtime", mask or "true",
                          vcpus, source if mask else "flavor"):
        return None
    all_cpus = frozenset(range(vcpus))
    rt = _mask(ri, key, mask, vcpus, source) if mask else all_cpus
    if rt is None:
        return None
    invalid = ("Use of realtime CPUs requires either one or more non-realtime "
               "CPU(s) or offloaded emulator threads.")
    if not rt or (rt == all_cpus and not emulator):
        ri.report(key if mask else "hw:cpu_realtime", mask or "true", invalid,
                  source if mask else "flavor")
        return None
    if not rt <= all_cpus:
        ri.report(key, mask, "Realtime policy vCPU(s) mask is configured with "
                  "RT vCPUs that are not a subset of the vCPUs in the flavor. "
                  "See hw:cpu_realtime_mask or hw_cpu_realtime_mask", source)
        return None
    return rt


def _dedicated_cpus(ri: RequestInput, vcpus: int) -> Optional[frozenset[int]]:
    """nova's ``get_dedicated_cpu_constraint``."""
    key = "hw:cpu_dedicated_mask"
    ri.claim(key)
    mask = rules.check_pattern(ri, key, ri.extra_specs.get(key), CPU_MASK_MATCH,
                               shown=CPU_MASK_PATTERN)
    if not mask:
        return None
    pcpus = _mask(ri, key, mask, vcpus)
    if pcpus is None:
        return None
    cpus = frozenset(range(vcpus))
    if not pcpus or not (cpus - pcpus):
        ri.report(key, mask, "Mixed instance must have at least 1 pinned vCPU "
                  "and 1 unpinned vCPU. See 'hw:cpu_dedicated_mask'.")
        return None
    if not pcpus <= cpus:
        ri.report(key, mask, "Mixed instance dedicated vCPU(s) mask is not a "
                  "subset of vCPUs in the flavor. See \"hw:cpu_dedicated_mask\"")
        return None
    return pcpus


def _page_size(ri: RequestInput) -> tuple[Optional[str], Optional[int], bool, bool]:
    """nova's ``_get_numa_pagesize_constraint``: ``(alias, size_kb, asked,
    from image)``."""
    flavor_request, image_request = ri.flavor_image("mem_page_size")
    flavor_request = rules.check_pattern(ri, "hw:mem_page_size", flavor_request,
                                         PAGE_SIZE_PATTERN)
    if image_request is not None:
        image_request = str(image_request)
    asked = bool(flavor_request)
    if not flavor_request and image_request:
        ri.report("hw_mem_page_size", image_request, "Page size %s forbidden "
                  "against '<empty>'" % (image_request,), source="image")
        return None, None, False, False
    if not flavor_request:
        return None, None, False, False
    alias, size = _page_value(ri, "hw:mem_page_size", flavor_request, "flavor")
    if image_request and alias in ("any", "large"):
        image_alias, image_size = _page_value(ri, "hw_mem_page_size", image_request,
                                              "image")
        return image_alias, image_size, True, True
    if image_request:
        ri.report("hw_mem_page_size", image_request, "Page size %s forbidden "
                  "against '%s'" % (image_request, flavor_request), source="image")
    return alias, size, asked, False


def _page_value(ri: RequestInput, key: str, request: str, source: str
                ) -> tuple[Optional[str], Optional[int]]:
    """nova's ``check_and_return_pages_size``: ``(alias, size in KiB)``."""
    if request in PAGE_ALIASES:
        return request, None
    if not request.isascii():
        # NOTE: int() and strutils read "\uff12\uff10\uff14\uff18" as 2048.
        size_kb = 0
    elif request.isdigit():
        size_kb = int(request)
    else:
        try:
            size_kb = int(strutils.string_to_bytes(request, return_int=True) / 1024)
        except ValueError:
            size_kb = 0
    if size_kb <= 0:
        ri.report(key, request, "Invalid memory page size '%s'" % (request,), source)
        return None, None
    # NOTE: an explicit 4, 16 or 64 KiB stays a size, as in nova: which of
    # them is "small" depends on the host (resources.numa.cell.page_order).
    return None, size_kb


def _numa_nodes(ri: RequestInput) -> tuple[Optional[int], bool]:
    """nova's ``_get_numa_node_count_constraint``: ``(count, from image)``."""
    flavor_nodes, image_nodes = ri.flavor_image("numa_nodes")
    nodes = rules.check_int(ri, "hw:numa_nodes", flavor_nodes, minimum=1,
                            maximum=NUMA_NODES_MAX)
    if image_nodes is not None:
        if nodes is not None:
            ri.report("hw_numa_nodes", image_nodes, "Image property "
                      "'hw_numa_nodes' is not permitted to override NUMA "
                      "configuration set against the flavor", source="image")
            return nodes, False
        value = rules.check_int(ri, "hw_numa_nodes", image_nodes,
                                maximum=NUMA_NODES_MAX, source="image")
        if value is not None and value < 1:
            ri.report("hw_numa_nodes", image_nodes, "The property 'numa_nodes' "
                      "cannot be '%s'. It must be a number greater than 0"
                      % (image_nodes,), source="image")
            return None, False
        return value, value is not None
    return nodes, False


def _cell_maps(ri: RequestInput, vcpus: int
               ) -> tuple[Optional[list[frozenset[int]]], Optional[list[int]], bool, bool]:
    """``hw:numa_cpus.N`` / ``hw:numa_mem.N`` (or the image's), validated:
    ``(cpus, mem, ok, from image)``."""
    ok = True
    found: dict[str, dict[str, dict[int, str]]] = {"flavor": {"cpus": {}, "mem": {}},
                                                   "image": {"cpus": {}, "mem": {}}}
    for key, value in ri.extra_specs.items():
        match = _CELL_KEY.match(key)
        if match:
            ri.claim(key)
            found["flavor"][match.group(1)][int(match.group(2))] = value
    for key, value in ri.image_properties.items():
        match = _IMAGE_CELL_KEY.match(key)
        if match:
            ri.claim(key, source="image")
            found["image"][match.group(1)][int(match.group(2))] = value
    flavor_any = bool(found["flavor"]["cpus"] or found["flavor"]["mem"])
    image_any = bool(found["image"]["cpus"] or found["image"]["mem"])
    if flavor_any and image_any:
        for what in ("cpus", "mem"):
            if found["image"][what]:
                ri.report("hw_numa_%s" % what, None, "Image property "
                          "'hw_numa_%s' is not permitted to override NUMA "
                          "configuration set against the flavor" % what,
                          source="image")
        ok = False
    source = "image" if image_any and not flavor_any else "flavor"
    sep = "_" if source == "image" else ":"
    cpus_list: Optional[list[frozenset[int]]] = None
    mem_list: Optional[list[int]] = None
    if found[source]["cpus"]:
        cpus_list = []
        for index in sorted(found[source]["cpus"]):
            key = "hw%snuma_cpus.%d" % (sep, index)
            text = str(found[source]["cpus"][index])
            if not re.fullmatch(CPU_MASK_MATCH, text, re.ASCII):
                ri.report(key, text, "Validation failed; '%s' is not of the "
                          "format '%s'." % (text, CPU_MASK_PATTERN), source)
                ok = False
                continue
            try:
                cpus_list.append(parse_cpu_spec(text))
            except InvalidCPUSpec as err:
                ri.report(key, text, str(err), source)
                ok = False
    if found[source]["mem"]:
        mem_list = []
        for index in sorted(found[source]["mem"]):
            key = "hw%snuma_mem.%d" % (sep, index)
            mem = rules.check_int(ri, key, found[source]["mem"][index], minimum=1,
                                  maximum=MAX_AMOUNT, source=source)
            if mem is None:
                ok = False
            else:
                mem_list.append(mem)
    for what in ("cpus", "mem"):
        indexes = sorted(found[source][what])
        if indexes and indexes != list(range(len(indexes))):
            ri.report("hw%snuma_%s.N" % (sep, what), None, "CPU and memory "
                      "allocation must be provided for all NUMA nodes "
                      "(node ids must be 0..N-1, got %s)"
                      % ", ".join(map(str, indexes)), source)
            ok = False
    return cpus_list, mem_list, ok, source == "image"


def _vpmem_labels(ri: RequestInput) -> bool:
    """``hw:pmem`` names a label (nova's ``get_vpmems``: comma-separated,
    blanks dropped): nova's fourth NUMA topology trigger."""
    value = ri.extra_specs.get("hw:pmem")
    return isinstance(value, str) and any(label.strip() for label in value.split(","))


def parse(ri: RequestInput) -> NUMARequest:
    """The NUMA request of ``ri``; every problem is reported on ``ri``."""
    flavor = ri.flavor
    vcpus, memory_mb = flavor.vcpus, flavor.memory_mb
    cpu_policy = _cpu_policy(ri)
    thread_policy, thread_from_image = _thread_policy(ri)
    thread_where = _where("hw:cpu_thread_policy", thread_from_image)
    thread_given: Optional[str] = thread_policy
    ri.claim("hw:emulator_threads_policy")
    emulator = rules.check_enum(ri, "hw:emulator_threads_policy",
                                ri.extra_specs.get("hw:emulator_threads_policy"),
                                EMULATOR_POLICIES)
    realtime_cpus = _realtime_cpus(ri, vcpus, emulator)
    dedicated_cpus = _dedicated_cpus(ri, vcpus)

    requested = {"VCPU": 0, "PCPU": 0, "MEMORY_MB": None}
    for key, value in sorted(ri.extra_specs.items()):
        match = _CPU_RC_KEY.match(key)
        if not match:
            continue
        ri.claim(key)
        if match.group(1):
            ri.report(key, value, "guest CPUs and memory are split over host "
                      "NUMA nodes by the numa plugin: use hw:numa_nodes, "
                      "hw:numa_cpus.N and hw:numa_mem.N instead of a numbered "
                      "%s group" % match.group(2))
            continue
        amount = rules.check_int(ri, key, value, minimum=0, maximum=MAX_AMOUNT)
        if amount == 0 and match.group(2) != "PCPU":
            # nova drops the class from the query (a guest using no host
            # CPUs or memory); here every guest takes its CPUs and memory
            # from a NUMA node, so refuse rather than ask something else.
            ri.report(key, value, "%s=0 is not supported: the numa plugin "
                      "always takes the guest's CPUs and memory from host "
                      "NUMA nodes; remove the key" % key)
            continue
        if amount is not None:
            requested[match.group(2)] = amount
    req_vcpus, req_pcpus = requested["VCPU"] or 0, requested["PCPU"] or 0
    if requested["MEMORY_MB"] not in (None, memory_mb):
        ri.report("resources:MEMORY_MB", requested["MEMORY_MB"], "must equal the "
                  "flavor's memory_mb (%d): guest memory is taken from NUMA "
                  "nodes by the numa plugin" % memory_mb)
    if cpu_policy and (req_vcpus or req_pcpus):
        ri.report("resources:%s" % ("PCPU" if req_pcpus else "VCPU"),
                  req_pcpus or req_vcpus,
                  "It is not possible to use the 'resources:VCPU' or "
                  "'resources:PCPU' extra specs in combination with the "
                  "'hw:cpu_policy' extra spec or 'hw_cpu_policy' image metadata "
                  "property; use one or the other")
    elif req_vcpus and req_pcpus:
        ri.report("resources:PCPU", req_pcpus, "It is not possible to specify "
                  "both 'resources:VCPU' and 'resources:PCPU' extra specs; use "
                  "one or the other")
    elif req_pcpus:
        wanted = vcpus + 1 if emulator == "isolate" else vcpus
        if emulator == "isolate" and req_pcpus != wanted:
            ri.report("resources:PCPU", req_pcpus, "You have requested "
                      "'hw:emulator_threads_policy=isolate' but have not "
                      "requested sufficient PCPUs to handle this policy; you "
                      "must allocate exactly flavor.vcpus + 1 PCPUs.")
        elif emulator != "isolate" and req_pcpus != wanted:
            ri.report("resources:PCPU", req_pcpus, "There is a mismatch between "
                      "the number of PCPUs requested via 'resourcesNN:PCPU' and "
                      "the flavor); you must allocate exactly flavor.vcpus PCPUs")
        cpu_policy = "dedicated"
    elif req_vcpus:
        if req_vcpus != vcpus:
            ri.report("resources:VCPU", req_vcpus, "must equal the flavor's "
                      "vcpus (%d): guest CPUs are taken from NUMA nodes by the "
                      "numa plugin" % vcpus)
        cpu_policy = "shared"

    ht_value = None
    ht_where: Where = ("trait:HW_CPU_HYPERTHREADING", "flavor")
    for key, value in sorted(ri.extra_specs.items()):
        if _HT_KEY.match(key):
            ri.claim(key)
            ht_where = (key, "flavor")
            ht_value = rules.check_enum(ri, key, value, ("required", "forbidden"))
    image_traits = ri.image_properties.get("traits_required")
    if (ht_value is None and isinstance(image_traits, tuple)
            and os_traits.HW_CPU_HYPERTHREADING in image_traits):
        ht_value = "required"
        ht_where = ("traits_required", "image")
    # NOTE: the image's traits_required names the trait; a flavor's
    # trait:HW_CPU_HYPERTHREADING has required/forbidden.
    ht_given = (os_traits.HW_CPU_HYPERTHREADING if ht_where[1] == "image"
                else ht_value)
    if thread_policy and ht_value:
        key, source = ht_where
        ri.report(key, ht_given, "It is not possible "
                  "to use the 'trait:HW_CPU_HYPERTHREADING' extra spec in "
                  "combination with the 'hw:cpu_thread_policy' extra spec or "
                  "'hw_cpu_thread_policy' image metadata property; use one or "
                  "the other", source)
    elif ht_value == "forbidden":
        thread_policy, thread_where, thread_given = "isolate", ht_where, ht_given
    elif ht_value == "required":
        thread_policy, thread_where, thread_given = "require", ht_where, ht_given

    if cpu_policy in ("shared", None):
        if thread_policy:
            key, source = thread_where
            ri.report(key, thread_given, "Cannot set cpu thread pinning "
                      "policy in a non dedicated cpu pinning policy", source)
        if emulator == "isolate":
            ri.report("hw:emulator_threads_policy", emulator, "An isolated CPU "
                      "emulator threads option requires a dedicated CPU policy "
                      "option.")
        if dedicated_cpus:
            ri.report("hw:cpu_dedicated_mask", ri.extra_specs.get(
                "hw:cpu_dedicated_mask"), "Cannot specify 'hw:cpu_dedicated_mask' "
                "without the 'mixed' policy.")
        if realtime_cpus:
            ri.report("hw:cpu_realtime", ri.extra_specs.get("hw:cpu_realtime"),
                      "Cannot set realtime policy in a non dedicated cpu pinning "
                      "policy")
    elif cpu_policy == "dedicated":
        if dedicated_cpus:
            ri.report("hw:cpu_dedicated_mask", ri.extra_specs.get(
                "hw:cpu_dedicated_mask"), "Cannot specify 'hw:cpu_dedicated_mask' "
                "without the 'mixed' policy.")
    else:  # mixed
        if bool(realtime_cpus) == bool(dedicated_cpus):
            ri.report("hw:cpu_dedicated_mask", ri.extra_specs.get(
                "hw:cpu_dedicated_mask"), "Dedicated CPU set can be specified "
                "from either 'hw:cpu_dedicated_mask' or 'hw:cpu_realtime_mask' "
                "when using 'mixed' CPU policy. 'hw:cpu_dedicated_mask' and "
                "'hw:cpu_realtime_mask' can not be specified at the same time, "
                "or be specified with none of them.")
        dedicated_cpus = dedicated_cpus or realtime_cpus

    # NOTE: the guest nodes are checked whatever else is wrong (every
    # problem is said in one run), unless their own inputs are invalid:
    # a bad hw:numa_nodes would be read as 1 node, a bad page size would
    # make every node's memory look wrong.
    before = len(ri.problems)
    nodes, nodes_from_image = _numa_nodes(ri)
    nodes_ok = len(ri.problems) == before
    before = len(ri.problems)
    page_alias, page_kb, page_asked, page_from_image = _page_size(ri)
    pages_ok = len(ri.problems) == before
    cpu_list, mem_list, maps_ok, maps_from_image = _cell_maps(ri, vcpus)
    extra = 1 if emulator == "isolate" and cpu_policy in ("dedicated", "mixed") else 0
    # nova's four triggers; hw:numa_cpus.N / hw:numa_mem.N alone are not one
    # of them. hw:pmem is the pmem plugin's key, read (not claimed) here: an
    # NVDIMM needs a guest NUMA node (libvirt refuses memory devices
    # without one), so nova gives a vPMEM guest one.
    wants_topology = bool(nodes or page_asked or _vpmem_labels(ri)
                          or cpu_policy in ("dedicated", "mixed"))
    if not wants_topology and (cpu_list is not None or mem_list is not None):
        key, source = _where("hw:numa_cpus.N", maps_from_image)
        sep = "_" if maps_from_image else ":"
        ri.report(key, None, "hw%snuma_cpus.N and hw%snuma_mem.N describe guest "
                  "NUMA nodes: set hw%snuma_nodes too (nova ignores them without "
                  "a NUMA topology)" % (sep, sep, sep), source)
    cells: list[GuestCell] = []
    if (wants_topology and nodes_ok
            and _cpus_numbered(ri, "vcpus", vcpus, vcpus)):
        cells = _cells(ri, vcpus, memory_mb, nodes or 1, cpu_policy,
                       dedicated_cpus, cpu_list, mem_list, maps_ok,
                       _where("hw:numa_nodes", nodes_from_image),
                       maps_from_image)
    for cell in cells if pages_ok else ():
        _check_memory_choices(ri, cell, page_alias, page_kb,
                              _where("hw:mem_page_size", page_from_image))
    return NUMARequest(
        vcpus=vcpus, memory_mb=memory_mb, cpu_policy=cpu_policy,
        cpu_thread_policy=thread_policy, emulator_threads_policy=emulator,
        realtime_cpus=realtime_cpus or frozenset(), mem_page_size=page_alias,
        page_size_kb=page_kb, cells=tuple(cells), extra_pcpus=extra)


def _cells(ri: RequestInput, vcpus: int, memory_mb: int, count: int,
           cpu_policy: Optional[str], dedicated_cpus: Optional[frozenset[int]],
           cpu_list: Optional[list[frozenset[int]]], mem_list: Optional[list[int]],
           maps_ok: bool, nodes_where: Where = ("hw:numa_nodes", "flavor"),
           maps_from_image: bool = False) -> list[GuestCell]:
    """The guest NUMA nodes, as nova's ``numa_get_constraints`` builds them:
    ``count`` nodes (``hw:numa_nodes``, else 1), split evenly or as mapped.
    Problems name the key the value came from (``nodes_where``; the image's
    ``hw_numa_*.N`` when ``maps_from_image``)."""
    nodes_key, nodes_source = nodes_where
    pcpus = frozenset(range(vcpus)) if cpu_policy == "dedicated" else (
        dedicated_cpus or frozenset())
    shared = frozenset(range(vcpus)) - pcpus
    if cpu_list is None and mem_list is None:
        if vcpus % count or memory_mb % count:
            ri.report(nodes_key, count, "Instance CPUs and/or memory "
                      "cannot be evenly distributed across instance NUMA "
                      "nodes. Explicit assignment of CPUs and memory to "
                      "nodes is required", nodes_source)
            return []
        ncpus, mem = vcpus // count, memory_mb // count
        cells = []
        for node in range(count):
            node_cpus = frozenset(range(node * ncpus, (node + 1) * ncpus))
            cells.append(GuestCell(node, node_cpus & shared, node_cpus & pcpus, mem))
        return cells
    if (cpu_list is None or mem_list is None or len(cpu_list) != count
            or len(mem_list) != count):
        if maps_ok:
            ri.report(nodes_key, count, "CPU and memory allocation "
                      "must be provided for all NUMA nodes", nodes_source)
        return []
    if not maps_ok:
        return []
    return _manual_cells(ri, vcpus, memory_mb, shared, pcpus, cpu_list, mem_list,
                         maps_from_image)


def _check_memory_choices(ri: RequestInput, cell: GuestCell,
                          page_alias: Optional[str], page_kb: Optional[int],
                          where: Where = ("hw:mem_page_size", "flavor")) -> None:
    """A problem when no page size the request allows divides the cell's
    memory: the cell would otherwise ask Placement for no memory at all."""
    if memory_choices(page_alias, page_kb, cell.memory_mb):
        return
    key, source = where
    if page_kb:
        ri.report(key, page_kb, "guest NUMA node %d memory "
                  "(%d MiB) is not a multiple of the page size (%d KiB)"
                  % (cell.id, cell.memory_mb, page_kb), source)
    else:
        ri.report(key, page_alias, "guest NUMA node %d memory "
                  "(%d MiB) is not a multiple of any page size %s allows (%s KiB)"
                  % (cell.id, cell.memory_mb, page_alias,
                     ", ".join(map(str, LARGE_PAGE_SIZES_KB))), source)


def _manual_cells(ri: RequestInput, vcpus: int, memory_mb: int,
                  shared: frozenset[int], pcpus: frozenset[int],
                  cpu_list: list[frozenset[int]], mem_list: list[int],
                  from_image: bool = False) -> list[GuestCell]:
    """nova's ``_get_numa_topology_manual``, every problem reported (on the
    image's ``hw_numa_*`` keys when ``from_image``)."""
    sep, source = ("_", "image") if from_image else (":", "flavor")
    cells = []
    available = set(range(vcpus))
    ok = True
    for node, (cpus, mem) in enumerate(zip(cpu_list, mem_list, strict=True)):
        for cpu in sorted(cpus):
            if cpu > vcpus - 1:
                ri.report("hw%snuma_cpus.%d" % (sep, node), None, "CPU number "
                          "%d is larger than max %d" % (cpu, vcpus - 1), source)
                ok = False
            elif cpu not in available:
                ri.report("hw%snuma_cpus.%d" % (sep, node), None, "CPU number "
                          "%d is assigned to two nodes" % cpu, source)
                ok = False
            else:
                available.remove(cpu)
        cells.append(GuestCell(node, cpus & shared, cpus & pcpus, mem))
    if available:
        ri.report("hw%snuma_cpus.N" % sep, None, "CPU number %s is not "
                  "assigned to any node" % ",".join(map(str, sorted(available))),
                  source)
        ok = False
    total = sum(mem_list)
    if total != memory_mb:
        ri.report("hw%snuma_mem.N" % sep, total, "%d MB of memory assigned, but "
                  "expected %d MB" % (total, memory_mb), source)
        ok = False
    return cells if ok else []


# --------------------------------------------------------------------------
# request groups


page_resource_class = names.page_resource_class


def memory_choices(page_alias: Optional[str], page_kb: Optional[int],
                   memory_mb: int) -> list[dict[str, int]]:
    """The ways one cell's memory may be taken, in order of preference.

    As nova's ``_numa_cell_supports_pagesize_request``: ``large`` and
    ``any`` try the largest page size first (then ``any`` falls back to
    small pages). A page size that does not divide the memory is no choice.
    A base page size (:data:`BASE_PAGE_SIZES_KB`) is the small pages
    (``MEMORY_MB``) of the hosts whose base page it is; where it is a huge
    page size elsewhere (:data:`BASE_AND_HUGE_PAGE_SIZES_KB`), that is a
    second choice. The fit checks the cell's small page size.
    """
    def pages(size_kb: int) -> Optional[dict[str, int]]:
        if (memory_mb * 1024) % size_kb:
            return None
        return {page_resource_class(size_kb): memory_mb * 1024 // size_kb}

    small = {orc.MEMORY_MB: memory_mb}
    if page_kb in BASE_PAGE_SIZES_KB:
        huge = pages(page_kb) if page_kb in BASE_AND_HUGE_PAGE_SIZES_KB else None
        return [small] + ([huge] if huge else [])
    if page_kb:
        choice = pages(page_kb)
        return [choice] if choice else []
    large = [c for c in (pages(s) for s in sorted(LARGE_PAGE_SIZES_KB, reverse=True))
             if c]
    if page_alias == "large":
        return large
    if page_alias == "any":
        return large + [small]
    return [small]


def cell_group_id(cell: int) -> str:
    return "_NUMA%d" % cell


@per_request
def request_groups(req: NUMARequest) -> list[RequestGroup]:
    """One ``_NUMA<N>`` group per guest NUMA node, or one floating group.

    - A cell group asks its PCPUs and VCPUs and its memory from one host NUMA
      provider (trait ``HW_NUMA_ROOT``). Memory is ``MEMORY_MB`` for small
      pages, ``CUSTOM_MEMORY_PAGE_<size>KB`` pages for a page size; for
      ``large``/``any`` the group lists each page size as a *choice* and the
      query builder tries them one by one. The emulator-threads PCPU goes
      with cell 0.
    - A floating guest (no NUMA topology) gets one ``floating`` group with
      ``split=FLOATING_SPLIT``: it may take its CPUs and memory from one
      cell, or split evenly over several (see :mod:`.floating`).
    - ``hw:cpu_thread_policy`` isolate/require becomes a root trait
      ``!HW_CPU_HYPERTHREADING`` / ``HW_CPU_HYPERTHREADING``, as nova does.
    """
    groups: list[RequestGroup] = []
    if req.cells:
        for cell in req.cells:
            resources = {}
            pcpus = len(cell.pcpus) + (req.extra_pcpus if cell.id == 0 else 0)
            if pcpus:
                resources[orc.PCPU] = pcpus
            if cell.cpus:
                resources[orc.VCPU] = len(cell.cpus)
            choices = memory_choices(req.mem_page_size, req.page_size_kb,
                                     cell.memory_mb)
            if len(choices) == 1:
                resources.update(choices[0])
                choices = []
            groups.append(RequestGroup(
                requester_id=cell_group_id(cell.id),
                resources=FrozenMap(resources),
                required_traits=frozenset({os_traits.HW_NUMA_ROOT}),
                choices=tuple(FrozenMap(c) for c in choices),
                owner=PLUGIN, kind=KIND_GUEST_NODE, node=cell.id))
    else:
        groups.append(RequestGroup(
            requester_id="",
            resources=FrozenMap({orc.VCPU: req.vcpus, orc.MEMORY_MB: req.memory_mb}),
            owner=PLUGIN, kind=KIND_FLOATING, split=FLOATING_SPLIT))
    trait = {"isolate": "forbidden", "require": "required"}.get(
        req.cpu_thread_policy or "")
    if trait:
        ht = frozenset({os_traits.HW_CPU_HYPERTHREADING})
        groups.append(RequestGroup(
            requester_id="", owner=PLUGIN, kind=KIND_ROOT,
            required_traits=ht if trait == "required" else frozenset(),
            forbidden_traits=ht if trait == "forbidden" else frozenset()))
    return groups


def samples() -> list[RequestInput]:
    """Representative requests (the plugin's ``sample_requests``): floating
    CPUs, pinned CPUs, two guest NUMA nodes on locked 1 GiB pages, two
    sockets, isolated threads with an isolated emulator thread, a mixed
    policy."""
    flavors = [
        (2, 2048, {}),
        (4, 4096, {"hw:cpu_policy": "dedicated"}),
        (8, 8192, {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2",
                   "hw:mem_page_size": "1GB", "hw:locked_memory": "true"}),
        (4, 8192, {"hw:numa_nodes": "2", "hw:cpu_sockets": "2"}),
        (2, 2048, {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate",
                   "hw:emulator_threads_policy": "isolate"}),
        (4, 4096, {"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "^0"}),
    ]
    return [RequestInput.from_dicts({"name": "numa.sample%d" % index, "vcpus": vcpus,
                                     "memory_mb": memory_mb, "extra_specs": specs})
            for index, (vcpus, memory_mb, specs) in enumerate(flavors)]
