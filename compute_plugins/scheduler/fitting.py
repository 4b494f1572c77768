"""Every plugin's ``fit`` on each candidate host's published states.

The scheduler reads the candidates' states from the host-state store in one
read (:meth:`~compute_plugins.hoststate.store.HostStateStore.get_hosts`),
decodes each plugin's document (:func:`compute_plugins.fit.decode_state`)
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
from collections.abc import Mapping
from typing import Any

from oslo_log import log as logging

from compute_plugins.fit import FitResult, StateFormatError, decode_state, fit_all
from compute_plugins.hoststate.store import HostSnapshot
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


def fit_host(plugins: Any, spec: Any, snapshot: HostSnapshot) -> HostFit:
    """Every requested plugin's ``fit`` on ``snapshot``."""
    loaded = _plugins_of(plugins)
    states: dict[str, Any] = {}
    broken: list[Rejection] = []
    for name in spec.requests:
        plugin = loaded.get(name)
        if plugin is None:
            broken.append(Rejection("the plugin is not loaded in this "
                                    "scheduler", plugin=name))
            continue
        doc = snapshot.states.get(name)
        if doc is None:
            broken.append(Rejection("the host published no state for this "
                                    "plugin (not enabled there, or its "
                                    "discovery failed)", plugin=name))
            continue
        try:
            states[name] = decode_state(plugin, doc)
        except StateFormatError as err:
            broken.append(Rejection("the host's published state cannot be "
                                    "read: %s" % err, plugin=name))
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
              snapshots: Mapping[str, HostSnapshot]) -> dict[str, HostFit]:
    """:func:`fit_host` on every snapshot, by host."""
    return {host: fit_host(plugins, spec, snap) for host, snap in snapshots.items()}
