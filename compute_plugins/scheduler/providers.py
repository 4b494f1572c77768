"""Which hosts have room: Placement asked what it answers linearly.

``GET /allocation_candidates`` enumerates every combination of providers
for the request's groups, and on wide trees the combinations explode (8
guest nodes over 8 host cells: 8^8; Placement bug 2126751). Whether a
provider has room for one group is linear, so the scheduler asks only that:
one ``GET /resource_providers?resources=...&required=...&member_of=...`` per
*distinct* group shape of the request (8 identical guest nodes: one call),
plus one call for the roots (root traits, the unsuffixed group's
aggregates, never ``COMPUTE_STATUS_DISABLED``). The combinatorics (which
guest node on which cell) are the plugins' ``fit`` on the host's state
(:mod:`compute_plugins.scheduler.fitting`), and Placement checks the
capacity atomically when the allocation is written.

A host is a candidate when an operator did not disable it in the host-state
store (:func:`operator_disabled`), its root passes the root query and, for
every requirement, some provider of its tree has room (a necessary
condition):

- a numbered group (a guest node, a port, ``resources1:``): its resources,
  traits and aggregates on one provider; with *choices* (page sizes), any
  one of them;
- the unsuffixed group: each resource class on some provider of the tree
  (Placement takes each class of the unsuffixed group from one provider,
  classes from different ones); a group that may be split over ``split``
  providers (a guest without a topology: its CPUs and memory) needs
  ``ceil(n / split)`` of each class on one provider;
- the unsuffixed group, and a group with ``member_of``, may be served by a
  sharing provider outside every host's tree (shared storage, trait
  ``MISC_SHARES_VIA_AGGREGATE``), as Placement's allocation candidates
  allow: such a provider counts for the hosts with a provider in one of
  its aggregates. Found with one call for the sharing providers, one per
  sharing provider with room (its aggregates) and one per such aggregate
  (its members): a handful, whatever the number of hosts.

Providers are mapped to hosts through the host-state store (the providers
each agent published) or their root. ``GET /resource_providers`` is not
paginated: one call returns every match.
"""

from __future__ import annotations

import dataclasses
import math
import re
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures
from typing import Any, Optional

import os_traits

from compute_plugins.hoststate.transport import HostPublication
from compute_plugins.placement import exception as pexc
from compute_plugins.plugin.contract import Rejection
from compute_plugins.request.groups import KIND_ROOT, RequestGroup
from compute_plugins.request.types import FrozenMap

#: The plugin name of rejections made at the Placement stage for the root.
PLACEMENT = "placement"
#: The trait of a disabled compute node: its root never matches.
DISABLED_TRAIT = "COMPUTE_STATUS_DISABLED"

#: A requirement's key: ``(suffix, resource class)``; the class is ``""``
#: for a numbered group (one provider for all its classes).
NeedKey = tuple[str, str]


@dataclasses.dataclass(frozen=True)
class Shape:
    """One ``GET /resource_providers`` filter."""

    resources: FrozenMap[str, int] = dataclasses.field(default_factory=FrozenMap)
    required: frozenset[str] = frozenset()
    forbidden: frozenset[str] = frozenset()
    member_of: tuple[tuple[str, ...], ...] = ()
    forbidden_aggregates: frozenset[str] = frozenset()

    def params(self) -> list[tuple[str, str]]:
        params = []
        if self.resources:
            params.append(("resources", ",".join(
                "%s:%d" % (rc, n) for rc, n in sorted(self.resources.items()))))
        traits = sorted(self.required) + ["!" + t for t in sorted(self.forbidden)]
        if traits:
            params.append(("required", ",".join(traits)))
        for aggs in self.member_of:
            params.append(("member_of", "in:" + ",".join(sorted(aggs))))
        if self.forbidden_aggregates:
            params.append(("member_of", "!in:" + ",".join(
                sorted(self.forbidden_aggregates))))
        return params

    def path(self) -> str:
        return "/resource_providers?" + urllib.parse.urlencode(self.params())

    def short(self) -> str:
        """``GET /resource_providers?resources=PCPU:4,...`` decoded (for people)."""
        return "GET /resource_providers?" + "&".join(
            "%s=%s" % pair for pair in self.params())


@dataclasses.dataclass(frozen=True)
class Need:
    """One thing some provider of a host's tree must have room for.

    :param key: ``(suffix, resource class or "")``.
    :param shapes: any one of them will do (a group's choices).
    :param owner: the plugin(s) that asked for it (``framework``: generic keys).
    """

    key: NeedKey
    shapes: tuple[Shape, ...]
    owner: str
    shared_ok: bool = False

    def describe(self) -> str:
        suffix, rc = self.key
        what = ("group %s" % suffix) if suffix else (
            "%s of the unsuffixed group" % rc)
        return "%s (%s)" % (what, " or ".join(
            "&".join("%s=%s" % p for p in s.params()) for s in self.shapes))


def _merged(groups: Sequence[RequestGroup]) -> dict[str, RequestGroup]:
    merged: dict[str, RequestGroup] = {}
    for group in groups:
        if group.kind == KIND_ROOT or not group.requester_id:
            continue
        current = merged.get(group.requester_id)
        merged[group.requester_id] = group if current is None else current.merged_with(group)
    return merged


def root_traits(groups: Sequence[RequestGroup]) -> tuple[frozenset[str], frozenset[str]]:
    """The root's required and forbidden traits of ``groups``: those of
    ``root`` groups and the unsuffixed group's (they describe the host),
    :data:`DISABLED_TRAIT` always forbidden."""
    required: set[str] = set()
    forbidden: set[str] = {DISABLED_TRAIT}
    for group in groups:
        if group.kind == KIND_ROOT or not group.requester_id:
            required |= group.required_traits
            forbidden |= group.forbidden_traits
    return frozenset(required), frozenset(forbidden)


def needs(groups: Sequence[RequestGroup]) -> tuple[Shape, tuple[Need, ...]]:
    """The root filter and every requirement of ``groups`` (module doc)."""
    root_required, root_forbidden = root_traits(groups)
    member_of: list[tuple[str, ...]] = []
    forbidden_aggs: set[str] = set()
    unsuffixed: dict[str, int] = {}
    owners: dict[str, set[str]] = {}
    result: list[Need] = []
    for group in groups:
        if group.requester_id or group.kind == KIND_ROOT:
            continue
        member_of.extend(m for m in group.member_of if m not in member_of)
        forbidden_aggs |= group.forbidden_aggregates
        for rc, amount in group.resources.items():
            unsuffixed[rc] = unsuffixed.get(rc, 0) + math.ceil(amount / group.split)
            owners.setdefault(rc, set()).add(group.owner)
        if group.choices:
            result.append(Need(("", "choices:%s" % group.owner), tuple(
                Shape(FrozenMap(choice)) for choice in group.choices), group.owner))
    for rc, amount in sorted(unsuffixed.items()):
        result.append(Need(("", rc), (Shape(FrozenMap({rc: amount})),),
                           "+".join(sorted(owners[rc])), shared_ok=True))
    for suffix, group in sorted(_merged(groups).items()):
        if not group.resources and not group.choices:
            continue
        base = dict(group.resources)
        variants = [dict(base, **choice) for choice in group.choices] or [base]
        shapes = tuple(Shape(FrozenMap(v), group.required_traits,
                             group.forbidden_traits, group.member_of,
                             group.forbidden_aggregates) for v in variants)
        result.append(Need((suffix, ""), shapes, group.owner,
                           shared_ok=bool(group.member_of)))
    root = Shape(required=frozenset(root_required - root_forbidden),
                 forbidden=frozenset(root_forbidden), member_of=tuple(member_of),
                 forbidden_aggregates=frozenset(forbidden_aggs))
    return root, tuple(result)


@dataclasses.dataclass(frozen=True)
class ProviderCandidates:
    """Placement's answer, by host.

    :param hosts: candidate hosts (sorted).
    :param room: host -> requirement key -> providers with room (the
        host's own, then sharing providers), for every candidate host.
    :param excluded: every other host the store knows -> why (a
        rejection per requirement no provider of its tree has room for).
    :param queries: the calls, decoded (``GET /resource_providers?...``).
    :param calls: how many requests were sent to Placement.
    :param shared: a sharing provider outside every host's tree gave some
        host room (an answer asked tree by tree cannot see those).
    :param complete: Placement was asked about every host just now, or
        about every host the kept answer had excluded (a request is
        refused only on such an answer: :mod:`.view`).
    """

    hosts: tuple[str, ...]
    room: Mapping[str, Mapping[NeedKey, tuple[str, ...]]]
    excluded: Mapping[str, tuple[Rejection, ...]]
    queries: tuple[str, ...]
    calls: int
    shared: bool = False
    complete: bool = True


def _owner_plugin(owner: str) -> str:
    return owner.split("+")[0] if owner else ""


def _root_filters(root: Shape) -> tuple[Optional[Shape], list[tuple[Shape, str]]]:
    """The root requirements as small answers: the roots with every
    required trait and aggregate (None: no such requirement), and per
    forbidden trait or aggregate the providers that have it (to exclude
    their hosts). Asking "providers without trait X" would list nearly
    every provider of the cloud."""
    positive = None
    if root.required or root.member_of:
        positive = Shape(required=root.required, member_of=root.member_of)
    negatives = []
    for trait in sorted(root.forbidden):
        why = ("the host is disabled (%s)" % trait if trait == DISABLED_TRAIT
               else "its root has the forbidden trait %s" % trait)
        negatives.append((Shape(required=frozenset({trait})), why))
    if root.forbidden_aggregates:
        aggs = tuple(sorted(root.forbidden_aggregates))
        negatives.append((Shape(member_of=(aggs,)),
                          "its root is in a forbidden aggregate (%s)" % ", ".join(aggs)))
    return positive, negatives


#: provider uuids -> the host that published each (unknown ones absent):
#: the store's
#: :meth:`~compute_plugins.hoststate.transport.HostPublication.hosts_for_providers`,
#: or a scheduler's kept mapping
#: (:meth:`~compute_plugins.scheduler.liveness.KeptLiveness.owners`).
Owners = Callable[[Sequence[str]], Mapping[str, str]]


def find(client: Any, store: HostPublication, groups: Sequence[RequestGroup],
         hosts: Optional[Sequence[str]] = None,
         trees: Optional[Mapping[str, str]] = None,
         owners: Optional[Owners] = None) -> ProviderCandidates:
    """Ask Placement which hosts have room for ``groups`` (module doc).

    :param client: a :class:`~compute_plugins.placement.client.PlacementClient`.
    :param hosts: the hosts the store knows (None: read them from it).
    :param trees: ask about these hosts only, one tree at a time: host ->
        a provider uuid of its tree (``in_tree``; one call per host and
        shape, each listing a few providers, instead of one per shape
        listing the whole cloud's). ``hosts`` is then ignored, and sharing
        providers are not looked for (none is in a host's tree).
    :param owners: which host published each provider (None: the
        store's ``hosts_for_providers``, a read per call).
    """
    if owners is None:
        owners = store.hosts_for_providers
    root_shape, wanted = needs(groups)
    shapes: dict[Shape, list[dict[str, Any]]] = {}
    positive, negatives = _root_filters(root_shape)
    ordered = ([positive] if positive is not None else []) + [
        shape for shape, _ in negatives] + [s for need in wanted for s in need.shapes]
    tree_queries: list[str] = []
    asks: list[tuple[Shape, Optional[str]]] = []
    for shape in dict.fromkeys(ordered):
        if trees is None:
            asks.append((shape, None))
            continue
        for tree in sorted(set(trees.values())):
            asks.append((shape, tree))
            tree_queries.append(shape.short() + "&in_tree=" + tree)
    for (shape, _), answer in zip(asks, _ask_all(client, asks), strict=True):
        shapes.setdefault(shape, []).extend(answer)
    if trees is not None:
        hosts = sorted(trees)
    uuids: set[str] = set()
    for providers in shapes.values():
        for rp in providers:
            uuids.add(rp["uuid"])
            if rp.get("root_provider_uuid"):
                uuids.add(rp["root_provider_uuid"])
    owner_of = owners(sorted(uuids)) if uuids else {}

    def host_of(rp: Mapping[str, Any]) -> Optional[str]:
        return owner_of.get(rp["uuid"]) or owner_of.get(rp.get("root_provider_uuid") or "")

    def roots(shape: Shape) -> set[Optional[str]]:
        return {host_of(rp) for rp in shapes[shape]
                if rp["uuid"] == rp.get("root_provider_uuid", rp["uuid"])}

    known = sorted(store.generations()) if hosts is None else sorted(hosts)
    root_reasons: dict[str, list[str]] = {}
    if positive is not None:
        passing = roots(positive)
        mismatch = "its root does not match %s" % positive.short()
        for host in known:
            if host not in passing:
                root_reasons.setdefault(host, []).append(mismatch)
    for shape, why in negatives:
        for bad in roots(shape):
            if bad is not None:
                root_reasons.setdefault(bad, []).append(why)
    room: dict[str, dict[NeedKey, list[str]]] = {h: {} for h in known}
    unowned: dict[NeedKey, list[str]] = {}
    for need in wanted:
        for shape in need.shapes:
            for rp in shapes[shape]:
                owner = host_of(rp)
                if owner is None:
                    if need.shared_ok:
                        unowned.setdefault(need.key, []).append(rp["uuid"])
                    continue
                if owner in room:
                    room[owner].setdefault(need.key, []).append(rp["uuid"])
    extra_queries: list[str] = []
    sharing = ({} if trees is not None
               else _sharing_hosts(client, owners, unowned, extra_queries))
    shared = False
    for key, shared_uuids in unowned.items():
        for uuid in shared_uuids:
            for owner in sharing.get(uuid, ()):
                if owner in room:
                    room[owner].setdefault(key, []).append(uuid)
                    shared = True
    candidates: list[str] = []
    excluded: dict[str, tuple[Rejection, ...]] = {}
    off = operator_disabled(store, known)
    # NOTE: each reason made once and shared by the hosts it excludes (a
    # frozen Rejection), not once per host: at 1,000 hosts an answer
    # excludes hundreds, each with the same few reasons.
    lacking = [(need.key, Rejection(
        "Placement: no provider of this host%s has room for %s"
        % (" (nor a sharing provider in its aggregates)" if need.shared_ok else "",
           need.describe()), plugin=_owner_plugin(need.owner))) for need in wanted]
    root_rejections: dict[str, Rejection] = {}
    for host in known:
        if host in off:
            excluded[host] = (off[host],)
            continue
        reasons = []
        for why in root_reasons.get(host, ()):
            rejection = root_rejections.get(why)
            if rejection is None:
                rejection = root_rejections[why] = Rejection("Placement: %s" % why,
                                                             plugin=PLACEMENT)
            reasons.append(rejection)
        has = room[host]
        for need_key, rejection in lacking:
            if not has.get(need_key):
                reasons.append(rejection)
        if reasons:
            excluded[host] = tuple(reasons)
        else:
            candidates.append(host)
    keys = {n.key for n in wanted}
    final = {host: {key: tuple(dict.fromkeys(room[host].get(key, []))) for key in keys}
             for host in candidates}
    if trees is not None:
        return ProviderCandidates(
            hosts=tuple(candidates), room=final, excluded=excluded,
            queries=tuple(tree_queries), calls=len(tree_queries))
    return ProviderCandidates(
        hosts=tuple(candidates), room=final, excluded=excluded,
        queries=tuple(s.short() for s in shapes) + tuple(extra_queries),
        calls=len(shapes) + len(extra_queries), shared=shared)


def operator_disabled(store: HostPublication,
                      hosts: Sequence[str]) -> dict[str, Rejection]:
    """host -> why, for the ``hosts`` an operator disabled (``compute-plugins
    host disable``: the store's record, with the reason given).

    Placement's ``COMPUTE_STATUS_DISABLED`` trait already excludes them;
    the store's record is read too because it is written first (the trait
    follows, from the command or the host's agent), and it says why: the
    one reason given for such a host is ``host X is disabled: REASON``.
    """
    if not hosts:
        return {}
    # NOTE: every disabled host in one read (a handful), whatever the
    # number of hosts asked about.
    wanted = set(hosts)
    return {host: Rejection(record.describe())
            for host, record in store.disabled_hosts().items() if host in wanted}


_UNKNOWN_TRAITS = re.compile(r"No such trait\(s\): ([A-Za-z0-9_, ]+)")


#: ``GET /resource_providers`` calls sent at once at most when one
#: question takes several (tree by tree: :func:`find`'s ``trees``).
#: Several Placement processes answer them side by side (``placement
#: serve --workers``); one process answers them one by one.
PARALLEL_CALLS = 4


def _ask_all(client: Any, asks: Sequence[tuple[Shape, Optional[str]]],
             parallel: Optional[int] = None) -> list[list[dict[str, Any]]]:
    """Each ``(shape, in_tree)``'s providers (:func:`_providers`), in
    order; up to ``parallel`` calls in flight at once (a small pool of
    threads, for the call only), so that asking about several trees takes
    about as long as the slowest of every ``parallel`` calls, not their
    sum. The first error raised by any call is raised (the others are
    waited for first).

    :param parallel: calls in flight at most (None: :data:`PARALLEL_CALLS`).
    """
    if parallel is None:
        parallel = PARALLEL_CALLS
    if len(asks) <= 1 or parallel <= 1:
        return [_providers(client, shape, in_tree=tree) for shape, tree in asks]
    with futures.ThreadPoolExecutor(max_workers=min(parallel, len(asks)),
                                    thread_name_prefix="placement-ask") as pool:
        pending = [pool.submit(_providers, client, shape, tree) for shape, tree in asks]
        futures.wait(pending)
        return [f.result() for f in pending]


def _providers(client: Any, shape: Shape,
               in_tree: Optional[str] = None) -> list[dict[str, Any]]:
    """Placement's providers matching ``shape`` (in the tree of the
    provider ``in_tree`` only, when given).

    A trait Placement has never heard of is a 400 there ("No such
    trait(s)"), not an empty answer: no provider has it, so a shape that
    requires it matches none, and forbidding it excludes none (the shape
    is asked again without it).
    """
    while True:
        try:
            path = shape.path()
            if in_tree is not None:
                path += ("&" if shape.params() else "") + urllib.parse.urlencode(
                    [("in_tree", in_tree)])
            answer = client.get(path)
        except pexc.PlacementHTTPError as err:
            found = _UNKNOWN_TRAITS.search(err.detail or "") if err.status == 400 else None
            unknown = ({t.strip() for t in found.group(1).split(",") if t.strip()}
                       if found else set())
            if not unknown or not unknown <= shape.required | shape.forbidden:
                raise
            if unknown & shape.required:
                return []
            shape = dataclasses.replace(shape, forbidden=shape.forbidden - unknown)
            continue
        return list(answer.get("resource_providers", ()))


def _sharing_hosts(client: Any, owners: Owners,
                   unowned: Mapping[NeedKey, Sequence[str]],
                   queries: list[str]) -> dict[str, set[str]]:
    """Sharing provider uuid -> the hosts it shares with (module doc).

    Of the providers outside every host's tree that have room, only those
    with ``MISC_SHARES_VIA_AGGREGATE`` share; each shares with the hosts
    that have a provider in one of its aggregates. Every call made is
    appended to ``queries``.
    """
    candidates = sorted({uuid for uuids in unowned.values() for uuid in uuids})
    if not candidates:
        return {}

    def get(path: str) -> Any:
        queries.append("GET " + urllib.parse.unquote(path))
        return client.get(path)

    flagged = get("/resource_providers?" + urllib.parse.urlencode(
        [("required", os_traits.MISC_SHARES_VIA_AGGREGATE)]))
    sharing = {rp["uuid"] for rp in flagged.get("resource_providers", ())}
    aggregates = {uuid: set(get("/resource_providers/%s/aggregates" % uuid)
                            .get("aggregates", ()))
                  for uuid in candidates if uuid in sharing}
    members: dict[str, list[Mapping[str, Any]]] = {}
    for agg in sorted(set().union(*aggregates.values()) if aggregates else ()):
        answer = get("/resource_providers?" + urllib.parse.urlencode(
            [("member_of", agg)]))
        members[agg] = list(answer.get("resource_providers", ()))
    uuids = sorted({uuid for rps in members.values() for rp in rps
                    for uuid in (rp["uuid"], rp.get("root_provider_uuid") or "")
                    if uuid})
    owner_of = owners(uuids) if uuids else {}
    result: dict[str, set[str]] = {}
    for uuid, aggs in aggregates.items():
        for agg in aggs:
            for rp in members[agg]:
                host = (owner_of.get(rp["uuid"])
                        or owner_of.get(rp.get("root_provider_uuid") or ""))
                if host is not None:
                    result.setdefault(uuid, set()).add(host)
    return result
