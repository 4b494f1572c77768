"""Push against poll (issue 19, item 1), same run, per store.

One host with its real compute agent (a thread, as ``compute-plugins
report`` runs it: ``[compute] claim_poll_interval`` 1 s, periodics every
60 s), its own store object (its own engine, as its own process would
have), a real scheduler and embedded Placement, on each store of
``--store``: a private PostgreSQL (:mod:`tests.servers`; ``--url`` for
another) and an SQLite file. The modes, each against the polling one of its
store (``[host_state] push`` off):

- PostgreSQL: ``notify`` (``LISTEN``/``NOTIFY``) and ``rabbit`` (the
  wake-ups through RabbitMQ, ``[host_state] push_transport_url``);
- SQLite: ``rabbit`` and ``fake`` (``fake://``: in-process, the demo's).

RabbitMQ is a private one (:func:`tests.servers.rabbitmq`; ``--broker``
for another). The safety net is 300 s everywhere. Printed per mode:

- the idle agent's statements on the store per minute (measured over
  ``--idle`` seconds, counted by an SQLAlchemy event listener), those of
  its lease renewal apart, and its Placement calls per minute;
- the answer latency: p50 and max of the seconds from the scheduler's
  submit to the agent's answer (``timings["claim"]``), over ``-n``
  decisions (each released after), and of the whole ``schedule()``;
- the ratios to the polling mode of the same store.

Run ``python -m bench.push [-n N] [--idle S] [--store postgresql,sqlite]
[--url URL] [--broker rabbit://...]``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from compute_plugins.hoststate.store import HostStateStore

#: The agent's periodic interval (``compute-plugins report --interval``).
PERIODIC = 60.0


@contextlib.contextmanager
def database(url: str | None) -> Iterator[str]:
    """A new database on ``url``'s server, or on a private PostgreSQL."""
    from tests import servers
    from tests.functional.hoststate.conftest import create_database

    if url is not None:
        yield url
        return
    with servers.postgresql() as server:
        made, drop = create_database(server)
        try:
            yield made
        finally:
            drop()


@contextlib.contextmanager
def broker(url: str | None) -> Iterator[str]:
    """``url``, or a private RabbitMQ's transport URL."""
    from tests import servers

    if url is not None:
        yield url
        return
    with servers.rabbitmq() as server:
        yield server.transport_url


def lease_statements(seen: list[str]) -> list[str]:
    """The statements of the lease renewals (on SQLite with their
    transaction's ``BEGIN IMMEDIATE``)."""
    def lease(statement: str) -> bool:
        return "hoststate_leases" in statement or "clock_timestamp()" in statement
    return [s for i, s in enumerate(seen)
            if lease(s) or (s == "BEGIN IMMEDIATE" and i + 1 < len(seen)
                            and lease(seen[i + 1]))]


def measure(url: str, push: bool, decisions: int, idle: float,
            transport_url: str = "") -> dict[str, Any]:
    from compute_plugins.placement import embedded
    from tests.functional.request.hosts import Placement, cell
    from tests.functional.scheduler.cloud import Cloud
    from tests.functional.scheduler.test_schedule import spec_of

    emb = embedded.EmbeddedPlacement("sqlite://").start()
    directory = tempfile.mkdtemp(prefix="bench-push-")
    cloud = Cloud(Placement(emb), directory, store=HostStateStore(
        url, push=push, push_transport_url=transport_url))
    own = HostStateStore(url, push=push, push_transport_url=transport_url)
    try:
        host = cloud.add_host("bench", [cell(16, 65536)], start=False, store=own)
        agent = host.agent
        agent.claim_poll_interval = 1.0
        stop = threading.Event()
        thread = threading.Thread(target=agent.run, args=(stop, PERIODIC), daemon=True)
        thread.start()
        time.sleep(1.5)
        seen: list[str] = []

        def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            seen.append(statement)

        # NOTE: every engine of the store (writes, reads, and on PostgreSQL
        # the one-statement engine the lease renewal runs on), not the
        # writes' alone: that one saw none of an idle agent's statements.
        for engine in own.db.engines:
            sa.event.listen(engine, "before_cursor_execute", record)
        calls = agent.client.placement.calls.snapshot()
        time.sleep(idle)
        for engine in own.db.engines:
            sa.event.remove(engine, "before_cursor_execute", record)
        placement_calls = sum(agent.client.placement.calls.snapshot().values()) \
            - sum(calls.values())
        lease = lease_statements(seen)
        sched = cloud.scheduler(answer_timeout=30.0)
        spec = spec_of(sched, {}, 1, 512)
        claim, whole = [], []
        for _ in range(decisions):
            consumer = str(uuid.uuid4())
            start = time.perf_counter()
            result = sched.schedule(spec, consumer, "p", "u")
            whole.append(time.perf_counter() - start)
            assert result.placed, result.reasons
            claim.append(result.timings["claim"])
            sched.release(consumer, timeout=30.0)
        stop.set()
        thread.join(30)
        per_minute = 60.0 / idle
        return {"statements": len(seen) * per_minute,
                "lease": len(lease) * per_minute,
                "placement": placement_calls * per_minute,
                "claim_p50": statistics.median(claim), "claim_max": max(claim),
                "whole_p50": statistics.median(whole)}
    finally:
        cloud.close()
        own.close()
        emb.close()


#: The modes of each store: (name, push, transport URL; "broker": the broker's).
MODES = {"postgresql": [("poll", False, ""), ("notify", True, ""), ("rabbit", True, "broker")],
         "sqlite": [("poll", False, ""), ("rabbit", True, "broker"), ("fake", True, "fake://")]}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.push")
    parser.add_argument("-n", type=int, default=20, help="decisions per mode")
    parser.add_argument("--idle", type=float, default=30.0,
                        help="seconds the idle agent is measured")
    parser.add_argument("--store", default="postgresql,sqlite",
                        help="the stores, comma-separated: postgresql, sqlite")
    parser.add_argument("--url", help="a PostgreSQL database (default: a private server)")
    parser.add_argument("--broker", help="a RabbitMQ transport URL, rabbit://... "
                        "(default: a private server)")
    args = parser.parse_args()
    stores = [s.strip() for s in args.store.split(",") if s.strip()]
    for store in stores:
        if store not in MODES:
            parser.error("--store %r: expected postgresql or sqlite" % store)
    logging.disable(logging.WARNING)
    print("%-10s %-6s %12s %10s %12s %10s %10s %10s" % (
        "store", "mode", "stmts/min", "lease/min", "placem./min", "claim p50",
        "claim max", "sched p50"))
    with broker(args.broker) as transport_url:
        for store in stores:
            if store == "postgresql":
                context: Any = database(args.url)
            else:
                context = sqlite_database()
            with context as url:
                runs = {}
                for mode, push, transport in MODES[store]:
                    runs[mode] = measure(url, push, args.n, args.idle,
                                         transport_url if transport == "broker" else transport)
                    r = runs[mode]
                    print("%-10s %-6s %12.0f %10.0f %12.1f %9.0fms %9.0fms %9.0fms" % (
                        store, mode, r["statements"], r["lease"], r["placement"],
                        r["claim_p50"] * 1000, r["claim_max"] * 1000, r["whole_p50"] * 1000),
                        flush=True)
            poll = runs["poll"]
            for mode, r in runs.items():
                if mode == "poll":
                    continue
                print("%s %s/poll: idle statements besides the lease %.0f -> %.0f per "
                      "minute; claim p50 x%.3f; schedule p50 x%.3f" % (
                          store, mode, poll["statements"] - poll["lease"],
                          r["statements"] - r["lease"], r["claim_p50"] / poll["claim_p50"],
                          r["whole_p50"] / poll["whole_p50"]))
    return 0


@contextlib.contextmanager
def sqlite_database() -> Iterator[str]:
    """An SQLite file in a new directory (removed after)."""
    with tempfile.TemporaryDirectory(prefix="bench-push-sqlite-") as directory:
        yield "sqlite:///%s/host_state.sqlite" % directory


if __name__ == "__main__":
    raise SystemExit(main())
