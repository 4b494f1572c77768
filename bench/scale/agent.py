"""The simulated agents' CPU per decision and per renewal (issue 19).

``python -m bench.scale.agent [--hosts 8] [--decisions 200]
[--store postgresql] [--renewals 500] [--profile FILE]``

What :mod:`bench.scale` measures for the agents' processes as a whole,
here for the agent's own thread alone: N simulated hosts' real agents
(:func:`bench.scale.agents.make_agent`: the plugins, the ledger, the
lease) on one :class:`~bench.scale.agents.AgentPool` thread, woken by the
store's push as in the benchmark, and one real scheduler in this process
(:func:`bench.scale.schedulers.workload`: boots and deletes) on the
embedded Placement (served over HTTP by this process's other threads,
SQLite in memory: its CPU is not counted). The figures are the CPU time of the agents' thread
(``time.thread_time``) in its polls, per decision, split into claims and
releases; and of a lease renewal (:meth:`ComputeAgent.poll` when it is
due), per renewal. With ``--profile`` the agents' polls run under
cProfile, on the thread's CPU clock (``python -m pstats FILE``).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import logging
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any, Optional

from bench.scale import agents, counters, hosts, schedulers
from compute_plugins.compute.agent import ComputeAgent
from compute_plugins.hoststate.store import HostStateStore
from compute_plugins.placement import client as pclient
from compute_plugins.placement import embedded


@contextlib.contextmanager
def store_url(store: str, tmp: str) -> Iterator[str]:
    """The store's database: a private PostgreSQL's or a SQLite file."""
    if store == "sqlite":
        yield "sqlite:///" + os.path.join(tmp, "hoststate.sqlite")
        return
    from tests import servers

    with servers.postgresql() as server:
        admin = server.admin()
        try:
            with admin.cursor() as cur:
                cur.execute("CREATE DATABASE bench_hoststate")
        finally:
            admin.close()
        yield server.url("bench_hoststate")


class TimedPool(agents.AgentPool):
    """An :class:`~bench.scale.agents.AgentPool` that adds up its polls'
    CPU time (``time.thread_time``: the polling thread's own), by what the
    poll did, and profiles them when given a profiler."""

    def __init__(self, pool_agents: list[ComputeAgent], stats: counters.Slot,
                 profiler: Optional[cProfile.Profile]) -> None:
        super().__init__(pool_agents, 1, stats)
        self.profiler = profiler
        self.cpu = {"claims": 0.0, "releases": 0.0, "other": 0.0}
        self.counts = {"claims": 0, "releases": 0, "other": 0}
        self.measuring = False

    def _poll(self, agent: ComputeAgent) -> None:
        if not self.measuring:
            super()._poll(agent)
            return
        claims, releases = (self.stats._local[counters.CLAIMS]  # noqa: SLF001
                            + self.stats._local[counters.REJECTIONS],  # noqa: SLF001
                            self.stats._local[counters.RELEASES])  # noqa: SLF001
        if self.profiler is not None:
            self.profiler.enable()
        start = time.thread_time()
        super()._poll(agent)
        spent = time.thread_time() - start
        if self.profiler is not None:
            self.profiler.disable()
        did_claims = (self.stats._local[counters.CLAIMS]  # noqa: SLF001
                      + self.stats._local[counters.REJECTIONS]) - claims  # noqa: SLF001
        did_releases = self.stats._local[counters.RELEASES] - releases  # noqa: SLF001
        kind = "claims" if did_claims else "releases" if did_releases else "other"
        self.cpu[kind] += spent
        self.counts[kind] += did_claims or did_releases or 1


def renewals(pool_agents: list[ComputeAgent], count: int) -> float:
    """CPU seconds (this thread's) of one lease renewal, on average: each
    agent in turn made due and polled (nothing else pushed: the poll
    renews and reads nothing else)."""
    spent = 0.0
    for i in range(count):
        agent = pool_agents[i % len(pool_agents)]
        agent._renew_at = 0.0  # noqa: SLF001 - due now
        start = time.thread_time()
        agent.poll()
        spent += time.thread_time() - start
    return spent / max(1, count)


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"hosts": args.hosts, "store": args.store,
                           "decisions": args.decisions}
    profiler = cProfile.Profile(time.thread_time) if args.profile else None
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp, \
            store_url(args.store, tmp) as url, \
            embedded.EmbeddedPlacement("sqlite://") as service, \
            HostStateStore(url) as agent_store, HostStateStore(url) as sched_store:
        made, _ = hosts.build(service.client(), hosts.placement_engine(), args.hosts)
        server = service.make_server(threads=4)
        serving = threading.Thread(target=server.serve_forever, daemon=True)
        serving.start()
        # NOTE: over HTTP, as the agents' processes in bench.scale: the
        # in-process transport would run Placement on the agents' thread.
        client = pclient.PlacementClient.for_url(server.url)
        stats = counters.Slot(ctx.Array("q", counters.FIELDS, lock=False))
        pool_agents = [agents.make_agent(h, os.path.join(tmp, "agents"), agent_store,
                                         client, args.poll_interval, args.lease)
                       for h in made]
        pool = TimedPool(pool_agents, stats, profiler)
        pool.first_poll()
        if agent_store.db.pushes:
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline and not all(a.pushed() for a in pool_agents):
                time.sleep(0.05)
            pool.settle()
        pool.start()
        try:
            scheduler = schedulers.make_scheduler(sched_store, client, 30.0)
            try:
                schedulers.warm_up(scheduler)
                # NOTE: a few decisions first (connections, caches warm).
                schedulers.workload(scheduler, 10, args.seed + 1, 0.3)
                pool.measuring = True
                done = schedulers.workload(scheduler, args.decisions, args.seed, 0.3)
                time.sleep(0.5)
                pool.measuring = False
            finally:
                scheduler.close()
        finally:
            pool.close()
            server.shutdown()
            serving.join(10)
        decisions = len(done["boots"]) + len(done["deletes"])
        out.update({
            "boots": len(done["boots"]), "deletes": len(done["deletes"]),
            "placed": done["placed"],
            "agent_cpu_ms_per_decision": round(
                sum(pool.cpu.values()) * 1e3 / max(1, decisions), 3),
            "agent_cpu_ms_per_claim": round(
                pool.cpu["claims"] * 1e3 / max(1, pool.counts["claims"]), 3),
            "agent_cpu_ms_per_release": round(
                pool.cpu["releases"] * 1e3 / max(1, pool.counts["releases"]), 3),
            "agent_cpu_ms_other_polls": round(pool.cpu["other"] * 1e3, 3),
            "other_polls": pool.counts["other"],
        })
        if profiler is not None:
            profiler.enable()
        out["agent_cpu_ms_per_renewal"] = round(
            renewals(pool_agents, args.renewals) * 1e3, 3)
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(args.profile)
        for agent in pool_agents:
            agent.end_lease()
    return out


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scale.agent",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--decisions", type=int, default=200)
    parser.add_argument("--store", choices=("sqlite", "postgresql"),
                        default="postgresql")
    parser.add_argument("--renewals", type=int, default=500)
    parser.add_argument("--poll-interval", type=float, default=1.0)
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", metavar="FILE",
                        help="cProfile the agents' polls into FILE")
    args = parser.parse_args(argv)
    if args.hosts < 1 or args.decisions < 1 or args.renewals < 1:
        parser.error("--hosts, --decisions and --renewals: expected at least 1")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    logging.disable(logging.WARNING)
    print(json.dumps(run(args), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
