"""CPU seconds spent by each part of a run: schedulers, agents, Placement,
the database server.

Wall times on a shared 2-core machine measure the load as much as the code;
the CPU each process used does not (much): ``cpu_ms_per_decision`` tells
where a decision's cost lies even when other jobs run beside the bench.
Read from Linux ``/proc`` (user + system time, with that of the process's
children already reaped); 0 for what is missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, Optional

#: The parts a run's CPU is split into.
ROLES = ("schedulers", "agents", "placement", "database")


def _stat(pid: int) -> Optional[list[str]]:
    try:
        with open("/proc/%d/stat" % pid) as stat:
            # NOTE: the fields after the command (in parentheses, which may
            # hold spaces): ppid is the 4th, utime, stime, cutime, cstime
            # the 14th-17th.
            return stat.read().rpartition(")")[2].split()
    except OSError:
        return None


def process_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and its reaped children (0 when it is gone)."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """``pid``'s live children (every thread's)."""
    found: list[int] = []
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return found
    for task in tasks:
        try:
            with open("/proc/%d/task/%s/children" % (pid, task)) as listed:
                found.extend(int(c) for c in listed.read().split())
        except OSError:
            continue
    return found


def _tree(pid: int, leave_out: set[int]) -> list[int]:
    """``pid`` and its descendants, those in ``leave_out`` (and theirs) not."""
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        if current in leave_out:
            continue
        pids.append(current)
        todo.extend(children(current))
    return pids


def database_pids(admin: Any) -> list[int]:
    """A PostgreSQL server's backends and its postmaster (whose reaped
    children's time counts the backends that ended), by ``admin``, an
    autocommit DB-API connection to it."""
    with admin.cursor() as cur:
        cur.execute("SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()")
        backends = [row[0] for row in cur.fetchall()]
    parents = {fields[1] for fields in map(_stat, backends) if fields is not None}
    return backends + [int(p) for p in parents if int(p) > 1]


def snapshot(schedulers: Iterable[int], agents: Iterable[int],
             database: Iterable[int] = ()) -> dict[str, float]:
    """CPU seconds by :data:`ROLES` now: the scheduler and agent processes
    with their descendants, the database's processes, and this process's
    tree besides them (Placement: this process serves it, with its forked
    workers)."""
    schedulers, agents, database = list(schedulers), list(agents), list(database)
    leave_out = set(schedulers) | set(agents) | set(database)
    return {
        "schedulers": sum(process_seconds(p) for s in schedulers for p in _tree(s, set())),
        "agents": sum(process_seconds(p) for a in agents for p in _tree(a, set())),
        "placement": sum(process_seconds(p) for p in _tree(os.getpid(), leave_out)),
        "database": sum(process_seconds(p) for p in database),
    }


def per_decision(before: Mapping[str, float], after: Mapping[str, float],
                 decisions: int) -> dict[str, float]:
    """Milliseconds of CPU per decision by role, and their ``total``."""
    out = {role: round((after[role] - before[role]) * 1e3 / max(1, decisions), 1)
           for role in ROLES}
    out["total"] = round(sum(out[role] for role in ROLES), 1)
    return out
