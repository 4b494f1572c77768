"""``compute-plugins validate``'s preview: the ``GET /allocation_candidates``
queries (microversion 1.39) a scheduler built on allocation candidates
would send for a request.

The scheduler does not send them: allocation candidates enumerate every
combination of providers and explode on wide trees, so it asks Placement
which providers have room (:mod:`compute_plugins.scheduler.providers`) and
the plugins' ``fit`` decides the rest. This module is what ``validate``
prints (and what ``bench.schedule`` measures the scheduler against): one
function (:func:`derive`) from the request groups, with the checks on
Placement's answer the query cannot express (:func:`accept`). It knows no
plugin: guest nodes are the groups of kind ``guest_node``, whoever asks
for them, and their providers the host's topology nodes
(:data:`compute_plugins.plugin.names.TOPOLOGY_NODE_TRAIT`).

Rules:

- **Groups** with the same suffix are merged (same provider); all unsuffixed
  groups form the unsuffixed group. ``root`` groups become ``root_required``
  (traits and ``!traits``); ``!COMPUTE_STATUS_DISABLED`` is always there.
- **Unsuffixed traits are root traits.** ``trait:X`` / image
  ``traits_required`` describe the host (nova puts CPU and status traits on
  the compute node), and the unsuffixed group may be left without resources
  (a guest of guest nodes without disk, the split alternatives below),
  which Placement >= 1.36 refuses. So they are always sent as
  ``root_required``: a trait only a child provider (a topology node, a PF)
  has does not match.
- **Unsuffixed aggregates** stay in the unsuffixed group while it has
  resources (Placement checks "the provider or its root is a member").
  Otherwise they go to a resourceless group ``_HOST`` that is no topology
  node, in ``same_subtree`` with a host-tree group: ``_HOST`` is then the
  root (see :func:`_place_unsuffixed`).
- **Guest nodes**: one numbered group per node of the guest's topology
  (kind ``guest_node``, e.g. the numa plugin's ``_NUMA<N>``). They must be
  on different providers, but ``group_policy=isolate`` would keep *every*
  numbered group apart (two ports could not share a PF). So the query uses
  the user's ``group_policy`` when set (honoured as given), else ``none``
  when Placement needs one, and each alternative lists the guest nodes in
  ``distinct``: :func:`accept` drops the allocation requests that put two
  of them on one provider.
- **Choices** (e.g. page sizes, ``hw:mem_page_size=large|any``): a group
  with choices yields one alternative per choice, in the group's order.
- **Devices** (groups of kind ``device``) with an ``affinity`` to a guest
  that has guest nodes, by policy:

  * ``required``: ``same_subtree=<guest node>,<device group>``; one
    alternative per guest node the device may sit under (all combinations,
    capped);
  * ``legacy``: as ``required``, then (last) alternatives where the device
    has no ``same_subtree`` (``unattached``): nova's legacy lets a device
    the host reports without a cell (a provider under the root) serve a
    guest; :func:`accept` drops answers whose device sits under a topology
    node;
  * ``preferred``, ``socket``: no constraint in the query (the plugin asks
    any root trait it needs); the fit prefers, or checks, the guest's
    cells.

  A guest without guest nodes has no affinity constraint (as in nova).
- **Split groups** (``split`` > 1, e.g. the CPUs and memory of a guest
  without a topology): the group is first asked as it is (alternative 1;
  Placement takes each resource class of the unsuffixed group from one
  provider, but different classes may come from different providers of
  the tree). Then (alternatives 2..``split``) it is split evenly over ``k``
  numbered groups ``<SPLIT_PREFIX><j>`` (kept on different providers like
  guest nodes), for hosts where no single provider has room for a whole
  class. An uneven split (3 + 1 vCPUs) is not tried: such a host is missed.
- **Symmetry**: guest nodes asking the same thing are interchangeable, so of
  the alternatives that differ only by a permutation of such nodes (the
  choice of node 0 vs node 1, which node a device sits under) only the
  first is run: Placement would return the same candidates with the guest
  nodes renamed.
- **Bounds**: at most ``MAX_ALTERNATIVES`` alternatives; when more exist the
  query carries a warning (``PlacementQuery.warnings``, logged, printed by
  ``validate``): a host that fits only a later one is missed.
- ``member_of`` of a numbered group is kept (``[disk]
  shared_storage_aggregate`` puts DISK_GB in ``_DISK`` with ``member_of`` the
  aggregate).

A scheduler would run the alternatives in order and take the union of their
candidates that :func:`accept` keeps (deduplicated); stopping at the first
non-empty alternative is a valid packing policy too.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, Protocol

from compute_plugins.plugin.names import TOPOLOGY_NODE_TRAIT
from compute_plugins.request.generic import GenericRequest
from compute_plugins.request.groups import (
    KIND_DEVICE,
    KIND_DISK,
    KIND_GUEST_NODE,
    KIND_ROOT,
    SPLIT_PREFIX,
    RequestGroup,
)
from compute_plugins.request.types import FrozenMap
from compute_plugins.scheduler.providers import root_traits

LOG = logging.getLogger(__name__)

MICROVERSION = "1.39"
#: Resourceless group standing for the compute node (see _place_unsuffixed).
HOST_GROUP = "_HOST"
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
        providers (guest nodes, the parts of a split group); not sent to
        Placement, checked on its answer by :func:`accept`.
    :param unattached: device suffixes asked without ``same_subtree``
        (``legacy`` affinity): the device must sit under no topology node;
        checked by :func:`accept` too.
    """

    groups: tuple[RequestGroup, ...]
    group_policy: Optional[str] = None
    same_subtree: tuple[tuple[str, ...], ...] = ()
    root_required: frozenset[str] = frozenset()
    root_forbidden: frozenset[str] = frozenset()
    description: str = ""
    distinct: tuple[str, ...] = ()
    unattached: tuple[str, ...] = ()

    def to_params(self) -> list[tuple[str, str]]:
        """``(name, value)`` pairs, sorted (nova's ``to_querystring`` order)."""
        params: list[tuple[str, str]] = []
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
                "distinct": list(self.distinct), "unattached": list(self.unattached)}


@dataclasses.dataclass(frozen=True)
class PlacementQuery:
    """The alternatives to run, in order (see the module docstring)."""

    alternatives: tuple[AllocationCandidatesQuery, ...]
    microversion: str = MICROVERSION
    #: Why some alternatives were not generated (cut at MAX_ALTERNATIVES).
    warnings: tuple[str, ...] = ()

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
            if alt.unattached:
                lines.append("    (under no topology node: %s)" % ", ".join(alt.unattached))
        return "\n".join(lines)


def _split(amount: int, parts: int) -> list[int]:
    return [amount // parts + (1 if j < amount % parts else 0) for j in range(parts)]


def _split_variants(group: RequestGroup) -> list[tuple[list[RequestGroup], str]]:
    variants = [([dataclasses.replace(group, split=1)],
                 "%s from any provider(s), each class from one"
                 % _resources_text(group))]
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
            variants.append((parts, "%s split evenly over %d providers"
                             % (_resources_text(group), k)))
    return variants


def _resources_text(group: RequestGroup) -> str:
    return ", ".join(sorted(group.resources))


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


def _interchangeable_nodes(groups: Sequence[RequestGroup]) -> dict[str, int]:
    """Guest-node suffix -> class id; nodes of one class ask the same thing."""
    classes: dict[tuple[Any, ...], int] = {}
    result = {}
    for group in groups:
        if group.kind != KIND_GUEST_NODE or not group.requester_id:
            continue
        signature = (tuple(sorted(group.resources.items())),
                     tuple(sorted(group.required_traits)),
                     tuple(sorted(group.forbidden_traits)),
                     tuple(sorted(tuple(sorted(a)) for a in group.member_of)),
                     tuple(tuple(sorted(c.items())) for c in group.choices))
        result[group.requester_id] = classes.setdefault(signature, len(classes))
    return result


def _symmetry_key(alt: AllocationCandidatesQuery, node_class: dict[str, int]) -> Any:
    """Equal for two alternatives that differ by a permutation of like nodes.

    Such an alternative is a choice, per guest node, of its resources and of
    the devices under it: the multiset of those per class says it all.
    """
    attached: dict[str, list[str]] = {}
    for node, dev in alt.same_subtree:
        attached.setdefault(node, []).append(dev)
    per_class: dict[int, list[Any]] = {}
    others = []
    for group in alt.groups:
        resources = tuple(sorted(group.resources.items()))
        if group.requester_id in node_class:
            per_class.setdefault(node_class[group.requester_id], []).append(
                (resources, tuple(sorted(attached.get(group.requester_id, ())))))
        else:
            others.append((group.requester_id, resources))
    return (tuple(sorted((c, tuple(sorted(v))) for c, v in per_class.items())),
            tuple(others), alt.group_policy, tuple(sorted(alt.unattached)))


class _Spec(Protocol):
    """What the preview reads of a
    :class:`~compute_plugins.request.spec.RequestSpec`."""

    @property
    def groups(self) -> tuple[RequestGroup, ...]:
        ...

    @property
    def generic(self) -> GenericRequest:
        ...


def preview(spec: _Spec) -> PlacementQuery:
    """The allocation-candidates query of a RequestSpec (module doc)."""
    return derive(spec.groups, spec.generic.group_policy)


def _without_traits(group: RequestGroup) -> RequestGroup:
    if group.requester_id or not (group.required_traits or group.forbidden_traits):
        return group
    return dataclasses.replace(group, required_traits=frozenset(),
                               forbidden_traits=frozenset())


def _anchor(groups: Sequence[RequestGroup]) -> Optional[RequestGroup]:
    """A numbered group with resources from the host's own tree: a guest
    node, else a part of a split group, else a device."""
    ranked = sorted((g for g in groups if g.requester_id and g.resources
                     and g.kind != KIND_DISK),
                    key=lambda g: (g.kind != KIND_GUEST_NODE,
                                   not g.requester_id.startswith(SPLIT_PREFIX),
                                   g.requester_id))
    return ranked[0] if ranked else None


def _place_unsuffixed(groups: tuple[RequestGroup, ...]
                      ) -> tuple[tuple[RequestGroup, ...], tuple[tuple[str, str], ...]]:
    """Groups and extra ``same_subtree`` pairs with the unsuffixed group's
    aggregates asked in a way Placement (>= 1.36) accepts.

    Placement refuses a group without resources outside ``same_subtree``,
    the unsuffixed one included; that happens when the unsuffixed group has
    only ``member_of`` left (a guest of guest nodes without disk, the split
    alternatives; its traits are ``root_required``). Nova's aggregates are
    on the compute node (the root), and a numbered group's ``member_of`` is
    checked on its own provider only, so the aggregates go to a
    resourceless group ``_HOST`` that must not be a topology node
    (``!``:data:`~compute_plugins.plugin.names.TOPOLOGY_NODE_TRAIT`) and is in
    ``same_subtree`` with a host-tree group (:func:`_anchor`): ``_HOST`` is
    then that group's provider or an ancestor of it that is no topology
    node, i.e. the root.
    """
    plain = next((g for g in groups if not g.requester_id), None)
    anchor = _anchor(groups)
    if plain is None or plain.resources or anchor is None:
        return groups, ()
    host = dataclasses.replace(plain, requester_id=HOST_GROUP, kind=KIND_ROOT,
                               forbidden_traits=frozenset({TOPOLOGY_NODE_TRAIT}))
    rest = tuple(g for g in groups if g.requester_id)
    return tuple(sorted(rest + (host,), key=lambda g: g.requester_id)), (
        (anchor.requester_id, HOST_GROUP),)


def _device_choices(nodes: list[str], device: RequestGroup) -> list[Optional[str]]:
    """Guest nodes ``device`` may sit under; None: under no topology node
    (nova's ``legacy`` accepts a device the host reports without a cell)."""
    choices: list[Optional[str]] = list(nodes)
    if device.affinity == "legacy":
        choices.append(None)
    return choices


def _affinity_combos(nodes: list[str], affine: list[RequestGroup]
                     ) -> list[tuple[tuple[str, Optional[str]], ...]]:
    """Every placement of the affine devices under guest nodes, those with
    fewer unattached (legacy) devices first."""
    combos = [tuple(zip((d.requester_id for d in affine), choice, strict=True))
              for choice in itertools.islice(itertools.product(
                  *(_device_choices(nodes, d) for d in affine)), MAX_COMBINATIONS)]
    return sorted(combos, key=lambda c: sum(1 for _, node in c if node is None))


def _policy(user_policy: Optional[str], numbered: Sequence[RequestGroup]) -> Optional[str]:
    """The user's ``group_policy`` if set; else ``none`` when Placement
    needs one. Guest nodes are kept apart by :func:`accept` instead of
    ``isolate``, which would keep every numbered group apart (two ports on
    one PF, a device and its own guest node's group...)."""
    if user_policy is not None:
        return user_policy
    return "none" if len(numbered) > 1 else None


def _distinct(groups: Sequence[RequestGroup]) -> tuple[str, ...]:
    """Suffixes that must be served by different providers: guest nodes
    and the parts of a split group."""
    suffixes = tuple(g.requester_id for g in groups if g.requester_id and (
        g.kind == KIND_GUEST_NODE or g.requester_id.startswith(SPLIT_PREFIX)))
    return suffixes if len(suffixes) > 1 else ()


def derive(groups: Sequence[RequestGroup],
           group_policy: Optional[str] = None) -> PlacementQuery:
    """The allocation-candidates query of ``groups`` (module doc)."""
    root_required, root_forbidden = root_traits(groups)
    root_required -= root_forbidden  # a conflict is refused at validation
    plain: list[RequestGroup] = []
    axes: list[list[tuple[list[RequestGroup], str]]] = []
    node_suffixes = [g.requester_id for g in sorted(
        (g for g in groups if g.kind == KIND_GUEST_NODE and g.node is not None),
        key=lambda g: g.node or 0)]
    affine: list[RequestGroup] = []
    for group in groups:
        if group.kind == KIND_ROOT:
            continue
        group = _without_traits(group)
        if group.split > 1:
            axes.append(_split_variants(group))
        elif group.choices:
            axes.append(_choice_variants(group))
        else:
            plain.append(group)
            if (group.kind == KIND_DEVICE and group.affinity in AFFINE_POLICIES
                    and node_suffixes and group.requester_id):
                affine.append(group)
    combos = _affinity_combos(node_suffixes, affine) if affine else [()]
    alternatives: list[AllocationCandidatesQuery] = []
    warnings: list[str] = []
    seen: set[Any] = set()
    node_class = _interchangeable_nodes(groups)
    for picked in itertools.islice(itertools.product(*axes), MAX_COMBINATIONS):
        picked_groups = [g for variant, _ in picked for g in variant]
        why = [d for _, d in picked if d]
        all_groups, host_subtree = _place_unsuffixed(_merge(plain + picked_groups))
        numbered = [g for g in all_groups if g.requester_id]
        for combo in combos:
            description = "; ".join(why + [
                "%s under %s" % (dev, node) if node else
                "%s under no topology node" % dev for dev, node in combo])
            alternative = AllocationCandidatesQuery(
                groups=all_groups, group_policy=_policy(group_policy, numbered),
                same_subtree=host_subtree + tuple(
                    (node, dev) for dev, node in combo if node),
                root_required=root_required, root_forbidden=root_forbidden,
                description=description or "the request as is",
                distinct=_distinct(all_groups),
                unattached=tuple(dev for dev, node in combo if node is None))
            key = _symmetry_key(alternative, node_class)
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


# -- checks on Placement's answer -------------------------------------------------


def accept(alternative: AllocationCandidatesQuery, allocation_request: Mapping[str, Any],
           provider_summaries: Optional[Mapping[str, Any]] = None) -> bool:
    """True when ``allocation_request`` (one item of Placement's
    ``allocation_requests``) honours what ``alternative`` could not ask:
    its ``distinct`` groups on pairwise different providers, its
    ``unattached`` devices under no topology node provider (one with
    :data:`~compute_plugins.plugin.names.TOPOLOGY_NODE_TRAIT`).

    :param provider_summaries: Placement's ``provider_summaries`` of the same
        answer; without them the ``unattached`` check is skipped.
    """
    mappings = allocation_request.get("mappings") or {}
    return (_apart(alternative.distinct, mappings)
            and _unattached(alternative.unattached, mappings, provider_summaries))


def accepted(alternative: AllocationCandidatesQuery,
             answer: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The allocation requests of a ``GET /allocation_candidates`` answer
    that :func:`accept` keeps."""
    summaries = answer.get("provider_summaries")
    return [req for req in answer.get("allocation_requests", ())
            if accept(alternative, req, summaries)]


def _apart(suffixes: tuple[str, ...], mappings: Mapping[str, Any]) -> bool:
    """No provider serves two of ``suffixes``."""
    used: set[str] = set()
    for suffix in suffixes:
        providers = set(mappings.get(suffix, ()))
        if providers & used:
            return False
        used |= providers
    return True


def _unattached(suffixes: tuple[str, ...], mappings: Mapping[str, Any],
                summaries: Optional[Mapping[str, Any]]) -> bool:
    """No provider of ``suffixes`` has a topology node provider above it."""
    if not suffixes or summaries is None:
        return True
    return not any(_under_topology_node(rp, summaries)
                   for suffix in suffixes for rp in mappings.get(suffix, ()))


def _under_topology_node(rp: str, summaries: Mapping[str, Any]) -> bool:
    seen: set[str] = set()
    current = summaries.get(rp, {}).get("parent_provider_uuid")
    while current and current not in seen:
        seen.add(current)
        summary = summaries.get(current, {})
        if TOPOLOGY_NODE_TRAIT in summary.get("traits", ()):
            return True
        current = summary.get("parent_provider_uuid")
    return False
