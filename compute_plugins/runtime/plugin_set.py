"""The loaded plugins as one typed set, and every call into them.

:class:`PluginSet` is an immutable, ordered mapping of plugin name to
plugin, each with the entry point it was loaded from. The
:class:`~compute_plugins.runtime.manager.PluginManager` builds it from stevedore's
extensions (``manager.plugins``); tests build one from instances
(:meth:`PluginSet.of`). Everything the framework asks of plugins goes
through it, with one isolation policy (:mod:`.calls`):

- a plugin that raises, or returns what its hook's contract does not allow,
  is *one reason naming it* (its entry point, and the host or request it
  concerns) for the caller to handle like any other: a
  :class:`~compute_plugins.plugin.contract.Rejection` of the host, a
  :class:`~compute_plugins.request.errors.Problem` of the request; never an
  exception into the scheduler, the agent or nova;
- the exceptions a hook's contract defines go through as they are: the
  request's :class:`~compute_plugins.request.errors.RequestValidationError`
  (its problems collected with the others') and a
  :class:`~compute_plugins.exception.ConfigError` (the operator's, a usage
  error) from ``parse_request``, an
  :class:`~compute_plugins.plugin.state.AssignmentConflict` from ``host_state``, a
  ``ValueError`` from ``allocations`` (:func:`~compute_plugins.plugin.contract.
  providers_by_suffix`).

The request side: :meth:`PluginSet.parse` (every plugin's typed request and
request groups, for :meth:`~compute_plugins.request.spec.RequestSpec.build`).
The host side: :meth:`PluginSet.host_states`, :meth:`PluginSet.encode_states`,
:meth:`PluginSet.decode_states`. The decision: :meth:`PluginSet.fit` (the
search of :mod:`.search`), :meth:`PluginSet.verify`,
:meth:`PluginSet.allocations`, :meth:`PluginSet.guest_fragments`,
:meth:`PluginSet.describe`, :meth:`PluginSet.utilization`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Optional, Protocol, TypeVar, Union, cast

from compute_plugins import exception
from compute_plugins.host.model import HostInfo
from compute_plugins.plugin.contract import (
    AssignmentT,
    GroupAllocation,
    GuestFragment,
    Mappings,
    Rejection,
    RequestT,
    ResourcePlugin,
    StateT,
    ViewT,
)
from compute_plugins.plugin.state import AssignmentConflict, PluginState, StateFormatError
from compute_plugins.plugin.topology import (
    TOPOLOGY,
    ReturnedGarbage,
    order_by_cell_devices,
    recorded_cells_problem,
)
from compute_plugins.request.errors import Problem, RequestValidationError
from compute_plugins.request.groups import (
    Decision,
    PluginAssignment,
    PluginRequest,
    RequestGroup,
)
from compute_plugins.request.inputs import RequestInput
from compute_plugins.request.types import (
    VERSION_RE,
    CodecError,
    FrozenMap,
    check_fields,
    decode,
    encode,
)
from compute_plugins.runtime import search
from compute_plugins.runtime.calls import PluginFailed, garbage, invoke
from compute_plugins.tree.contribution import ProviderContribution, Providers

T = TypeVar("T")

__all__ = ["AnyPlugin", "LoadedPlugin", "ParsedRequest", "PluginSet",
           "SpecLike", "as_any"]

#: A loaded plugin as the runtime holds it: its view, state and the values
#: it decides are its own business (the runtime hands each plugin back only
#: what that plugin made, or what its declared types decode).
AnyPlugin = ResourcePlugin[object, PluginRequest, object, PluginAssignment]


def as_any(plugin: ResourcePlugin[ViewT, RequestT, StateT, AssignmentT]) -> AnyPlugin:
    """``plugin`` as the runtime holds it (:data:`AnyPlugin`): the one place
    a plugin's own types are forgotten."""
    return cast(AnyPlugin, plugin)


@dataclasses.dataclass(frozen=True)
class LoadedPlugin:
    """One plugin of a set.

    :param name: its entry-point name (the name requests and states use).
    :param plugin: the instance.
    :param entry_point: ``module:Class`` it was loaded from ("" for an
        instance a test built).
    """

    name: str
    plugin: AnyPlugin
    entry_point: str = ""

    def origin(self) -> str:
        """``entry point module:Class``, else ``class module:Class``: where
        to look for the plugin's code, for messages."""
        if self.entry_point:
            return "entry point %s" % self.entry_point
        cls = type(self.plugin)
        return "class %s:%s" % (cls.__module__, cls.__qualname__)


class SpecLike(Protocol):
    """What the runtime reads of a
    :class:`~compute_plugins.request.spec.RequestSpec`."""

    @property
    def requests(self) -> Mapping[str, PluginRequest]: ...

    @property
    def decision(self) -> Optional[Decision]: ...


@dataclasses.dataclass(frozen=True)
class ParsedRequest:
    """Every plugin's share of one request (:meth:`PluginSet.parse`).

    :param requests: plugin -> its typed request (plugins that ask).
    :param groups: their request groups, in plugin order.
    :param versions: plugin -> its data version (every plugin whose version
        can be recorded).
    :param claimed: the ``(source, key)`` pairs the plugins claimed.
    :param problems: every problem the plugins found or caused.
    """

    requests: FrozenMap[str, PluginRequest]
    groups: tuple[RequestGroup, ...]
    versions: FrozenMap[str, str]
    claimed: frozenset[tuple[str, str]]
    problems: tuple[Problem, ...]


class PluginSet(Mapping[str, AnyPlugin]):
    """The loaded plugins, in load order; see the module docstring.

    :param loaded: the plugins, each once.
    :raises ValueError: a name given twice.
    """

    def __init__(self, loaded: Iterable[LoadedPlugin] = ()) -> None:
        self._loaded: dict[str, LoadedPlugin] = {}
        for item in loaded:
            if item.name in self._loaded:
                raise ValueError("plugin %r is loaded twice" % item.name)
            self._loaded[item.name] = item
        self._subsets: dict[frozenset[str], PluginSet] = {}

    @classmethod
    def of(cls, plugins: Mapping[str, AnyPlugin],
           entry_points: Optional[Mapping[str, str]] = None) -> PluginSet:
        """A set of ready instances (tests): name -> plugin, in order."""
        given = entry_points or {}
        return cls(LoadedPlugin(name, plugin, given.get(name, ""))
                   for name, plugin in plugins.items())

    # -- the mapping ----------------------------------------------------------

    def __getitem__(self, name: str) -> AnyPlugin:
        return self._loaded[name].plugin

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded)

    def __len__(self) -> int:
        return len(self._loaded)

    def __repr__(self) -> str:
        return "PluginSet(%s)" % ", ".join(self._loaded)

    def loaded(self, name: str) -> LoadedPlugin:
        """Plugin ``name`` with its entry point."""
        return self._loaded[name]

    def entry_point(self, name: str) -> str:
        """``module:Class`` plugin ``name`` was loaded from ("" when not
        known: a test instance, or not loaded)."""
        item = self._loaded.get(name)
        return item.entry_point if item is not None else ""

    def version(self, name: str) -> str:
        """Plugin ``name``'s data version."""
        return str(getattr(self[name], "version", "1.0"))

    def request_type(self, name: str) -> Optional[type[PluginRequest]]:
        """The request type plugin ``name`` declares (None: it asks nothing,
        or it is not loaded)."""
        return self._declared(name, "request_type", PluginRequest)

    def assignment_type(self, name: str) -> Optional[type[PluginAssignment]]:
        """The assignment type plugin ``name`` declares (None: it decides
        nothing, or it is not loaded)."""
        return self._declared(name, "assignment_type", PluginAssignment)

    def state_type(self, name: str) -> Optional[type[PluginState]]:
        """The host state type plugin ``name`` declares (None: it keeps
        none, or it is not loaded)."""
        return self._declared(name, "state_type", PluginState)

    def _declared(self, name: str, attribute: str, base: type[T]) -> Optional[type[T]]:
        """A type the plugin declares on its class, when it is one of ``base``."""
        item = self._loaded.get(name)
        kind = getattr(item.plugin, attribute, None) if item is not None else None
        if isinstance(kind, type) and issubclass(kind, base):
            return kind
        return None

    @functools.cached_property
    def order(self) -> tuple[str, ...]:
        """Plugin names in the order their ``fit`` runs: by name, except
        that a plugin runs after those it names in ``fit_after`` and those
        that provide a role it ``needs`` (when in the set).

        :raises FitOrderCycle: plugins name each other (a cycle; a
            :class:`~compute_plugins.exception.ConfigError`): :meth:`fit`
            and :meth:`verify` reject with it.
        """
        return tuple(search.fit_order(self._fit_after))

    def runs_after(self, name: str) -> tuple[str, ...]:
        """The plugins of the set whose ``fit`` runs before plugin
        ``name``'s: those it names in ``fit_after``, then those providing
        a role it ``needs``."""
        return self._fit_after[name]

    @functools.cached_property
    def _fit_after(self) -> Mapping[str, tuple[str, ...]]:
        """Every plugin -> the plugins of the set it runs after: those it
        names in ``fit_after``, then those providing a role it ``needs``
        (the topology a device's NUMA affinity reads)."""
        result: dict[str, tuple[str, ...]] = {}
        for name, item in self._loaded.items():
            after = [p for p in item.plugin.fit_after if p in self._loaded]
            needs = set(item.plugin.needs)
            after.extend(other for other, candidate in self._loaded.items()
                         if other != name and other not in after
                         and needs & set(candidate.plugin.provides))
            result[name] = tuple(after)
        return FrozenMap(result)

    def only(self, names: Iterable[str]) -> PluginSet:
        """The plugins of this set named in ``names``, in this set's order
        (kept: a set is immutable)."""
        key = frozenset(names) & frozenset(self._loaded)
        subset = self._subsets.get(key)
        if subset is None:
            subset = self if len(key) == len(self._loaded) else PluginSet(
                item for name, item in self._loaded.items() if name in key)
            self._subsets[key] = subset
        return subset

    def _origin(self, name: str) -> str:
        return self._loaded[name].origin()

    # -- the request side -------------------------------------------------------

    def parse(self, request_input: RequestInput) -> ParsedRequest:
        """Every plugin parses its keys of ``request_input``, once.

        A plugin that raises anything but the validation error (a bug of
        that plugin), or returns what the model cannot hold (a value out of
        range, a request or group of the wrong type), is one
        :class:`Problem` naming the plugin and its entry point; the other
        plugins go on.

        :raises ConfigError: a plugin's configuration is wrong (raised as
            it is: the operator's, not the request's).
        """
        problems: list[Problem] = []
        claimed: set[tuple[str, str]] = set()
        requests: dict[str, PluginRequest] = {}
        groups: list[RequestGroup] = []
        versions: dict[str, str] = {}
        for name, item in self._loaded.items():
            version = self.version(name)
            if not VERSION_RE.match(version):
                problems.append(self._problem(
                    name, "its version %r is not MAJOR.MINOR" % version))
                continue
            versions[name] = version
            view = request_input.for_plugin(name)
            try:
                req, plugin_groups = self._parse_one(item, view)
            except RequestValidationError as err:
                problems.extend(err.problems)
                req, plugin_groups = None, []
            except PluginFailed as failed:
                problems.append(self._parse_failure(failed))
                req, plugin_groups = None, []
            except CodecError as err:
                problems.append(self._problem(
                    name, "returned a value the request model refuses: %s"
                    % _first_line(err)))
                req, plugin_groups = None, []
            problems.extend(view.problems)
            claimed |= view.claimed
            if req is None or view.problems:
                continue
            requests[name] = req
            groups.extend(plugin_groups)
        return ParsedRequest(FrozenMap(requests), tuple(groups),
                             FrozenMap(versions), frozenset(claimed),
                             tuple(problems))

    def _parse_one(self, item: LoadedPlugin, view: RequestInput
                   ) -> tuple[Optional[PluginRequest], list[RequestGroup]]:
        """One plugin's typed request and its groups (none when it reported
        a problem or had nothing to ask).

        :raises RequestValidationError: the plugin found problems.
        :raises ConfigError: the plugin's configuration is wrong.
        :raises PluginFailed: it failed.
        :raises CodecError: it returned what the model refuses.
        """
        name = item.name
        req = invoke(name, item.origin, "parse_request",
                     (RequestValidationError, exception.ConfigError),
                     item.plugin.parse_request, view)
        if req is None or view.problems:
            return None, []
        expected = self.request_type(name)
        if expected is None or type(req) is not expected:
            raise CodecError("parse_request returned %s: expected its "
                             "request_type (%s)"
                             % (type(req).__name__, getattr(
                                 expected, "__name__", "none declared")))
        # NOTE: a request built without its dataclass __post_init__ (a
        # subclass that overrides it) is checked here too.
        check_fields(req, "requests.%s" % name)
        return req, self.request_groups(name, req)

    def request_groups(self, name: str, request: PluginRequest) -> list[RequestGroup]:
        """Plugin ``name``'s request groups for its ``request``.

        :raises PluginFailed: it failed (a group the model refuses included).
        :raises CodecError: it returned something else than request groups.
        """
        item = self._loaded[name]
        given = invoke(name, item.origin, "request_groups", (),
                       item.plugin.request_groups, request)
        if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
            raise CodecError("request_groups returned %s: expected a list of "
                             "RequestGroup" % type(given).__name__)
        groups: list[RequestGroup] = invoke(name, item.origin, "request_groups",
                                            (), list, given)
        for group in groups:
            if type(group) is not RequestGroup:
                raise CodecError("request_groups returned %s: expected "
                                 "RequestGroup" % type(group).__name__)
        return groups

    def _problem(self, name: str, what: str) -> Problem:
        return Problem("plugin", name, None, "%s (%s)" % (what, self._origin(name)),
                       plugin=name)

    def _parse_failure(self, failed: PluginFailed) -> Problem:
        """A plugin's bug while parsing, as one problem of that plugin: what
        it raised, or the value it built that the model refuses."""
        if isinstance(failed.error, CodecError):
            what = ("returned a value the request model refuses: %s"
                    % _first_line(failed.error))
        else:
            what = "failed to parse the request: %s" % failed.detail
        return self._problem(failed.plugin, what)

    # -- the host side --------------------------------------------------------------

    def host_state(self, name: str, view: object, providers: Providers,
                   assignments: Sequence[PluginAssignment], *, host: str = ""
                   ) -> Union[object, Rejection]:
        """Plugin ``name``'s host state of ``view`` under ``assignments``,
        or why it has none.

        :param providers: the plugin's providers on the node.

        :raises AssignmentConflict: the assignments do not hold on the host.
        """
        item = self._loaded[name]
        try:
            state = invoke(name, item.origin, "host_state", (AssignmentConflict,),
                           item.plugin.host_state, view, providers, tuple(assignments))
        except PluginFailed as failed:
            return Rejection(failed.reason(host), plugin=name)
        expected = self.state_type(name)
        if state is not None and (expected is None or type(state) is not expected):
            return Rejection(garbage(name, item.origin(), "host_state", state,
                                     "its state_type (%s) or None"
                                     % getattr(expected, "__name__", "none declared")
                                     ).reason(host), plugin=name)
        return state

    def host_states(self, views: Mapping[str, object],
                    providers: Mapping[str, Providers],
                    usage: Mapping[str, Sequence[PluginAssignment]], *,
                    unavailable: Optional[Mapping[str, str]] = None,
                    no_providers: Optional[Mapping[str, str]] = None,
                    strict: bool = False, host: str = ""
                    ) -> tuple[dict[str, object], list[Rejection]]:
        """Every plugin's host state under ``usage``.

        :param views: plugin -> its view of the host (a plugin without one
            could not discover the host).
        :param providers: plugin -> its providers on the node
            (:meth:`Providers.of <compute_plugins.tree.contribution.Providers.of>`).
        :param usage: plugin -> the assignments in force.
        :param unavailable: plugin -> why it has no view.
        :param no_providers: plugin -> why it has no providers on the node
            (it never contributed: its state would name none).
        :param strict: raise :class:`AssignmentConflict` when the
            assignments in force do not hold on the host (the user's input
            is wrong) instead of a rejection of that plugin.
        :returns: the states, and a rejection per plugin that has none: it
            failed to discover the host, its ``host_state`` failed, or the
            assignments in force do not hold on the host.
        """
        why = unavailable or {}
        states: dict[str, object] = {}
        broken: list[Rejection] = []
        for name in self._loaded:
            if name not in views:
                broken.append(Rejection(
                    "the plugin could not discover the host: %s"
                    % why.get(name, "no view"), plugin=name))
                continue
            if no_providers and name in no_providers:
                broken.append(Rejection(
                    "the plugin has no providers on the host: %s"
                    % no_providers[name], plugin=name))
                continue
            try:
                state = self.host_state(name, views[name], providers[name],
                                        usage.get(name, ()), host=host)
            except AssignmentConflict as err:
                if strict:
                    raise
                broken.append(Rejection("the claims in force do not hold on "
                                        "the host: %s" % err.reason, plugin=name))
                continue
            if isinstance(state, Rejection):
                broken.append(state)
            else:
                states[name] = state
        return states, broken

    def encode_state(self, name: str, state: object) -> dict[str, object]:
        """``{"plugin", "version", "state"}``: plugin ``name``'s ``state`` as
        JSON with its data version.

        :raises StateFormatError: the state cannot be encoded.
        """
        try:
            body = None if state is None else encode(state)
        except (CodecError, TypeError, ValueError) as err:
            raise StateFormatError("host state of %s cannot be encoded: %s (%s)"
                                   % (name, err, self._origin(name))) from None
        return {"plugin": name, "version": self.version(name), "state": body}

    def encode_states(self, states: Mapping[str, object]
                      ) -> tuple[dict[str, dict[str, object]], list[Rejection]]:
        """:meth:`encode_state` of every state; a rejection per plugin
        whose state cannot be encoded."""
        documents: dict[str, dict[str, object]] = {}
        broken: list[Rejection] = []
        for name, state in states.items():
            try:
                documents[name] = self.encode_state(name, state)
            except StateFormatError as err:
                broken.append(Rejection(str(err), plugin=name))
        return documents, broken

    def decode_state(self, name: str, doc: object) -> object:
        """The state :meth:`encode_state` wrote, for loaded plugin ``name``.

        :raises StateFormatError: another plugin's state, a newer version
            than the loaded plugin's, or a document of the wrong shape.
        """
        if not isinstance(doc, Mapping) or set(doc) != {"plugin", "version", "state"}:
            raise StateFormatError("host state of %s: expected an object with "
                                   "plugin, version and state" % name)
        if doc["plugin"] != name:
            raise StateFormatError("host state of %r given to plugin %r"
                                   % (doc["plugin"], name))
        ours = self.version(name)
        theirs, mine = _state_version(doc["version"]), _state_version(ours)
        if theirs[0] != mine[0] or theirs[1] > mine[1]:
            raise StateFormatError(
                "host state of %s has version %s; this reader supports %s"
                % (name, doc["version"], ours))
        if doc["state"] is None:
            return None
        kind = self.state_type(name)
        if kind is None:
            raise StateFormatError("plugin %s declares no state_type" % name)
        try:
            return decode(kind, doc["state"], "%s.state" % name)
        except CodecError as err:
            raise StateFormatError("host state of %s: %s" % (name, err)) from None
        except Exception as err:  # noqa: BLE001 - the state class's own code
            raise StateFormatError("host state of %s: %s: %s (%s)" % (
                name, type(err).__name__, err, self._origin(name))) from None

    def decode_states(self, documents: Mapping[str, object]
                      ) -> tuple[dict[str, object], dict[str, str]]:
        """The states of the loaded plugins among ``documents`` (plugin ->
        :meth:`encode_state`'s document; others are skipped).

        :returns: plugin -> state, and plugin -> why its document cannot be
            read.
        """
        states: dict[str, object] = {}
        broken: dict[str, str] = {}
        for name, doc in documents.items():
            if name not in self._loaded:
                continue
            try:
                states[name] = self.decode_state(name, doc)
            except StateFormatError as err:
                broken[name] = str(err)
        return states, broken

    # -- the decision ----------------------------------------------------------------

    def fit(self, states: Mapping[str, object], spec: SpecLike,
            mappings: Mappings = None, *, budget: int = search.FIT_BUDGET,
            host: str = "") -> search.FitResult:
        """Every plugin of this set that has a request in ``spec`` decides
        on one host (:func:`.search.fit_all`: in :attr:`order`, retried over
        the earlier plugins' ``alternatives``, at most ``budget`` decisions).

        A plugin that fails, or returns what is not its assignment, a
        :class:`Rejection` or None, rejects (the reason names it and
        ``host``).

        :param states: plugin -> its host state on this host.
        :param mappings: the candidate's ``mappings`` (None offline).
        """
        try:
            order = [name for name in self.order
                     if spec.requests.get(name) is not None]
        except search.FitOrderCycle as cycle:
            return search.FitResult(rejections=(cycle.rejection(),))
        failures: list[Rejection] = []
        # NOTE: nova's cell order counts the host's free PCI devices
        # (compute_plugins.plugin.topology.order_by_cell_devices); a
        # plugin's failure there rejects the host, naming it.
        try:
            states = order_by_cell_devices(states, order, self._guarded)
        except PluginFailed as failed:
            return search.FitResult(rejections=(
                Rejection(failed.reason(host), plugin=failed.plugin),))

        def decide(name: str, earlier: search.Decided
                   ) -> Union[PluginAssignment, Rejection, None]:
            item = self._loaded[name]
            try:
                outcome = invoke(name, item.origin, "fit", (), item.plugin.fit,
                                 states.get(name), spec.requests[name],
                                 mappings, earlier)
            except PluginFailed as failed:
                outcome = Rejection(failed.reason(host), plugin=name)
                failures.append(outcome)
                return outcome
            if not (outcome is None or isinstance(outcome, Rejection)
                    or self._is_assignment(name, outcome)):
                outcome = Rejection(garbage(
                    name, item.origin(), "fit", outcome,
                    "its assignment, a Rejection or None").reason(host),
                    plugin=name)
                failures.append(outcome)
            return outcome

        def alternatives(name: str, earlier: search.Decided
                         ) -> Iterator[PluginAssignment]:
            item = self._loaded[name]
            try:
                given = invoke(name, item.origin, "alternatives", (),
                               item.plugin.alternatives, states.get(name),
                               spec.requests[name], mappings, earlier)
                for alternative in given:
                    if not self._is_assignment(name, alternative):
                        failures.append(Rejection(garbage(
                            name, item.origin(), "alternatives", alternative,
                            "its assignment").reason(host), plugin=name))
                        return
                    yield alternative
            except PluginFailed as failed:
                failures.append(Rejection(failed.reason(host), plugin=name))
            except Exception as err:  # noqa: BLE001 - raised by the generator
                failures.append(Rejection(PluginFailed(
                    name, item.origin(), "alternatives", "%s: %s"
                    % (type(err).__name__, err), err).reason(host), plugin=name))

        result = search.fit_all(order, self._fit_after, decide, alternatives,
                                budget)
        if result.fits or not failures:
            return result
        extra = tuple(r for r in dict.fromkeys(failures)
                      if r not in result.rejections)
        return dataclasses.replace(result, rejections=result.rejections + extra)

    def _guarded(self, name: str, hook: str, fn: Callable[..., Any],
                 *args: Any) -> Any:
        """``fn(*args)``, a method of plugin ``name``'s state, with the
        runtime's isolation (:class:`PluginFailed`; a
        :class:`ReturnedGarbage` is the plugin's wrong value)."""
        item = self._loaded.get(name)
        if item is None:
            return fn(*args)
        try:
            return invoke(name, item.origin, hook, (ReturnedGarbage,), fn, *args)
        except ReturnedGarbage as bad:
            raise garbage(name, item.origin(), hook, bad.value, bad.expected) from None

    def _is_assignment(self, name: str, value: object) -> bool:
        """``value`` is plugin ``name``'s declared assignment type."""
        expected = self.assignment_type(name)
        return expected is not None and type(value) is expected

    def verify(self, states: Mapping[str, object], spec: SpecLike, *,
               host: str = "") -> tuple[Rejection, ...]:
        """Every plugin's ``verify`` of the decision recorded in ``spec``.

        A plugin with a request but no recorded assignment is verified by
        its ``fit`` on the decision's mappings (it had nothing to decide
        then, and must still have nothing to refuse now). A plugin that
        ``needs`` :data:`~compute_plugins.plugin.topology.TOPOLOGY` and records the
        guest's host cells it checked its affinity against must record those
        the topology provider's decision gives. A
        plugin that fails, or answers what is not a :class:`Rejection` or
        None, rejects.

        :returns: every rejection (empty: the decision holds on ``states``).
        :raises ValueError: ``spec`` carries no decision.
        """
        decision = spec.decision
        if decision is None:
            raise ValueError("the spec carries no decision to verify")
        try:
            order = self.order
        except search.FitOrderCycle as cycle:
            return (cycle.rejection(),)
        rejections: list[Rejection] = []
        earlier: dict[str, PluginAssignment] = {}
        for name in order:
            request = spec.requests.get(name)
            if request is None:
                continue
            item = self._loaded[name]
            assignment = decision.assignments.get(name)
            problem: Optional[Rejection]
            try:
                if assignment is None:
                    outcome = invoke(name, item.origin, "fit", (), item.plugin.fit,
                                     states.get(name), request, decision.mappings,
                                     FrozenMap(earlier))
                    problem = outcome if isinstance(outcome, Rejection) else None
                else:
                    answer = invoke(name, item.origin, "verify", (),
                                    item.plugin.verify, states.get(name),
                                    request, assignment)
                    if answer is not None and not isinstance(answer, Rejection):
                        raise garbage(name, item.origin(), "verify", answer,
                                      "a Rejection or None")
                    problem = answer
                    if problem is None and TOPOLOGY in item.plugin.needs:
                        mismatch = recorded_cells_problem(earlier, assignment)
                        problem = None if mismatch is None else Rejection(mismatch)
            except PluginFailed as failed:
                # NOTE: raised, it would stop the compute agent, and the
                # decision (still pending) would stop it again at every
                # restart.
                problem = Rejection(failed.reason(host))
            if assignment is not None:
                earlier[name] = assignment
            if problem is not None:
                rejections.append(search.named(problem, name))
        return tuple(rejections)

    def allocations(self, name: str, request: PluginRequest,
                    assignment: PluginAssignment, state: object, *,
                    host: str = ""
                    ) -> Union[Optional[tuple[GroupAllocation, ...]], Rejection]:
        """What each of plugin ``name``'s request groups takes on which
        provider (None: the plugin does not say), or why it cannot say."""
        item = self._loaded[name]
        try:
            given = invoke(name, item.origin, "allocations", (ValueError,),
                           item.plugin.allocations, request, assignment, state)
        except PluginFailed as failed:
            return Rejection(failed.reason(host), plugin=name)
        except ValueError as err:
            return Rejection("cannot build its allocation: %s" % err, plugin=name)
        if given is None:
            return None
        if (isinstance(given, (str, bytes)) or not isinstance(given, Sequence)
                or not all(isinstance(i, GroupAllocation) for i in given)):
            return Rejection(garbage(name, item.origin(), "allocations", given,
                                     "a sequence of GroupAllocation or None"
                                     ).reason(host), plugin=name)
        return tuple(given)

    def guest_fragments(self, requests: Mapping[str, PluginRequest],
                        assignments: Mapping[str, PluginAssignment]
                        ) -> Union[list[tuple[str, tuple[GuestFragment, ...]]],
                                   Rejection]:
        """Every assigned plugin's ``guest_config``, in fit order: ``(plugin,
        its fragments)``; or the first reason naming a plugin: an assignment
        of a plugin that is not loaded or has no request, a
        ``guest_config`` that fails or does not return a sequence."""
        for name in assignments:
            if name not in self._loaded:
                return Rejection("the plugin is not loaded", plugin=name)
            if name not in requests:
                return Rejection("an assignment without a request", plugin=name)
        contributions = []
        for name in self.order:
            if name not in assignments:
                continue
            item = self._loaded[name]
            try:
                fragments = invoke(name, item.origin, "guest_config", (),
                                   item.plugin.guest_config, requests[name],
                                   assignments[name])
            except PluginFailed as failed:
                return Rejection(failed.reason(), plugin=name)
            if isinstance(fragments, (str, bytes)) or not isinstance(fragments, Sequence):
                return Rejection("guest_config returned a %s, not a sequence of "
                                 "GuestFragment (%s)" % (type(fragments).__name__,
                                                         item.origin()),
                                 plugin=name)
            contributions.append((name, tuple(fragments)))
        return contributions

    def describe(self, name: str, request: PluginRequest,
                 assignment: PluginAssignment) -> list[str]:
        """Plugin ``name``'s ``assignment`` for people, a line per guest
        node or device; one line saying so when the plugin fails."""
        item = self._loaded[name]
        try:
            given = invoke(name, item.origin, "describe", (), item.plugin.describe,
                           request, assignment)
            if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
                raise garbage(name, item.origin(), "describe", given,
                              "a sequence of str")
            # NOTE: read under the policy: an iterator's lines are kept,
            # and one that raises midway is the plugin's failure.
            lines: list[object] = invoke(name, item.origin, "describe", (),
                                         list, given)
            if not all(isinstance(line, str) for line in lines):
                raise garbage(name, item.origin(), "describe", lines,
                              "a sequence of str")
        except PluginFailed as failed:
            return ["(%s)" % failed.reason()]
        return [str(line) for line in lines]

    def utilization(self, name: str, state: object) -> Optional[float]:
        """How full the host is for plugin ``name`` (0.0 to 1.0), None: no
        opinion (also when the plugin fails or answers something else: a
        NaN would make the weighers' order arbitrary, a weight out of the
        range outweigh every other plugin's)."""
        item = self._loaded[name]
        try:
            used = invoke(name, item.origin, "utilization", (),
                          item.plugin.utilization, state)
        except PluginFailed:
            return None
        if used is None:
            return None
        number = isinstance(used, (int, float)) and not isinstance(used, bool)
        if not number or not 0.0 <= used <= 1.0:
            garbage(name, item.origin(), "utilization", used,
                    "a float from 0.0 to 1.0 or None", show=number)
            return None
        return float(used)

    # -- the host's discovery (the manager) ----------------------------------------

    def discover(self, name: str, host: HostInfo) -> object:
        """Plugin ``name``'s view of ``host``.

        :raises Exception: what the plugin raised (the manager records it
            as the plugin's failure and keeps the last view).
        """
        item = self._loaded[name]
        try:
            return invoke(name, item.origin, "discover", (),
                          item.plugin.discover, host)
        except PluginFailed as failed:
            assert failed.error is not None
            raise failed.error from None

    def contributions(self, name: str, view: object, nodename: str
                      ) -> tuple[ProviderContribution, ...]:
        """Plugin ``name``'s providers for ``view`` on ``nodename``.

        :raises Exception: what the plugin raised, or a TypeError when it
            returned something else than provider contributions.
        """
        item = self._loaded[name]
        try:
            given = invoke(name, item.origin, "provider_contributions", (),
                           item.plugin.provider_contributions, view, nodename)
        except PluginFailed as failed:
            assert failed.error is not None
            raise failed.error from None
        items = tuple(given)
        for contribution in items:
            if not isinstance(contribution, ProviderContribution):
                raise TypeError("provider_contributions returned %s, not "
                                "ProviderContribution"
                                % type(contribution).__name__)
        return items


def _first_line(err: BaseException) -> str:
    lines = str(err).splitlines()
    return lines[0] if lines else ""


def _state_version(text: object) -> tuple[int, int]:
    try:
        major, minor = str(text).split(".")
        return int(major), int(minor)
    except ValueError:
        raise StateFormatError("state version %r is not MAJOR.MINOR"
                               % (text,)) from None
