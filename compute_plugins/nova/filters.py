"""``PluginFitFilter``: every plugin's ``fit`` as a nova scheduler filter.

Enable it in nova's scheduler::

    [filter_scheduler]
    available_filters = nova.scheduler.filters.all_filters
    available_filters = compute_plugins.nova.filters.PluginFitFilter
    enabled_filters = ComputeFilter,...,PluginFitFilter
    [compute_plugins]
    config_file = /etc/compute-plugins/compute-plugins.conf

Per instance of a request (:meth:`PluginFitFilter.filter_all`, which nova's
filter handler calls once per instance with every host and the same spec
object) the filter builds our RequestSpec once per request from nova's
flavor, image, ports and hints (:func:`compute_plugins.nova.spec.request_input`;
never from a spec recorded in the hints, which a resize carries with its
old flavor; :data:`compute_plugins.nova.spec.PARSES` counts the parses),
reads every host's published plugin states in one read of the host-state
store (each host decoded again only when its generation changed), and runs
every plugin's ``fit`` (:meth:`compute_plugins.runtime.PluginSet.fit`) per
allocation candidate of the host (``candidate["mappings"]``). It keeps the
candidates that fit, as nova's ``CandidateFilterMixin`` does, and keeps
each one's decision on the host: ``host_state.plugin_decisions``
(candidate key -> ``Decision``) and ``host_state.plugin_rejections`` (the
reasons when nothing fits). A request our plugins cannot parse passes no
host (nova's NoValidHost) with one ERROR line naming every problem: a
filter never raises into nova's scheduler.

The decision survives in stock nova (see ``doc/source/nova-compat.md``):

- **what nova claims is the decision.** nova's query asks the guest's CPUs
  and memory as one unsuffixed group: its candidates do not say which of
  our groups each provider serves, so such candidates are fitted once per
  host with no mappings (each plugin choosing its providers, as
  ``compute-plugins fit`` does); only the candidates that allocate what
  that decision takes, provider by provider (:func:`matches`), are kept, in
  nova's order; when none does, nova's first candidate with the same totals
  is moved onto the decision's providers (:func:`carrying`: a two-node
  guest's CPUs split over two cells, which nova's one group cannot ask) and
  nova claims that in Placement (Placement checks the capacity).
  Candidates of our own query (``mappings`` with our reserved ``_``
  suffixes) restrict each plugin to their providers: nova's query with
  contrib/nova's 0002 patch (``[filter_scheduler] numa_in_placement``: one
  ``_NUMA<N>`` group per guest node, the numa plugin's names) is one, so
  each guest node goes on the cell Placement gave its group in the
  candidate nova claims.
- **the compute reads it.** nova calls ``HostState.consume_from_request``
  on the host it selected and claimed, for each instance, right after the
  claim; the filter wraps that method on each host state it sees
  (:meth:`PluginFitFilter.selected`) and records the claimed candidate's
  decision for the instance and host in the host-state store
  (:mod:`compute_plugins.nova.decisions`), where the driver mixin reads it.
  Alternates (the hosts nova returns with each selected one, whose first
  candidate its conductor claims on a reschedule) get theirs only with
  contrib/nova's 0003 patch, which tells their host state
  (``consider_as_alternate``, :meth:`PluginFitFilter.alternate`); stock
  nova tells no plugin point.
- **the instances of one request never share a unit.** The same call
  counts the decision on the host state for the next instances of the
  request (nova keeps the host state and the spec object across them):
  their fit runs on the published state with the earlier instances'
  assignments taken (a plugin state's ``consumed``, :class:`ConsumesAssignments`;
  a plugin whose state cannot take it gets one instance of the request per
  host).
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, Protocol

from nova.scheduler import filters
from nova.scheduler import utils as scheduler_utils
from oslo_log import log as logging

from compute_plugins.hoststate.errors import HostStateError
from compute_plugins.hoststate.store import HostStateStore
from compute_plugins.nova import spec as nova_spec
from compute_plugins.nova.decisions import NovaDecisions
from compute_plugins.plugin.contract import Mappings, Rejection
from compute_plugins.plugin.state import AssignmentConflict
from compute_plugins.request.errors import RequestInputError, RequestValidationError
from compute_plugins.request.groups import (
    KIND_GENERIC,
    KIND_ROOT,
    Decision,
    is_reserved_suffix,
)
from compute_plugins.request.spec import RequestSpec
from compute_plugins.request.types import FrozenMap
from compute_plugins.runtime import FitResult, PluginSet
from compute_plugins.scheduler.fitting import StateCache
from compute_plugins.scheduler.liveness import KeptLiveness

LOG = logging.getLogger(__name__)

__all__ = ["ConsumesAssignments", "HostStates", "PluginFitFilter", "StatesSource",
           "StoreStates", "candidate_key", "carrying", "matches", "record_selection"]

#: Plugin name -> its decoded host state.
HostStates = Mapping[str, object]


class StatesSource(Protocol):
    """Where the filter reads hosts' states (:class:`StoreStates`)."""

    def get(self, hosts: Iterable[str]) -> Mapping[str, HostStates]:
        """host -> its plugins' states (hosts without any are absent)."""


def candidate_key(candidate: Mapping[str, Any]) -> str:
    """A stable key of an allocation candidate: its allocations as JSON."""
    return json.dumps(candidate.get("allocations", {}), sort_keys=True)


class StoreStates:
    """Hosts' plugin states from the host-state store, decoded once per
    generation (:class:`~compute_plugins.scheduler.fitting.StateCache`),
    kept as the scheduler keeps them: pruned per read by the hosts that
    changed (:meth:`~compute_plugins.scheduler.fitting.StateCache.read_pruned`),
    the hosts gone forgotten.

    :param store: the host-state store.
    :param plugins: the loaded plugins.
    """

    def __init__(self, store: HostStateStore, plugins: PluginSet) -> None:
        self.store = store
        self.plugins = plugins
        self._cache = StateCache()
        #: Every host's generation, read by change: what the cache is
        #: pruned by, and the generations of the live hosts.
        self._liveness = KeptLiveness()

    def get(self, hosts: Iterable[str]) -> dict[str, HostStates]:
        """host -> its plugins' states; hosts that never published are
        absent, and so is a plugin whose state cannot be read (logged)."""
        wanted = sorted(set(hosts))
        alive, _changed = self._cache.read_pruned(self._liveness, self.store)
        live = alive.generations
        generations = {h: live[h] for h in wanted if h in live}
        # NOTE: nova judges its hosts' liveness itself: a host whose
        # agent's lease expired is filtered as any (its generation read).
        down = [h for h in wanted if h in alive.down]
        if down:
            generations.update(self.store.generations(down))
        decoded = self._cache.get(self.plugins, self.store,
                                  [h for h in wanted if h in generations],
                                  generations)
        return {h: decoded[h].states for h in wanted if h in decoded}


def _placement(spec: RequestSpec, candidate: Mapping[str, Any]) -> Mappings:
    """The candidate's mappings when they name every group suffix our
    plugins use, else None (see the module docstring)."""
    mappings = candidate.get("mappings")
    if not mappings or not any(is_reserved_suffix(g) for g in mappings):
        # NOTE: nova's own query (its groups are "" and port/request ids):
        # its unsuffixed group is not our floating or disk group.
        return None
    needed = {g.requester_id for g in spec.groups
              if g.kind not in (KIND_GENERIC, KIND_ROOT)}
    if needed <= set(mappings):
        return FrozenMap((g, tuple(rps)) for g, rps in mappings.items())
    return None


class ConsumesAssignments(Protocol):
    """A plugin's host state that can take one more assignment (what the
    scheduler gave an earlier instance of the same nova request on the
    host, before the host publishes again). A plugin whose state lacks
    ``consumed`` gets one instance of a request per host."""

    def consumed(self, assignment: Any) -> object:
        """The state with ``assignment`` taken too.

        :raises AssignmentConflict: it does not hold on the state.
        """


#: Attributes the filter keeps on nova's ``RequestSpec`` object (never
#: fields: nova does not serialise them) for the instances of one request.
_PARSED = "_compute_plugins_parsed"
_TOKEN = "_compute_plugins_request"


def _request_token(spec_obj: Any) -> str:
    """An id of this request (one ``select_destinations``: nova passes the
    same spec object for every instance of it)."""
    token = getattr(spec_obj, _TOKEN, None)
    if token is None:
        token = uuid.uuid4().hex
        setattr(spec_obj, _TOKEN, token)
    return str(token)


def _instance_of(spec_obj: Any) -> Optional[str]:
    if spec_obj.obj_attr_is_set("instance_uuid") and spec_obj.instance_uuid:
        return str(spec_obj.instance_uuid)
    return None


#: resource class -> provider -> amount.
Amounts = dict[str, dict[str, int]]


def _amounts(allocations: Mapping[str, Mapping[str, Any]]) -> Amounts:
    """An allocation request's ``allocations`` by resource class."""
    out: Amounts = {}
    for rp, body in allocations.items():
        for rc, amount in dict(body.get("resources", {})).items():
            if amount:
                out.setdefault(rc, {})[rp] = int(amount)
    return out


def matches(candidate: Mapping[str, Any], wanted: Amounts) -> bool:
    """nova's ``candidate`` allocates what ``wanted`` (the decision's
    allocation) takes, provider by provider, for every resource class both
    name (classes only one names, nova's ``VCPU`` fallback query or its
    ``MEMORY_MB`` for huge pages, cannot be compared)."""
    have = _amounts(candidate.get("allocations", {}))
    return all(have[rc] == wanted[rc] for rc in wanted if rc in have)


def _agrees(candidate: Mapping[str, Any], groups: Mapping[str, str]) -> bool:
    """Every group both ``candidate``'s mappings and the decision
    (``groups``: suffix -> provider) name is on the same provider."""
    mappings = candidate.get("mappings") or {}
    return all(list(mappings[g]) == [rp] for g, rp in groups.items() if g in mappings)


def carrying(candidate: Mapping[str, Any], wanted: Amounts
             ) -> Optional[dict[str, Any]]:
    """``candidate`` with the decision's providers for the resource classes
    both name, when it asks the same totals of them (nova's unsuffixed
    group spread otherwise over the host's providers); None when the
    totals differ. Its unsuffixed mapping follows the providers."""
    have = _amounts(candidate.get("allocations", {}))
    common = [rc for rc in wanted if rc in have]
    if any(sum(have[rc].values()) != sum(wanted[rc].values()) for rc in common):
        return None
    allocations: dict[str, dict[str, int]] = {}
    for rc, by_rp in have.items():
        for rp, amount in (wanted[rc] if rc in common else by_rp).items():
            allocations.setdefault(rp, {})[rc] = amount
    result = copy.deepcopy(dict(candidate))
    result["allocations"] = {rp: {"resources": res} for rp, res in allocations.items()}
    mappings = dict(result.get("mappings") or {})
    if "" in mappings:
        others = {rp for g, rps in mappings.items() if g != "" for rp in rps}
        mappings[""] = sorted(rp for rp in allocations if rp not in others)
        result["mappings"] = mappings
    return result


class PluginFitFilter(filters.BaseHostFilter):  # type: ignore[misc]  # nova is untyped
    """Pass the hosts where every plugin's ``fit`` succeeds on at least one
    allocation candidate; keep only those candidates and their decisions.

    nova's filter handler constructs it without arguments: the plugins and
    the host-state store then come from the configuration files nova's
    ``[compute_plugins] config_file`` names.

    :param plugins: the loaded plugins.
    :param states: where hosts' states come from (:class:`StoreStates`).
    :param decisions: where the decision of each selected instance is
        recorded for its compute (default: the store of ``states`` when it
        is a :class:`StoreStates`; None: not recorded).
    :param nova_config: nova's ``CONF`` (default: nova's global one when
        the filter loads its own plugins): its ``[pci] alias`` is read on
        every request, as nova does (:class:`~compute_plugins.nova.conf.NovaAliases`).
    """

    RUN_ON_REBUILD = False

    def __init__(self, plugins: Optional[PluginSet] = None,
                 states: Optional[StatesSource] = None,
                 decisions: Optional[NovaDecisions] = None,
                 nova_config: Any = None) -> None:
        super().__init__()
        from compute_plugins.nova import conf as nova_conf
        self.aliases: Optional[nova_conf.NovaAliases] = None
        if plugins is None or states is None:
            from compute_plugins.runtime.manager import PluginManager
            if nova_config is None:
                import nova.conf
                nova_config = nova.conf.CONF
            conf = nova_conf.plugin_conf(nova_config)
            if plugins is None:
                plugins = PluginManager(conf).plugins
                self.aliases = nova_conf.NovaAliases(nova_config, conf)
            if states is None:
                states = StoreStates(HostStateStore.from_config(conf), plugins)
        self.plugins = plugins
        self.states = states
        if decisions is None and isinstance(states, StoreStates):
            decisions = NovaDecisions(states.store)
        self.decisions = decisions

    def filter_all(self, filter_obj_list: Iterable[Any], spec_obj: Any) -> Any:
        """Filter every host for one instance of a request: the spec is
        parsed once per request (nova calls this once per instance, with
        the same spec object) and the states read in one go."""
        if not self.RUN_ON_REBUILD and scheduler_utils.request_is_rebuild(spec_obj):
            return filter_obj_list
        hosts = list(filter_obj_list)
        spec = self._parse(spec_obj)
        if isinstance(spec, Rejection):
            for host in hosts:
                self._reject(host, spec)
            return []
        token = _request_token(spec_obj)
        instance = _instance_of(spec_obj)
        states = self.states.get([h.host for h in hosts]) if spec.requests else {}
        return [h for h in hosts
                if self._passes(h, spec, states.get(h.host), token, instance)]

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool:
        """One host (nova's per-host API; :meth:`filter_all` is the fast
        path: it reads the states of every host at once)."""
        spec = self._parse(spec_obj)
        if isinstance(spec, Rejection):
            self._reject(host_state, spec)
            return False
        states = self.states.get([host_state.host]) if spec.requests else {}
        return self._passes(host_state, spec, states.get(host_state.host),
                            _request_token(spec_obj), _instance_of(spec_obj))

    def spec_for(self, spec_obj: Any) -> RequestSpec:
        """Our spec for nova's, parsed from its flavor, image, ports and
        hints once per request: the instances of one request (the same spec
        object, the same flavor and image) share it
        (:data:`compute_plugins.nova.spec.PARSES` counts the parses).

        A spec recorded in nova's hints (:func:`record_selection`) is never
        used here: a resize or migration keeps nova's spec, hints included,
        with a new flavor, and a user can send any hint through nova's API.

        :raises RequestValidationError: the flavor or image is invalid for a
            plugin (nova's API validates extra specs first, so this is a
            key nova does not know).
        :raises RequestInputError: the flavor or a port cannot be used.
        """
        inputs = nova_spec.request_input(spec_obj)
        generation = 0
        if self.aliases is not None:
            # NOTE: a parse cached under older aliases is stale, whichever
            # request applied the change
            self.aliases.refresh()
            generation = self.aliases.generation
        cached = getattr(spec_obj, _PARSED, None)
        if (cached is not None and cached[0] is self.plugins
                and cached[1] == inputs and cached[3] == generation):
            spec: RequestSpec = cached[2]
            return spec
        spec = nova_spec.parse(self.plugins, inputs, nova_spec.SCHEDULER)
        setattr(spec_obj, _PARSED, (self.plugins, inputs, spec, generation))
        return spec

    def _parse(self, spec_obj: Any) -> Any:
        """:meth:`spec_for`, or the reason it failed as a Rejection (logged):
        a filter never raises into nova's scheduler, the request gets
        nova's NoValidHost and the log names every problem."""
        try:
            return self.spec_for(spec_obj)
        except (RequestValidationError, RequestInputError) as err:
            instance = (spec_obj.instance_uuid
                        if spec_obj.obj_attr_is_set("instance_uuid") else None)
            LOG.error("PluginFitFilter passes no host for instance %s: %s",
                      instance, str(err).replace("\n", " "))
            return Rejection("the request cannot be parsed: %s" % err)

    @staticmethod
    def _reject(host_state: Any, rejection: Rejection) -> None:
        host_state.plugin_spec = None
        host_state.plugin_decisions = {}
        host_state.plugin_rejections = (rejection,)
        host_state.allocation_candidates = []

    def _passes(self, host_state: Any, spec: RequestSpec,
                states: Optional[HostStates], token: str = "",
                instance: Optional[str] = None) -> bool:
        host_state.plugin_spec = spec
        host_state.plugin_decisions = {}
        host_state.plugin_rejections = ()
        host_state.plugin_instance = instance
        host_state.plugin_request = token
        self._hook(host_state)
        if not spec.requests:
            return True
        missing = sorted(n for n in spec.requests
                         if n in self.plugins and (states is None or n not in states))
        if missing:
            host_state.plugin_rejections = tuple(Rejection(
                "host %s published no state for plugin %s" % (host_state.host, n),
                plugin=n) for n in missing)
            LOG.debug("%s fails PluginFitFilter: no published state for %s",
                      host_state.host, ", ".join(missing))
            return False
        assert states is not None
        consumed = self._consumed(host_state, spec, states, token)
        if isinstance(consumed, Rejection):
            host_state.plugin_rejections = (consumed,)
            host_state.allocation_candidates = []
            LOG.debug("%s fails PluginFitFilter: %s", host_state.host, consumed.reason)
            return False
        states = consumed
        candidates = list(getattr(host_state, "allocation_candidates", None) or ())
        if not candidates:
            # NOTE: no candidates (nova's rebuild path): one offline fit.
            result = self.plugins.fit(states, spec, None, host=host_state.host)
            if result.fits:
                host_state.plugin_decisions[""] = self._decision(
                    host_state, {}, result)
            else:
                host_state.plugin_rejections = result.rejections
            return result.fits
        kept: list[Mapping[str, Any]] = []
        offline: Optional[FitResult] = None
        nova_own: list[Mapping[str, Any]] = []
        rejections: Sequence[Rejection] = ()
        for candidate in candidates:
            placement = _placement(spec, candidate)
            if placement is None:
                if offline is None:
                    offline = self.plugins.fit(states, spec, None,
                                               host=host_state.host)
                if offline.fits:
                    nova_own.append(candidate)
                else:
                    rejections = offline.rejections
                continue
            result = self.plugins.fit(states, spec, placement, host=host_state.host)
            if result.fits:
                kept.append(candidate)
                # NOTE: candidates of one allocation differ in their
                # mappings only (Placement answers every order of groups of
                # the same amounts: _NUMA0 on cell 0 and _NUMA1 on cell 1,
                # and the reverse); the first one kept is the one nova
                # claims, its decision puts each group's node on the
                # provider Placement gave that group in it.
                host_state.plugin_decisions.setdefault(
                    candidate_key(candidate),
                    self._decision(host_state, candidate, result))
            else:
                rejections = result.rejections
        if nova_own:
            assert offline is not None
            carried = self._carried(host_state, spec, states, offline, nova_own)
            if isinstance(carried, Rejection):
                rejections = (carried,)
            for candidate in carried if isinstance(carried, list) else ():
                kept.append(candidate)
                host_state.plugin_decisions.setdefault(
                    candidate_key(candidate),
                    self._decision(host_state, candidate, offline))
        host_state.allocation_candidates = kept
        if not kept:
            host_state.plugin_rejections = tuple(rejections)
            LOG.debug("%s fails PluginFitFilter: %s", host_state.host,
                      "; ".join("%s: %s" % (r.plugin, r.reason) for r in rejections))
        return bool(kept)

    def _wanted(self, spec: RequestSpec, states: HostStates,
                result: FitResult) -> tuple[Amounts, dict[str, str]]:
        """What the plugins' decision takes, by resource class and
        provider (the plugins that do not say take nothing here), and the
        provider of each of its suffixed groups."""
        wanted: Amounts = {}
        groups: dict[str, str] = {}
        for name, assignment in result.assignments.items():
            request = spec.requests.get(name)
            if request is None:
                continue
            given = self.plugins.allocations(name, request, assignment,
                                             states.get(name))
            for item in given if isinstance(given, tuple) else ():
                if item.suffix:
                    groups[item.suffix] = item.provider_uuid
                for rc, amount in item.resources.items():
                    by_rp = wanted.setdefault(rc, {})
                    by_rp[item.provider_uuid] = by_rp.get(item.provider_uuid, 0) + amount
        return wanted, groups

    def _carried(self, host_state: Any, spec: RequestSpec, states: HostStates,
                 offline: FitResult, candidates: list[Mapping[str, Any]]
                 ) -> list[Mapping[str, Any]] | Rejection:
        """nova's own candidates that allocate what the offline decision
        takes, in nova's order, those whose mappings give each group the
        decision's provider first (nova's groups named as ours: its
        ``_NUMA<N>`` of contrib/nova's 0002 patch with a device of ours it
        does not ask); none: the first one whose totals match,
        moved onto the decision's providers (:func:`carrying`), so that
        what nova claims is the decision; else a Rejection."""
        asked = {rc for g in spec.groups
                 for res in (g.resources, *g.choices) for rc in res}
        if not any(rc in asked for c in candidates
                   for body in c.get("allocations", {}).values()
                   for rc in body.get("resources", {})):
            return candidates  # nothing of ours in them to compare
        wanted, groups = self._wanted(spec, states, offline)
        same = [c for c in candidates if matches(c, wanted)]
        if same:
            return sorted(same, key=lambda c: not _agrees(c, groups))
        for candidate in candidates:
            moved = carrying(candidate, wanted)
            if moved is not None:
                return [moved]
        return Rejection(
            "none of nova's allocation candidates on host %s can carry the "
            "decision (it takes %s)" % (host_state.host, json.dumps(
                wanted, sort_keys=True)))

    def _consumed(self, host_state: Any, spec: RequestSpec, states: HostStates,
                  token: str) -> HostStates | Rejection:
        """The host's states under what earlier instances of this request
        were given on it (:attr:`plugin_given`, recorded when nova selected
        the host): nova's scheduler places every instance of a request
        before any host publishes again."""
        given = getattr(host_state, "plugin_given", None)
        if not given or given[0] != token:
            return states
        result = dict(states)
        for instance, decision in given[1]:
            for name, assignment in decision.assignments.items():
                state = result.get(name)
                if state is None:
                    continue
                consume = getattr(state, "consumed", None)
                if consume is None:
                    if spec.requests.get(name) is None:
                        continue
                    return Rejection(
                        "host %s already takes instance %s of this request and "
                        "plugin %s cannot count it before the host publishes "
                        "again: one instance of the request per host"
                        % (host_state.host, instance, name), plugin=name)
                try:
                    result[name] = consume(assignment)
                except AssignmentConflict as err:
                    return Rejection("host %s: %s" % (host_state.host, err.reason),
                                     plugin=name)
        return result

    def _hook(self, host_state: Any) -> None:
        """Have nova's ``consume_from_request`` of this host (which nova's
        scheduler calls on the host it selected and claimed for an
        instance, before the next instance of the request) record the
        decision (:meth:`selected`), and ``consider_as_alternate`` (nova
        with contrib/nova's 0003 patch: called on each alternate host it
        returns) record the alternate's (:meth:`alternate`). Installed once
        per host state, on the object (nova keeps its host states between
        requests)."""
        if getattr(host_state, "_compute_plugins_hook", None) is self:
            return
        method = getattr(type(host_state), "consume_from_request", None)
        if method is None:
            return  # not nova's HostState: nothing selects through it
        original = method.__get__(host_state)

        def consume_from_request(spec_obj: Any) -> Any:
            answer = original(spec_obj)
            self.selected(host_state, spec_obj)
            return answer

        host_state.consume_from_request = consume_from_request
        considered = getattr(type(host_state), "consider_as_alternate", None)
        if considered is not None:
            told = considered.__get__(host_state)

            def consider_as_alternate(spec_obj: Any, instance_uuid: str,
                                      allocation_request: Mapping[str, Any]) -> Any:
                answer = told(spec_obj, instance_uuid, allocation_request)
                self.alternate(host_state, spec_obj, instance_uuid,
                               allocation_request)
                return answer

            host_state.consider_as_alternate = consider_as_alternate
        host_state._compute_plugins_hook = self

    def selected(self, host_state: Any, spec_obj: Any) -> Optional[Decision]:
        """nova selected ``host_state`` for the instance of ``spec_obj``
        (and claimed its first candidate): record the decision of that
        candidate for the compute (:mod:`compute_plugins.nova.decisions`)
        and count it for the next instances of the request on this host.
        Returns the decision (None: the filter did not decide this
        instance on this host)."""
        instance = _instance_of(spec_obj)
        spec = getattr(host_state, "plugin_spec", None)
        if (instance is None or spec is None
                or getattr(host_state, "plugin_instance", None) != instance):
            return None
        left = getattr(host_state, "allocation_candidates", None) or ()
        key = candidate_key(left[0]) if left else ""
        decision: Optional[Decision] = (
            getattr(host_state, "plugin_decisions", None) or {}).get(key)
        if decision is None:
            return None
        token = _request_token(spec_obj)
        given = getattr(host_state, "plugin_given", None)
        earlier = list(given[1]) if given and given[0] == token else []
        host_state.plugin_given = (token, earlier + [(instance, decision)])
        self._record(instance, host_state.host, spec, decision)
        return decision

    def alternate(self, host_state: Any, spec_obj: Any, instance_uuid: str,
                  candidate: Mapping[str, Any]) -> Optional[Decision]:
        """nova returns ``host_state`` as an alternate of ``instance_uuid``
        with ``candidate`` (nova with contrib/nova's 0003 patch; its
        conductor claims that candidate on a reschedule without the
        scheduler): record the candidate's decision for that instance and
        host, as :meth:`selected` does, and count nothing (the candidate is
        not claimed). The decision is the one kept for that candidate when
        the filter passed the host in this request (``spec_obj``'s): for a
        request of several instances nova picks every alternate after the
        last instance's filtering, whose spec names another instance, and
        the instances of one request share the flavor, image and ports.
        A candidate's decision goes to the first instance of the request
        nova names it for, only: nova hands one alternate's candidate to
        every instance of the request, and two instances rescheduled there
        together would each find the other's recorded (never executed)
        decision taking the same CPUs and both refuse. A later instance
        gets no decision there and, on a reschedule, nova's own claim (as
        stock nova; its compute says so).

        Returns the decision (None: the filter kept none for the
        candidate in this request, or gave it to an earlier instance)."""
        spec = getattr(host_state, "plugin_spec", None)
        token = _request_token(spec_obj)
        if (spec is None or getattr(host_state, "plugin_request", None)
                != token):
            return None
        key = candidate_key(candidate)
        decision: Optional[Decision] = (
            getattr(host_state, "plugin_decisions", None) or {}).get(key)
        if decision is None:
            return None
        handed = getattr(host_state, "plugin_alternates", None)
        given: dict[str, str] = dict(handed[1]) if handed and handed[0] == token else {}
        if given.setdefault(key, str(instance_uuid)) != str(instance_uuid):
            LOG.info("PluginFitFilter: host %s is an alternate of instance %s "
                     "with the candidate whose decision went to instance %s "
                     "of the same request: none recorded for %s (a reschedule "
                     "there gets nova's own claim)", host_state.host,
                     instance_uuid, given[key], instance_uuid)
            return None
        host_state.plugin_alternates = (token, given)
        self._record(str(instance_uuid), host_state.host, spec, decision)
        return decision

    def _record(self, instance: str, host: str, spec: RequestSpec,
                decision: Decision) -> None:
        """Record ``decision`` for ``instance`` on ``host`` for its compute
        (a failure is logged: the compute then finds none)."""
        if self.decisions is None:
            return
        try:
            self.decisions.record(instance, host, spec.with_decision(decision))
        except (HostStateError, ValueError) as err:
            LOG.error("PluginFitFilter could not record the decision for "
                      "instance %s on host %s: %s; its compute will find "
                      "none and refuse to guess", instance, host, err)

    @staticmethod
    def _decision(host_state: Any, candidate: Mapping[str, Any],
                  result: FitResult) -> Decision:
        return Decision.from_allocation_request(
            host_state.host, candidate, nodename=host_state.nodename or "",
            assignments=result.assignments)


def record_selection(spec_obj: Any, host_state: Any,
                     candidate: Optional[Mapping[str, Any]] = None) -> Decision:
    """Write the decision for ``candidate`` on ``host_state`` (default: the
    first candidate left, the one nova's scheduler claims) into nova's
    ``spec_obj``, for the compute to read back (``compute_plugins.nova.spec.from_nova``).

    :raises LookupError: the filter kept no decision for that candidate.
    """
    decisions = getattr(host_state, "plugin_decisions", None) or {}
    if candidate is None:
        left = getattr(host_state, "allocation_candidates", None) or ()
        candidate = left[0] if left else None
    key = "" if candidate is None else candidate_key(candidate)
    if key not in decisions:
        raise LookupError("PluginFitFilter kept no decision for host %s and "
                          "this candidate" % host_state.host)
    decision: Decision = decisions[key]
    nova_spec.record(spec_obj, host_state.plugin_spec, decision)
    return decision
