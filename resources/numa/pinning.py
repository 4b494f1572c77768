"""Which host CPUs of one cell a guest node's dedicated vCPUs are pinned to.

A per-cell problem: the thread policy only looks at the cell's cores and
which of their threads are free. Two functions, one job each:

- :func:`choose` picks the CPUs (nova's ``_pack_instance_onto_cores``
  order: the cores with the most free threads first, as many threads of
  each as the policy allows), or says why the cell cannot take them;
- :func:`problem` says whether a given pinning is valid on the cell. The
  fit checks its own choice with it and ``verify`` checks a recorded one:
  one definition of "valid".

The policies (nova's, ``hw:cpu_thread_policy``):

- ``prefer`` (and unset): any free dedicated CPUs; siblings first.
- ``require``: the cell has SMT, and every vCPU goes on a core with at
  least two free threads (nova packs the same number of threads of each
  such core first; where that fails, any such cores are used, as long as no
  vCPU lands on a core with a single free thread).
- ``isolate``: on a cell with SMT, refused (:data:`ISOLATE_ON_SMT`): the
  plugin's dedicated CPUs are ``[compute] cpu_dedicated_set``, so, as nova
  with that option, holding a core's siblings idle would take CPUs the
  Placement request (the guest's PCPUs) does not count (nova bug 1889633;
  nova only keeps the "hold the siblings" behaviour for its legacy hosts,
  without ``cpu_dedicated_set``: on those the plugin pins to the ``VCPU``
  CPUs, :attr:`resources.numa.view.NUMAView.legacy`, but still refuses
  ``isolate`` on SMT). The query forbids
  ``HW_CPU_HYPERTHREADING`` on the root too (:mod:`resources.numa.provider`);
  the per-cell check makes the fit and ``verify`` say so on their own. On a
  cell without SMT, as ``prefer``.

The emulator threads' CPU (``hw:emulator_threads_policy=isolate``) is one
more free dedicated CPU, not one of the vCPUs': any free one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Optional, Union

from compute_plugins.plugin.cpuset import format_cpu_spec
from resources.numa.state import CellState

PREFER = "prefer"
ISOLATE = "isolate"
REQUIRE = "require"

#: Why ``hw:cpu_thread_policy=isolate`` is refused on a cell with SMT
#: (nova's ``_pack_instance_onto_cores`` with ``cpu_dedicated_set``).
ISOLATE_ON_SMT = (
    "%s %s thread siblings (SMT) and %s asks hw:cpu_thread_policy=isolate: "
    "refused as nova refuses it with [compute] cpu_dedicated_set (holding "
    "the siblings idle would take CPUs the guest's PCPU request does not "
    "count; nova bug 1889633)")
#: The same on nova's legacy host (no ``cpu_dedicated_set``), where nova
#: would pin a core and hold its siblings: not implemented here.
ISOLATE_ON_SMT_LEGACY = (
    "%s %s thread siblings (SMT) and %s asks hw:cpu_thread_policy=isolate: "
    "nova's legacy mode for hosts without [compute] cpu_dedicated_set (pin "
    "a core, hold its siblings idle) is not implemented; set "
    "cpu_dedicated_set")


def plural(count: int, noun: str) -> str:
    """``1 CPU``, ``2 CPUs``: ``noun`` is the singular; the last word of it
    takes the ``s``."""
    return "%d %s%s" % (count, noun, "" if count == 1 else "s")


@dataclasses.dataclass(frozen=True)
class Subject:
    """Who a message is about: ``host cell 1`` / ``host cells 1-3``.

    :param name: the cell(s).
    :param has: the verb that follows (``has`` or ``each have``).
    """

    name: str
    has: str = "has"

    @classmethod
    def of(cls, cell_ids: Sequence[int]) -> Subject:
        if len(cell_ids) == 1:
            return cls("host cell %d" % cell_ids[0])
        return cls("host cells %s" % format_cpu_spec(cell_ids), "each have")


@dataclasses.dataclass(frozen=True)
class Pinning:
    """A chosen pinning on one cell.

    :param cpus: host CPUs of the guest node's dedicated vCPUs, in the order
        of the vCPUs.
    :param emulator: the emulator threads' CPU (empty when none is asked).
    """

    cpus: tuple[int, ...]
    emulator: frozenset[int] = frozenset()


def _free_threads(cell: CellState) -> list[list[int]]:
    """The free dedicated threads of each core that has some, core order."""
    free = cell.free_pcpus
    return [sorted(core & free) for core in cell.cores if core & free]


def _uniform(groups: list[list[int]], count: int, least: int
             ) -> Optional[list[int]]:
    """nova's ``_get_pinning`` loop: the same number ``t`` of threads from
    each core with at least ``t`` free, ``t`` from the most down to
    ``least``; None when no ``t`` gives ``count`` CPUs."""
    top = max((len(g) for g in groups), default=0)
    for threads in range(top, least - 1, -1):
        usable = [g for g in groups if len(g) >= threads]
        if threads * len(usable) >= count:
            return [cpu for g in usable for cpu in g[:threads]][:count]
    return None


def _first_free(groups: list[list[int]], taken: set[int], count: int
                ) -> frozenset[int]:
    rest = [cpu for g in groups for cpu in g if cpu not in taken]
    return frozenset(rest[:count])


def _require_fallback(groups: list[list[int]], count: int) -> Optional[list[int]]:
    """Any threads of the cores with at least two free, fullest first."""
    paired = sorted((g for g in groups if len(g) >= 2), key=len, reverse=True)
    cpus = [cpu for g in paired for cpu in g]
    return cpus[:count] if len(cpus) >= count else None


def _isolate_on_smt(subject: Subject, who: str, legacy: bool) -> str:
    return (ISOLATE_ON_SMT_LEGACY if legacy else ISOLATE_ON_SMT) % (
        subject.name, subject.has, who)


def choose(cell: CellState, count: int, emulator: int, policy: Optional[str],
           subject: Subject, who: str, legacy: bool = False) -> Union[Pinning, str]:
    """Pick ``count`` dedicated CPUs (+ ``emulator`` for emulator threads)
    on ``cell`` under thread ``policy``; a reason when it cannot.

    The caller has checked that the cell has ``count + emulator`` free
    dedicated CPUs.
    """
    groups = _free_threads(cell)
    if policy == ISOLATE and cell.has_threads:
        return _isolate_on_smt(subject, who, legacy)
    if policy == REQUIRE:
        if not cell.has_threads:
            return ("%s %s no thread siblings (SMT), %s requires them "
                    "(hw:cpu_thread_policy=require)"
                    % (subject.name, subject.has, who))
        chosen = _uniform(groups, count, 2) or _require_fallback(groups, count)
        if chosen is None:
            paired = sum(len(g) for g in groups if len(g) >= 2)
            return ("%s %s %s on cores with at least two free "
                    "threads, %s needs %d (hw:cpu_thread_policy=require)"
                    % (subject.name, subject.has, plural(paired, "free CPU"),
                       who, count))
    else:
        chosen = _uniform(groups, count, 1)
        if chosen is None:
            chosen = [cpu for g in groups for cpu in g][:count]
    return Pinning(tuple(chosen), _first_free(groups, set(chosen), emulator))


def problem(cell: CellState, policy: Optional[str], cpus: Sequence[int],
            emulator: frozenset[int], idle: frozenset[int],
            subject: Subject, who: str, legacy: bool = False) -> Optional[str]:
    """Why pinning ``cpus`` (+ ``emulator``, holding ``idle``) on ``cell``
    under thread ``policy`` is not valid; None when it is."""
    taken = list(cpus) + sorted(emulator) + sorted(idle)
    if len(set(taken)) != len(taken):
        twice = sorted({cpu for cpu in taken if taken.count(cpu) > 1})
        return "%s takes CPU(s) %s of %s twice" % (
            who, format_cpu_spec(twice), subject.name)
    foreign = set(taken) - cell.pcpus
    if foreign:
        return "CPU(s) %s are not dedicated CPUs of %s (dedicated: %s)" % (
            format_cpu_spec(foreign), subject.name,
            format_cpu_spec(cell.pcpus) or "none")
    busy = set(taken) & cell.pinned
    if busy:
        return "CPU(s) %s of %s are taken by other guests" % (
            format_cpu_spec(busy), subject.name)
    free = cell.free_pcpus
    if policy == REQUIRE:
        if not cell.has_threads:
            return ("%s %s no thread siblings (SMT), %s requires them "
                    "(hw:cpu_thread_policy=require)"
                    % (subject.name, subject.has, who))
        alone = [cpu for cpu in cpus if len(cell.core_of[cpu] & free) < 2]
        if alone:
            return ("CPU(s) %s of %s have no free thread sibling; %s "
                    "requires them (hw:cpu_thread_policy=require)"
                    % (format_cpu_spec(alone), subject.name, who))
    if policy == ISOLATE and cell.has_threads:
        return _isolate_on_smt(subject, who, legacy)
    if idle:
        return "%s holds CPU(s) %s of %s idle beside its emulator threads' CPU" % (
            who, format_cpu_spec(idle), subject.name)
    return None
