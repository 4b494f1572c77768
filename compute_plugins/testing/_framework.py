"""The one place the conformance kit calls the framework.

Everything the kit asks of the framework goes through this module: loading
plugins side by side (and by entry point), discovery, parsing a request into
a RequestSpec, host states under the assignments in force, every plugin's
``fit`` and ``verify``, a plugin's ``alternatives``, the guest domain, and
the JSON codecs of requests, states and assignments. The checks call no
framework module and no plugin hook directly, so the kit follows the
framework's plugin runtime by this module alone.

Every call goes through the plugin runtime
(:class:`~compute_plugins.runtime.PluginSet`, which a
:class:`~compute_plugins.runtime.manager.PluginManager` over the ready instances
builds), as the agent and the scheduler make them.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging as std_logging
from collections.abc import Iterator, Mapping, Sequence
from importlib import metadata
from typing import Any, Optional

from oslo_config import cfg
from stevedore import extension

from compute_plugins import conf as conf_areas
from compute_plugins import exception
from compute_plugins.compute import guest
from compute_plugins.host import discover_host
from compute_plugins.host.model import HostInfo
from compute_plugins.plugin.contract import Rejection
from compute_plugins.plugin.state import AssignmentConflict
from compute_plugins.request.errors import Problem, RequestValidationError
from compute_plugins.request.groups import Decision, PluginAssignment, PluginRequest
from compute_plugins.request.inputs import RequestInput
from compute_plugins.request.spec import RequestSpec
from compute_plugins.request.types import FrozenMap, decode, encode
from compute_plugins.runtime import AnyPlugin, PluginSet
from compute_plugins.runtime.manager import NAMESPACE, PluginManager, available_plugins
from compute_plugins.runtime.search import FitResult

__all__ = ["CONTRACT_ERRORS", "AnyPlugin", "FitResult", "GuestConfigError", "Loaded",
           "PluginAssignment", "PluginRequest", "Problem", "Rejection", "RequestInput",
           "RequestSpec", "alternatives", "assignment_round_trip", "build_spec", "config",
           "discover", "domain_xml", "fit", "group_providers", "host_states", "installed_class",
           "installed_names", "load", "load_host", "quiet", "request_round_trip",
           "samples", "spec_doc", "state_doc", "state_round_trip", "value_doc", "verify"]

GuestConfigError = guest.GuestConfigError


def _entry_point(plugin: AnyPlugin) -> metadata.EntryPoint:
    """The entry point ``plugin``'s class would have (the framework names
    it in a plugin's failures)."""
    cls = type(plugin)
    return metadata.EntryPoint(name=plugin.name, group=NAMESPACE,
                               value="%s:%s" % (cls.__module__, cls.__qualname__))


class Loaded:
    """Plugins loaded side by side, as the framework runs them on a host.

    :param plugins: ready plugin instances (the plugin under test and the
        plugins it runs after), all built on ``conf``.
    :param conf: their configuration.
    """

    def __init__(self, plugins: Sequence[AnyPlugin], conf: cfg.ConfigOpts) -> None:
        extensions = [extension.Extension(p.name, _entry_point(p), type(p), p)
                      for p in plugins]
        self.manager = PluginManager(
            conf, extension_manager=extension.ExtensionManager.make_test_instance(
                extensions))

    @property
    def plugins(self) -> PluginSet:
        """The plugin runtime over them (a mapping of name -> instance)."""
        return self.manager.plugins

    def earlier_than(self, name: str, assignments: Mapping[str, PluginAssignment]
                     ) -> dict[str, PluginAssignment]:
        """The ``assignments`` of the plugins whose ``fit`` runs before
        ``name``'s: what its ``fit`` got as ``earlier``."""
        order = self.plugins.order
        before = order[:order.index(name)]
        return {n: assignments[n] for n in before if n in assignments}


def load(plugins: Sequence[AnyPlugin], conf: cfg.ConfigOpts) -> Loaded:
    """``plugins`` loaded together (see :class:`Loaded`)."""
    return Loaded(plugins, conf)


def config(config_files: Sequence[str]) -> cfg.ConfigOpts:
    """A private configuration read from ``config_files`` (the framework's
    option groups registered; plugins register theirs when built on it)."""
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    args: list[str] = []
    for path in config_files:
        args += ["--config-file", path]
    conf(args, project="compute-plugins", default_config_files=[],
         default_config_dirs=[])
    return conf


def installed_names() -> list[str]:
    """The plugins installed in the ``compute_plugins.resources`` namespace."""
    return available_plugins()


def installed_class(name: str) -> type[AnyPlugin]:
    """The class of the installed plugin ``name`` (imports it).

    :raises LookupError: no such plugin is installed.
    """
    for entry_point in metadata.entry_points(group=NAMESPACE, name=name):
        loaded: type[AnyPlugin] = entry_point.load()
        return loaded
    raise LookupError("no plugin %r is installed in %s (installed: %s)"
                      % (name, NAMESPACE, ", ".join(available_plugins()) or "none"))


def load_host(path: str) -> HostInfo:
    """The host of the snapshot directory ``path``."""
    return discover_host(host_snapshot=path)


def samples(plugin: AnyPlugin) -> tuple[RequestInput, ...]:
    """The plugin's ``sample_requests()``."""
    return tuple(plugin.sample_requests())


def discover(loaded: Loaded, host: HostInfo) -> dict[str, str]:
    """Every plugin's view of ``host``; plugin -> why it failed, for those
    that did."""
    loaded.manager.discover(host)
    return {name: failure.reason for name, failure in loaded.manager.failures.items()}


def build_spec(loaded: Loaded, request_input: RequestInput
               ) -> tuple[Optional[RequestSpec], tuple[Problem, ...]]:
    """The RequestSpec of ``request_input``, or every problem found."""
    try:
        return RequestSpec.build(loaded.plugins, request_input), ()
    except RequestValidationError as err:
        return None, tuple(err.problems)


def spec_doc(spec: RequestSpec) -> Any:
    """``spec`` as its JSON document."""
    return spec.to_dict()


def host_states(loaded: Loaded, nodename: str,
                usage: Mapping[str, Sequence[PluginAssignment]]
                ) -> tuple[dict[str, Any], tuple[Rejection, ...]]:
    """Every plugin's host state under ``usage`` (plugin -> the assignments
    in force), and a rejection per plugin that could build none."""
    states, broken = loaded.manager.host_states(nodename, usage)
    return states, tuple(broken)


def fit(loaded: Loaded, states: Mapping[str, Any], spec: RequestSpec) -> FitResult:
    """Every plugin's ``fit`` of ``spec`` on ``states`` (offline: the
    plugins choose their providers)."""
    return loaded.plugins.fit(states, spec, None)


def verify(loaded: Loaded, states: Mapping[str, Any], spec: RequestSpec,
           assignments: Mapping[str, PluginAssignment], nodename: str
           ) -> tuple[Rejection, ...]:
    """Every plugin's ``verify`` of the decision ``assignments`` of
    ``spec`` on ``states`` (empty: it holds)."""
    decided = spec.with_decision(Decision(host=nodename, nodename=nodename,
                                          assignments=FrozenMap(assignments)))
    return loaded.plugins.verify(states, decided, host=nodename)


def alternatives(loaded: Loaded, name: str, state: Any, spec: RequestSpec,
                 earlier: Mapping[str, PluginAssignment], limit: int
                 ) -> list[PluginAssignment]:
    """At most ``limit`` of plugin ``name``'s ``alternatives`` (offline).

    A plugin that raises raises here (the kit reports it).
    """
    plugin = loaded.plugins[name]
    offered = plugin.alternatives(state, spec.requests[name], None, FrozenMap(earlier))
    return list(itertools.islice(offered, limit))


def group_providers(plugin: AnyPlugin, request: PluginRequest,
                    assignment: PluginAssignment, state: Any
                    ) -> Optional[Mapping[str, str]]:
    """The plugin's ``group_providers`` of a decision: group suffix -> the
    provider it takes the group from (None: the plugin does not say).

    A plugin that raises raises here (the kit reports it).
    """
    return plugin.group_providers(request, assignment, state)


def domain_xml(loaded: Loaded, spec: RequestSpec,
               assignments: Mapping[str, PluginAssignment], name: str) -> str:
    """The guest domain of ``assignments``: every plugin's fragments
    assembled.

    :raises GuestConfigError: a fragment cannot be part of a domain.
    """
    return guest.domain_xml(spec, assignments, loaded.plugins, name=name)


def _through_json(doc: Any) -> Any:
    return json.loads(json.dumps(doc))


def request_round_trip(plugin: AnyPlugin, request: PluginRequest) -> PluginRequest:
    """``request`` through JSON text and back with the type the framework
    reads the plugin's requests with.

    :raises Exception: what the codec raises (no type, a wrong shape).
    """
    kind = plugin.request_type
    if kind is None:
        raise LookupError("plugin %s declares no request type" % plugin.name)
    back: PluginRequest = decode(kind, _through_json(encode(request)),
                                 "%s.request" % plugin.name)
    return back


def assignment_round_trip(plugin: AnyPlugin,
                          assignment: PluginAssignment) -> PluginAssignment:
    """``assignment`` through JSON text and back (see
    :func:`request_round_trip`)."""
    kind = plugin.assignment_type
    if kind is None:
        raise LookupError("plugin %s declares no assignment type" % plugin.name)
    back: PluginAssignment = decode(kind, _through_json(encode(assignment)),
                                    "%s.assignment" % plugin.name)
    return back


def state_doc(plugin: AnyPlugin, state: Any) -> Any:
    """``state`` as the JSON document a host publishes."""
    return PluginSet.of({plugin.name: plugin}).encode_state(plugin.name, state)


def state_round_trip(plugin: AnyPlugin, state: Any) -> Any:
    """``state`` through JSON text and back, as the scheduler reads it."""
    plugins = PluginSet.of({plugin.name: plugin})
    return plugins.decode_state(
        plugin.name, _through_json(plugins.encode_state(plugin.name, state)))


def value_doc(value: Any) -> Any:
    """Any value of the model (a request, state, assignment, rejection) as
    its JSON document."""
    return encode(value)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The framework's error logs held back while the kit makes plugins
    fail on purpose (the failures are reported by the checks)."""
    logger = std_logging.getLogger("compute_plugins")
    level = logger.level
    logger.setLevel(std_logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


#: Per hook, the exceptions the plugin contract lets a plugin raise (the
#: framework handles them as documented): anything else is a plugin's bug.
CONTRACT_ERRORS: Mapping[str, tuple[type[BaseException], ...]] = {
    "discover": (exception.ComputePluginsError,),
    "parse_request": (RequestValidationError, exception.ConfigError),
    "host_state": (AssignmentConflict,),
}
