"""Simulated hosts' agents: the real :class:`ComputeAgent`, many per process.

The one module of the benchmark that drives an agent. Each simulated host
gets a real :class:`~compute_plugins.compute.agent.ComputeAgent` (its own
plugins discovered from the host's snapshot, its own ledger and node
identity in a state directory, the process's store and Placement client),
and a worker process runs thousands of them on a few threads
(:class:`AgentPool`), each calling :meth:`ComputeAgent.poll` when the
agent has work: where the store pushes, when its host is woken and when
its lease is to be renewed; elsewhere every ``claim_poll_interval``. That
is the real lease (taken, renewed every third of its duration), the real
claim path (the plugins' ``verify``, the ledger, the protocol's answers)
and the real release (Placement's ``DELETE /allocations``).

What is not run: the agent's periodic (discovery and the Placement sync),
because the host's tree was registered in bulk (:mod:`bench.scale.hosts`);
the agent is told its providers instead of reading them back.
"""

from __future__ import annotations

import functools
import heapq
import os
import queue
import threading
import time
import traceback
from concurrent import futures
from multiprocessing.connection import Connection
from typing import Any, Optional

from bench.scale import counters, cpu
from bench.scale.hosts import SimHost
from bench.schedule import cloud
from compute_plugins.compute import identity
from compute_plugins.compute.agent import ComputeAgent
from compute_plugins.compute.ledger import Ledger
from compute_plugins.hoststate.store import HostStateStore
from compute_plugins.placement import client as pclient
from compute_plugins.placement import report


def make_agent(host: SimHost, state_root: str, store: HostStateStore,
               placement: pclient.PlacementClient, poll_interval: float,
               lease_duration: float) -> ComputeAgent:
    """The agent of one simulated host (nothing contacted yet)."""
    info = cloud.host_info(host.name, host.shape)
    manager = cloud.manager(host.shape, cached=True)
    manager.discover(info)
    state_dir = os.path.join(state_root, host.name)
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    node = identity.ensure(state_dir, host.name)
    ledger = Ledger.load(state_dir, host.name, manager.plugins)
    agent = ComputeAgent(manager, report.ReportClient(placement, refresh_interval=0),
                         store, ledger, lambda: info, first=info,
                         claim_poll_interval=poll_interval, node=node,
                         lease_duration=lease_duration)
    # NOTE: what the skipped periodic would have read back from Placement
    # (the tree registered in bulk); the first poll publishes it.
    agent._providers = dict(host.providers)  # noqa: SLF001
    return agent


class AgentPool:
    """The agents of one process, run on ``threads`` threads (each thread
    its share of the agents).

    Where the store pushes (PostgreSQL), an agent is polled when its host
    is woken (:meth:`ComputeAgent.on_wake`: at once, by the thread that
    owns it) and when its own clock says it has work
    (:meth:`ComputeAgent.due_at`: the lease's renewal, the safety net's
    read), never on a timer that reads nothing: 10,000 idle agents cost
    their heartbeats only, and a decision is seen as it is pushed, not up
    to a ``claim_poll_interval`` later. Where it does not push (SQLite),
    every agent is polled every ``claim_poll_interval``, as its own loop
    would (:meth:`ComputeAgent.run`).
    """

    def __init__(self, agents: list[ComputeAgent], threads: int,
                 stats: counters.Slot) -> None:
        self.agents = agents
        self.threads = threads
        self.stats = stats
        self.stop = threading.Event()
        self.errors: list[str] = []
        count = min(threads, len(agents))
        #: Each thread's wake-ups: indexes (into its share) of agents woken.
        self._woken: list[queue.SimpleQueue[int]] = [queue.SimpleQueue()
                                                     for _ in range(count)]
        self._threads = [threading.Thread(target=self._loop, args=(n,), daemon=True)
                         for n in range(count)]

    def first_poll(self) -> None:
        """Every agent's first poll (its lease taken, its state published,
        its host's wake-ups subscribed where the store pushes), on the
        pool's threads (their waits on the store overlap)."""
        for n, woken in enumerate(self._woken):
            for i, agent in enumerate(self.agents[n::len(self._woken)]):
                agent.on_wake(functools.partial(woken.put, i))
        with futures.ThreadPoolExecutor(self.threads) as running:
            list(running.map(self._poll, self.agents))

    def settle(self) -> None:
        """Poll the agents woken before :meth:`start` (a broker's listener,
        once connected, wakes every waiter once: they subscribed before
        their channels were bound): part of the set-up, not of the idle
        figures."""
        for n, woken in enumerate(self._woken):
            agents = self.agents[n::len(self._woken)]
            while True:
                try:
                    i = woken.get_nowait()
                except queue.Empty:
                    break
                self._poll(agents[i])

    def _poll(self, agent: ComputeAgent) -> None:
        try:
            result = agent.poll()
        except Exception as err:  # noqa: BLE001 - counted and reported once
            self.stats.add(counters.ERRORS)
            if len(self.errors) < 5:
                self.errors.append("%s: %s" % (agent.host, "".join(
                    traceback.format_exception_only(type(err), err)).strip()))
            return
        self.stats.add(counters.POLLS)
        if result.error:
            self.stats.add(counters.ERRORS)
            if len(self.errors) < 5:
                self.errors.append("%s: %s" % (agent.host, result.error))
        self.stats.add(counters.CLAIMS, sum(1 for c in result.claims if c.claimed))
        self.stats.add(counters.REJECTIONS, sum(1 for c in result.claims if not c.claimed))
        self.stats.add(counters.RELEASES, len(result.releases))

    def _loop(self, n: int) -> None:
        agents = self.agents[n::len(self._woken)]
        woken = self._woken[n]
        # NOTE: the first timed polls spread over one interval, so that the
        # agents do not all poll (and renew) at once.
        now = time.monotonic()
        due = [(min(agent.due_at(), now + agent.claim_poll_interval * i / max(len(agents), 1)),
                i) for i, agent in enumerate(agents)]
        heapq.heapify(due)
        while not self.stop.is_set():
            when, i = due[0]
            try:
                # NOTE: a pushed wake-up first; else the next agent due.
                ready = woken.get(timeout=max(0.0, min(when - time.monotonic(), 0.5)))
            except queue.Empty:
                if when > time.monotonic():
                    continue    # NOTE: the stop event checked every 0.5 s
                self._poll(agents[i])
                heapq.heapreplace(due, (agents[i].due_at(), i))
                continue
            self._poll(agents[ready])
            # NOTE: its timed entry stays: polled then, it does nothing
            # unless due (a renewal), and is rescheduled.

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def close(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join()


def worker(conn: Connection, stats: counters.Slot) -> None:
    """A worker process: agents for the hosts it is sent, until told to stop.

    Messages in: ``("start", hosts, (store_url, push_transport_url),
    placement_url, state_root,
    poll_interval, lease_duration, threads)``, then ``("stop",)``. Out:
    ``("ready", seconds, errors, pushed)`` once every agent polled once
    (``pushed``: how many are woken by the store's push),
    ``("stopped", errors)``.
    """
    pool: Optional[AgentPool] = None
    store: Optional[HostStateStore] = None
    try:
        message: Any = conn.recv()
        (_, hosts, store_url, placement_url, state_root, poll_interval,
         lease_duration, threads) = message
        start = time.monotonic()
        store = HostStateStore(cpu.named(store_url[0], "agents"),
                               push_transport_url=store_url[1])
        for engine in store.db.engines:
            counters.count_statements(engine, stats)
        placement = pclient.PlacementClient.for_url(placement_url)
        stats.placement = placement.calls
        agents = [make_agent(h, state_root, store, placement, poll_interval,
                             lease_duration) for h in hosts]
        pool = AgentPool(agents, threads, stats)
        pool.first_poll()
        if store.db.pushes:
            # NOTE: a broker's listener connects on its own thread (the
            # agents poll meanwhile): ready once it has, or said not pushed.
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline and not all(a.pushed() for a in agents):
                time.sleep(0.05)
            pool.settle()
        stats.sync()
        conn.send(("ready", time.monotonic() - start, list(pool.errors),
                   sum(1 for agent in agents if agent.pushed())))
        pool.start()
        while True:
            if conn.poll(0.5):
                conn.recv()
                break
            stats.sync()
        pool.close()
        stats.sync()
        conn.send(("stopped", list(pool.errors)))
    except Exception as err:  # noqa: BLE001 - sent to the main process
        conn.send(("failed", "".join(traceback.format_exception(err))))
    finally:
        if pool is not None:
            pool.stop.set()
        if store is not None:
            store.close()
