"""A small complete search: give each of a few items one choice, in order.

Device plugins serve several request groups (VGPU groups, ports, alias
devices) from a few devices, each group's choice narrowing the next one's
(instances, VFs, bandwidth taken). Taking each group's best device in turn
(greedy) can miss a host where the groups do fit: two VGPU groups of 1 and
2 vGPUs on pGPUs with 2 and 1 free fit only with the first group on the
smaller one. :func:`first_fit` tries the choices depth first in each
item's preference order, so the answer is the greedy one whenever that
works, and remembers the (item, usage) pairs that failed, so a usage
reached twice is not explored twice.

The number of distinct usages can still grow fast (ports over many PFs), so
every search runs on a :class:`Budget` of steps (one per choice tried).
When it runs out the outcome says so (``exhausted``) and the plugin's
rejection says the search stopped, never that nothing fits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, Optional, TypeVar

ItemT = TypeVar("ItemT")
ChoiceT = TypeVar("ChoiceT")
UsageT = TypeVar("UsageT", bound=Hashable)

#: Steps a plugin's search may take on one host by default: ample for the
#: requests nova accepts (a few groups, ports, alias devices), small enough
#: to bound a scheduler pass over many hosts.
DEFAULT_STEPS = 10000


class Budget:
    """A count of search steps, shared by the searches of one decision.

    :param limit: the most steps allowed.
    """

    def __init__(self, limit: int = DEFAULT_STEPS) -> None:
        self.limit = limit
        self.used = 0

    @property
    def exhausted(self) -> bool:
        return self.used >= self.limit

    def spend(self, steps: int = 1) -> bool:
        """Count ``steps``; False (and nothing counted beyond the limit)
        when the budget does not allow them."""
        if self.used + steps > self.limit:
            self.used = self.limit
            return False
        self.used += steps
        return True

    def stopped(self, what: str) -> str:
        """The sentence a rejection gives when the search ran out."""
        return ("the search for %s stopped after %d steps (its budget) "
                "without an answer; the host may still fit" % (what, self.limit))


@dataclasses.dataclass(frozen=True)
class Outcome(Generic[ChoiceT]):
    """The choices, one per item (None: no way found to serve every item).

    :param failed_at: when there is no way, the index of the deepest item
        that had no choice left, and ``usage_there`` the usage it saw then
        (to explain the failure with the item's own checks).
    :param exhausted: the budget ran out before the search finished: the
        items may still fit.
    """

    choices: Optional[tuple[ChoiceT, ...]]
    failed_at: int = 0
    exhausted: bool = False


class _OutOfSteps(Exception):
    pass


def first_fit(items: Sequence[ItemT], usage: UsageT,
              options: Callable[[ItemT, UsageT], Sequence[ChoiceT]],
              take: Callable[[ItemT, ChoiceT, UsageT], UsageT],
              budget: Optional[Budget] = None,
              ) -> tuple[Outcome[ChoiceT], UsageT]:
    """Choices for ``items`` in order, each from ``options(item, usage)``
    (the acceptable ones, best first), ``take`` giving the usage after it.

    :param budget: steps allowed (one per ``options`` call and per choice
        tried); a fresh :class:`Budget` when None.
    :returns: the outcome and, when it failed, the usage the deepest failing
        item saw (else the final usage).
    """
    budget = budget if budget is not None else Budget()
    failed: set[tuple[int, UsageT]] = set()
    deepest: list[tuple[int, UsageT]] = [(0, usage)]
    chosen: list[ChoiceT] = []

    def search(index: int, used: UsageT) -> Optional[UsageT]:
        if index == len(items):
            return used
        if (index, used) in failed:
            return None
        if not budget.spend():
            raise _OutOfSteps()
        for choice in options(items[index], used):
            if not budget.spend():
                raise _OutOfSteps()
            chosen.append(choice)
            done = search(index + 1, take(items[index], choice, used))
            if done is not None:
                return done
            chosen.pop()
        failed.add((index, used))
        if index >= deepest[0][0]:
            deepest[0] = (index, used)
        return None

    try:
        final = search(0, usage)
    except _OutOfSteps:
        return Outcome(None, deepest[0][0], exhausted=True), deepest[0][1]
    if final is None:
        return Outcome(None, deepest[0][0]), deepest[0][1]
    return Outcome(tuple(chosen)), final
