"""The vGPU plugin's request: ``resources[N]:VGPU`` and mdev-type traits.

nova's syntax: ``resources[N]:VGPU=<count>`` with, in the same group,
``trait[N]:CUSTOM_MDEV_TYPE_<TYPE>=required|forbidden``; an mdev class of
the configuration (``[mdev_<type>] mdev_class = CUSTOM_*``, e.g. nova's
``CUSTOM_NOTVGPU``) is asked the same way instead of ``VGPU``
(``resources[N]:CUSTOM_NOTVGPU=1``). A numbered group asks one class (its
resources come from one provider, a pGPU offers one); the unsuffixed group
may ask several, as Placement serves each of its resource classes from one
provider, different classes from different ones. Each (group, class)
becomes one ``device`` request group (all its vGPUs from one pGPU): the
numbered group keeps the user's suffix, the unsuffixed ones are named
``_VGPU`` (``VGPU`` first, then the custom classes by name), ``_VGPU1``...
(reserved suffixes: none is numbered, ``group_policy`` leaves them be).

NUMA affinity: nova has none for mdevs; here a vGPU group follows
``hw:pci_numa_affinity_policy`` when it is ``required``, ``preferred`` or
``socket`` (``legacy``, the default, means none for vGPUs).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

import os_resource_classes as orc

from compute_plugins.plugin import devices
from compute_plugins.request import rules
from compute_plugins.request.groups import (
    AFFINITY_POLICIES,
    KIND_DEVICE,
    KIND_ROOT,
    PluginAssignment,
    PluginRequest,
    RequestGroup,
    granular_key_re,
    is_reserved_suffix,
)
from compute_plugins.request.inputs import MAX_AMOUNT, RequestInput
from compute_plugins.request.types import FrozenMap, enum_field

PLUGIN = "vgpu"
UNSUFFIXED_GROUP = "_VGPU"

#: The resource class of vGPUs (an mdev type's default ``mdev_class``).
VGPU = orc.VGPU
_MDEV_KEY = granular_key_re("trait", "(CUSTOM_MDEV_TYPE_[A-Z0-9_]+)")


@dataclasses.dataclass(frozen=True)
class VGPUGroup:
    """vGPUs asked in one group (from one physical GPU)."""

    requester_id: str
    count: int
    mdev_types: frozenset[str] = frozenset()
    forbidden_mdev_types: frozenset[str] = frozenset()
    #: ``VGPU``, or the ``[mdev_<type>] mdev_class`` asked.
    resource_class: str = VGPU

    @property
    def numbered(self) -> bool:
        """A group of the user's ``resources<N>:`` (``group_policy`` rules it)."""
        return not is_reserved_suffix(self.requester_id)


@dataclasses.dataclass(frozen=True)
class VGPURequest(PluginRequest):
    """The VGPU groups of a request.

    :param isolate: ``group_policy=isolate``: no two numbered groups on one
        pGPU (:func:`compute_plugins.plugin.devices.isolates_groups`).
    """

    groups: tuple[VGPUGroup, ...] = ()
    affinity: Optional[str] = enum_field(AFFINITY_POLICIES)
    isolate: bool = False


@dataclasses.dataclass(frozen=True)
class MdevAssignment:
    """The pGPU and the mdevs serving one group.

    ``mdev_uuids``: one per vGPU of the group; each is an mdev of
    ``mdev_type`` that exists on the pGPU and no guest uses, or one the
    compute host creates with that uuid (see :mod:`resources.vgpu.state`).
    """

    requester_id: str
    provider_uuid: str
    parent_address: str
    mdev_type: str = ""
    mdev_uuids: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class VGPUAssignment(PluginAssignment):
    """The vgpu plugin's part of the decision.

    :param devices: one per VGPU group, in the request's group order.
    :param host_cells: the host cells of the guest's NUMA nodes the NUMA
        affinity was decided against (empty: no NUMA topology); ``verify``
        checks the affinity against them (it gets no ``numa`` assignment).
    """

    devices: tuple[MdevAssignment, ...] = ()
    host_cells: tuple[int, ...] = ()


def _class_key(classes: frozenset[str]) -> re.Pattern[str]:
    """``resources[N]:<class>`` for the mdev classes ``classes``."""
    return granular_key_re("resources", "(%s)" % "|".join(
        re.escape(c) for c in sorted(classes | {VGPU})))


def parse(ri: RequestInput, classes: frozenset[str] = frozenset({VGPU})
          ) -> Optional[VGPURequest]:
    """The VGPU groups of ``ri``; ``classes``: the mdev classes of the
    configuration (:func:`resources.vgpu.view.mdev_classes`)."""
    class_key = _class_key(classes)
    counts: dict[str, dict[str, int]] = {}
    required: dict[str, set[str]] = {}
    forbidden: dict[str, set[str]] = {}
    trait_keys: dict[str, list[tuple[str, str]]] = {}
    for key, value in sorted(ri.extra_specs.items()):
        match = class_key.match(key)
        if match:
            ri.claim(key)
            count = rules.check_int(ri, key, value, minimum=0, maximum=MAX_AMOUNT)
            if not count:
                continue
            suffix, rc = match.group(1) or "", match.group(2)
            if suffix and suffix in counts:
                ri.report(key, value, "a group's mdevs come from one physical "
                          "GPU, which offers one mdev class: the group asks "
                          "%s already" % ", ".join(counts[suffix]))
                continue
            counts.setdefault(suffix, {})[rc] = count
            continue
        match = _MDEV_KEY.match(key)
        if match:
            trait_keys.setdefault(match.group(1) or "", []).append((key, value))
    for suffix, items in trait_keys.items():
        for key, value in items:
            ri.claim(key)
            if suffix not in counts:
                ri.report(key, value, "an mdev type trait needs a VGPU request "
                          "in the same group: resources%s:VGPU" % suffix)
                continue
            kind = rules.check_enum(ri, key, value, ("required", "forbidden"))
            if kind == "required" and len(counts[suffix]) > 1:
                # NOTE: Placement wants the trait on one of the group's
                # providers, which pGPU (class) is not said.
                ri.report(key, value, "the unsuffixed group asks several mdev "
                          "classes (%s): require the mdev type in a numbered "
                          "group with its class" % ", ".join(sorted(counts[suffix])))
                continue
            target = required if kind == "required" else forbidden
            if kind:
                target.setdefault(suffix, set()).add(key.split(":", 1)[1])
    for suffix, types in required.items():
        if len(types) > 1:
            ri.report("trait%s:CUSTOM_MDEV_TYPE_*" % suffix, ",".join(sorted(types)),
                      "a physical GPU offers one mdev type: require at most "
                      "one CUSTOM_MDEV_TYPE_* trait per group")
    if not counts:
        return None
    policy = devices.pci_affinity_policy(ri)
    affinity = policy if policy in ("required", "preferred", "socket") else None
    groups = tuple(
        VGPUGroup(requester_id=_requester_id(suffix, index), count=count,
                  mdev_types=frozenset(required.get(suffix, ())),
                  forbidden_mdev_types=frozenset(forbidden.get(suffix, ())),
                  resource_class=rc)
        for suffix, asked in sorted(counts.items())
        for index, (rc, count) in enumerate(sorted(
            asked.items(), key=lambda item: (item[0] != VGPU, item[0]))))
    return VGPURequest(groups=groups, affinity=affinity,
                       isolate=devices.isolates_groups(ri))


def _requester_id(suffix: str, index: int) -> str:
    """The group of the ``index``-th class asked with ``suffix`` (module
    doc): the user's suffix, or ``_VGPU``, ``_VGPU1``... unsuffixed."""
    if suffix:
        return suffix
    return UNSUFFIXED_GROUP + (str(index) if index else "")


def request_groups(req: VGPURequest) -> list[RequestGroup]:
    """One device group per VGPU group; with the ``socket`` policy also the
    root trait nova requires for it (whether or not SR-IOV is asked)."""
    groups = [
        RequestGroup(
            requester_id=g.requester_id,
            resources=FrozenMap({g.resource_class: g.count}),
            required_traits=g.mdev_types,
            forbidden_traits=g.forbidden_mdev_types,
            owner=PLUGIN, kind=KIND_DEVICE, affinity=req.affinity)
        for g in req.groups]
    if req.affinity == "socket":
        groups.append(RequestGroup(
            requester_id="", required_traits=frozenset({devices.SOCKET_TRAIT}),
            owner=PLUGIN, kind=KIND_ROOT))
    return groups


def samples() -> list[RequestInput]:
    """Representative requests (the plugin's ``sample_requests``): a vGPU,
    a T4-2B vGPU on the guest's own NUMA cell, two vGPUs of one pGPU."""
    specs = [
        {"resources:VGPU": "1"},
        {"resources:VGPU": "1", "trait:CUSTOM_MDEV_TYPE_NVIDIA_223": "required",
         "hw:numa_nodes": "1", "hw:pci_numa_affinity_policy": "required"},
        {"resources1:VGPU": "2"},
    ]
    return [RequestInput.from_dicts({"name": "vgpu.sample%d" % index, "vcpus": 4,
                                     "memory_mb": 4096, "extra_specs": extra_specs})
            for index, extra_specs in enumerate(specs)]
