"""Every plugin's ``fit`` on each candidate host's published states.

The scheduler reads the candidates' states from the host-state store in one
read (:meth:`~compute_plugins.hoststate.store.HostStateStore.get_hosts`),
decodes each plugin's document
(:meth:`compute_plugins.runtime.PluginSet.decode_states`; kept per host
generation by :class:`StateCache`) and runs every plugin's ``fit``
(:meth:`compute_plugins.runtime.PluginSet.fit`) offline (no mappings):
the plugins choose the providers themselves, from the state, and the
scheduler writes the allocation their assignments take
(:mod:`compute_plugins.scheduler.allocation`).

A host whose state a requested plugin did not publish, cannot be read, or
makes the plugin fail, is a rejection naming the plugin: never an error of
the whole request.

A fit is a pure function of the host's states and the plugins' requests,
so it is kept with the decoded states of that generation
(:attr:`DecodedHost.fits`, by the spec's ``requests``: kube-scheduler's
former equivalence cache, keyed here by the host's generation instead of
invalidated by events). A scheduler that places many guests of a few
flavors fits each host once per flavor and per state the host publishes,
not once per decision: between two decisions only the hosts that claimed
something publish a new generation.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import weakref
from collections.abc import Collection, Hashable, Mapping, Sequence
from typing import Any, Optional

from oslo_log import log as logging

from compute_plugins.hoststate.records import HostSnapshot
from compute_plugins.hoststate.transport import HostPublication
from compute_plugins.plugin.contract import Rejection
from compute_plugins.request.spec import RequestSpec
from compute_plugins.runtime import FitResult, PluginSet
from compute_plugins.scheduler.liveness import KeptLiveness, Liveness

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class HostFit:
    """One host's verdict.

    :param host: the host (service host name).
    :param nodename: its node name (its root provider's name).
    :param generation: the store generation of the states fitted.
    :param root_uuid: its root provider's uuid ("" when it published none).
    :param states: plugin name -> decoded state (the plugins with a request).
    :param result: every assignment, or every plugin's rejection.
    """

    host: str
    nodename: str
    generation: int
    root_uuid: str
    states: Mapping[str, object]
    result: FitResult
    #: The host's weight by the weighers' multipliers
    #: (:func:`compute_plugins.scheduler.weighers.weigh`): a pure function
    #: of these states, kept with the fit (the same lifetime as
    #: :attr:`DecodedHost.fits`), so that a plan on kept fits weighs by
    #: lookups. multipliers -> (the plugins that weighed, the weight).
    weights: dict[Hashable, tuple[PluginSet, float]] = dataclasses.field(
        default_factory=dict, compare=False, repr=False)


def _root(snapshot: HostSnapshot) -> str:
    for uuid, name in snapshot.providers.items():
        if name == snapshot.nodename:
            return uuid
    return ""


@dataclasses.dataclass(frozen=True)
class DecodedHost:
    """A host's published states, decoded once per generation.

    :param snapshot: the host as the store holds it.
    :param states: plugin -> decoded state.
    :param broken: plugin -> why its state cannot be read.
    """

    snapshot: HostSnapshot
    states: Mapping[str, object]
    broken: Mapping[str, str]
    #: The fits made on these states, by the plugins and the spec's
    #: ``requests`` (:func:`fit_host`; at most :data:`MAX_KEPT_FITS`).
    fits: dict[Hashable, tuple[PluginSet, HostFit]] = dataclasses.field(
        default_factory=dict, compare=False, repr=False)


#: Fits kept per host generation (request shapes: flavors, images' and
#: ports' needs); the oldest kept is dropped first.
MAX_KEPT_FITS = 32
#: Fits kept by one scheduler, all hosts together (:class:`KeptFits`); the
#: oldest kept is dropped first. A fit holds the plugins' assignments (a
#: few KiB with a NUMA topology): 32 per host at 10,000 hosts reached about
#: 1 GiB; this bound keeps about 4 request shapes per host at 10,000 hosts
#: (a few hundred MiB at most).
MAX_FITS = 40_000


class KeptFits:
    """The order in which fits were kept, over every host, so that one
    scheduler keeps at most ``limit`` (the oldest dropped first), however
    many hosts and request shapes it sees.

    Holds the hosts weakly: a host's decoded states replaced by a newer
    generation take their fits with them; their entries here then count
    until they come round (the fits kept are at most ``limit``).
    """

    def __init__(self, limit: int = MAX_FITS) -> None:
        self.limit = max(1, limit)
        self._order: collections.deque[
            tuple[weakref.ref[DecodedHost], Hashable]] = collections.deque()
        self._lock = threading.Lock()

    def kept(self, host: DecodedHost, key: Hashable) -> None:
        """``host`` keeps a fit under ``key``: the oldest kept are dropped
        past the limit."""
        with self._lock:
            self._order.append((weakref.ref(host), key))
            while len(self._order) > self.limit:
                ref, old = self._order.popleft()
                holder = ref()
                if holder is not None:
                    holder.fits.pop(old, None)

    def __len__(self) -> int:
        """Entries (at least the fits still kept)."""
        return len(self._order)


def decode_host(plugins: PluginSet, snapshot: HostSnapshot) -> DecodedHost:
    """Every loaded plugin's state of ``snapshot``, decoded (a state that
    cannot be read is logged, once per generation)."""
    states, broken = plugins.decode_states(snapshot.states)
    for name, why in sorted(broken.items()):
        LOG.error("host %s: state of plugin %s cannot be read: %s",
                  snapshot.host, name, why)
    return DecodedHost(snapshot, states, broken)


class StateCache:
    """Decoded states by host, kept while the host's generation stands.

    A host's states change only with its generation (the store writes
    both together), so a long-running scheduler reads and decodes a host
    again only after it published something new: the store's cheap
    ``generations()`` tells which.
    """

    def __init__(self, max_fits: int = MAX_FITS) -> None:
        self._hosts: dict[str, DecodedHost] = {}
        self._lock = threading.Lock()
        #: The fits kept with these states, bounded all hosts together.
        self.fits = KeptFits(max_fits)

    def prune(self, generations: Mapping[str, int],
              changed: Optional[Collection[str]] = None) -> None:
        """Forget the hosts no longer among ``generations`` (every live
        host's: gone, renamed or down) and those whose generation went back
        (the store was recreated or restored, or another host took the name):
        a generation alone names a state only while it only grows, and a
        host that climbed back to the cached number must not be served the
        old state.

        :param changed: only these hosts can have gone or gone back since
            the last prune (the hosts written, gone down or back since:
            :meth:`~.liveness.KeptLiveness.read_changes`): only they are
            looked at, not every host kept (a decision's cost grows with
            what changed, not with the hosts). None: every host kept.
        """
        with self._lock:
            hosts = self._hosts
            if changed is None:
                for host in [h for h, decoded in hosts.items()
                             if generations.get(h, 0) < decoded.snapshot.generation]:
                    del hosts[host]
                return
            for host in changed:
                decoded = hosts.get(host)
                if (decoded is not None
                        and generations.get(host, 0) < decoded.snapshot.generation):
                    del hosts[host]

    def read_pruned(self, kept: KeptLiveness, store: HostPublication
                    ) -> tuple[Liveness, Optional[frozenset[str]]]:
        """The hosts of ``store`` as ``kept`` reads them with their changes
        (:meth:`~.liveness.KeptLiveness.read_changes`), and this cache
        pruned by that read (:meth:`prune`): what every long-running
        holder of a cache does before it serves states, so that the hosts
        gone are forgotten (the cache does not grow with every host that
        ever was) and a host gone back is read again.

        :returns: the read, and the hosts it says changed (None: any).
        """
        alive, changed = kept.read_changes(store)
        self.prune(alive.generations, changed)
        return alive, changed

    def __len__(self) -> int:
        return len(self._hosts)

    def get(self, plugins: PluginSet, store: HostPublication, hosts: Sequence[str],
            generations: Mapping[str, int]) -> dict[str, DecodedHost]:
        """``hosts`` decoded: from the cache when their generation is the
        one in ``generations``, else read (one read for all) and decoded."""
        with self._lock:
            cached = {h: self._hosts[h] for h in hosts if h in self._hosts
                      and self._hosts[h].snapshot.generation == generations.get(h)}
        missing = [h for h in hosts if h not in cached]
        if missing:
            fresh = {h: decode_host(plugins, snap)
                     for h, snap in store.get_hosts(missing).items()}
            with self._lock:
                self._hosts.update(fresh)
            cached.update(fresh)
        return cached


def _fit_key(plugins: PluginSet, spec: RequestSpec) -> Optional[Hashable]:
    """What a fit depends on besides the host's states: the plugins (by
    identity: the kept fit holds them, :func:`fit_host` checks) and the
    spec's typed requests (None: a request that cannot be hashed, never
    kept)."""
    key: Any = (id(plugins), spec.requests)
    try:
        hash(key)
    except TypeError:
        return None
    return key  # type: ignore[no-any-return]


_UNKEYED: Any = object()


def fit_host(plugins: PluginSet, spec: RequestSpec, host: DecodedHost,
             bound: Optional[KeptFits] = None, key: Any = _UNKEYED) -> HostFit:
    """Every requested plugin's ``fit`` on ``host``'s states; a requested
    plugin that is not loaded here, or whose state the host did not publish
    or cannot be read, rejects the host without a fit. The same requests
    on the same decoded states are fitted once (:attr:`DecodedHost.fits`;
    at most :data:`MAX_KEPT_FITS` per host, and with ``bound`` at most its
    limit all hosts together).

    :param key: ``_fit_key(plugins, spec)``, made once by a caller that
        fits many hosts (:func:`fit_hosts`); default: made here.
    """
    if key is _UNKEYED:
        key = _fit_key(plugins, spec)
    kept = host.fits.get(key) if key is not None else None
    if kept is not None and kept[0] is plugins:
        return kept[1]
    fit = _fit_host(plugins, spec, host)
    if key is not None:
        if len(host.fits) >= MAX_KEPT_FITS:
            try:
                del host.fits[next(iter(host.fits))]
            except (KeyError, RuntimeError, StopIteration):
                pass  # NOTE: another thread dropped one meanwhile
        host.fits[key] = (plugins, fit)
        if bound is not None:
            bound.kept(host, key)
    return fit


def _fit_host(plugins: PluginSet, spec: RequestSpec, host: DecodedHost) -> HostFit:
    snapshot = host.snapshot
    states: dict[str, object] = {}
    broken: list[Rejection] = []
    for name in spec.requests:
        if name not in plugins:
            broken.append(Rejection("the plugin is not loaded in this "
                                    "scheduler", plugin=name))
        elif name in host.broken:
            broken.append(Rejection("the host's published state cannot be "
                                    "read: %s" % host.broken[name], plugin=name))
        elif name not in host.states:
            broken.append(Rejection("the host published no state for this "
                                    "plugin (not enabled there, or its "
                                    "discovery failed)", plugin=name))
        else:
            states[name] = host.states[name]
    result = (FitResult(rejections=tuple(broken)) if broken else
              plugins.only(states).fit(states, spec, host=snapshot.host))
    return HostFit(host=snapshot.host, nodename=snapshot.nodename,
                   generation=snapshot.generation, root_uuid=_root(snapshot),
                   states=states, result=result)


def fit_hosts(plugins: PluginSet, spec: RequestSpec,
              hosts: Mapping[str, DecodedHost],
              bound: Optional[KeptFits] = None) -> dict[str, HostFit]:
    """:func:`fit_host` on every host, by host."""
    key = _fit_key(plugins, spec)
    return {name: fit_host(plugins, spec, host, bound, key)
            for name, host in hosts.items()}
