"""N simulated hosts, real agents, real Placement and store, K schedulers.

``python -m bench.scale --hosts N --schedulers K [--store sqlite|postgresql]``

- **Placement**: the embedded one (:mod:`compute_plugins.placement.embedded`)
  in this process, served over loopback HTTP to the other processes; on an
  in-memory SQLite database, or a PostgreSQL one (``--store postgresql``).
- **The store**: a :class:`HostStateStore` on a SQLite file, or on
  PostgreSQL: a private server started for the run as the tests start
  theirs (``tests/servers.py``), or ``--store-url`` (and
  ``--placement-db-url`` for Placement's database) on one you run.
- **Hosts** (:mod:`bench.scale.hosts`): shapes in turn, the first of each
  registered by the report client, the others copied in bulk in Placement's
  database; set-up time printed (Placement, then the agents).
- **Agents** (:mod:`bench.scale.agents`): the real ``ComputeAgent`` of each
  host, in ``--workers`` processes of ``--threads`` threads, renewing its
  lease (every third of ``--lease``); woken by its host's notification
  where the store pushes (PostgreSQL), else polling every
  ``--poll-interval`` (the agent's default ``claim_poll_interval``, 1 s).
- **Schedulers' warm-up** (``--warm-up``): each plans every request once
  before the workload, so that its view holds Placement's answers (tens
  of MB each at 10,000 hosts) as a running scheduler's does; timed apart.
  ``--warm-up every-host``: each of those plans fits every candidate, not
  the plan's sample, so that the workload starts with the fits a
  scheduler that has run a while keeps (one per host and request shape).
  The output names the warm-up a run had (``warm_up``: none, sample or
  every-host): it changes which fits the workload finds kept.
- **Idle** (``--idle`` seconds, nothing scheduled): the agents' store
  statements and Placement calls per host-minute (leases included).
- **Workload** (:mod:`bench.scale.schedulers`): ``--decisions`` boots and
  deletes shared by ``--schedulers`` processes, each working on
  ``--concurrency`` requests at once (threads on its one scheduler;
  default 1, one after the other); decisions/s over the
  slowest scheduler's time, boot latency p50/p99, Placement calls and store
  statements (every process) per decision; the schedulers' Placement
  requests by kind, and why their views asked about every host or about
  some trees (``scheduler_asks_per_decision``).
- **CPU** (:mod:`bench.scale.cpu`): every part's CPU per decision over
  the workload (schedulers, agents, Placement, the private PostgreSQL's
  backends; less the idle minute's rate, the lease renewals, as
  ``cpu_ms_per_decision_less_idle``), and the idle CPU per host-minute:
  what a decision costs whatever else the machine runs. The private
  PostgreSQL's by part (``database_cpu_ms_per_decision``: the store's
  backends of the schedulers, of the agents, of this process; Placement's;
  the server's own processes; the children it reaped meanwhile, such as
  closed connections and autovacuum workers), and its backends that
  started or ended over the workload (``database_backends``).
- **Check**: once the deletes are done, every consumer's allocation in
  Placement compared with its claim in the store (``double_allocations``:
  consumers where they disagree; 0 expected).

``--json`` prints one JSON object instead of the text.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import logging
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing import connection as mpconnection
from typing import Any, Optional

import sqlalchemy as sa

from bench.scale import agents, counters, cpu, hosts, schedulers
from compute_plugins import exception
from compute_plugins.hoststate import broker as hoststate_broker
from compute_plugins.hoststate import protocol
from compute_plugins.hoststate.store import HostStateStore
from compute_plugins.placement import embedded
from compute_plugins.scheduler import audit, liveness

#: Seconds a worker has to answer before the run is given up.
WORKER_TIMEOUT = 900.0


def positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError("%r is not a number" % text) from None
        if not value > 0:
            raise argparse.ArgumentTypeError("%r: must be > 0" % text)
        return value
    return parse


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=(
        "N simulated hosts (real agents' claim path, real Placement and "
        "store) and K schedulers booting and deleting."))
    parser.add_argument("--hosts", type=positive(int), default=100)
    parser.add_argument("--schedulers", type=positive(int), default=2,
                        help="scheduler processes (default 2)")
    parser.add_argument("--decisions", type=positive(int), default=100,
                        help="boots and deletes, all schedulers together (default 100)")
    parser.add_argument("--concurrency", type=positive(int), default=1,
                        help="requests each scheduler process works on at once "
                        "(threads on its one Scheduler: scheduling cycles one at a "
                        "time, bindings concurrent; default 1: one after the other)")
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite",
                        help="the databases of Placement and the store (default sqlite; "
                        "postgresql: a private server, or --store-url)")
    parser.add_argument("--store-url", help="the store's database (SQLAlchemy URL)")
    parser.add_argument("--push-transport-url", default="",
                        help="[host_state] push_transport_url of every store: "
                        "rabbit://USER:PASS@HOST:PORT/ (any store pushes through "
                        "RabbitMQ), or 'private': a private RabbitMQ "
                        "(tests/servers.py); default: none (PostgreSQL pushes by "
                        "NOTIFY, SQLite polls)")
    parser.add_argument("--placement-db-url",
                        help="the embedded Placement's database (SQLAlchemy URL)")
    parser.add_argument("--placement-workers", type=positive(int), default=1,
                        help="processes serving Placement (PostgreSQL only; "
                        "default 1): placement serve's --workers")
    parser.add_argument("--workers", type=positive(int), default=2,
                        help="agents' processes (default 2)")
    parser.add_argument("--threads", type=positive(int), default=4,
                        help="polling threads per agents' process (default 4)")
    parser.add_argument("--poll-interval", type=positive(float), default=1.0,
                        help="the agents' claim_poll_interval (default 1 s)")
    parser.add_argument("--lease", type=positive(float), default=30.0,
                        help="the agents' lease duration (default 30 s)")
    parser.add_argument("--idle", type=positive(float), default=10.0,
                        help="seconds measured with nothing scheduled (default 10)")
    parser.add_argument("--answer-timeout", type=positive(float), default=30.0)
    parser.add_argument("--placement-view-seconds", type=float,
                        help="the schedulers' [scheduler] placement_view_seconds "
                        "(default: the option's)")
    parser.add_argument("--warm-up", nargs="?", const="sample", default=None,
                        choices=("sample", "every-host"),
                        help="each scheduler plans every request once before the "
                        "workload (its view filled; the seconds printed apart); "
                        "every-host: each of those plans fits every candidate "
                        "(the fits a scheduler that has run a while keeps), not "
                        "the plan's sample")
    parser.add_argument("--delete-fraction", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", metavar="DIR",
                        help="write a cProfile of each process into DIR (a "
                        "scheduler's: its start and warm-up in scheduler-N-setup, "
                        "the workload on in scheduler-N)")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args(argv)
    if not 0 <= args.delete_fraction < 1:
        parser.error("--delete-fraction %g: must be in [0, 1)" % args.delete_fraction)
    if args.lease < 3 * args.poll_interval:
        parser.error("--lease must be at least 3 x --poll-interval")
    if args.placement_workers > 1 and args.store != "postgresql":
        parser.error("--placement-workers %d: only with --store postgresql"
                     % args.placement_workers)
    if args.placement_view_seconds is not None and not args.placement_view_seconds >= 0:
        parser.error("--placement-view-seconds %g: must be >= 0" % args.placement_view_seconds)
    if args.push_transport_url not in ("", "private"):
        if args.push_transport_url.lower().startswith("fake:"):
            # NOTE: the agents and the schedulers are processes of their
            # own: in-process wake-ups would reach none of them.
            parser.error("--push-transport-url fake://: wakes one process only; the "
                         "agents and the schedulers run in processes of their own "
                         "(a rabbit:// URL, or 'private')")
        try:
            hoststate_broker.broker_urls(args.push_transport_url)
        except ValueError as err:
            parser.error("--push-transport-url: %s" % err)
    return args


@contextlib.contextmanager
def broker(transport_url: str) -> Iterator[str]:
    """``transport_url``, or a private RabbitMQ's for ``private``."""
    if transport_url != "private":
        yield transport_url
        return
    from tests import servers

    with servers.rabbitmq() as server:
        yield server.transport_url


@contextlib.contextmanager
def databases(args: argparse.Namespace, tmp: str) -> Iterator[
        tuple[str, str, Callable[[], dict[int, str]]]]:
    """(Placement's database URL, the store's, what lists the private
    database server's processes by part (:func:`cpu.database_pids`):
    none on SQLite or a server of yours)."""
    placement_url = args.placement_db_url
    store_url = args.store_url
    if args.store == "sqlite" or (placement_url and store_url):
        yield (placement_url or "sqlite://",
               store_url or "sqlite:///" + os.path.join(tmp, "hoststate.sqlite"), dict)
        return
    from tests import servers

    with servers.postgresql() as server:
        admin = server.admin()
        try:
            for name in ("bench_placement", "bench_hoststate"):
                with admin.cursor() as cur:
                    cur.execute("CREATE DATABASE %s" % name)
        finally:
            admin.close()
        watcher = server.admin()
        try:
            yield (placement_url or server.url("bench_placement"),
                   store_url or server.url("bench_hoststate"),
                   lambda: cpu.database_pids(watcher, {"bench_placement": "placement",
                                                       "bench_hoststate": "store"}))
        finally:
            watcher.close()


class Workers:
    """The agents' and the schedulers' processes (forked before Placement
    starts: they share nothing with it but the code)."""

    def __init__(self, count: int, target: Any, profile: Optional[str], kind: str) -> None:
        ctx = multiprocessing.get_context("fork")
        self.slots: list[counters.Slot] = []
        self.pipes: list[Any] = []
        self.procs: list[Any] = []
        for i in range(count):
            slot = counters.Slot(ctx.Array("q", counters.FIELDS, lock=False))
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=_run, args=(target, theirs, slot, profile,
                                                  "%s-%d" % (kind, i)), daemon=True)
            proc.start()
            self.slots.append(slot)
            self.pipes.append(mine)
            self.procs.append(proc)

    def send_all(self, messages: list[Any]) -> None:
        """Each process its message; one that has ended is skipped: the
        answer awaited next says so (:meth:`receive_all`), and the
        schedulers' ``("stop",)``, which awaits none, needs no one gone
        after its answer (a scheduler killed then failed the run with a
        ``BrokenPipeError`` once its figures were in)."""
        for pipe, message in zip(self.pipes, messages, strict=True):
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                pipe.send(message)

    def receive_all(self, timeout: Optional[float] = WORKER_TIMEOUT) -> list[Any]:
        """Every process's answer (``timeout`` seconds each at most; None:
        no limit, the workload's end)."""
        answers: dict[int, Any] = {}
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(answers) < len(self.pipes):
            # NOTE: every process at once: one that failed is said when it
            # fails, not after the others' answers (a workload's minutes).
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            waiting = [p for i, p in enumerate(self.pipes) if i not in answers]
            ready = mpconnection.wait(waiting, left)
            if not ready:
                pid = self.procs[self.pipes.index(waiting[0])].pid
                raise RuntimeError("process %d did not answer in %s s" % (pid, timeout))
            for found in ready:
                index = self.pipes.index(found)
                try:
                    answer = self.pipes[index].recv()
                except EOFError:
                    raise RuntimeError("process %d ended without answering"
                                       % self.procs[index].pid) from None
                if answer[0] == "failed":
                    raise RuntimeError("process %d failed:\n%s"
                                       % (self.procs[index].pid, answer[1]))
                answers[index] = answer
        return [answers[i] for i in range(len(self.pipes))]

    def total(self, field: int) -> int:
        return counters.total(self.slots, field)

    def close(self) -> None:
        """The processes gone (ended by now, or stopped: a run given up)."""
        for proc in self.procs:
            proc.join(2)
            if proc.is_alive():
                proc.terminate()
                proc.join()


def _run(target: Any, conn: Any, slot: counters.Slot, profile: Optional[str],
         name: str) -> None:
    logging.disable(logging.WARNING)
    if profile is None:
        target(conn, slot)
        return
    # NOTE: a profile covers the thread it runs in: a scheduler's request
    # threads (--concurrency) write their own (schedulers.concurrent).
    schedulers.PROFILE = os.path.join(profile, name)
    profiler = cProfile.Profile()
    schedulers.PROFILER = profiler
    profiler.runcall(target, conn, slot)
    profiler.dump_stats(os.path.join(profile, name + ".pstats"))


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))]


def check(placement: Any, store: HostStateStore, consumers: list[str],
          settle: float) -> tuple[int, int]:
    """(consumers whose Placement allocation is not their claim's, still
    in flight after ``settle`` seconds): waits for the deletes first."""
    deadline = time.monotonic() + settle
    while True:
        active = {c: store.active_decision(c) for c in consumers}
        moving = [c for c, d in active.items()
                  if d is not None and d.status != protocol.CLAIMED]
        if not moving or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    wrong = 0
    for consumer, decision in active.items():
        if consumer in moving:
            continue
        body = placement.get("/allocations/%s" % consumer).get("allocations") or {}
        held = {rp: {rc: n for rc, n in (b.get("resources") or {}).items() if n}
                for rp, b in body.items()}
        expected = audit.decision_allocations(decision) if decision is not None else {}
        wrong += held != expected
    return wrong, len(moving)


def run(args: argparse.Namespace) -> dict[str, Any]:
    profile = args.profile
    if profile:
        os.makedirs(profile, exist_ok=True)
    agent_procs = Workers(min(args.workers, args.hosts), agents.worker, profile, "agents")
    sched_procs = Workers(args.schedulers, schedulers.worker, profile, "scheduler")
    out: dict[str, Any] = {"hosts": args.hosts, "schedulers": args.schedulers,
                           "concurrency": args.concurrency,
                           "store": args.store, "workers": len(agent_procs.procs),
                           "placement_workers": args.placement_workers,
                           "poll_interval_s": args.poll_interval, "lease_s": args.lease,
                           # NOTE: the warm-up decides which fits the workload
                           # finds kept: the figures say which one they had.
                           "warm_up": args.warm_up or "none",
                           "push_transport": args.push_transport_url.partition(":")[0]}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp, \
                databases(args, tmp) as (placement_db, store_url, database_pids), \
                broker(args.push_transport_url) as transport_url, \
                embedded.EmbeddedPlacement(placement_db) as service, \
                HostStateStore(store_url, push_transport_url=transport_url) as store:
            server = service.make_server(threads=8, workers=args.placement_workers)
            serving = threading.Thread(target=serve, args=(server,), daemon=True)
            serving.start()
            try:
                _measure(args, out, service, server.url, store,
                         (store_url, transport_url), tmp, agent_procs, sched_procs,
                         database_pids)
            except Exception as err:
                if server.lost_worker is None:
                    raise
                # NOTE: what the processes then saw ("cannot reach
                # Placement") follows from it
                raise RuntimeError("%s: Placement stopped (then: %s)" % (
                    server.lost_worker, str(err).strip().splitlines()[-1])) from err
            finally:
                server.shutdown()
                serving.join(10)
    finally:
        agent_procs.close()
        sched_procs.close()
    return out


def serve(server: Any) -> None:
    """Placement's HTTP server until it is shut down, or until one of its
    workers ends (``--placement-workers``): then said at once, with how it
    ended (an exit code, a signal: the OOM killer's SIGKILL, a crash's
    SIGSEGV), since the processes only see Placement gone."""
    server.serve_forever()
    if server.lost_worker is not None:
        say("%s: Placement stopped" % server.lost_worker)


def say(text: str) -> None:
    """Progress, on stderr (a run takes minutes)."""
    print("  ... " + text, file=sys.stderr, flush=True)


def _measure(args: argparse.Namespace, out: dict[str, Any], service: Any,
             placement_url: str, store: HostStateStore, store_url: tuple[str, str], tmp: str,
             agent_procs: Workers, sched_procs: Workers,
             database_pids: Callable[[], dict[int, str]]) -> None:
    client = service.client()
    client.get("/")
    # -- set-up --------------------------------------------------------
    start = time.monotonic()
    made, by_api = hosts.build(client, hosts.placement_engine(), args.hosts)
    out["setup_placement_s"] = round(time.monotonic() - start, 2)
    # NOTE: the baseline, same run: every host through the report client,
    # at the templates' pace.
    out["setup_placement_by_api_s"] = round(by_api * args.hosts, 1)
    start = time.monotonic()
    agent_procs.send_all([("start", chunk, store_url, placement_url,
                           os.path.join(tmp, "agents"), args.poll_interval, args.lease,
                           args.threads)
                          for chunk in hosts.chunks(made, len(agent_procs.procs))])
    ready = agent_procs.receive_all()
    out["setup_agents_s"] = round(time.monotonic() - start, 2)
    out["setup_s"] = round(out["setup_placement_s"] + out["setup_agents_s"], 2)
    say("set-up: %.1f s (Placement %.1f s, agents' first poll %.1f s)"
        % (out["setup_s"], out["setup_placement_s"], out["setup_agents_s"]))
    errors = [e for answer in ready for e in answer[2]]
    out["pushed_hosts"] = sum(answer[3] for answer in ready)
    # -- idle ----------------------------------------------------------
    idle = (counters.STATEMENTS, counters.PLACEMENT, counters.POLLS)
    roles = ([p.pid for p in sched_procs.procs], [p.pid for p in agent_procs.procs])
    before = [agent_procs.total(f) for f in idle]
    cpu_before = cpu.snapshot(*roles, database_pids())
    time.sleep(args.idle)
    cpu_after = cpu.snapshot(*roles, database_pids())
    idle_database = {part: (cpu_after[part] - cpu_before[part]) / args.idle
                     for part in cpu_after if part.startswith("database.")}
    after = [agent_procs.total(f) for f in idle]
    # NOTE: every process's CPU while nothing is scheduled (the agents'
    # lease renewals, the database's share of them), per host-minute:
    # what the workload's CPU per decision also holds.
    idle_cpu = {role: (cpu_after[role] - cpu_before[role]) / args.idle
                for role in cpu.ROLES}
    out["idle_cpu_ms_per_host_minute"] = round(
        sum(idle_cpu.values()) * 60e3 / args.hosts, 2)
    host_minutes = args.hosts * args.idle / 60
    # NOTE: 60 / --poll-interval when the agents poll and keep up; where
    # the store pushes, an agent is polled for its lease renewal only
    # (every third of --lease), or when woken.
    out["idle_polls_per_host_minute"] = round((after[2] - before[2]) / host_minutes, 1)
    out["idle_store_queries_per_host_minute"] = round(
        (after[0] - before[0]) / host_minutes, 2)
    out["idle_placement_calls_per_host_minute"] = round(
        (after[1] - before[1]) / host_minutes, 2)
    out["down_hosts_after_idle"] = len(liveness.read(store).down)
    say("idle, per host-minute: %.2f store queries, %.2f Placement calls, %.1f polls; "
        "hosts down (lease lapsed): %d"
        % (out["idle_store_queries_per_host_minute"],
           out["idle_placement_calls_per_host_minute"], out["idle_polls_per_host_minute"],
           out["down_hosts_after_idle"]))
    # -- workload ------------------------------------------------------
    share = [args.decisions // args.schedulers + (i < args.decisions % args.schedulers)
             for i in range(args.schedulers)]
    sched_procs.send_all([("start", store_url, placement_url, n, args.seed + i,
                           args.delete_fraction, args.answer_timeout,
                           args.placement_view_seconds, args.warm_up,
                           args.concurrency)
                          for i, n in enumerate(share)])
    warmed = sched_procs.receive_all(timeout=None)
    out["scheduler_warm_up_s"] = round(max(answer[1] for answer in warmed), 1)
    if args.warm_up:
        say("schedulers' warm-up (%s): %.1f s"
            % (args.warm_up, out["scheduler_warm_up_s"]))
    everyone = (agent_procs, sched_procs)
    fields = (counters.STATEMENTS, counters.PLACEMENT)
    before = [sum(w.total(f) for w in everyone) for f in fields]
    sides_before = [w.total(counters.STATEMENTS) for w in everyone]
    database_before = database_pids()
    cpu_before = cpu.snapshot(*roles, database_before)
    cpu_start = time.monotonic()
    sched_procs.send_all([("go",)] * args.schedulers)
    results = [answer[1] for answer in sched_procs.receive_all(timeout=None)]
    database_after = database_pids()
    cpu_after = cpu.snapshot(*roles, database_after)
    # NOTE: the schedulers close their stores once the CPU is read: a
    # scheduler done before the others closed its connections, and its
    # backends' time was then the postmaster's (reaped), not the store's.
    sched_procs.send_all([("stop",)] * args.schedulers)
    cpu_seconds = time.monotonic() - cpu_start
    out["down_hosts_after_workload"] = len(liveness.read(store).down)
    say("workload: done")
    time.sleep(1.0)  # NOTE: the agents' counters are synced every 0.5 s
    after = [sum(w.total(f) for w in everyone) for f in fields]
    sides = [w.total(counters.STATEMENTS) - b for w, b in zip(everyone, sides_before,
                                                               strict=True)]
    boots = [s for r in results for s in r["boots"]]
    deletes = [s for r in results for s in r["deletes"]]
    decisions = len(boots) + len(deletes)
    seconds = max(r["seconds"] for r in results)
    out.update({
        "decisions": decisions, "boots": len(boots), "deletes": len(deletes),
        "placed": sum(r["placed"] for r in results),
        "decisions_per_s": round(decisions / seconds, 2),
        "p50_ms": round(percentile(boots, 50) * 1e3, 1),
        "p99_ms": round(percentile(boots, 99) * 1e3, 1),
        "delete_p50_ms": round(percentile(deletes, 50) * 1e3, 1),
        # NOTE: every process's CPU over the workload (the agents' idle
        # lease renewals included), per decision: what a decision costs
        # whatever else the machine runs.
        "cpu_ms_per_decision": cpu.per_decision(cpu_before, cpu_after, decisions),
        # NOTE: the same, less what the idle minute's rate (lease renewals)
        # spent over the workload's time: a decision's own cost.
        "cpu_ms_per_decision_less_idle": cpu.per_decision(
            cpu_before, {role: cpu_after[role] - idle_cpu[role] * cpu_seconds
                         for role in cpu.ROLES}, decisions),
        "store_queries_per_decision": round((after[0] - before[0]) / decisions, 1),
        "placement_calls_per_decision": round((after[1] - before[1]) / decisions, 2),
        # NOTE: the same by side; the agents' also less the idle minute's
        # rate (their lease renewals) over the workload's time: what a
        # decision itself sends.
        "store_queries_per_decision_by_side": {
            "agents": round(sides[0] / decisions, 1),
            "agents_less_idle": round(
                (sides[0] - out["idle_store_queries_per_host_minute"] * args.hosts / 60
                 * cpu_seconds) / decisions, 1),
            "schedulers": round(sides[1] / decisions, 1)},
        # NOTE: the schedulers' Placement requests by kind, and why their
        # views asked Placement (bench.scale.schedulers.asks), per decision.
        "scheduler_asks_per_decision": {
            k: round(n / decisions, 3)
            for k, n in schedulers.merged(r["asks"] for r in results).items()},
        "rejections": agent_procs.total(counters.REJECTIONS),
        # NOTE: the boots' offers by outcome (claimed, rejected, conflict:
        # Placement's 409, timeout...), every scheduler together.
        "attempts": schedulers.merged(r["outcomes"] for r in results),
        # NOTE: a boot's first plan (candidates, states, fit) and what
        # followed it (offers, plans made again); what is left of p50_ms is
        # the wait for the scheduling cycle (--concurrency) and the reads
        # before the plan.
        "plan_p50_ms": round(percentile([s for r in results for s in r["plans"]], 50)
                             * 1e3, 1),
        "after_plan_p50_ms": round(percentile([s for r in results for s in r["bindings"]],
                                              50) * 1e3, 1),
        "after_plan_p99_ms": round(percentile([s for r in results for s in r["bindings"]],
                                              99) * 1e3, 1),
    })
    if database_before:
        # NOTE: the private PostgreSQL's CPU by part (cpu.DATABASE_PARTS),
        # all of it and less the idle rate; and its backends that started
        # or ended over the workload (a client that connects per request
        # would show in both, and in "reaped"). None on SQLite or a server
        # of yours, whose processes are not this machine's to read.
        out.update({
            "database_cpu_ms_per_decision": cpu.database_per_decision(
                cpu_before, cpu_after, decisions),
            "database_cpu_ms_per_decision_less_idle": cpu.database_per_decision(
                cpu_before, {part: cpu_after[part] - idle_database.get(part, 0.0)
                             * cpu_seconds for part in cpu_after}, decisions),
            "database_backends": cpu.backends_changed(database_before, database_after),
        })
    failed = [f for r in results for f in r["failed"]]
    # -- check ---------------------------------------------------------
    consumers = [c for r in results for c in r["all"]]
    wrong, moving = check(client, store, consumers, 5 * args.poll_interval + 10)
    out["double_allocations"] = wrong
    out["in_flight_at_end"] = moving
    agent_procs.send_all([("stop",)] * len(agent_procs.procs))
    stopped = agent_procs.receive_all()
    errors += [e for answer in stopped for e in answer[1]]
    out["agent_errors"] = agent_procs.total(counters.ERRORS)
    out["errors_sample"] = errors[:3] + failed[:3]
    agents_kb = agent_procs.total(counters.RSS_KB)
    out["rss_mib"] = {
        "main_placement": round(counters.rss_kb() / 1024, 1),
        "agents": round(agents_kb / 1024, 1),
        "agents_kib_per_host": round(agents_kb / args.hosts, 1),
        "scheduler_each": round(statistics.mean(
            s.read()[counters.RSS_KB] for s in sched_procs.slots) / 1024, 1)}


def report(out: dict[str, Any]) -> str:
    """The run in words."""
    rss = out["rss_mib"]
    # NOTE: the private PostgreSQL's parts where the run read them (_measure).
    database = [
        "  PostgreSQL's CPU per decision less the idle rate: %s; backends started %s, "
        "ended %s"
        % (", ".join("%s %.1f ms" % kv for kv in
                     out["database_cpu_ms_per_decision_less_idle"].items()),
           out["database_backends"]["started"] or "none",
           out["database_backends"]["ended"] or "none")
    ] if "database_backends" in out else []
    return "\n".join([
        "%d hosts, %d schedulers (%d requests at once each), %s; agents in %d "
        "processes, polling every %g s"
        % (out["hosts"], out["schedulers"], out["concurrency"], out["store"],
           out["workers"], out["poll_interval_s"]),
        "  set-up: %.1f s (Placement %.1f s, agents' first poll %.1f s; schedulers' "
        "warm-up (%s) %.1f s); Placement "
        "through the report client, host by host, would take %.0f s (%.0fx)"
        % (out["setup_s"], out["setup_placement_s"], out["setup_agents_s"],
           out["warm_up"], out["scheduler_warm_up_s"], out["setup_placement_by_api_s"],
           out["setup_placement_by_api_s"] / max(out["setup_placement_s"], 0.01)),
        "  idle, per host-minute: %.1f store queries, %.2f Placement calls "
        "(%.1f polls, %.0f due; %d of %d hosts woken by push)"
        % (out["idle_store_queries_per_host_minute"],
           out["idle_placement_calls_per_host_minute"],
           out["idle_polls_per_host_minute"],
           180 / out["lease_s"] if out["pushed_hosts"] else 60 / out["poll_interval_s"],
           out["pushed_hosts"], out["hosts"]),
        "  %d decisions (%d boots, %d placed; %d deletes): %.1f decisions/s, "
        "boot p50 %.0f ms, p99 %.0f ms; delete p50 %.0f ms"
        % (out["decisions"], out["boots"], out["placed"], out["deletes"],
           out["decisions_per_s"], out["p50_ms"], out["p99_ms"], out["delete_p50_ms"]),
        "  per decision: %.2f Placement calls, %.1f store queries; %d rejections; "
        "offers: %s"
        % (out["placement_calls_per_decision"], out["store_queries_per_decision"],
           out["rejections"], ", ".join("%d %s" % (n, k) for k, n in
                                        sorted(out["attempts"].items()))),
        "  schedulers' Placement asks per decision: %s"
        % (", ".join("%s %.3f" % (k, n) for k, n in
                     out["scheduler_asks_per_decision"].items()) or "none"),
        "  CPU per decision: %s; less the idle rate: %s; idle: %.2f ms per host-minute"
        % (", ".join("%s %.1f ms" % (role, ms)
                     for role, ms in out["cpu_ms_per_decision"].items()),
           ", ".join("%s %.1f ms" % (role, ms)
                     for role, ms in out["cpu_ms_per_decision_less_idle"].items()),
           out["idle_cpu_ms_per_host_minute"]),
    ] + database + [
        "  double allocations: %d (%d still in flight); agent errors: %d; hosts down "
        "(lease lapsed) after the idle minute %d, after the workload %d"
        % (out["double_allocations"], out["in_flight_at_end"], out["agent_errors"],
           out["down_hosts_after_idle"], out["down_hosts_after_workload"]),
        "  memory (RSS): main + Placement %.0f MiB, agents %.0f MiB (%.0f KiB/host), "
        "each scheduler %.0f MiB"
        % (rss["main_placement"], rss["agents"], rss["agents_kib_per_host"],
           rss["scheduler_each"]),
    ] + ["  error: %s" % e for e in out["errors_sample"]])


def main(argv: list[str]) -> int:
    args = parse(argv)
    logging.disable(logging.WARNING)
    try:
        out = run(args)
    except (RuntimeError, exception.ComputePluginsError, sa.exc.ArgumentError) as err:
        print("bench.scale: %s" % str(err).strip().splitlines()[-1], file=sys.stderr)
        return 1
    print(json.dumps(out, sort_keys=True) if args.json else report(out), flush=True)
    return 0 if out["double_allocations"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
