"""Every plugin's decision on one host: ``fit_all``, ``verify_all``, states.

The scheduler calls :func:`fit_all` on the states a host published; the
compute host calls :func:`verify_all` on its live states with the decision
the scheduler recorded in the spec. Both run the plugins' own code (``fit``
and ``verify``, which is built from the same checks), in the same order
(:func:`fit_order`), on the same typed requests: a scheduler that passes and
a claim that fails can only differ by the host having changed in between.

A plugin's host state is a frozen dataclass subclassing :class:`PluginState`
(registered by plugin name, like requests and assignments), carried as JSON
with the plugin's data version (:func:`encode_state` / :func:`decode_state`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar, Optional

from oslo_log import log as logging

from compute_plugins import exception
from compute_plugins.plugin import Placement, Rejection, ResourcePlugin
from compute_plugins.request.groups import PluginAssignment
from compute_plugins.request.types import CodecError, FrozenMap, decode, encode
from compute_plugins.topology import TOPOLOGY, recorded_cells_problem

__all__ = ["AssignmentConflict", "FitResult", "PluginState", "Rejection",
           "FIT_BUDGET", "StateFormatError", "decode_state", "encode_state", "fit_all",
           "fit_order", "runs_after", "state_type", "verify_all"]

LOG = logging.getLogger(__name__)

_STATE_TYPES: dict[str, type[PluginState]] = {}


class PluginState:
    """Base class of a plugin's host state (subclass as a frozen dataclass
    with ``plugin`` set to the plugin's entry-point name)."""

    plugin: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.plugin:
            _STATE_TYPES[cls.plugin] = cls


def state_type(plugin: str) -> Optional[type[PluginState]]:
    """The registered state class of ``plugin`` (None when unknown)."""
    return _STATE_TYPES.get(plugin)


class AssignmentConflict(exception.ComputePluginsError):
    """Assignments in force cannot all hold on the host: a unit (CPU, page,
    mdev, VF) given twice, or one the host does not have.

    :param plugin: the plugin whose state could not be built.
    :param reason: what is wrong, naming the unit.
    """

    def __init__(self, plugin: str, reason: str) -> None:
        self.plugin = plugin
        self.reason = reason
        super().__init__("%s: %s" % (plugin, reason))


class StateFormatError(exception.ComputePluginsError):
    """A serialised host state cannot be read (shape, plugin, version)."""


def _version(text: str) -> tuple[int, int]:
    try:
        major, minor = text.split(".")
        return int(major), int(minor)
    except (AttributeError, ValueError):
        raise StateFormatError("state version %r is not MAJOR.MINOR"
                               % (text,)) from None


def encode_state(plugin: ResourcePlugin[Any, Any, Any, Any],
                 state: Any) -> dict[str, Any]:
    """``{"plugin", "version", "state"}``: ``state`` as JSON with the
    plugin's data version."""
    return {"plugin": plugin.name, "version": plugin.version,
            "state": None if state is None else encode(state)}


def decode_state(plugin: ResourcePlugin[Any, Any, Any, Any], doc: Any) -> Any:
    """The state :func:`encode_state` wrote, for the loaded ``plugin``.

    :raises StateFormatError: another plugin's state, a newer version than
        the loaded plugin's, or a document of the wrong shape.
    """
    if not isinstance(doc, Mapping) or set(doc) != {"plugin", "version", "state"}:
        raise StateFormatError("host state of %s: expected an object with "
                               "plugin, version and state" % plugin.name)
    if doc["plugin"] != plugin.name:
        raise StateFormatError("host state of %r given to plugin %r"
                               % (doc["plugin"], plugin.name))
    theirs, ours = _version(doc["version"]), _version(plugin.version)
    if theirs[0] != ours[0] or theirs[1] > ours[1]:
        raise StateFormatError(
            "host state of %s has version %s; this reader supports %s"
            % (plugin.name, doc["version"], plugin.version))
    if doc["state"] is None:
        return None
    kind = state_type(plugin.name)
    if kind is None:
        raise StateFormatError("plugin %s has no registered state type"
                               % plugin.name)
    try:
        return decode(kind, doc["state"], "%s.state" % plugin.name)
    except CodecError as err:
        raise StateFormatError("host state of %s: %s" % (plugin.name, err)) from None


def _plugins_of(plugins: Any) -> Mapping[str, ResourcePlugin[Any, Any, Any, Any]]:
    """``PluginManager`` or ``{name: plugin}``."""
    loaded: Mapping[str, ResourcePlugin[Any, Any, Any, Any]] = getattr(
        plugins, "plugins", plugins)
    return loaded


def runs_after(plugins: Mapping[str, ResourcePlugin[Any, Any, Any, Any]],
               name: str) -> list[str]:
    """The loaded plugins whose ``fit`` runs before ``name``'s: those it
    names in ``fit_after``, then those that provide a role it ``needs``."""
    plugin = plugins[name]
    after = [p for p in plugin.fit_after if p in plugins]
    needs = plugin.needs
    if needs:
        for other, candidate in plugins.items():
            if other == name or other in after:
                continue
            for role in candidate.provides:
                if role in needs:
                    after.append(other)
                    break
    return after


def fit_order(plugins: Mapping[str, ResourcePlugin[Any, Any, Any, Any]]) -> list[str]:
    """Plugin names in the order their ``fit`` runs: by name, except that a
    plugin runs after those it names in ``fit_after`` and those providing
    a role it ``needs`` (:func:`runs_after`)."""
    done: list[str] = []
    pending = sorted(plugins)
    before = {name: runs_after(plugins, name) for name in pending}
    while pending:
        for name in pending:
            if all(p in done for p in before[name]):
                done.append(name)
                pending.remove(name)
                break
        else:
            raise exception.ConfigError(
                "plugins %s run after each other (fit_after, needs: a cycle)"
                % ", ".join(pending))
    return done


@dataclasses.dataclass(frozen=True)
class FitResult:
    """Every plugin's decision on one host.

    :param assignments: plugin -> its assignment (plugins that decide).
    :param rejections: every plugin's reason not to fit, in fit order.
    """

    assignments: FrozenMap[str, PluginAssignment] = dataclasses.field(
        default_factory=FrozenMap)
    rejections: tuple[Rejection, ...] = ()

    @property
    def fits(self) -> bool:
        return not self.rejections


def _named(rejection: Rejection, plugin: str) -> Rejection:
    return rejection if rejection.plugin else dataclasses.replace(
        rejection, plugin=plugin)


#: At most this many plugin decisions (``fit`` answers and alternatives)
#: :func:`fit_all`'s retry over alternatives tries on one host: the
#: topology provider (the numa plugin) offers at most one placement per
#: host cell, each followed by the device plugins' fits, so a host of 64
#: cells with three device plugins is still searched whole.
FIT_BUDGET = 256


class _Exhausted(Exception):
    """The retry's step budget ran out."""


def _fit_one(plugin: ResourcePlugin[Any, Any, Any, Any], name: str, state: Any,
             request: Any, placement: Placement,
             earlier: Mapping[str, PluginAssignment]) -> Any:
    """``plugin.fit``; a plugin that raises (its bug) rejects, naming itself,
    instead of failing the whole host's fit."""
    try:
        return plugin.fit(state, request, placement, FrozenMap(earlier))
    except Exception as err:  # noqa: BLE001 - a plugin's bug: its rejection
        LOG.debug("plugin %s: fit failed", name, exc_info=True)
        return Rejection("the plugin failed while fitting: %s: %s"
                         % (type(err).__name__, err), plugin=name)


def _alternatives_of(plugin: ResourcePlugin[Any, Any, Any, Any], name: str,
                     state: Any, request: Any, placement: Placement,
                     earlier: Mapping[str, PluginAssignment]
                     ) -> Iterator[PluginAssignment]:
    """``plugin.alternatives``, ending where the plugin raises (its bug: the
    decisions it offered before still count)."""
    try:
        yield from plugin.alternatives(state, request, placement, FrozenMap(earlier))
    except Exception:  # noqa: BLE001 - a plugin's bug: no more alternatives
        LOG.debug("plugin %s: alternatives failed", name, exc_info=True)


def _straight(loaded: Mapping[str, ResourcePlugin[Any, Any, Any, Any]],
              order: Sequence[str], states: Mapping[str, Any], spec: Any,
              placement: Placement
              ) -> tuple[dict[str, PluginAssignment], list[Rejection]]:
    """Every plugin's ``fit`` once, in order: the assignments and every
    rejection (plugins after a rejecting one still run, to say theirs)."""
    assignments: dict[str, PluginAssignment] = {}
    rejections: list[Rejection] = []
    for name in order:
        outcome = _fit_one(loaded[name], name, states.get(name),
                           spec.requests[name], placement, assignments)
        if isinstance(outcome, Rejection):
            rejections.append(_named(outcome, name))
        elif outcome is not None:
            assignments[name] = outcome
    return assignments, rejections


def _retry_helps(loaded: Mapping[str, ResourcePlugin[Any, Any, Any, Any]],
                 assignments: Mapping[str, PluginAssignment],
                 rejections: Sequence[Rejection]) -> bool:
    """Another decision of an earlier plugin may change a rejection: a
    rejecting plugin runs after (:func:`runs_after`) one that decided."""
    return any(after in assignments
               for rejection in rejections if rejection.plugin in loaded
               for after in runs_after(loaded, rejection.plugin))


def _search(loaded: Mapping[str, ResourcePlugin[Any, Any, Any, Any]],
            order: Sequence[str], states: Mapping[str, Any], spec: Any,
            placement: Placement, budget: int
            ) -> tuple[Optional[dict[str, PluginAssignment]], int]:
    """Depth first over the plugins' decisions: each plugin's ``fit``
    answer, then (when a later plugin runs after it and nothing fits) its
    ``alternatives``, best first. Each decision counts one step.

    :returns: the first assignments every plugin accepts (None: none
        found) and the steps taken.
    :raises _Exhausted: more than ``budget`` steps.
    """
    steps = 0

    def step() -> None:
        nonlocal steps
        steps += 1
        if steps > budget:
            raise _Exhausted()

    def search(index: int, earlier: dict[str, PluginAssignment]
               ) -> Optional[dict[str, PluginAssignment]]:
        if index == len(order):
            return earlier
        name = order[index]
        plugin, request, state = loaded[name], spec.requests[name], states.get(name)
        step()
        outcome = _fit_one(plugin, name, state, request, placement, earlier)
        if isinstance(outcome, Rejection):
            return None
        if outcome is None:
            return search(index + 1, earlier)
        found = search(index + 1, {**earlier, name: outcome})
        if found is not None or not any(
                name in runs_after(loaded, later) for later in order[index + 1:]):
            return found
        others = _alternatives_of(plugin, name, state, request, placement, earlier)
        for alternative in itertools.islice(others, 1, None):
            step()
            found = search(index + 1, {**earlier, name: alternative})
            if found is not None:
                return found
        return None

    return search(0, {}), steps


def fit_all(plugins: Any, states: Mapping[str, Any], spec: Any,
            placement: Placement = None, budget: int = FIT_BUDGET) -> FitResult:
    """Run every plugin that has a request in ``spec`` on one host.

    Each plugin's ``fit`` runs once, in :func:`fit_order`. When a plugin
    rejects and it runs after (:func:`runs_after`) a plugin that decided,
    the earlier plugins' ``alternatives`` are tried in turn (depth first,
    at most ``budget`` decisions): a device off the topology provider's
    first choice of host cells still finds the guest on another choice
    that reaches it.

    :param plugins: a PluginManager or ``{name: plugin}``.
    :param states: plugin name -> its host state on this host.
    :param spec: the :class:`~compute_plugins.request_spec.RequestSpec`.
    :param placement: the candidate's ``mappings`` (None offline).
    :param budget: the most decisions the retry may try.
    :returns: all assignments when every plugin fits, else every rejection
        of the first pass (plugins after a rejecting one still run, to say
        their reasons), and one saying so when the retry ran out of budget.
        A plugin whose ``fit`` raises (its bug) rejects, its rejection naming
        it and the exception; the others still run.
    """
    loaded = _plugins_of(plugins)
    order = [name for name in fit_order(loaded)
             if spec.requests.get(name) is not None]
    assignments, rejections = _straight(loaded, order, states, spec, placement)
    if not rejections:
        return FitResult(assignments=FrozenMap(assignments))
    if _retry_helps(loaded, assignments, rejections):
        try:
            found, _ = _search(loaded, order, states, spec, placement, budget)
        except _Exhausted:
            tried = sorted({after for rejection in rejections
                            if rejection.plugin in loaded
                            for after in runs_after(loaded, rejection.plugin)
                            if after in assignments})
            rejections.append(Rejection(
                "stopped after trying %d decisions (fit_all's budget) of %s "
                "and the plugins after it without one every plugin accepts; "
                "the host may still fit with another" % (budget, ", ".join(tried)),
                plugin=", ".join(tried)))
        else:
            if found is not None:
                return FitResult(assignments=FrozenMap(found))
    return FitResult(rejections=tuple(rejections))


def verify_all(plugins: Any, states: Mapping[str, Any], spec: Any) -> tuple[Rejection, ...]:
    """Every plugin's ``verify`` of the decision recorded in ``spec``.

    A plugin with a request but no recorded assignment is verified by its
    ``fit`` on the decision's mappings (it had nothing to decide then, and
    must still have nothing to refuse now). A plugin that ``needs``
    :data:`~compute_plugins.topology.TOPOLOGY` and records the guest's
    host cells it checked its affinity against must record those the
    topology provider's decision gives
    (:func:`~compute_plugins.topology.recorded_cells_problem`).

    :returns: every rejection (empty: the decision holds on ``states``).
    """
    loaded = _plugins_of(plugins)
    decision = spec.decision
    if decision is None:
        raise ValueError("the spec carries no decision to verify")
    rejections: list[Rejection] = []
    earlier: dict[str, PluginAssignment] = {}
    for name in fit_order(loaded):
        request = spec.requests.get(name)
        if request is None:
            continue
        assignment = decision.assignments.get(name)
        try:
            if assignment is None:
                outcome = loaded[name].fit(states.get(name), request,
                                           decision.mappings, FrozenMap(earlier))
                problem = outcome if isinstance(outcome, Rejection) else None
            else:
                problem = loaded[name].verify(states.get(name), request, assignment)
                if problem is None and TOPOLOGY in loaded[name].needs:
                    mismatch = recorded_cells_problem(earlier, assignment)
                    problem = None if mismatch is None else Rejection(mismatch)
        except Exception as err:  # noqa: BLE001 - a plugin's bug: its rejection
            # NOTE: raised, it would stop the compute agent, and the decision
            # (still pending) would stop it again at every restart.
            problem = Rejection("the plugin failed while verifying the decision: "
                                "%s: %s" % (type(err).__name__, err))
        if assignment is not None:
            earlier[name] = assignment
        if problem is not None:
            rejections.append(_named(problem, name))
    return tuple(rejections)

