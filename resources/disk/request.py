"""The disk plugin's request: ``DISK_GB`` as nova computes it.

``root_gb + ephemeral_gb + ceil(swap MiB / 1024)`` (nova's
``resources_from_flavor`` with ``convert_mb_to_ceil_gb``), unless the flavor
overrides it with ``resources:DISK_GB`` (e.g. ``0`` for boot-from-volume).
``DISK_GB`` is asked in the unsuffixed group, as nova asks it: the compute
root serves it (local disk) or a sharing provider in one of the root's
aggregates (shared storage). Which of the two is the host's to say (its
``[disk] shared_storage_aggregate``, in its host state), not the
scheduler's configuration: one cloud has hosts of both kinds.

Ephemeral encryption (nova's ``ephemeral_encryption_filter``):
``hw:ephemeral_encryption`` / image ``hw_ephemeral_encryption`` (true in
either; both given and different is nova's conflict) asks the root trait
``COMPUTE_EPHEMERAL_ENCRYPTION``, and ``hw:ephemeral_encryption_format`` /
``hw_ephemeral_encryption_format`` (``plain``, ``luks``, ``luksv2``; the two
may not differ) ``COMPUTE_EPHEMERAL_ENCRYPTION_<FORMAT>`` too. A format
without encryption asks nothing, as in nova (nor are the two formats
compared then).

Requests recorded by version 1.0 may name ``shared_aggregate``: they asked
``DISK_GB`` in a ``_DISK`` group restricted to that aggregate, and are still
read and verified that way.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

import os_resource_classes as orc
import os_traits

from compute_plugins.request import rules
from compute_plugins.request.groups import (
    KIND_DISK,
    KIND_ROOT,
    PluginAssignment,
    PluginRequest,
    RequestGroup,
)
from compute_plugins.request.inputs import MAX_AMOUNT, RequestInput
from compute_plugins.request.types import FrozenMap

PLUGIN = "disk"
SHARED_GROUP = "_DISK"
OVERRIDE_KEY = "resources:DISK_GB"
#: nova's ``BlockDeviceEncryptionFormatType.ALL``.
EPHEMERAL_ENCRYPTION_FORMATS = ("plain", "luks", "luksv2")


def ephemeral_encryption_traits(encryption_format: Optional[str]) -> frozenset[str]:
    """The root traits of ephemeral encryption (in ``encryption_format``)."""
    traits = {os_traits.COMPUTE_EPHEMERAL_ENCRYPTION}
    if encryption_format:
        traits.add("%s_%s" % (os_traits.COMPUTE_EPHEMERAL_ENCRYPTION,
                              encryption_format.upper()))
    return frozenset(traits)


@dataclasses.dataclass(frozen=True)
class DiskRequest(PluginRequest):
    disk_gb: int
    root_gb: int = 0
    ephemeral_gb: int = 0
    swap_mb: int = 0
    override: bool = False
    shared_aggregate: Optional[str] = None
    #: ``hw:ephemeral_encryption`` (1.2), and its format when given.
    ephemeral_encryption: bool = False
    ephemeral_encryption_format: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class DiskAssignment(PluginAssignment):
    """Which provider serves the guest's ``DISK_GB``.

    :param provider_uuid: the compute root (local disk), the sharing
        provider Placement allocated from (shared storage), or "" (shared
        storage decided offline: the sharing provider is not the host's).
    :param shared: on the shared-storage aggregate's sharing provider.
    :param disk_gb: the amount taken (the host state sums it).
    """

    provider_uuid: str = ""
    shared: bool = False
    disk_gb: int = 0


def convert_mb_to_ceil_gb(mb_value: int) -> int:
    """nova's ``compute.utils.convert_mb_to_ceil_gb``."""
    return int(math.ceil(mb_value / 1024.0)) if mb_value else 0


def parse(ri: RequestInput) -> Optional[DiskRequest]:
    flavor = ri.flavor
    total = flavor.root_gb + flavor.ephemeral_gb + convert_mb_to_ceil_gb(flavor.swap)
    override = False
    if OVERRIDE_KEY in ri.extra_specs:
        ri.claim(OVERRIDE_KEY)
        value = rules.check_int(ri, OVERRIDE_KEY, ri.extra_specs[OVERRIDE_KEY],
                                minimum=0, maximum=MAX_AMOUNT)
        if value is not None:
            total, override = value, True
    encrypted = rules.flavor_image_bool(ri, "ephemeral_encryption")
    # NOTE: nova compares the two formats only when encryption is asked.
    encryption_format = rules.flavor_image_same(
        ri, "ephemeral_encryption_format", EPHEMERAL_ENCRYPTION_FORMATS,
        compare=rules.either_true(ri, "ephemeral_encryption"))
    return DiskRequest(disk_gb=total, root_gb=flavor.root_gb,
                       ephemeral_gb=flavor.ephemeral_gb, swap_mb=flavor.swap,
                       override=override, ephemeral_encryption=bool(encrypted),
                       ephemeral_encryption_format=(encryption_format if encrypted
                                                    else None))


def request_groups(req: DiskRequest) -> list[RequestGroup]:
    groups = []
    if req.ephemeral_encryption:
        groups.append(RequestGroup(
            requester_id="", owner=PLUGIN, kind=KIND_ROOT,
            required_traits=ephemeral_encryption_traits(req.ephemeral_encryption_format)))
    if not req.disk_gb:
        return groups
    if req.shared_aggregate:
        return [RequestGroup(
            requester_id=SHARED_GROUP, resources=FrozenMap({orc.DISK_GB: req.disk_gb}),
            member_of=((req.shared_aggregate,),), owner=PLUGIN, kind=KIND_DISK)] + groups
    return [RequestGroup(requester_id="", resources=FrozenMap({orc.DISK_GB: req.disk_gb}),
                         owner=PLUGIN, kind=KIND_DISK)] + groups


def samples() -> list[RequestInput]:
    """Representative requests (the plugin's ``sample_requests``): a root
    disk, root and ephemeral disks with swap, ``resources:DISK_GB``,
    encrypted ephemeral disks (LUKS)."""
    flavors: list[dict[str, Any]] = [
        {"root_gb": 20},
        {"root_gb": 200, "ephemeral_gb": 100, "swap": 2048},
        {"root_gb": 10, "extra_specs": {OVERRIDE_KEY: "400"}},
        {"root_gb": 20, "ephemeral_gb": 20,
         "extra_specs": {"hw:ephemeral_encryption": "true",
                         "hw:ephemeral_encryption_format": "luks"}},
    ]
    return [RequestInput.from_dicts({"name": "disk.sample%d" % index, "vcpus": 2,
                                     "memory_mb": 2048, **flavor})
            for index, flavor in enumerate(flavors)]
