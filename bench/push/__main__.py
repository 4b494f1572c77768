"""Push against poll on PostgreSQL (issue 19, item 1), same run.

One host with its real compute agent (a thread, as ``compute-plugins
report`` runs it: ``[compute] claim_poll_interval`` 1 s, periodics every
60 s), its own store object (its own engine, as its own process would
have), a real scheduler and embedded Placement, on a private PostgreSQL
(:mod:`tests.servers`; ``--url`` for another), once with ``[host_state]
push`` off (the agent polls) and once on (``LISTEN``/``NOTIFY``, safety net
300 s). Printed per mode:

- the idle agent's statements on the store per minute (measured over
  ``--idle`` seconds, counted by an SQLAlchemy event listener), those of
  its lease renewal apart, and its Placement calls per minute;
- the answer latency: p50 and max of the seconds from the scheduler's
  submit to the agent's answer (``timings["claim"]``), over ``-n``
  decisions (each released after), and of the whole ``schedule()``;
- the ratios push / poll.

Run ``python -m bench.push [-n N] [--idle S] [--url URL]``.
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


def measure(url: str, push: bool, decisions: int, idle: float) -> dict[str, Any]:
    from compute_plugins.placement import embedded
    from tests.functional.request.hosts import Placement, cell
    from tests.functional.scheduler.cloud import Cloud
    from tests.functional.scheduler.test_schedule import spec_of

    emb = embedded.EmbeddedPlacement("sqlite://").start()
    directory = tempfile.mkdtemp(prefix="bench-push-")
    cloud = Cloud(Placement(emb), directory, store=HostStateStore(url, push=push))
    own = HostStateStore(url, push=push)
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

        sa.event.listen(own.engine, "before_cursor_execute", record)
        calls = agent.client.placement.calls.snapshot()
        time.sleep(idle)
        sa.event.remove(own.engine, "before_cursor_execute", record)
        placement_calls = sum(agent.client.placement.calls.snapshot().values()) \
            - sum(calls.values())
        lease = [s for s in seen if "hoststate_leases" in s or "clock_timestamp()" in s]
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


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.push")
    parser.add_argument("-n", type=int, default=20, help="decisions per mode")
    parser.add_argument("--idle", type=float, default=30.0,
                        help="seconds the idle agent is measured")
    parser.add_argument("--url", help="a PostgreSQL database (default: a private server)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    with database(args.url) as url:
        runs = {mode: measure(url, mode == "push", args.n, args.idle)
                for mode in ("poll", "push")}
    print("%-5s %12s %10s %12s %10s %10s %10s" % (
        "mode", "stmts/min", "lease/min", "placem./min", "claim p50", "claim max",
        "sched p50"))
    for mode, r in runs.items():
        print("%-5s %12.0f %10.0f %12.1f %9.0fms %9.0fms %9.0fms" % (
            mode, r["statements"], r["lease"], r["placement"], r["claim_p50"] * 1000,
            r["claim_max"] * 1000, r["whole_p50"] * 1000))
    poll, push = runs["poll"], runs["push"]
    print("push/poll: idle statements besides the lease %.0f -> %.0f per minute; "
          "claim p50 x%.3f; schedule p50 x%.3f" % (
              poll["statements"] - poll["lease"], push["statements"] - push["lease"],
              push["claim_p50"] / poll["claim_p50"], push["whole_p50"] / poll["whole_p50"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
