"""A small complete search: give each of a few items one choice, in order.

Device plugins serve several request groups (VGPU groups, ports) from a
few devices, each group's choice narrowing the next one's (instances,
VFs, bandwidth taken). Taking each group's best device in turn (greedy) can
miss a host where the groups do fit: two VGPU groups of 1 and 2 vGPUs on
pGPUs with 2 and 1 free fit only with the first group on the smaller one.
:func:`first_fit` tries the choices depth first in each item's preference
order, so the answer is the greedy one whenever that works, and remembers
the (item, usage) pairs that failed, so a usage reached twice is not
explored twice: the work is bounded by the number of distinct usages, not
by the product of the choices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, Optional, TypeVar

ItemT = TypeVar("ItemT")
ChoiceT = TypeVar("ChoiceT")
UsageT = TypeVar("UsageT", bound=Hashable)


@dataclasses.dataclass(frozen=True)
class Outcome(Generic[ChoiceT]):
    """The choices, one per item (None: no way to serve every item).

    :param failed_at: when there is no way, the index of the deepest item
        that had no choice left, and ``usage_there`` the usage it saw then
        (to explain the failure with the item's own checks).
    """

    choices: Optional[tuple[ChoiceT, ...]]
    failed_at: int = 0


def first_fit(items: Sequence[ItemT], usage: UsageT,
              options: Callable[[ItemT, UsageT], Sequence[ChoiceT]],
              take: Callable[[ItemT, ChoiceT, UsageT], UsageT],
              ) -> tuple[Outcome[ChoiceT], UsageT]:
    """Choices for ``items`` in order, each from ``options(item, usage)``
    (the acceptable ones, best first), ``take`` giving the usage after it.

    :returns: the outcome and, when it failed, the usage the deepest failing
        item saw (else the final usage).
    """
    failed: set[tuple[int, UsageT]] = set()
    deepest: list[tuple[int, UsageT]] = [(0, usage)]
    chosen: list[ChoiceT] = []

    def search(index: int, used: UsageT) -> Optional[UsageT]:
        if index == len(items):
            return used
        if (index, used) in failed:
            return None
        for choice in options(items[index], used):
            chosen.append(choice)
            done = search(index + 1, take(items[index], choice, used))
            if done is not None:
                return done
            chosen.pop()
        failed.add((index, used))
        if index >= deepest[0][0]:
            deepest[0] = (index, used)
        return None

    final = search(0, usage)
    if final is None:
        return Outcome(None, deepest[0][0]), deepest[0][1]
    return Outcome(tuple(chosen)), final
