"""The fit search: every plugin's decision on one host, retried over the
earlier plugins' alternatives.

Pure algorithm over two callables (a plugin's decision given the earlier
ones, and its alternatives): :class:`~compute_plugins.runtime.PluginSet`
binds them to the plugins, the host's states and the request, with its
failure isolation. Kept apart so that the order and the budget of the
search are read in one place.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Optional, Union

from compute_plugins import exception
from compute_plugins.plugin.contract import Rejection
from compute_plugins.request.groups import PluginAssignment
from compute_plugins.request.types import FrozenMap

#: At most this many plugin decisions (``fit`` answers and alternatives)
#: the retry over alternatives tries on one host: the topology provider
#: (the numa plugin) offers at most one placement per host cell, each
#: followed by the device plugins' fits, so a host of 64 cells with three device plugins is still
#: searched whole.
FIT_BUDGET = 256

#: The decisions made so far on one host, by plugin.
Decided = Mapping[str, PluginAssignment]
#: A plugin's ``fit`` given the earlier decisions: its assignment, why not,
#: or None (nothing to decide).
Decide = Callable[[str, Decided], Union[PluginAssignment, Rejection, None]]
#: A plugin's ``alternatives`` given the earlier decisions, best first.
Alternatives = Callable[[str, Decided], Iterator[PluginAssignment]]


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


class FitOrderCycle(exception.ConfigError):
    """Plugins run after each other (``fit_after``, ``needs``): no order.

    :param plugins: the plugins that cannot be ordered, by name.
    """

    def __init__(self, plugins: Sequence[str]) -> None:
        self.plugins = tuple(plugins)
        super().__init__("plugins %s run after each other (fit_after, needs: "
                         "a cycle)" % ", ".join(self.plugins))

    def rejection(self) -> Rejection:
        """The cycle as the rejection of a host (of any host)."""
        return Rejection(str(self), plugin=", ".join(self.plugins))


def fit_order(fit_after: Mapping[str, Sequence[str]]) -> list[str]:
    """Plugin names in the order their ``fit`` runs: by name, except that a
    plugin runs after those it names in ``fit_after`` (when present).

    :param fit_after: every plugin -> the plugins it runs after.
    :raises FitOrderCycle: plugins name each other (a cycle).
    """
    done: list[str] = []
    pending = sorted(fit_after)
    while pending:
        for name in pending:
            after = [p for p in fit_after[name] if p in fit_after]
            if all(p in done for p in after):
                done.append(name)
                pending.remove(name)
                break
        else:
            raise FitOrderCycle(pending)
    return done


def named(rejection: Rejection, plugin: str) -> Rejection:
    """``rejection`` with its ``plugin`` filled in."""
    return rejection if rejection.plugin else dataclasses.replace(
        rejection, plugin=plugin)


class _Exhausted(Exception):
    """The retry's step budget ran out."""


def _straight(order: Sequence[str], decide: Decide
              ) -> tuple[dict[str, PluginAssignment], list[Rejection]]:
    """Every plugin's ``fit`` once, in order: the assignments and every
    rejection (plugins after a rejecting one still run, to say theirs)."""
    assignments: dict[str, PluginAssignment] = {}
    rejections: list[Rejection] = []
    for name in order:
        outcome = decide(name, FrozenMap(assignments))
        if isinstance(outcome, Rejection):
            rejections.append(named(outcome, name))
        elif outcome is not None:
            assignments[name] = outcome
    return assignments, rejections


def _retry_helps(fit_after: Mapping[str, Sequence[str]],
                 assignments: Mapping[str, PluginAssignment],
                 rejections: Sequence[Rejection]) -> bool:
    """Another decision of an earlier plugin may change a rejection: a
    rejecting plugin runs after (``fit_after``) one that decided."""
    return any(after in assignments
               for rejection in rejections if rejection.plugin in fit_after
               for after in fit_after[rejection.plugin])


def _search(order: Sequence[str], fit_after: Mapping[str, Sequence[str]],
            decide: Decide, alternatives: Alternatives, budget: int
            ) -> Optional[dict[str, PluginAssignment]]:
    """Depth first over the plugins' decisions: each plugin's ``fit``
    answer, then (when a later plugin runs after it and nothing fits) its
    ``alternatives``, best first. Each decision counts one step.

    :returns: the first assignments every plugin accepts (None: none found).
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
        step()
        outcome = decide(name, FrozenMap(earlier))
        if isinstance(outcome, Rejection):
            return None
        if outcome is None:
            return search(index + 1, earlier)
        found = search(index + 1, {**earlier, name: outcome})
        if found is not None or not any(
                name in fit_after[later] for later in order[index + 1:]):
            return found
        others = alternatives(name, FrozenMap(earlier))
        for alternative in itertools.islice(others, 1, None):
            step()
            found = search(index + 1, {**earlier, name: alternative})
            if found is not None:
                return found
        return None

    return search(0, {})


def fit_all(order: Sequence[str], fit_after: Mapping[str, Sequence[str]],
            decide: Decide, alternatives: Alternatives,
            budget: int = FIT_BUDGET) -> FitResult:
    """Every plugin of ``order`` decides, once, in that order. When a
    plugin rejects and it runs after (``fit_after``) a plugin that decided,
    the earlier plugins' ``alternatives`` are tried in turn (depth first, at
    most ``budget`` decisions): a device off the topology provider's first
    choice of host cells still finds the guest on another choice that reaches it.

    :param order: the plugins that decide, in fit order.
    :param fit_after: every plugin -> the plugins it runs after.
    :returns: all assignments when every plugin fits, else every rejection
        of the first pass (plugins after a rejecting one still run, to say
        their reasons), and one saying so when the retry ran out of budget.
    """
    assignments, rejections = _straight(order, decide)
    if not rejections:
        return FitResult(assignments=FrozenMap(assignments))
    if _retry_helps(fit_after, assignments, rejections):
        try:
            found = _search(order, fit_after, decide, alternatives, budget)
        except _Exhausted:
            tried = sorted({after for rejection in rejections
                            if rejection.plugin in fit_after
                            for after in fit_after[rejection.plugin]
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
