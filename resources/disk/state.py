"""The disk plugin's host state and decision: which provider serves DISK_GB.

- **Local disk** (no ``[disk] shared_storage_aggregate``): the compute root
  (``providers.root``, the uuid the tree has) with the host's ``DISK_GB``
  total, reserved and allocation ratio; ``used_gb`` sums the local
  assignments in force. A
  guest fits when Placement's rule holds: ``used + disk_gb <= (total -
  reserved) * ratio`` and ``disk_gb <= total`` (``max_unit``). Checked offline
  and with an allocation alike: the allocation must name the root in the
  unsuffixed group, where the request asks ``DISK_GB``.
- **Shared storage** (the host's ``[disk] shared_storage_aggregate``): the
  root reports no ``DISK_GB``; a sharing provider in the host's aggregate
  serves the unsuffixed group's ``DISK_GB``. Its capacity is not the host's
  to know (Placement checks it when the allocation is written): the
  assignment says ``shared`` and names no provider; the allocation records
  which sharing provider serves it. A request recorded by version 1.0 with
  ``shared_aggregate`` (group ``_DISK``) needs the host in that aggregate.

A request of 0 GB (boot from volume) has nothing to decide (``fit`` returns
None). ``fit`` builds the assignment and returns :func:`verify` of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Optional, Union

from compute_plugins.plugin.contract import Earlier, Mappings, Rejection
from compute_plugins.plugin.state import AssignmentConflict, PluginState
from compute_plugins.request.types import min_field
from compute_plugins.tree.contribution import Providers
from resources.disk.request import (
    PLUGIN,
    SHARED_GROUP,
    DiskAssignment,
    DiskRequest,
)
from resources.disk.view import DiskView

#: The request group of local DISK_GB (the unsuffixed one).
LOCAL_GROUP = ""


@dataclasses.dataclass(frozen=True)
class DiskState(PluginState):
    """The compute root's ``DISK_GB`` and what the guests in force take.

    :param total_gb: the root's ``DISK_GB`` total; None when the host
        reports none (shared storage, or no disk data).
    :param shared_aggregate: the shared-storage aggregate the host is in.
    """

    provider_uuid: str
    total_gb: Optional[int] = None
    reserved_gb: int = 0
    allocation_ratio: float = min_field(0, default=1.0)
    used_gb: int = 0
    shared_aggregate: Optional[str] = None
    #: The ephemeral encryption formats the host supports (its root traits).
    ephemeral_encryption_formats: frozenset[str] = frozenset()

    @property
    def capacity_gb(self) -> int:
        """Placement's capacity: ``(total - reserved) * ratio``."""
        if self.total_gb is None:
            return 0
        return int((self.total_gb - self.reserved_gb) * self.allocation_ratio)

    @property
    def free_gb(self) -> int:
        return self.capacity_gb - self.used_gb

    def consumed(self, assignment: DiskAssignment) -> DiskState:
        """This state once ``assignment`` is taken too (an earlier guest of
        the same request on this host, before it publishes again)."""
        if assignment.shared:
            return self
        return dataclasses.replace(self, used_gb=self.used_gb + assignment.disk_gb)


def build_state(view: DiskView, providers: Providers,
                assignments: Sequence[DiskAssignment]) -> DiskState:
    """The :class:`DiskState` of ``view`` under ``assignments``.

    :param providers: the plugin's providers (the compute root's uuid).

    :raises AssignmentConflict: a local assignment names another provider
        than this host's root, or the host reports no local ``DISK_GB``.
    """
    root = providers.root
    used = 0
    for assignment in assignments:
        if assignment.shared:
            continue
        if assignment.provider_uuid != root:
            raise AssignmentConflict(PLUGIN, "a guest's %d GB of local disk is on "
                                     "provider %s, this host's root is %s"
                                     % (assignment.disk_gb,
                                        assignment.provider_uuid, root))
        if view.total_gb is None:
            raise AssignmentConflict(PLUGIN, "a guest takes %d GB of local disk "
                                     "and this host reports no DISK_GB"
                                     % assignment.disk_gb)
        used += assignment.disk_gb
    # NOTE: guests above the capacity (the ratio or reserve lowered since)
    # are no conflict: they run; new guests do not fit until room is made.
    return DiskState(provider_uuid=root, total_gb=view.total_gb,
                     reserved_gb=view.reserved_gb,
                     allocation_ratio=view.allocation_ratio, used_gb=used,
                     shared_aggregate=view.shared_aggregate,
                     ephemeral_encryption_formats=view.ephemeral_encryption_formats)


def _encryption_problem(state: DiskState, request: DiskRequest) -> Optional[Rejection]:
    """Why the host cannot encrypt the guest's ephemeral disks, if it cannot
    (the root traits Placement checks, checked on the host state too)."""
    if not request.ephemeral_encryption:
        return None
    wanted = request.ephemeral_encryption_format
    if state.ephemeral_encryption_formats and (
            wanted is None or wanted in state.ephemeral_encryption_formats):
        return None
    return Rejection("the guest asks ephemeral encryption%s; this host supports %s"
                     % (" in %s" % wanted if wanted else "",
                        ", ".join(sorted(state.ephemeral_encryption_formats))
                        or "none ([disk] ephemeral_encryption_formats)"),
                     state.provider_uuid)


def _where(request: DiskRequest) -> str:
    return "the guest needs %d GB" % request.disk_gb


def fit(state: DiskState, request: DiskRequest, placement: Mappings,
        earlier: Earlier) -> Union[DiskAssignment, Rejection, None]:
    """The provider of the guest's ``DISK_GB`` (module doc)."""
    if not request.disk_gb:
        return _encryption_problem(state, request)
    if request.shared_aggregate:
        provider = ""
        if placement is not None:
            mapped = tuple(placement.get(SHARED_GROUP, ()))
            if not mapped:
                return Rejection("the allocation maps no provider to DISK_GB "
                                 "group %s" % SHARED_GROUP)
            provider = mapped[0]
        assignment = DiskAssignment(provider_uuid=provider, shared=True,
                                    disk_gb=request.disk_gb)
    elif state.shared_aggregate:
        if placement is not None and not any(
                rp != state.provider_uuid for rp in placement.get(LOCAL_GROUP, ())):
            return Rejection("this host's disk is on shared storage aggregate %s; "
                             "the allocation takes DISK_GB from no sharing provider"
                             % state.shared_aggregate, state.provider_uuid)
        assignment = DiskAssignment(shared=True, disk_gb=request.disk_gb)
    else:
        if placement is not None:
            mapped = tuple(placement.get(LOCAL_GROUP, ()))
            if state.provider_uuid not in mapped:
                return Rejection("DISK_GB is allocated from provider(s) %s, not "
                                 "from this host's root %s"
                                 % (", ".join(mapped) or "none",
                                    state.provider_uuid), state.provider_uuid)
        assignment = DiskAssignment(provider_uuid=state.provider_uuid,
                                    disk_gb=request.disk_gb)
    return verify(state, request, assignment) or assignment


def verify(state: DiskState, request: DiskRequest,
           assignment: DiskAssignment) -> Optional[Rejection]:
    """None when ``assignment`` still holds on ``state`` (module doc)."""
    encryption = _encryption_problem(state, request)
    if encryption is not None:
        return encryption
    if assignment.disk_gb != request.disk_gb:
        return Rejection("the assignment takes %d GB of disk, %s"
                         % (assignment.disk_gb, _where(request)))
    if request.shared_aggregate:
        if not assignment.shared:
            return Rejection("the assignment puts the disk on the root, the "
                             "request asks shared storage aggregate %s"
                             % request.shared_aggregate)
        if state.shared_aggregate != request.shared_aggregate:
            return Rejection("this host's disk is %s, the request asks shared "
                             "storage aggregate %s"
                             % ("on shared storage aggregate %s"
                                % state.shared_aggregate if state.shared_aggregate
                                else "local", request.shared_aggregate))
        return None
    if assignment.shared:
        if not state.shared_aggregate:
            return Rejection("the assignment puts the disk on shared storage; "
                             "this host's disk is local", state.provider_uuid)
        return None
    if assignment.provider_uuid != state.provider_uuid:
        return Rejection("the disk is assigned to provider %s, this host's root "
                         "is %s" % (assignment.provider_uuid, state.provider_uuid),
                         state.provider_uuid)
    if state.total_gb is None:
        return Rejection("this host reports no local DISK_GB%s; %s"
                         % (" (its disk is on shared storage aggregate %s)"
                            % state.shared_aggregate if state.shared_aggregate
                            else "", _where(request)), state.provider_uuid)
    if request.disk_gb > state.total_gb:
        return Rejection("host root %s has %d GB of DISK_GB in all, %s"
                         % (state.provider_uuid, state.total_gb, _where(request)),
                         state.provider_uuid)
    if state.free_gb < request.disk_gb:
        return Rejection("host root %s has %d GB of DISK_GB free (total %d, "
                         "reserved %d, ratio %g, used %d), %s"
                         % (state.provider_uuid, max(state.free_gb, 0),
                            state.total_gb, state.reserved_gb,
                            state.allocation_ratio, state.used_gb,
                            _where(request)), state.provider_uuid)
    return None
