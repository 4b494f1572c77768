"""Which devices serve the request's PCI aliases: a bounded, complete choice.

Each alias ``a`` needs ``count(a)`` devices among its *candidates* (the
devices that match it and that its NUMA affinity allows, free of other
guests); no device twice; never a PF together with one of its VFs
(:meth:`~resources.sriov.state.SRIOVState.related`). Three stages; the
last two count their steps on a :class:`~compute_plugins.plugin.choice.Budget`
(the first is one pass over the devices per alias):

1. **greedy**: each alias in the request's order takes its best free
   candidates (NUMA-affine first, a PF with VFs last, then by address).
   The usual answer, and the one nova's ordering gives;
2. **flow**: (when the aliases need more devices than all their
   candidates together, nothing fits: the greedy's reasons stand at once)
   when the greedy leaves an alias short (an earlier, broader
   alias took the devices a later one needed), a maximum flow from aliases
   (capacity ``count``) to their candidates (capacity 1), by augmenting
   paths, each alias visited once per path: at most ``sum(count)``
   augmentations of ``2 x aliases x devices`` steps each. When it cannot
   give every alias its count, nothing can (the PF/VF rule only removes
   choices): the greedy's reasons stand;
3. **search**: only when the flow's answer gives a PF with one of its VFs,
   a depth-first search (:func:`~compute_plugins.plugin.choice.first_fit`) over
   the aliases' device slots, each alias's devices taken in candidate order
   (combinations, not permutations), within the budget; when it runs out,
   the rejection says the search stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Optional, Union

from compute_plugins.plugin.choice import Budget, first_fit
from compute_plugins.plugin.contract import Rejection
from resources.sriov.request import AliasRequest
from resources.sriov.state import DeviceState, SRIOVState

#: ``(alias, devices)`` per alias of the request, in its order.
Choice = list[tuple[AliasRequest, tuple[DeviceState, ...]]]
#: Why a device cannot serve an alias given the addresses taken (None: it can).
Problem = Callable[[DeviceState, AliasRequest, frozenset[str]], Optional[str]]


#: A search state: the addresses taken, and the candidate position after
#: the device the current alias's previous slot got.
_SlotUsage = tuple[frozenset[str], int]


class Stopped(Exception):
    """The budget ran out (the message is the budget's sentence)."""


def _spend(budget: Budget, steps: int = 1) -> None:
    if not budget.spend(steps):
        raise Stopped(budget.stopped("the devices of the aliases"))


def _flow(aliases: Sequence[AliasRequest],
          candidates: Mapping[str, Sequence[DeviceState]],
          budget: Budget) -> Optional[dict[str, list[DeviceState]]]:
    """Every alias's count of distinct candidates (no PF/VF rule), or None
    when no such choice exists."""
    owner: dict[str, str] = {}          # device address -> alias requester
    given: dict[str, list[DeviceState]] = {a.requester_id: [] for a in aliases}
    by_id = {a.requester_id: a for a in aliases}

    def augment(alias_id: str, visited: set[str]) -> bool:
        """One more device for ``alias_id``: a free candidate, else one
        whose holder (another alias, each visited once) takes another."""
        visited.add(alias_id)
        for device in candidates[alias_id]:
            _spend(budget)
            if device.address not in owner:
                owner[device.address] = alias_id
                given[alias_id].append(device)
                return True
        for device in candidates[alias_id]:
            _spend(budget)
            holder = owner[device.address]
            if holder in visited or not augment(holder, visited):
                continue
            given[holder] = [d for d in given[holder]
                             if d.address != device.address]
            owner[device.address] = alias_id
            given[alias_id].append(device)
            return True
        return False

    for alias_id, alias in by_id.items():
        for _ in range(alias.count):
            if not augment(alias_id, set()):
                return None
    return given


def _in_order(given: Sequence[DeviceState], candidates: Sequence[DeviceState]
              ) -> tuple[DeviceState, ...]:
    """``given`` in candidate (preference) order."""
    addresses = {d.address for d in given}
    return tuple(d for d in candidates if d.address in addresses)


def _related_pair(state: SRIOVState, chosen: Sequence[DeviceState]) -> bool:
    addresses = {d.address for d in chosen}
    return any(other in addresses for d in chosen for other in state.related(d))


def _search(state: SRIOVState, aliases: Sequence[AliasRequest],
            candidates: Mapping[str, Sequence[DeviceState]], problem: Problem,
            budget: Budget) -> Optional[Choice]:
    """Depth first over device slots (module doc, stage 3)."""
    slots = [(alias, k) for alias in aliases for k in range(alias.count)]

    def options(slot: tuple[AliasRequest, int], usage: _SlotUsage
                ) -> list[tuple[int, DeviceState]]:
        alias, k = slot
        taken, after = usage
        start = after if k else 0
        result = []
        for position, device in enumerate(candidates[alias.requester_id][start:],
                                          start):
            _spend(budget)
            if problem(device, alias, taken) is None:
                result.append((position, device))
        return result

    def take(slot: tuple[AliasRequest, int], choice: tuple[int, DeviceState],
             usage: _SlotUsage) -> _SlotUsage:
        position, device = choice
        return usage[0] | {device.address}, position + 1

    start: _SlotUsage = (frozenset(), 0)
    outcome, _ = first_fit(slots, start, options, take, budget)
    if outcome.exhausted:
        raise Stopped(budget.stopped("the devices of the aliases"))
    if outcome.choices is None:
        return None
    chosen: dict[str, list[DeviceState]] = {a.requester_id: [] for a in aliases}
    for (alias, _), (_, device) in zip(slots, outcome.choices, strict=True):
        chosen[alias.requester_id].append(device)
    return [(a, tuple(chosen[a.requester_id])) for a in aliases]


def choose(state: SRIOVState, aliases: Sequence[AliasRequest],
           candidates: Mapping[str, Sequence[DeviceState]],
           greedy: Callable[[], Union[Choice, Rejection]], problem: Problem,
           budget: Budget) -> Union[Choice, Rejection]:
    """The devices of every alias (module doc), or why not (the greedy's
    reason, or the budget's when it ran out).

    :param candidates: per alias requester id, its candidates, best first.
    :param greedy: stage 1 (its choice, or its rejection).
    :param problem: the per-device check ``fit`` and ``verify`` share.
    """
    first = greedy()
    if not isinstance(first, Rejection):
        return first
    union = {d.address for devices in candidates.values() for d in devices}
    if len(union) < sum(a.count for a in aliases):
        return first
    try:
        flow = _flow(aliases, candidates, budget)
        if flow is None:
            return first
        chosen = [d for devices in flow.values() for d in devices]
        if not _related_pair(state, chosen):
            return [(a, _in_order(flow[a.requester_id], candidates[a.requester_id]))
                    for a in aliases]
        found = _search(state, aliases, candidates, problem, budget)
    except Stopped as stopped:
        return Rejection(str(stopped))
    return first if found is None else found
