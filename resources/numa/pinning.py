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
  Placement request (the guest's PCPUs) does not count (nova bug 1889633).
  The query forbids ``HW_CPU_HYPERTHREADING`` on the root too
  (:mod:`resources.numa.provider`); the per-cell check makes the fit and
  ``verify`` say so on their own. On nova's legacy host (no
  ``cpu_dedicated_set``, :attr:`resources.numa.view.NUMAView.legacy`) nova
  keeps its old "pin a core, hold its siblings idle" ``isolate``, and so
  does the plugin (:func:`_isolate_legacy`): each vCPU takes the first
  thread of a whole free core (a core with the cell's most threads, all
  free: nova's ``sibling_sets[threads_per_core]``), the core's other
  threads are held idle by the guest (:attr:`Pinning.idle`, recorded in
  ``held_cpus``: nova's ``pin_cpus_with_siblings``), and the emulator
  threads' CPU of ``hw:emulator_threads_policy=isolate`` is the first
  thread of a further whole free core, its siblings held too (nova takes
  the first free thread of any other core and then holds its siblings,
  which fails nova's claim where one of them is taken: the plugin takes a
  whole free core instead). On a cell without SMT, as ``prefer``.

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
#: What ``isolate`` asks on nova's legacy host (no ``cpu_dedicated_set``):
#: said when the cell has too few whole free cores.
ISOLATE_LEGACY = (
    "hw:cpu_thread_policy=isolate on a host without [compute] "
    "cpu_dedicated_set pins each vCPU to a whole free core and holds its "
    "thread siblings idle")


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
    #: CPUs held idle beside them: the thread siblings of the cores of
    #: ``cpus`` and ``emulator`` (``isolate`` on a legacy host).
    idle: frozenset[int] = frozenset()


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


def _isolate_on_smt(subject: Subject, who: str) -> str:
    return ISOLATE_ON_SMT % (subject.name, subject.has, who)


def _threads_per_core(cell: CellState) -> int:
    """The most threads a core of the cell has (nova's ``threads_per_core``)."""
    return max((len(core) for core in cell.cores), default=1)


def _whole_free_cores(cell: CellState) -> list[frozenset[int]]:
    """Cores with the cell's most threads, every one a free dedicated CPU
    (nova's ``sibling_sets[threads_per_core]``), core order."""
    threads = _threads_per_core(cell)
    free = cell.free_pcpus
    return [core for core in cell.cores if len(core) == threads and core <= free]


def _isolate_legacy(cell: CellState, count: int, emulator: int,
                    subject: Subject, who: str) -> Union[Pinning, str]:
    """``isolate`` on a legacy host's SMT cell: the first thread of a whole
    free core per vCPU (and for the emulator threads), the cores' other
    threads held idle (see the module doc)."""
    whole = _whole_free_cores(cell)
    if len(whole) < count + emulator:
        extra = " + 1 for emulator threads" if emulator else ""
        return ("%s %s %s (all %d threads free), %s needs %d%s (%s)"
                % (subject.name, subject.has,
                   plural(len(whole), "whole free core"),
                   _threads_per_core(cell), who, count, extra, ISOLATE_LEGACY))
    cpus = tuple(min(core) for core in whole[:count])
    emulated = frozenset(min(core) for core in whole[count:count + emulator])
    used = frozenset().union(*whole[:count + emulator])
    return Pinning(cpus, emulated, used - set(cpus) - emulated)


def _isolate_legacy_problem(cell: CellState, cpus: Sequence[int],
                            emulator: frozenset[int], idle: frozenset[int],
                            subject: Subject, who: str) -> Optional[str]:
    """Why ``cpus`` (+ ``emulator``, holding ``idle``) is not a legacy
    ``isolate`` pinning on ``cell``: one CPU per core, on cores with the
    cell's most threads, each core's other threads held idle."""
    threads = _threads_per_core(cell)
    cores = [cell.core_of[cpu] for cpu in list(cpus) + sorted(emulator)]
    shared = sorted({cpu for cpu, core in zip(list(cpus) + sorted(emulator), cores,
                                              strict=True)
                     if cores.count(core) > 1})
    if shared:
        return ("CPU(s) %s of %s share a core; %s asks one CPU per core (%s)"
                % (format_cpu_spec(shared), subject.name, who, ISOLATE_LEGACY))
    small = sorted(min(core) for core in cores if len(core) < threads)
    if small:
        return ("the cores of CPU(s) %s of %s have fewer than its %d threads "
                "per core; %s needs whole cores (%s)"
                % (format_cpu_spec(small), subject.name, threads, who,
                   ISOLATE_LEGACY))
    siblings = frozenset().union(*cores) - set(cpus) - emulator
    if idle != siblings:
        return ("%s must hold CPU(s) %s of %s idle (the thread siblings of "
                "its cores); it holds %s (%s)"
                % (who, format_cpu_spec(siblings) or "none", subject.name,
                   format_cpu_spec(idle) or "none", ISOLATE_LEGACY))
    return None


def choose(cell: CellState, count: int, emulator: int, policy: Optional[str],
           subject: Subject, who: str, legacy: bool = False) -> Union[Pinning, str]:
    """Pick ``count`` dedicated CPUs (+ ``emulator`` for emulator threads)
    on ``cell`` under thread ``policy``; a reason when it cannot.

    The caller has checked that the cell has ``count + emulator`` free
    dedicated CPUs.
    """
    if policy == ISOLATE and cell.has_threads:
        if legacy:
            return _isolate_legacy(cell, count, emulator, subject, who)
        return _isolate_on_smt(subject, who)
    groups = _free_threads(cell)
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
        if legacy:
            return _isolate_legacy_problem(cell, cpus, emulator, idle,
                                           subject, who)
        return _isolate_on_smt(subject, who)
    if idle:
        return "%s holds CPU(s) %s of %s idle beside its emulator threads' CPU" % (
            who, format_cpu_spec(idle), subject.name)
    return None
