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
- ``isolate``: on a cell with SMT, each vCPU takes a whole free core (every
  thread a free dedicated CPU: a core with a shared CPU never is) and its
  siblings stay idle, held by the guest (nova's ``pin_cpus_with_siblings``,
  its legacy ``vcpu_pin_set`` behaviour; modern nova and the query refuse
  SMT hosts for ``isolate``, see :mod:`resources.numa.provider`); on a cell
  without SMT, as ``prefer``.

The emulator threads' CPU (``hw:emulator_threads_policy=isolate``) is one
more free dedicated CPU, not one of the vCPUs': any free one, or, under
``isolate`` with SMT, a whole free core of its own.
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
    :param idle: siblings held idle (``isolate`` on SMT).
    """

    cpus: tuple[int, ...]
    emulator: frozenset[int] = frozenset()
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


def choose(cell: CellState, count: int, emulator: int, policy: Optional[str],
           subject: Subject, who: str) -> Union[Pinning, str]:
    """Pick ``count`` dedicated CPUs (+ ``emulator`` for emulator threads)
    on ``cell`` under thread ``policy``; a reason when it cannot.

    The caller has checked that the cell has ``count + emulator`` free
    dedicated CPUs.
    """
    groups = _free_threads(cell)
    if policy == ISOLATE and cell.has_threads:
        whole = [core for core in cell.cores if core <= cell.free_pcpus]
        if len(whole) < count + emulator:
            return ("%s %s %s, %s needs %d (%s; "
                    "hw:cpu_thread_policy=isolate takes a whole core per "
                    "CPU and leaves its siblings idle)"
                    % (subject.name, subject.has,
                       plural(len(whole), "wholly free core"), who,
                       count + emulator, _count_text(count, emulator)))
        cpus = [min(core) for core in whole[:count]]
        emu = frozenset(min(core) for core in whole[count:count + emulator])
        held = frozenset().union(*whole[:count + emulator])
        return Pinning(tuple(cpus), emu, held - set(cpus) - emu)
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


def _count_text(count: int, emulator: int) -> str:
    text = plural(count, "vCPU")
    if emulator:
        text += " + %d for emulator threads" % emulator
    return text


def problem(cell: CellState, policy: Optional[str], cpus: Sequence[int],
            emulator: frozenset[int], idle: frozenset[int],
            subject: Subject, who: str) -> Optional[str]:
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
        owners = list(cpus) + sorted(emulator)
        cores = [cell.core_of[cpu] for cpu in owners]
        partial = [cpu for cpu, core in zip(owners, cores, strict=True)
                   if not core <= free]
        if partial:
            return ("the cores of CPU(s) %s of %s are not wholly free; %s "
                    "takes whole cores (hw:cpu_thread_policy=isolate)"
                    % (format_cpu_spec(partial), subject.name, who))
        if len(set(cores)) != len(cores):
            return ("%s puts two CPUs on one core of %s "
                    "(hw:cpu_thread_policy=isolate)" % (who, subject.name))
        siblings = frozenset().union(*cores) - set(owners)
        if idle != siblings:
            return ("%s must hold the siblings %s of its CPUs on %s idle, "
                    "not %s (hw:cpu_thread_policy=isolate)"
                    % (who, format_cpu_spec(siblings) or "(none)",
                       subject.name, format_cpu_spec(idle) or "none"))
    elif idle:
        return "%s holds CPU(s) %s of %s idle without isolating threads" % (
            who, format_cpu_spec(idle), subject.name)
    return None
