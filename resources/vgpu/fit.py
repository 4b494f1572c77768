"""The vGPU plugin's decision: which pGPU and which mdevs serve each group.

Per VGPU group, in the request's order:

- **the pGPU**: the one Placement allocated the group from (``placement``
  maps the group's suffix to its provider); offline (``placement`` None)
  the best pGPU that can serve it: NUMA-affine first (see
  :mod:`compute_plugins.plugin.topology`), then by address (deterministic). Two
  groups may share a pGPU (nova's ``group_policy=none``), except two
  numbered groups under ``group_policy=isolate`` (as Placement keeps them
  apart); the second sees what the first took, and when the best choices
  leave a later group without a pGPU the next ones are tried (:func:`compute_plugins.plugin.choice.
  first_fit`): whenever the groups fit the host, ``fit`` finds where;
- **the checks** (:func:`group_problem`): the pGPU offers the group's
  resource class (``VGPU`` or its ``[mdev_<type>] mdev_class``), the
  group's required / forbidden ``CUSTOM_MDEV_TYPE_*`` traits, under
  ``group_policy=isolate`` no other numbered group on it, enough free
  instances of its type, and the NUMA affinity policy against the host cells of the guest's NUMA
  nodes (the topology in ``earlier``: the ``needs = (TOPOLOGY,)`` of
  :class:`~resources.vgpu.VGPUPlugin`);
- **the mdevs**: existing free mdevs of the type first (sorted), then new
  ones (:func:`resources.vgpu.state.new_mdev_uuid`).

``fit`` builds the assignment, then returns :func:`verify` of it: the checks
a claim runs are, by construction, the checks the scheduler ran.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Optional, Union

from compute_plugins.plugin.choice import Budget, first_fit
from compute_plugins.plugin.contract import Earlier, Mappings, Rejection
from compute_plugins.plugin.devices import PCI_AFFINITY, isolation_problem, summarize
from compute_plugins.plugin.topology import Affinity, guest_host_cells
from resources.vgpu.provider import mdev_type_trait
from resources.vgpu.request import (
    MdevAssignment,
    VGPUAssignment,
    VGPUGroup,
    VGPURequest,
)
from resources.vgpu.state import PGPUState, VGPUState, new_mdev_uuid


def group_problem(gpu: PGPUState, group: VGPUGroup, affinity: Affinity,
                  taken: int = 0, holder: Optional[str] = None) -> Optional[str]:
    """Why ``gpu`` cannot serve ``group`` when ``taken`` of its instances
    already went to earlier groups of the request and, under
    ``group_policy=isolate``, numbered group ``holder`` has it (None: none
    has, or the policy does not apply); None when it can."""
    name = "pGPU %s" % gpu.address
    if group.numbered:
        problem = isolation_problem(name, group.requester_id, holder)
        if problem is not None:
            return problem
    if gpu.resource_class != group.resource_class:
        return ("%s offers its mdevs as %s, group %s asks for %s"
                % (name, gpu.resource_class, group.requester_id,
                   group.resource_class))
    trait = mdev_type_trait(gpu.mdev_type)
    if group.mdev_types and trait not in group.mdev_types:
        return ("%s offers mdev type %s, group %s requires %s"
                % (name, gpu.mdev_type, group.requester_id,
                   ", ".join(sorted(group.mdev_types))))
    if trait in group.forbidden_mdev_types:
        return ("%s offers mdev type %s, which group %s forbids"
                % (name, gpu.mdev_type, group.requester_id))
    free = gpu.free - taken
    if free < group.count:
        return ("%s has %d of %d mdevs of type %s free, group %s needs %d"
                % (name, max(free, 0), gpu.total, gpu.mdev_type,
                   group.requester_id, group.count))
    problem = affinity.problem(gpu.cell)
    if problem is not None:
        return "%s %s" % (name, problem)
    return None


def mdevs_problem(state: VGPUState, gpu: PGPUState, requester_id: str,
                  mdevs: Sequence[str], taken: Sequence[str]) -> Optional[str]:
    """Why ``gpu`` cannot give group ``requester_id`` the mdevs ``mdevs``
    (``taken``: mdevs of the pGPU earlier groups of the request got)."""
    new = [m for m in taken if not gpu.knows(m)]
    seen = set(taken)
    for mdev in mdevs:
        if mdev in seen:
            return "mdev %s is given twice (group %s)" % (mdev, requester_id)
        seen.add(mdev)
        owner = state.owner_of(mdev)
        if owner is not None and owner.address != gpu.address:
            return ("mdev %s of group %s is on pGPU %s, not on pGPU %s"
                    % (mdev, requester_id, owner.address, gpu.address))
        if mdev in gpu.used_mdevs or mdev in gpu.planned_mdevs:
            return ("mdev %s on pGPU %s (group %s) is used by another guest"
                    % (mdev, gpu.address, requester_id))
        if mdev not in gpu.free_mdevs:
            new.append(mdev)
    if len(new) > gpu.creatable:
        return ("pGPU %s can create %d more mdevs of type %s, group %s needs "
                "%d new" % (gpu.address, gpu.creatable, gpu.mdev_type,
                            requester_id, len(new)))
    return None


def _affinity(request: VGPURequest, host_cells: frozenset[int],
              state: VGPUState) -> Affinity:
    return Affinity(request.affinity, host_cells, state.sockets, key=PCI_AFFINITY)


def _pick_mdevs(gpu: PGPUState, count: int, taken: Sequence[str]) -> tuple[str, ...]:
    """``count`` mdevs of ``gpu``: free existing ones, then new uuids."""
    chosen = [m for m in gpu.free_mdevs if m not in taken][:count]
    index = 0
    while len(chosen) < count:
        candidate = new_mdev_uuid(gpu.provider_uuid, index)
        index += 1
        if not gpu.knows(candidate) and candidate not in taken:
            chosen.append(candidate)
    return tuple(chosen)


@dataclasses.dataclass(frozen=True)
class Usage:
    """What earlier groups of the request took, per pGPU in state order:
    instances, and the numbered group holding it under
    ``group_policy=isolate`` (None: none)."""

    counts: tuple[int, ...]
    holders: tuple[Optional[str], ...]

    @classmethod
    def empty(cls, state: VGPUState) -> Usage:
        return cls((0,) * len(state.pgpus), (None,) * len(state.pgpus))


def _holder(request: VGPURequest, group: VGPUGroup) -> Optional[str]:
    """The group a pGPU is held by once ``group`` takes it (isolate)."""
    return group.requester_id if request.isolate and group.numbered else None


def _candidates(state: VGPUState, group: VGPUGroup, affinity: Affinity,
                placement: Mappings, usage: Usage
                ) -> tuple[list[PGPUState], Optional[Rejection]]:
    """The pGPUs that can serve ``group`` after ``usage``, best first: the
    mapped one, or offline every one, NUMA-affine first, then by address;
    when none, why not."""
    taken = dict(zip((g.address for g in state.pgpus),
                     zip(usage.counts, usage.holders, strict=True), strict=True))
    if placement is not None:
        mapped = tuple(placement.get(group.requester_id, ()))
        if not mapped:
            return [], Rejection("the allocation maps no provider to VGPU "
                                 "group %s" % group.requester_id)
        for gpu in state.pgpus:
            if gpu.provider_uuid in mapped:
                problem = group_problem(gpu, group, affinity, *taken[gpu.address])
                if problem is not None:
                    return [], Rejection(problem, gpu.provider_uuid)
                return [gpu], None
        return [], Rejection("VGPU group %s is allocated from provider %s, which "
                             "is not a pGPU of this host"
                             % (group.requester_id, ", ".join(mapped)), mapped[0])
    fits: list[PGPUState] = []
    problems: list[str] = []
    for gpu in state.pgpus:
        problem = group_problem(gpu, group, affinity, *taken[gpu.address])
        if problem is None:
            fits.append(gpu)
        else:
            problems.append(problem)
    if fits:
        fits.sort(key=lambda g: (affinity.rank(g.cell), g.address))
        return fits, None
    if not problems:
        return [], Rejection("no pGPU of this host offers vGPUs; group %s needs %d"
                             % (group.requester_id, group.count))
    return [], Rejection("no pGPU can serve group %s: %s"
                         % (group.requester_id, summarize(problems)))


def fit(state: VGPUState, request: VGPURequest, placement: Mappings,
        earlier: Earlier, budget: Optional[Budget] = None
        ) -> Union[VGPUAssignment, Rejection]:
    """The pGPU and mdevs of every VGPU group of ``request`` (module doc);
    the search for pGPUs runs on ``budget`` (a default :class:`Budget`)."""
    budget = budget if budget is not None else Budget()
    affinity = _affinity(request, guest_host_cells(earlier), state)
    index = {gpu.address: i for i, gpu in enumerate(state.pgpus)}

    def options(group: VGPUGroup, usage: Usage) -> list[PGPUState]:
        return _candidates(state, group, affinity, placement, usage)[0]

    def take(group: VGPUGroup, gpu: PGPUState, usage: Usage) -> Usage:
        at = index[gpu.address]
        counts = list(usage.counts)
        counts[at] += group.count
        holders = list(usage.holders)
        holders[at] = holders[at] or _holder(request, group)
        return Usage(tuple(counts), tuple(holders))

    outcome, usage = first_fit(request.groups, Usage.empty(state),
                               options, take, budget)
    if outcome.exhausted:
        return Rejection(budget.stopped("pGPUs for %d VGPU groups"
                                        % len(request.groups)))
    if outcome.choices is None:
        group = request.groups[outcome.failed_at]
        rejection = _candidates(state, group, affinity, placement, usage)[1]
        # NOTE: the deepest failing group has no pGPU left (search module).
        return rejection or Rejection("no pGPU can serve group %s"
                                      % group.requester_id)
    taken: dict[str, list[str]] = {}
    devices = []
    for group, chosen in zip(request.groups, outcome.choices, strict=True):
        already = taken.setdefault(chosen.address, [])
        mdevs = _pick_mdevs(chosen, group.count, already)
        already.extend(mdevs)
        devices.append(MdevAssignment(
            requester_id=group.requester_id, provider_uuid=chosen.provider_uuid,
            parent_address=chosen.address, mdev_type=chosen.mdev_type,
            mdev_uuids=mdevs))
    assignment = VGPUAssignment(devices=tuple(devices),
                                host_cells=tuple(sorted(affinity.guest_cells)))
    return verify(state, request, assignment) or assignment


def verify(state: VGPUState, request: VGPURequest,
           assignment: VGPUAssignment) -> Optional[Rejection]:
    """None when ``assignment`` still holds on ``state`` (module doc)."""
    affinity = _affinity(request, frozenset(assignment.host_cells), state)
    devices = {d.requester_id: d for d in assignment.devices}
    wanted = [g.requester_id for g in request.groups]
    if sorted(devices) != sorted(wanted) or len(devices) != len(assignment.devices):
        return Rejection("the assignment serves VGPU groups %s, the request asks "
                         "%s" % (", ".join(d.requester_id for d in assignment.devices)
                                 or "none", ", ".join(wanted)))
    taken: dict[str, list[str]] = {}
    holders: dict[str, str] = {}
    for group in request.groups:
        device = devices[group.requester_id]
        gpu = state.pgpu(device.parent_address)
        if gpu is None:
            return Rejection("pGPU %s of group %s offers no vGPUs on this host"
                             % (device.parent_address, group.requester_id),
                             device.provider_uuid)
        if device.provider_uuid != gpu.provider_uuid:
            return Rejection("group %s names provider %s for pGPU %s, whose "
                             "provider is %s" % (group.requester_id,
                                                 device.provider_uuid, gpu.address,
                                                 gpu.provider_uuid), gpu.provider_uuid)
        if device.mdev_type != gpu.mdev_type:
            return Rejection("group %s expects mdev type %s on pGPU %s, which "
                             "offers %s" % (group.requester_id, device.mdev_type,
                                            gpu.address, gpu.mdev_type),
                             gpu.provider_uuid)
        if len(device.mdev_uuids) != group.count:
            return Rejection("group %s gets %d mdevs, it asks %d"
                             % (group.requester_id, len(device.mdev_uuids),
                                group.count), gpu.provider_uuid)
        already = taken.setdefault(gpu.address, [])
        problem = (group_problem(gpu, group, affinity, len(already),
                                 holders.get(gpu.address))
                   or mdevs_problem(state, gpu, group.requester_id,
                                    device.mdev_uuids, already))
        if problem is not None:
            return Rejection(problem, gpu.provider_uuid)
        already.extend(device.mdev_uuids)
        holder = _holder(request, group)
        if holder is not None:
            holders.setdefault(gpu.address, holder)
    return None
