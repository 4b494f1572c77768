"""CPU seconds spent by each part of a run: schedulers, agents, Placement,
the database server.

Wall times on a shared 2-core machine measure the load as much as the code;
the CPU each process used does not (much): ``cpu_ms_per_decision`` tells
where a decision's cost lies even when other jobs run beside the bench.
Read from Linux ``/proc`` (user + system time, with that of the process's
children already reaped); 0 for what is missing.

The private PostgreSQL's share is split by what its processes serve
(:data:`DATABASE_PARTS`): the store's backends by client (each process of
the bench names its connections: :func:`named`), Placement's, the server's
own processes, and the children it reaped meanwhile (a backend whose
client closed it, an autovacuum worker): a client that connected and
closed per request would show there, and in the backends that started
and ended over the run (:func:`backends_changed`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, Optional

import sqlalchemy as sa

#: The parts a run's CPU is split into.
ROLES = ("schedulers", "agents", "placement", "database")
#: The parts the private PostgreSQL's CPU is split into: the store's
#: backends by client (the schedulers', the agents', the main process's),
#: Placement's, the server's own processes (the postmaster, the WAL
#: writer, the checkpointer, the background writer, the autovacuum
#: launcher...), and the postmaster's children that ended (their whole
#: life's CPU: connections closed, autovacuum workers, parallel workers).
DATABASE_PARTS = ("store_schedulers", "store_agents", "store", "placement", "server",
                  "reaped")
#: The ``application_name`` prefix of the bench's processes' connections.
APPLICATION = "bench-scale-"


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


def named(url: str, role: str) -> str:
    """``url`` (the store's SQLAlchemy URL) with its connections named
    ``bench-scale-ROLE`` on PostgreSQL (``application_name``, which
    :func:`database_pids` reads), unless it names them itself."""
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() != "postgresql" or "application_name" in parsed.query:
        return url
    return parsed.update_query_dict({"application_name": APPLICATION + role}).render_as_string(
        hide_password=False)


def database_pids(admin: Any, databases: Mapping[str, str]) -> dict[int, str]:
    """A PostgreSQL server's processes by :data:`DATABASE_PARTS`: its
    backends and its postmaster (``"postmaster"``: its own time is the
    server's, its reaped children's ``reaped``), by ``admin``, an
    autocommit DB-API connection to it (its own backend left out).

    :param databases: the part of each database's client backends
        (``{"bench_placement": "placement", ...}``); the store's are split
        by their ``application_name`` (:func:`named`); others are the
        server's.
    """
    with admin.cursor() as cur:
        cur.execute("SELECT pid, backend_type, datname, application_name "
                    "FROM pg_stat_activity WHERE pid <> pg_backend_pid()")
        rows = cur.fetchall()
    parts: dict[int, str] = {}
    for pid, kind, datname, application in rows:
        part = databases.get(datname or "", "server") if kind == "client backend" else "server"
        if part == "store" and (application or "").startswith(APPLICATION):
            named_part = "store_" + application[len(APPLICATION):]
            part = named_part if named_part in DATABASE_PARTS else part
        parts[pid] = part
    parents = {fields[1] for fields in map(_stat, parts) if fields is not None}
    for parent in parents:
        if int(parent) > 1:
            parts[int(parent)] = "postmaster"
    return parts


def _own_and_reaped(pid: int) -> tuple[float, float]:
    """CPU seconds of ``pid`` itself and of its reaped children."""
    fields = _stat(pid)
    if fields is None:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def snapshot(schedulers: Iterable[int], agents: Iterable[int],
             database: Mapping[int, str] | Iterable[int] = ()) -> dict[str, float]:
    """CPU seconds by :data:`ROLES` now: the scheduler and agent processes
    with their descendants, the database's processes, and this process's
    tree besides them (Placement: this process serves it, with its forked
    workers); with the database's by :data:`DATABASE_PARTS` (keys
    ``database.PART``) where ``database`` maps its processes to their
    parts (:func:`database_pids`)."""
    parts = database if isinstance(database, Mapping) else dict.fromkeys(database, "server")
    schedulers, agents = list(schedulers), list(agents)
    leave_out = set(schedulers) | set(agents) | set(parts)
    out = {
        "schedulers": sum(process_seconds(p) for s in schedulers for p in _tree(s, set())),
        "agents": sum(process_seconds(p) for a in agents for p in _tree(a, set())),
        "placement": sum(process_seconds(p) for p in _tree(os.getpid(), leave_out)),
    }
    split = dict.fromkeys(DATABASE_PARTS, 0.0)
    for pid, part in parts.items():
        own, reaped = _own_and_reaped(pid)
        if part == "postmaster":
            split["server"] += own
            split["reaped"] += reaped
        else:
            split[part] += own + reaped
    out["database"] = sum(split.values())
    out.update(("database." + part, seconds) for part, seconds in split.items())
    return out


def per_decision(before: Mapping[str, float], after: Mapping[str, float],
                 decisions: int) -> dict[str, float]:
    """Milliseconds of CPU per decision by role, and their ``total``."""
    out = {role: round((after[role] - before[role]) * 1e3 / max(1, decisions), 1)
           for role in ROLES}
    out["total"] = round(sum(out[role] for role in ROLES), 1)
    return out


def database_per_decision(before: Mapping[str, float], after: Mapping[str, float],
                          decisions: int) -> dict[str, float]:
    """Milliseconds of the database's CPU per decision by
    :data:`DATABASE_PARTS` (:func:`snapshot`'s ``database.PART``)."""
    return {part: round((after["database." + part] - before["database." + part]) * 1e3
                        / max(1, decisions), 1) for part in DATABASE_PARTS}


def backends_changed(before: Mapping[int, str], after: Mapping[int, str]) -> dict[str, Any]:
    """The backends that started and those that ended between two
    :func:`database_pids`, by part (those that started and ended between
    are not seen: their CPU is ``reaped``)."""
    started: dict[str, int] = {}
    ended: dict[str, int] = {}
    for pid, part in after.items():
        if pid not in before and part != "postmaster":
            started[part] = started.get(part, 0) + 1
    for pid, part in before.items():
        if pid not in after and part != "postmaster":
            ended[part] = ended.get(part, 0) + 1
    return {"started": started, "ended": ended}
