"""The embedded Placement's CPU per request, at N hosts (issue 19).

``python -m bench.scale.placement --hosts 1000 [--store postgresql]
[--requests 200] [--profile FILE]``

Builds N simulated hosts in an embedded Placement (as ``bench.scale``
does: templates registered by the report client, the rest copied into
its tables), then sends, through the in-process transport (no socket,
no other process), the requests a scheduler sends per decision: ``GET
/resource_providers?resources=...`` (every host: one per request shape)
and the same with ``in_tree`` (one host's tree), ``PUT
/allocations/{consumer}`` and ``DELETE /allocations/{consumer}``; and
prints, for each kind, the process CPU per request (``time.process_time``:
this process's every thread, with nothing else running in it). With
``--profile`` the requests run under cProfile and its stats are written
to FILE (``python -m pstats FILE``).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Optional

import sqlalchemy as sa

from bench.scale import hosts
from compute_plugins.placement import embedded

#: The microversion the requests are sent at (the report client's).
MICROVERSION = "placement 1.39"
RESOURCES = "VCPU:1,MEMORY_MB:512"


@contextlib.contextmanager
def database(store: str) -> Iterator[str]:
    """Placement's database URL: in-memory SQLite or a private PostgreSQL
    (whose backends' CPU :func:`database_cpu` reads)."""
    if store == "sqlite":
        yield "sqlite://"
        return
    from tests import servers

    with servers.postgresql() as server:
        admin = server.admin()
        try:
            with admin.cursor() as cur:
                cur.execute("CREATE DATABASE bench_placement")
            DATABASE_CPU.append(lambda: _backends_cpu(admin))
            yield server.url("bench_placement")
        finally:
            DATABASE_CPU.clear()
            admin.close()


#: Reads the CPU seconds of the database's server processes (PostgreSQL).
DATABASE_CPU: list[Callable[[], float]] = []


def _backends_cpu(admin: Any) -> float:
    """CPU seconds of PostgreSQL's backends serving ``bench_placement``."""
    with admin.cursor() as cur:
        cur.execute("SELECT pid FROM pg_stat_activity WHERE datname = 'bench_placement'")
        pids = [row[0] for row in cur.fetchall()]
    return sum(cpu_seconds(pid) for pid in pids)


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` (Linux ``/proc``; 0
    when it is gone)."""
    try:
        with open("/proc/%d/stat" % pid) as stat:
            # NOTE: the fields after the command (in parentheses, which may
            # hold spaces): utime and stime are the 14th and 15th.
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def database_cpu() -> float:
    """:data:`DATABASE_CPU`'s reading; 0 on SQLite (in this process)."""
    return DATABASE_CPU[0]() if DATABASE_CPU else 0.0


#: SQL statements sent and connections checked out of the pool, so far.
COUNTS = {"statements": 0, "checkouts": 0}


def count_statements(engine: Any) -> None:
    """Count ``engine``'s statements and pool checkouts into :data:`COUNTS`."""
    def statement(*args: Any) -> None:
        COUNTS["statements"] += 1

    def checkout(*args: Any) -> None:
        COUNTS["checkouts"] += 1

    sa.event.listen(engine, "before_cursor_execute", statement)
    sa.event.listen(engine, "checkout", checkout)


def timed(count: int, send: Callable[[int], None]) -> dict[str, float]:
    """Per call of ``send``: milliseconds of this process's CPU, of
    wall-clock time (the database's share included), statements and
    pool checkouts."""
    before = dict(COUNTS)
    db = database_cpu()
    start, wall = time.process_time(), time.perf_counter()
    for i in range(count):
        send(i)
    cpu = time.process_time() - start
    wall = time.perf_counter() - wall
    db = database_cpu() - db
    return {"cpu_ms": round(cpu * 1e3 / count, 2),
            "db_cpu_ms": round(db * 1e3 / count, 2),
            "wall_ms": round(wall * 1e3 / count, 2),
            **{k: round((COUNTS[k] - before[k]) / count, 1) for k in COUNTS}}


def measure(client: Any, count: int) -> dict[str, Any]:
    """CPU and wall ms, statements and checkouts per request of each kind
    (module doc)."""
    headers = {"OpenStack-API-Version": MICROVERSION}
    sess = client.adapter

    def call(method: str, url: str, body: Any = None, ok: int = 200) -> Any:
        resp = sess.request(url, method, json=body, headers=headers, raise_exc=False)
        if resp.status_code != ok:
            raise RuntimeError("%s %s: %s %s" % (method, url, resp.status_code,
                                                 resp.text[:300]))
        return resp

    answer = call("GET", "/resource_providers?resources=" + RESOURCES).content
    start = time.process_time()
    rps = json.loads(answer)
    decode = time.process_time() - start
    providers = rps["resource_providers"]
    roots = sorted({rp["root_provider_uuid"] for rp in providers})
    targets = [rp["uuid"] for rp in providers]
    project, user = str(uuid.uuid4()), str(uuid.uuid4())
    consumers = [str(uuid.uuid4()) for _ in range(count)]

    def put(i: int) -> None:
        body = {"allocations": {targets[i % len(targets)]: {
                    "resources": {"VCPU": 1, "MEMORY_MB": 512}}},
                "project_id": project, "user_id": user,
                "consumer_generation": None, "consumer_type": "INSTANCE"}
        call("PUT", "/allocations/" + consumers[i], body, ok=204)

    out = {
        "get_all": timed(max(1, count // 20), lambda i: call(
            "GET", "/resource_providers?resources=" + RESOURCES)),
        "get_in_tree": timed(count, lambda i: call(
            "GET", "/resource_providers?resources=%s&in_tree=%s"
            % (RESOURCES, roots[i % len(roots)]))),
        "put_allocations": timed(count, put),
        "get_allocations": timed(count, lambda i: call(
            "GET", "/allocations/" + consumers[i])),
        "delete_allocations": timed(count, lambda i: call(
            "DELETE", "/allocations/" + consumers[i], ok=204)),
    }
    return {"providers_listed": len(providers), "answer_bytes": len(answer),
            "decode_ms": round(decode * 1e3, 2), **out}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale.placement",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="postgresql")
    parser.add_argument("--requests", type=int, default=200,
                        help="requests of each kind (default 200; the full "
                        "GET a twentieth of it)")
    parser.add_argument("--profile", metavar="FILE",
                        help="run the requests under cProfile, stats into FILE")
    args = parser.parse_args(argv)
    with database(args.store) as url, embedded.EmbeddedPlacement(url) as service:
        client = service.client()
        client.get("/")
        start = time.monotonic()
        hosts.build(client, hosts.placement_engine(), args.hosts)
        count_statements(hosts.placement_engine())
        setup = time.monotonic() - start
        measure(client, 20)  # NOTE: warm (first-request imports, caches)
        if args.profile:
            profiler = cProfile.Profile()
            out = profiler.runcall(measure, client, args.requests)
            profiler.dump_stats(args.profile)
        else:
            out = measure(client, args.requests)
    out = {"hosts": args.hosts, "store": args.store, "setup_s": round(setup, 1), **out}
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
