"""The allocation the scheduler writes, built from the plugins' assignments.

Each plugin says what each of its request groups takes on which provider
(:meth:`~compute_plugins.plugin.contract.ResourcePlugin.allocations`, by default
each group whole on the provider
:meth:`~compute_plugins.plugin.contract.ResourcePlugin.group_providers` names). The
groups no plugin places (generic ``resources[N]:`` keys, a plugin that had
nothing to decide, shared storage offline) go to a provider Placement said
has room for them on that host (:mod:`compute_plugins.scheduler.providers`),
the root first. The allocation is then every group's resources summed per
provider, exactly the body of ``PUT /allocations/{consumer}``, and the
``mappings`` name every group's provider(s): the decision recorded in the
spec, which the compute's claim executes and its ledger holds.

A plugin whose allocation does not add up to its own request (a bug of the
plugin) is a rejection of that host naming the plugin.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Union

from compute_plugins.plugin.contract import GroupAllocation, Rejection
from compute_plugins.request.groups import KIND_ROOT, Decision, RequestGroup
from compute_plugins.request.spec import RequestSpec
from compute_plugins.request.types import FrozenMap
from compute_plugins.runtime import PluginSet
from compute_plugins.scheduler.fitting import HostFit
from compute_plugins.scheduler.providers import NeedKey


def _totals(items: Sequence[GroupAllocation]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for item in items:
        for rc, n in item.resources.items():
            totals[rc] = totals.get(rc, 0) + n
    return totals


def _check(name: str, groups: Sequence[RequestGroup],
           items: Sequence[GroupAllocation]) -> Union[Rejection, None]:
    """The plugin's allocation takes exactly what its groups ask: per
    group with choices, its base and one choice; in all, the rest."""
    rest_expected: dict[str, int] = {}
    choice_suffixes = set()
    for group in groups:
        if group.choices:
            choice_suffixes.add(group.requester_id)
            got = _totals([i for i in items if i.suffix == group.requester_id])
            wanted = [{**{rc: n for rc, n in group.resources.items()},
                       **dict(c)} for c in group.choices]
            if got not in wanted:
                return Rejection("its allocation takes %s in group %s; the "
                                 "request asks one of %s"
                                 % (got, group.requester_id, wanted), plugin=name)
            continue
        for rc, n in group.resources.items():
            rest_expected[rc] = rest_expected.get(rc, 0) + n
    got = _totals([i for i in items if i.suffix not in choice_suffixes])
    got = {rc: n for rc, n in got.items() if n}
    rest_expected = {rc: n for rc, n in rest_expected.items() if n}
    if got != rest_expected:
        return Rejection("its allocation takes %s; its request asks %s"
                         % (dict(sorted(got.items())),
                            dict(sorted(rest_expected.items()))), plugin=name)
    return None


def _pick(providers: Sequence[str], root: str) -> str:
    return root if root in providers else providers[0]


def build_decision(plugins: PluginSet, spec: RequestSpec, fit: HostFit,
                   room: Mapping[NeedKey, Sequence[str]]) -> Union[Decision, Rejection]:
    """The decision for ``fit`` (a host where every plugin fits): host,
    allocation, mappings and every assignment; or why it cannot be built.

    :param room: the host's requirement -> providers with room
        (:attr:`ProviderCandidates.room`).
    """
    own: dict[str, list[RequestGroup]] = {}
    for group in spec.groups:
        if group.kind != KIND_ROOT and (group.resources or group.choices):
            own.setdefault(group.owner, []).append(group)
    items: list[GroupAllocation] = []
    placed_by_plugin: set[str] = set()
    for name, assignment in fit.result.assignments.items():
        given = plugins.allocations(name, spec.requests[name], assignment,
                                    fit.states.get(name), host=fit.host)
        if given is None:
            continue
        if isinstance(given, Rejection):
            return given
        problem = _check(name, own.get(name, []), given)
        if problem is not None:
            return problem
        items.extend(given)
        placed_by_plugin.add(name)
    for owner, groups in sorted(own.items()):
        if owner in placed_by_plugin:
            continue
        for group in groups:
            placed = _fallback(group, room, fit.root_uuid)
            if isinstance(placed, Rejection):
                return placed
            items.extend(placed)
    allocations: dict[str, dict[str, int]] = {}
    mappings: dict[str, list[str]] = {}
    for item in items:
        resources = {rc: n for rc, n in item.resources.items() if n}
        if not resources:
            continue
        target = allocations.setdefault(item.provider_uuid, {})
        for rc, n in resources.items():
            target[rc] = target.get(rc, 0) + n
        providers = mappings.setdefault(item.suffix, [])
        if item.provider_uuid not in providers:
            providers.append(item.provider_uuid)
    return Decision(
        host=fit.host, nodename=fit.nodename,
        allocations=FrozenMap((rp, FrozenMap(sorted(res.items())))
                              for rp, res in sorted(allocations.items())),
        mappings=FrozenMap((g, tuple(rps)) for g, rps in sorted(mappings.items())),
        assignments=fit.result.assignments)


def _fallback(group: RequestGroup, room: Mapping[NeedKey, Sequence[str]],
              root: str) -> Union[list[GroupAllocation], Rejection]:
    """A group no plugin placed, on a provider Placement said has room."""
    who = group.owner.split("+")[0]
    if group.choices:
        return Rejection("no plugin chose among the choices of group %r"
                         % group.requester_id, plugin=who)
    if group.requester_id:
        providers = room.get((group.requester_id, ""), ())
        if not providers:
            return Rejection("no provider has room for group %s"
                             % group.requester_id, plugin=who)
        return [GroupAllocation(group.requester_id, _pick(providers, root),
                                dict(group.resources))]
    result = []
    for rc, n in sorted(group.resources.items()):
        providers = room.get(("", rc), ())
        if not providers:
            return Rejection("no provider has room for %d %s" % (n, rc), plugin=who)
        result.append(GroupAllocation("", _pick(providers, root), {rc: n}))
    return result
