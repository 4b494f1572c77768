"""Every plugin's ``fit`` on each candidate host's published states.

The scheduler reads the candidates' states from the host-state store in one
read (:meth:`~compute_plugins.hoststate.store.HostStateStore.get_hosts`),
decodes each plugin's document (:func:`compute_plugins.fit.decode_state`;
kept per host generation by :class:`StateCache`)
and runs :func:`compute_plugins.fit.fit_all` offline (``placement=None``):
the plugins choose the providers themselves, from the state, and the
scheduler writes the allocation their assignments take
(:mod:`compute_plugins.scheduler.allocation`).

A host whose state a requested plugin did not publish, cannot be read, or
makes the plugin fail, is a rejection naming the plugin: never an error of
the whole request.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from oslo_log import log as logging

from compute_plugins.fit import FitResult, StateFormatError, decode_state, fit_all
from compute_plugins.hoststate.records import HostSnapshot
from compute_plugins.hoststate.transport import HostPublication
from compute_plugins.plugin import Rejection

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
    states: Mapping[str, Any]
    result: FitResult


def _plugins_of(plugins: Any) -> Mapping[str, Any]:
    return getattr(plugins, "plugins", plugins)  # type: ignore[no-any-return]


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
    states: Mapping[str, Any]
    broken: Mapping[str, str]


def decode_host(plugins: Any, snapshot: HostSnapshot) -> DecodedHost:
    """Every loaded plugin's state of ``snapshot``, decoded."""
    loaded = _plugins_of(plugins)
    states: dict[str, Any] = {}
    broken: dict[str, str] = {}
    for name, doc in snapshot.states.items():
        plugin = loaded.get(name)
        if plugin is None:
            continue
        try:
            states[name] = decode_state(plugin, doc)
        except StateFormatError as err:
            broken[name] = str(err)
    return DecodedHost(snapshot, states, broken)


class StateCache:
    """Decoded states by host, kept while the host's generation stands.

    A host's states change only with its generation (the store writes
    both together), so a long-running scheduler reads and decodes a host
    again only after it published something new: the store's cheap
    ``generations()`` tells which.
    """

    def __init__(self) -> None:
        self._hosts: dict[str, DecodedHost] = {}
        self._lock = threading.Lock()

    def get(self, plugins: Any, store: HostPublication, hosts: Sequence[str],
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


def fit_host(plugins: Any, spec: Any, host: DecodedHost) -> HostFit:
    """Every requested plugin's ``fit`` on ``host``'s states."""
    loaded = _plugins_of(plugins)
    snapshot = host.snapshot
    states: dict[str, Any] = {}
    broken: list[Rejection] = []
    for name in spec.requests:
        if name not in loaded:
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
    result = FitResult(rejections=tuple(broken))
    if not broken:
        try:
            result = fit_all({n: loaded[n] for n in states}, states, spec,
                             placement=None)
        except Exception as err:  # noqa: BLE001 - a plugin's bug, one host
            LOG.exception("fit failed on host %s", snapshot.host)
            result = FitResult(rejections=(Rejection(
                "a plugin failed while fitting: %s: %s"
                % (type(err).__name__, err)),))
    return HostFit(host=snapshot.host, nodename=snapshot.nodename,
                   generation=snapshot.generation, root_uuid=_root(snapshot),
                   states=states, result=result)


def fit_hosts(plugins: Any, spec: Any,
              hosts: Mapping[str, DecodedHost]) -> dict[str, HostFit]:
    """:func:`fit_host` on every host, by host."""
    return {name: fit_host(plugins, spec, host) for name, host in hosts.items()}
