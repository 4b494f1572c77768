"""The Placement query of a RequestSpec (``GET /allocation_candidates``, 1.39).

Derived from the request groups the plugins and the framework produced, by
one function (:func:`derive`), so no query is assembled by hand twice.

Rules:

- **Groups** with the same suffix are merged (same provider); all unsuffixed
  groups form the unsuffixed group. ``root`` groups become ``root_required``
  (traits and ``!traits``); ``!COMPUTE_STATUS_DISABLED`` is always there.
- **Guest NUMA nodes**: one numbered group ``_NUMA<N>`` per guest node
  (PCPU/VCPU, MEMORY_MB or huge pages, trait HW_NUMA_ROOT). With two or more
  the default ``group_policy`` is ``isolate``: each guest node on its own
  host node (``group_policy=none`` is then refused at validation).
  Otherwise the user's ``group_policy`` is used, else ``none`` when Placement
  needs one (two or more numbered groups).
- **Page sizes**: a group with *choices* (``hw:mem_page_size=large|any``)
  yields one alternative per choice, in order of preference.
- **Devices** (VGPU, SR-IOV VF with bandwidth and physnet, PCI alias) of a
  guest with a NUMA topology, by NUMA affinity policy:

  * ``required``: ``same_subtree=_NUMA<N>,<device group>``; one alternative
    per guest node the device may sit on (all combinations, capped);
  * ``legacy`` (nova's default for ports and aliases): as ``required``. The
    providers this project builds put a device under its NUMA node whenever
    the host knows it; a device the host reports without NUMA node sits under
    the root and only matches a guest without NUMA topology;
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
  they are split evenly over ``k`` isolated numbered groups ``_SPLIT<j>``,
  for hosts where no single node has room for all the vCPUs or all the
  memory. An uneven split (3 + 1 vCPUs) is not tried: such a host is missed.
- **Symmetry**: guest NUMA nodes asking the same thing are interchangeable,
  so of the alternatives that differ only by a permutation of such nodes
  (page size of node 0 vs node 1, which node a device sits under) only the
  first is run: Placement would return the same candidates with the guest
  nodes renamed.
- ``member_of`` of a group is kept (``[disk] shared_storage_aggregate`` puts
  DISK_GB in ``_DISK`` with ``member_of`` the aggregate).

The scheduler runs the alternatives in order and takes the union of their
candidates (deduplicated); stopping at the first non-empty alternative is a
valid packing policy too.
"""

from __future__ import annotations

import dataclasses
import itertools
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Optional

from compute_plugins.request.groups import (
    KIND_DEVICE,
    KIND_FLOATING,
    KIND_NUMA_CELL,
    KIND_ROOT,
    RequestGroup,
)
from compute_plugins.request.types import FrozenMap

if TYPE_CHECKING:
    from compute_plugins.request_spec import RequestSpec

MICROVERSION = "1.39"
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
    """

    groups: tuple[RequestGroup, ...]
    group_policy: Optional[str] = None
    same_subtree: tuple[tuple[str, ...], ...] = ()
    root_required: frozenset[str] = frozenset()
    root_forbidden: frozenset[str] = frozenset()
    limit: Optional[int] = None
    description: str = ""

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

    def to_dict(self) -> dict[str, Any]:
        params: dict[str, list[str]] = {}
        for name, value in self.to_params():
            params.setdefault(name, []).append(value)
        return {"description": self.description,
                "querystring": self.to_querystring(), "params": params}


@dataclasses.dataclass(frozen=True)
class PlacementQuery:
    """The alternatives to run, in order (see the module docstring)."""

    alternatives: tuple[AllocationCandidatesQuery, ...]
    microversion: str = MICROVERSION

    def querystrings(self) -> list[str]:
        return [alt.to_querystring() for alt in self.alternatives]

    def to_dict(self) -> dict[str, Any]:
        return {"microversion": self.microversion,
                "alternatives": [alt.to_dict() for alt in self.alternatives]}

    def __str__(self) -> str:
        lines = []
        for i, alt in enumerate(self.alternatives, 1):
            lines.append("alternative %d: %s" % (i, alt.description))
            lines.append("  GET /allocation_candidates?%s" % alt.to_querystring())
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
                group, requester_id="_SPLIT%d" % j, resources=FrozenMap(resources),
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
            tuple(others), alt.group_policy)


def derive(spec: RequestSpec, limit: Optional[int] = None) -> PlacementQuery:
    """The Placement query of ``spec`` (see the module docstring)."""
    return derive_from_groups(spec.groups, spec.generic.group_policy, limit)


def derive_from_groups(groups: Sequence[RequestGroup], group_policy: Optional[str] = None,
                       limit: Optional[int] = None) -> PlacementQuery:
    root_required: set[str] = set()
    root_forbidden: set[str] = {DISABLED_TRAIT}
    plain: list[RequestGroup] = []
    axes: list[list[tuple[list[RequestGroup], str]]] = []
    cells = sorted({g.numa_node for g in groups
                    if g.kind == KIND_NUMA_CELL and g.numa_node is not None})
    cell_suffix = {g.numa_node: g.requester_id for g in groups
                   if g.kind == KIND_NUMA_CELL}
    affine: list[RequestGroup] = []
    for group in groups:
        if group.kind == KIND_ROOT:
            root_required |= group.required_traits
            root_forbidden |= group.forbidden_traits
        elif group.kind == KIND_FLOATING and group.split > 1:
            axes.append(_floating_variants(group))
        elif group.choices:
            axes.append(_choice_variants(group))
        else:
            plain.append(group)
            if (group.kind == KIND_DEVICE and group.affinity in AFFINE_POLICIES
                    and cells and group.requester_id):
                affine.append(group)
    root_required -= root_forbidden
    # Affinity axis: which guest node each affine device sits under.
    combos: list[tuple[tuple[str, ...], ...]] = [()]
    if affine:
        combos = []
        for choice in itertools.islice(
                itertools.product(cells, repeat=len(affine)), MAX_COMBINATIONS):
            combos.append(tuple(
                (cell_suffix[cell], dev.requester_id)
                for cell, dev in zip(choice, affine, strict=True)))
    alternatives = []
    seen: set[Any] = set()
    cell_class = _interchangeable_cells(groups)
    combinations = itertools.islice(itertools.product(*axes), MAX_COMBINATIONS)
    for picked in combinations:
        picked_groups = [g for variant, _ in picked for g in variant]
        why = [d for _, d in picked if d]
        all_groups = _merge(plain + picked_groups)
        numbered = [g for g in all_groups if g.requester_id]
        n_cells = sum(1 for g in numbered if g.kind == KIND_NUMA_CELL
                      or g.requester_id.startswith("_SPLIT"))
        policy = group_policy
        if policy is None and n_cells > 1:
            policy = "isolate"
        elif policy is None and len(numbered) > 1:
            policy = "none"
        for combo in combos:
            description = "; ".join(why + ["%s under %s" % (dev, cell)
                                           for cell, dev in combo])
            alternative = AllocationCandidatesQuery(
                groups=all_groups, group_policy=policy,
                same_subtree=tuple(tuple(pair) for pair in combo),
                root_required=frozenset(root_required),
                root_forbidden=frozenset(root_forbidden),
                limit=limit, description=description or "the request as is")
            key = _symmetry_key(alternative, cell_class)
            if key in seen:
                continue
            seen.add(key)
            alternatives.append(alternative)
            if len(alternatives) >= MAX_ALTERNATIVES:
                break
        if len(alternatives) >= MAX_ALTERNATIVES:
            break
    return PlacementQuery(alternatives=tuple(alternatives))
