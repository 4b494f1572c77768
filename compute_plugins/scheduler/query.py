"""The Placement query of a RequestSpec (``GET /allocation_candidates``, 1.39).

Derived from the request groups the plugins and the framework produced, by
one function (:func:`derive`), so no query is assembled by hand twice.

Rules:

- **Groups** with the same suffix are merged (same provider); all unsuffixed
  groups form the unsuffixed group. ``root`` groups become ``root_required``
  (traits and ``!traits``); ``!COMPUTE_STATUS_DISABLED`` is always there.
- **Unsuffixed traits are root traits.** ``trait:X`` / image
  ``traits_required`` describe the host (nova puts CPU and status traits on
  the compute node), and the unsuffixed group may be left without resources
  (a NUMA guest without disk, the split alternatives below), which
  Placement >= 1.36 refuses. So they are always sent as ``root_required``:
  a trait only a child provider (a NUMA node, a PF) has does not match.
- **Unsuffixed aggregates** stay in the unsuffixed group while it has
  resources (Placement checks "the provider or its root is a member").
  Otherwise they go to a resourceless group ``_HOST`` with
  ``!HW_NUMA_ROOT``, in ``same_subtree`` with a host-tree group: ``_HOST``
  is then the root (see :func:`_place_unsuffixed`).
- **Guest NUMA nodes**: one numbered group ``_NUMA<N>`` per guest node
  (PCPU/VCPU, MEMORY_MB or huge pages, trait HW_NUMA_ROOT). They must be on
  different host nodes, but ``group_policy=isolate`` would keep *every*
  numbered group apart (two ports could not share a PF). So the query uses
  the user's ``group_policy`` when set (honoured as given), else ``none``
  when Placement needs one, and each alternative lists the guest nodes in
  ``distinct``: :func:`compute_plugins.scheduler.candidates.accept` drops
  the allocation requests that put two of them on one provider.
- **Page sizes**: a group with *choices* (``hw:mem_page_size=large|any``)
  yields one alternative per choice, largest page size first (nova's order).
- **Devices** (VGPU, SR-IOV VF with bandwidth and physnet, PCI alias) of a
  guest with a NUMA topology, by NUMA affinity policy:

  * ``required``: ``same_subtree=_NUMA<N>,<device group>``; one alternative
    per guest node the device may sit under (all combinations, capped);
  * ``legacy`` (nova's default for ports and aliases): as ``required``,
    then (last) alternatives where the device has no ``same_subtree``
    (``numa_free``): nova's legacy lets a device without NUMA affinity (a
    provider under the root) serve a NUMA guest; ``accept`` drops answers
    whose device sits under a NUMA node provider;
  * ``preferred``: no constraint in the query; the weigher/fit prefers the
    guest's nodes;
  * ``socket``: root trait ``COMPUTE_SOCKET_PCI_NUMA_AFFINITY`` (as nova);
    the same-socket check is the fit's job.

  A guest without NUMA topology has no affinity constraint (as in nova).
- **Guests without NUMA topology** (*floating*): the CPUs and memory are
  first asked in the unsuffixed group (alternative 1). Placement takes each
  resource class of the unsuffixed group from one provider, but different
  classes may come from different providers of the tree: the VCPUs of one
  host NUMA node and the memory of another. Then (alternatives 2..``split``)
  they are split evenly over ``k`` numbered groups ``_SPLIT<j>`` (kept on
  different providers like guest nodes), for hosts where no single node has
  room for all the vCPUs or all the memory. An uneven split (3 + 1 vCPUs) is
  not tried: such a host is missed.
- **Symmetry**: guest NUMA nodes asking the same thing are interchangeable,
  so of the alternatives that differ only by a permutation of such nodes
  (page size of node 0 vs node 1, which node a device sits under) only the
  first is run: Placement would return the same candidates with the guest
  nodes renamed.
- **Bounds**: at most ``MAX_ALTERNATIVES`` alternatives; when more exist the
  query carries a warning (``PlacementQuery.warnings``, logged, printed by
  ``validate``): a host that fits only a later one is missed.
- ``member_of`` of a numbered group is kept (``[disk]
  shared_storage_aggregate`` puts DISK_GB in ``_DISK`` with ``member_of`` the
  aggregate).

The scheduler runs the alternatives in order and takes the union of their
candidates (deduplicated); stopping at the first non-empty alternative is a
valid packing policy too.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Optional

import os_traits

from compute_plugins.request.groups import (
    KIND_DEVICE,
    KIND_DISK,
    KIND_FLOATING,
    KIND_NUMA_CELL,
    KIND_ROOT,
    RequestGroup,
)
from compute_plugins.request.types import FrozenMap

if TYPE_CHECKING:
    from compute_plugins.request_spec import RequestSpec

LOG = logging.getLogger(__name__)

MICROVERSION = "1.39"
#: Suffix prefix of the parts of a split floating guest.
SPLIT_PREFIX = "_SPLIT"
#: Resourceless group standing for the compute node (see _place_unsuffixed).
HOST_GROUP = "_HOST"
DISABLED_TRAIT = "COMPUTE_STATUS_DISABLED"
#: At most this many alternative queries per request.
MAX_ALTERNATIVES = 32
#: At most this many combinations are generated before symmetric ones are
#: dropped (bounds the work for many guest nodes with many choices).
MAX_COMBINATIONS = 4096
AFFINE_POLICIES = ("required", "legacy")


@dataclasses.dataclass(frozen=True)
class AllocationCandidatesQuery:
    """One ``GET /allocation_candidates`` request.

    :param groups: the merged groups; ``requester_id`` is the suffix.
    :param description: why this alternative exists, for humans.
    :param distinct: suffixes that must be served by pairwise different
        providers (guest NUMA nodes); not sent to Placement, checked on its
        answer by :func:`compute_plugins.scheduler.candidates.accept`.
    :param numa_free: device suffixes asked without ``same_subtree``
        (``legacy`` affinity): the device must sit under no NUMA node;
        checked by ``accept`` too.
    """

    groups: tuple[RequestGroup, ...]
    group_policy: Optional[str] = None
    same_subtree: tuple[tuple[str, ...], ...] = ()
    root_required: frozenset[str] = frozenset()
    root_forbidden: frozenset[str] = frozenset()
    limit: Optional[int] = None
    description: str = ""
    distinct: tuple[str, ...] = ()
    numa_free: tuple[str, ...] = ()

    def group(self, suffix: str) -> Optional[RequestGroup]:
        for group in self.groups:
            if group.requester_id == suffix:
                return group
        return None

    def to_params(self) -> list[tuple[str, str]]:
        """``(name, value)`` pairs, sorted (nova's ``to_querystring`` order)."""
        params: list[tuple[str, str]] = []
        if self.limit is not None:
            params.append(("limit", str(self.limit)))
        if self.group_policy is not None:
            params.append(("group_policy", self.group_policy))
        root = sorted(self.root_required) + ["!" + t for t in sorted(self.root_forbidden)]
        if root:
            params.append(("root_required", ",".join(root)))
        for suffixes in self.same_subtree:
            params.append(("same_subtree", ",".join(sorted(suffixes))))
        for group in self.groups:
            suffix = group.requester_id
            if group.resources:
                params.append(("resources" + suffix, ",".join(
                    sorted("%s:%d" % (rc, n) for rc, n in group.resources.items()))))
            required = sorted(group.required_traits) + [
                "!" + t for t in sorted(group.forbidden_traits)]
            if required:
                params.append(("required" + suffix, ",".join(required)))
            for aggs in group.member_of:
                params.append(("member_of" + suffix, "in:" + ",".join(sorted(aggs))))
            if group.forbidden_aggregates:
                params.append(("member_of" + suffix, "!in:" + ",".join(
                    sorted(group.forbidden_aggregates))))
        return sorted(params)

    def to_querystring(self) -> str:
        return urllib.parse.urlencode(self.to_params())

    def readable(self) -> list[str]:
        """The parameters decoded, ``name=value`` one per item (for people)."""
        return ["%s=%s" % pair for pair in self.to_params()]

    def to_dict(self) -> dict[str, Any]:
        params: dict[str, list[str]] = {}
        for name, value in self.to_params():
            params.setdefault(name, []).append(value)
        return {"description": self.description,
                "querystring": self.to_querystring(), "params": params,
                "distinct": list(self.distinct), "numa_free": list(self.numa_free)}


@dataclasses.dataclass(frozen=True)
class PlacementQuery:
    """The alternatives to run, in order (see the module docstring)."""

    alternatives: tuple[AllocationCandidatesQuery, ...]
    microversion: str = MICROVERSION
    #: Why some alternatives were not generated (cut at MAX_ALTERNATIVES).
    warnings: tuple[str, ...] = ()

    def querystrings(self) -> list[str]:
        return [alt.to_querystring() for alt in self.alternatives]

    def to_dict(self) -> dict[str, Any]:
        return {"microversion": self.microversion,
                "alternatives": [alt.to_dict() for alt in self.alternatives],
                "warnings": list(self.warnings)}

    def __str__(self) -> str:
        lines = ["warning: %s" % w for w in self.warnings]
        for i, alt in enumerate(self.alternatives, 1):
            lines.append("alternative %d: %s" % (i, alt.description))
            lines.append("  GET /allocation_candidates")
            lines.extend("    %s" % param for param in alt.readable())
            if alt.distinct:
                lines.append("    (kept on different providers: %s)"
                             % ", ".join(alt.distinct))
            if alt.numa_free:
                lines.append("    (under no NUMA node: %s)" % ", ".join(alt.numa_free))
        return "\n".join(lines)


def _split(amount: int, parts: int) -> list[int]:
    return [amount // parts + (1 if j < amount % parts else 0) for j in range(parts)]


def _floating_variants(group: RequestGroup) -> list[tuple[list[RequestGroup], str]]:
    variants = [([dataclasses.replace(group, kind=KIND_FLOATING, split=1)],
                 "CPUs and memory from any NUMA node(s), each class from one")]
    for k in range(2, group.split + 1):
        shares = {rc: _split(n, k) for rc, n in group.resources.items()}
        parts = []
        for j in range(k):
            resources = {rc: s[j] for rc, s in shares.items() if s[j]}
            if not resources:
                break
            parts.append(dataclasses.replace(
                group, requester_id="%s%d" % (SPLIT_PREFIX, j), resources=FrozenMap(resources),
                split=1))
        if len(parts) == k:
            variants.append((parts, "CPUs and memory split evenly over %d "
                             "NUMA nodes" % k))
    return variants


def _choice_variants(group: RequestGroup) -> list[tuple[list[RequestGroup], str]]:
    if not group.choices:
        return [([group], "")]
    variants = []
    for choice in group.choices:
        resources = dict(group.resources)
        resources.update(choice)
        variants.append(([dataclasses.replace(
            group, resources=FrozenMap(resources), choices=())],
            "%s: %s" % (group.requester_id, ",".join(sorted(choice)))))
    return variants


def _merge(groups: Iterable[RequestGroup]) -> tuple[RequestGroup, ...]:
    merged: dict[str, RequestGroup] = {}
    for group in groups:
        current = merged.get(group.requester_id)
        merged[group.requester_id] = group if current is None else current.merged_with(group)
    return tuple(sorted((g for g in merged.values() if not g.is_empty()),
                        key=lambda g: g.requester_id))


def _interchangeable_cells(groups: Sequence[RequestGroup]) -> dict[str, int]:
    """Guest-node suffix -> class id; nodes of one class ask the same thing."""
    classes: dict[tuple[Any, ...], int] = {}
    result = {}
    for group in groups:
        if group.kind != KIND_NUMA_CELL or not group.requester_id:
            continue
        signature = (tuple(sorted(group.resources.items())),
                     tuple(sorted(group.required_traits)),
                     tuple(sorted(group.forbidden_traits)),
                     tuple(sorted(tuple(sorted(a)) for a in group.member_of)),
                     tuple(tuple(sorted(c.items())) for c in group.choices))
        result[group.requester_id] = classes.setdefault(signature, len(classes))
    return result


def _symmetry_key(alt: AllocationCandidatesQuery, cell_class: dict[str, int]) -> Any:
    """Equal for two alternatives that differ by a permutation of like nodes.

    Such an alternative is a choice, per guest node, of its resources and of
    the devices under it: the multiset of those per class says it all.
    """
    attached: dict[str, list[str]] = {}
    for cell, dev in alt.same_subtree:
        attached.setdefault(cell, []).append(dev)
    per_class: dict[int, list[Any]] = {}
    others = []
    for group in alt.groups:
        resources = tuple(sorted(group.resources.items()))
        if group.requester_id in cell_class:
            per_class.setdefault(cell_class[group.requester_id], []).append(
                (resources, tuple(sorted(attached.get(group.requester_id, ())))))
        else:
            others.append((group.requester_id, resources))
    return (tuple(sorted((c, tuple(sorted(v))) for c, v in per_class.items())),
            tuple(others), alt.group_policy, tuple(sorted(alt.numa_free)))


def derive(spec: RequestSpec, limit: Optional[int] = None) -> PlacementQuery:
    """The Placement query of ``spec`` (see the module docstring)."""
    return derive_from_groups(spec.groups, spec.generic.group_policy, limit)


def root_traits(groups: Sequence[RequestGroup]) -> tuple[frozenset[str], frozenset[str]]:
    """The root's required and forbidden traits of ``groups`` (those of
    ``root`` groups and the unsuffixed group's; ``COMPUTE_STATUS_DISABLED``
    always forbidden)."""
    return _root_traits(groups)


def _root_traits(groups: Sequence[RequestGroup]) -> tuple[frozenset[str], frozenset[str]]:
    """``root_required`` and root-forbidden traits: those of ``root`` groups
    and the unsuffixed group's (see the module docstring)."""
    required: set[str] = set()
    forbidden: set[str] = {DISABLED_TRAIT}
    for group in groups:
        if group.kind == KIND_ROOT or not group.requester_id:
            required |= group.required_traits
            forbidden |= group.forbidden_traits
    return frozenset(required), frozenset(forbidden)


def _without_traits(group: RequestGroup) -> RequestGroup:
    if group.requester_id or not (group.required_traits or group.forbidden_traits):
        return group
    return dataclasses.replace(group, required_traits=frozenset(),
                               forbidden_traits=frozenset())


def _anchor(groups: Sequence[RequestGroup]) -> Optional[RequestGroup]:
    """A numbered group with resources from the host's own tree: a guest
    NUMA node, else a part of a split guest, else a device."""
    ranked = sorted((g for g in groups if g.requester_id and g.resources
                     and g.kind != KIND_DISK),
                    key=lambda g: (g.kind != KIND_NUMA_CELL,
                                   not g.requester_id.startswith(SPLIT_PREFIX),
                                   g.requester_id))
    return ranked[0] if ranked else None


def _place_unsuffixed(groups: tuple[RequestGroup, ...]
                      ) -> tuple[tuple[RequestGroup, ...], tuple[tuple[str, str], ...]]:
    """Groups and extra ``same_subtree`` pairs with the unsuffixed group's
    aggregates asked in a way Placement (>= 1.36) accepts.

    Placement refuses a group without resources outside ``same_subtree``,
    the unsuffixed one included; that happens when the unsuffixed group has
    only ``member_of`` left (a NUMA guest without disk, the split
    alternatives of a floating guest; its traits are ``root_required``).
    Nova's aggregates are on the compute node (the root), and a numbered
    group's ``member_of`` is checked on its own provider only, so the
    aggregates go to a resourceless group ``_HOST`` that must not be a NUMA
    node (``!HW_NUMA_ROOT``) and is in ``same_subtree`` with a host-tree
    group (:func:`_anchor`): ``_HOST`` is then that group's provider or an
    ancestor of it that is no NUMA node, i.e. the root.
    """
    plain = next((g for g in groups if not g.requester_id), None)
    anchor = _anchor(groups)
    if plain is None or plain.resources or anchor is None:
        return groups, ()
    host = dataclasses.replace(plain, requester_id=HOST_GROUP, kind=KIND_ROOT,
                               forbidden_traits=frozenset({os_traits.HW_NUMA_ROOT}))
    rest = tuple(g for g in groups if g.requester_id)
    return tuple(sorted(rest + (host,), key=lambda g: g.requester_id)), (
        (anchor.requester_id, HOST_GROUP),)


def _device_choices(cells: list[str], device: RequestGroup) -> list[Optional[str]]:
    """Guest nodes ``device`` may sit under; None: under no NUMA node (nova's
    ``legacy`` accepts a device the host reports without NUMA affinity)."""
    choices: list[Optional[str]] = list(cells)
    if device.affinity == "legacy":
        choices.append(None)
    return choices


def _affinity_combos(cells: list[str], affine: list[RequestGroup]
                     ) -> list[tuple[tuple[str, Optional[str]], ...]]:
    """Every placement of the affine devices under guest nodes, those with
    fewer unattached (legacy) devices first."""
    combos = [tuple(zip((d.requester_id for d in affine), choice, strict=True))
              for choice in itertools.islice(itertools.product(
                  *(_device_choices(cells, d) for d in affine)), MAX_COMBINATIONS)]
    return sorted(combos, key=lambda c: sum(1 for _, cell in c if cell is None))


def _policy(user_policy: Optional[str], numbered: Sequence[RequestGroup]) -> Optional[str]:
    """The user's ``group_policy`` if set; else ``none`` when Placement
    needs one. Guest NUMA nodes are kept apart by :mod:`candidates` instead
    of ``isolate``, which would keep every numbered group apart (two ports
    on one PF, a device and its own NUMA node's group...)."""
    if user_policy is not None:
        return user_policy
    return "none" if len(numbered) > 1 else None


def _distinct(groups: Sequence[RequestGroup]) -> tuple[str, ...]:
    """Suffixes that must be served by different providers: guest NUMA
    nodes and the parts of a split floating guest."""
    suffixes = tuple(g.requester_id for g in groups if g.requester_id and (
        g.kind == KIND_NUMA_CELL or g.requester_id.startswith(SPLIT_PREFIX)))
    return suffixes if len(suffixes) > 1 else ()


def derive_from_groups(groups: Sequence[RequestGroup], group_policy: Optional[str] = None,
                       limit: Optional[int] = None) -> PlacementQuery:
    root_required, root_forbidden = _root_traits(groups)
    root_required -= root_forbidden  # a conflict is refused at validation
    plain: list[RequestGroup] = []
    axes: list[list[tuple[list[RequestGroup], str]]] = []
    cell_suffixes = [g.requester_id for g in sorted(
        (g for g in groups if g.kind == KIND_NUMA_CELL and g.numa_node is not None),
        key=lambda g: g.numa_node or 0)]
    affine: list[RequestGroup] = []
    for group in groups:
        if group.kind == KIND_ROOT:
            continue
        group = _without_traits(group)
        if group.kind == KIND_FLOATING and group.split > 1:
            axes.append(_floating_variants(group))
        elif group.choices:
            axes.append(_choice_variants(group))
        else:
            plain.append(group)
            if (group.kind == KIND_DEVICE and group.affinity in AFFINE_POLICIES
                    and cell_suffixes and group.requester_id):
                affine.append(group)
    combos = _affinity_combos(cell_suffixes, affine) if affine else [()]
    alternatives: list[AllocationCandidatesQuery] = []
    warnings: list[str] = []
    seen: set[Any] = set()
    cell_class = _interchangeable_cells(groups)
    for picked in itertools.islice(itertools.product(*axes), MAX_COMBINATIONS):
        picked_groups = [g for variant, _ in picked for g in variant]
        why = [d for _, d in picked if d]
        all_groups, host_subtree = _place_unsuffixed(_merge(plain + picked_groups))
        numbered = [g for g in all_groups if g.requester_id]
        for combo in combos:
            description = "; ".join(why + [
                "%s under %s" % (dev, cell) if cell else
                "%s under no NUMA node" % dev for dev, cell in combo])
            alternative = AllocationCandidatesQuery(
                groups=all_groups, group_policy=_policy(group_policy, numbered),
                same_subtree=host_subtree + tuple(
                    (cell, dev) for dev, cell in combo if cell),
                root_required=root_required, root_forbidden=root_forbidden,
                limit=limit, description=description or "the request as is",
                distinct=_distinct(all_groups),
                numa_free=tuple(dev for dev, cell in combo if cell is None))
            key = _symmetry_key(alternative, cell_class)
            if key in seen:
                continue
            if len(alternatives) >= MAX_ALTERNATIVES:
                warnings.append(_cut_warning())
                break
            seen.add(key)
            alternatives.append(alternative)
        if warnings:
            break
    return PlacementQuery(alternatives=tuple(alternatives), warnings=tuple(warnings))


def _cut_warning() -> str:
    message = ("more than %d alternative queries: only the first %d are run, "
               "a host that fits only a later one is missed" % (
                   MAX_ALTERNATIVES, MAX_ALTERNATIVES))
    LOG.warning(message)
    return message
