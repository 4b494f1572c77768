"""``PluginFitFilter``: every plugin's ``fit`` as a nova scheduler filter.

Enable it in nova's scheduler::

    [filter_scheduler]
    available_filters = nova.scheduler.filters.all_filters
    available_filters = compute_plugins.nova.filters.PluginFitFilter
    enabled_filters = ComputeFilter,...,PluginFitFilter
    [compute_plugins]
    config_file = /etc/compute-plugins/compute-plugins.conf

Per request (:meth:`PluginFitFilter.filter_all`, which nova's filter
handler calls once with every host) the filter builds our RequestSpec once
from nova's flavor, image, ports and hints
(:func:`compute_plugins.nova.spec.request_input`; never from a spec
recorded in the hints, which a resize carries with its old flavor), reads
every
host's published plugin states in one read of the host-state store (each
host decoded again only when its generation changed), and runs every
plugin's ``fit`` (:meth:`compute_plugins.runtime.PluginSet.fit`) per
allocation candidate of the host
(``candidate["mappings"]``). It keeps the candidates that fit, as nova's
``CandidateFilterMixin`` does, and keeps each one's decision on the host:
``host_state.plugin_decisions`` (candidate key -> ``Decision``) and
``host_state.plugin_rejections`` (the reasons when nothing fits). A request
our plugins cannot parse passes no host (nova's NoValidHost) with one ERROR
line naming every problem: a filter never raises into nova's scheduler.
:func:`record_selection` writes the decision of the candidate the scheduler
claims into nova's spec (a scheduler hint, see
:mod:`compute_plugins.nova.spec`), where the compute reads it back.

nova builds its own Placement query, whose request groups are not ours
(its guest CPUs and memory are one unsuffixed group, its other suffixes
port and PCI request ids): a candidate from our own query (``mappings``
with our reserved ``_`` suffixes, naming every group suffix our plugins
use) restricts each plugin to those providers; any other candidate is
fitted with no mappings,
each plugin choosing its providers on the host, as ``compute-plugins fit``
does (the result is then the same for every such candidate and computed
once per host).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, Protocol

from nova.scheduler import filters
from nova.scheduler import utils as scheduler_utils
from oslo_log import log as logging

from compute_plugins.hoststate.store import HostStateStore
from compute_plugins.nova import spec as nova_spec
from compute_plugins.plugin.contract import Mappings, Rejection
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

LOG = logging.getLogger(__name__)

__all__ = ["HostStates", "PluginFitFilter", "StatesSource", "StoreStates",
           "candidate_key", "record_selection"]

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
    generation (:class:`~compute_plugins.scheduler.fitting.StateCache`).

    :param store: the host-state store.
    :param plugins: the loaded plugins.
    """

    def __init__(self, store: HostStateStore, plugins: PluginSet) -> None:
        self.store = store
        self.plugins = plugins
        self._cache = StateCache()

    def get(self, hosts: Iterable[str]) -> dict[str, HostStates]:
        """host -> its plugins' states; hosts that never published are
        absent, and so is a plugin whose state cannot be read (logged)."""
        wanted = sorted(set(hosts))
        generations = self.store.generations(wanted)
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


class PluginFitFilter(filters.BaseHostFilter):  # type: ignore[misc]  # nova is untyped
    """Pass the hosts where every plugin's ``fit`` succeeds on at least one
    allocation candidate; keep only those candidates and their decisions.

    nova's filter handler constructs it without arguments: the plugins and
    the host-state store then come from the configuration files nova's
    ``[compute_plugins] config_file`` names.

    :param plugins: the loaded plugins.
    :param states: where hosts' states come from (:class:`StoreStates`).
    """

    RUN_ON_REBUILD = False

    def __init__(self, plugins: Optional[PluginSet] = None,
                 states: Optional[StatesSource] = None) -> None:
        super().__init__()
        if plugins is None or states is None:
            from compute_plugins.nova import conf as nova_conf
            from compute_plugins.runtime.manager import PluginManager
            conf = nova_conf.plugin_conf()
            if plugins is None:
                plugins = PluginManager(conf).plugins
            if states is None:
                states = StoreStates(HostStateStore.from_config(conf), plugins)
        self.plugins = plugins
        self.states = states

    def filter_all(self, filter_obj_list: Iterable[Any], spec_obj: Any) -> Any:
        """Filter every host of one request: the spec is built once and the
        states read in one go (nova calls this once per request)."""
        if not self.RUN_ON_REBUILD and scheduler_utils.request_is_rebuild(spec_obj):
            return filter_obj_list
        hosts = list(filter_obj_list)
        spec = self._parse(spec_obj)
        if isinstance(spec, Rejection):
            for host in hosts:
                self._reject(host, spec)
            return []
        states = self.states.get([h.host for h in hosts]) if spec.requests else {}
        return [h for h in hosts if self._passes(h, spec, states.get(h.host))]

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool:
        """One host (nova's per-host API; :meth:`filter_all` is the fast
        path: it parses the spec once for every host)."""
        spec = self._parse(spec_obj)
        if isinstance(spec, Rejection):
            self._reject(host_state, spec)
            return False
        states = self.states.get([host_state.host]) if spec.requests else {}
        return self._passes(host_state, spec, states.get(host_state.host))

    def spec_for(self, spec_obj: Any) -> RequestSpec:
        """Our spec for nova's, parsed from its flavor, image, ports and
        hints, once per call (:meth:`filter_all`: once per request).

        A spec recorded in nova's hints (:func:`record_selection`) is never
        used here: a resize or migration keeps nova's spec, hints included,
        with a new flavor, and a user can send any hint through nova's API.

        :raises RequestValidationError: the flavor or image is invalid for a
            plugin (nova's API validates extra specs first, so this is a
            key nova does not know).
        :raises RequestInputError: the flavor or a port cannot be used.
        """
        return RequestSpec.build(self.plugins, nova_spec.request_input(spec_obj))

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
                states: Optional[HostStates]) -> bool:
        host_state.plugin_spec = spec
        host_state.plugin_decisions = {}
        host_state.plugin_rejections = ()
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
        rejections: Sequence[Rejection] = ()
        for candidate in candidates:
            placement = _placement(spec, candidate)
            if placement is None:
                if offline is None:
                    offline = self.plugins.fit(states, spec, None,
                                               host=host_state.host)
                result = offline
            else:
                result = self.plugins.fit(states, spec, placement,
                                          host=host_state.host)
            if result.fits:
                kept.append(candidate)
                host_state.plugin_decisions[candidate_key(candidate)] = (
                    self._decision(host_state, candidate, result))
            else:
                rejections = result.rejections
        host_state.allocation_candidates = kept
        if not kept:
            host_state.plugin_rejections = tuple(rejections)
            LOG.debug("%s fails PluginFitFilter: %s", host_state.host,
                      "; ".join("%s: %s" % (r.plugin, r.reason) for r in rejections))
        return bool(kept)

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
