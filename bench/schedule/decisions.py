"""Whole decisions per second: :meth:`Scheduler.schedule` with and without
its view (issue 19, item 2), same cloud, same run.

Each decision is the real path: liveness and generations from the store,
Placement's answer (asked, or kept by :mod:`compute_plugins.scheduler.view`),
the states read and fitted, the weighers, ``PUT /allocations``, the
decision submitted to the store and its answer read back. The host's
answer is instant (:class:`InstantHosts`: the claim is applied to the
host's state as its agent would, the state published, the decision
claimed, inside the submit), so the numbers are the scheduler's own,
not the agent's polling.

Two schedulers take turns on the same cloud, one decision each in turn
(each also sees the other's claims, as two scheduler processes would):

- **baseline**: ``placement_view_seconds`` 0 and
  ``hosts_to_score_percentage`` 100: Placement asked on every decision,
  every candidate fitted (the scheduler before the view);
- **view**: the defaults.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins.hoststate import protocol
from compute_plugins.hoststate.records import HostDecision
from compute_plugins.hoststate.store import HostStateStore
from compute_plugins.plugin.contract import Rejection
from compute_plugins.plugin.state import AssignmentConflict
from compute_plugins.request.spec import RequestSpec
from compute_plugins.runtime import PluginSet
from compute_plugins.runtime.manager import PluginManager
from compute_plugins.scheduler.selection import Scheduler, ScheduleResult

#: The two schedulers compared: label -> ``[scheduler]`` overrides.
MODES: dict[str, dict[str, Any]] = {
    "baseline (no view)": {"placement_view_seconds": 0.0,
                           "hosts_to_score_percentage": 100},
    "view": {},
}


class InstantHosts:
    """The store, with every host's agent answering at once: a submitted
    decision's assignments are added to its host's claims, the host's
    states under them published (a new generation, as the agent publishes
    before it answers) and the decision claimed; or, when they do not hold
    on the host's state (another scheduler's claim took the same CPUs or
    devices first), rejected, as the agent would.

    :param managers: host -> its plugins, discovered (the bench cloud's).
    :param plugins: the plugins the specs were built with.
    """

    def __init__(self, store: HostStateStore, managers: Mapping[str, PluginManager],
                 plugins: PluginSet) -> None:
        self._store = store
        self._managers = managers
        self._plugins = plugins
        self._claims: dict[str, dict[str, list[Any]]] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def submit_decision(self, consumer: str, host: str, spec: str) -> HostDecision:
        submitted = self._store.submit_decision(consumer, host, spec)
        decision = RequestSpec.from_json(spec, self._plugins).decision
        assert decision is not None
        with self._lock:
            usage = self._claims.setdefault(host, {})
            wanted = {name: usage.get(name, []) + [assignment]
                      for name, assignment in decision.assignments.items()}
            manager = self._managers[host]
            try:
                built, broken = manager.host_states(host, {**usage, **wanted},
                                                    strict=True, host=host)
            except AssignmentConflict as err:
                protocol.reject(self._store, submitted.id, [Rejection(
                    "taken by another guest: %s" % err)])
                return submitted
            if broken:
                raise RuntimeError("host %s: %s" % (host, broken))
            usage.update(wanted)
            states, _ = manager.plugins.encode_states(built)
            snapshot = self._store.get_host(host)
            assert snapshot is not None
            self._store.publish(host, states, snapshot.generation)
        protocol.claim(self._store, submitted.id)
        return submitted


def scheduler(store: Any, client: Any, plugins: PluginSet,
              overrides: Mapping[str, Any]) -> Scheduler:
    """A scheduler with ``[scheduler]`` ``overrides``."""
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    conf([], default_config_files=[], default_config_dirs=[])
    for name, value in overrides.items():
        conf.set_override(name, value, "scheduler")
    return Scheduler(conf, plugins, client, store, poll_interval=0.001)


#: A decision: its result and its wall-clock seconds.
Timed = tuple[ScheduleResult, float]


def run(store: HostStateStore, client: Any, managers: Mapping[str, PluginManager],
        plugins: PluginSet, specs: Sequence[Any], count: int) -> dict[str, list[Timed]]:
    """``count`` decisions per mode, taking turns; mode -> results."""
    hosts = InstantHosts(store, managers, plugins)
    scheds = {label: scheduler(hosts, client, plugins, overrides)
              for label, overrides in MODES.items()}
    results: dict[str, list[Timed]] = {label: [] for label in MODES}
    try:
        for i in range(count):
            spec = specs[i % len(specs)]
            for label, sched in scheds.items():
                start = time.perf_counter()
                result = sched.schedule(spec, str(uuid.uuid4()), "bench", "bench")
                took = time.perf_counter() - start
                if not result.placed:
                    raise RuntimeError("%s: not placed: %s" % (label, result.reasons))
                results[label].append((result, took))
    finally:
        for sched in scheds.values():
            sched.close()
    return results


def report(results: Mapping[str, list[Timed]]) -> list[str]:
    """The table: decisions/s, latency, Placement calls (mean: the view
    asks Placement on the first decision of each request shape; median)
    and the time in Placement and in the fit per decision; the view's
    ratio last."""
    lines = ["  %-20s %7s %8s %8s %10s %10s %9s %8s" % (
        "scheduler", "dec/s", "p50 ms", "max ms", "calls/dec", "calls p50", "rp ms",
        "fit ms")]
    rate = {}
    for label, timed in results.items():
        done = [r for r, _ in timed]
        took = [t for _, t in timed]
        rate[label] = len(done) / sum(took)
        lines.append("  %-20s %7.1f %8.1f %8.1f %10.2f %10g %9.1f %8.1f" % (
            label, rate[label], statistics.median(took) * 1e3, max(took) * 1e3,
            statistics.mean(r.placement_call_count for r in done),
            statistics.median(r.placement_call_count for r in done),
            statistics.mean(r.timings.get("placement", 0.0) for r in done) * 1e3,
            statistics.mean(r.timings.get("fit", 0.0) for r in done) * 1e3))
    base, ours = rate[next(iter(MODES))], rate["view"]
    lines.append("  view / baseline: %.1fx decisions/s" % (ours / base))
    return lines


__all__ = ["InstantHosts", "MODES", "report", "report_together", "run", "run_together",
           "scheduler"]


def run_together(store: HostStateStore, client: Any,
                 managers: Mapping[str, PluginManager], plugins: PluginSet,
                 specs: Sequence[Any], count: int, schedulers: int,
                 subset: int) -> tuple[list[Timed], float]:
    """``schedulers`` schedulers (threads, each its own view) at once, each
    placing ``count`` guests with ``[scheduler] host_subset_size``
    ``subset``; every decision, and the seconds they all took."""
    hosts = InstantHosts(store, managers, plugins)
    barrier = threading.Barrier(schedulers)
    results: list[Timed] = []
    lock = threading.Lock()
    failed: list[str] = []

    def one(index: int) -> None:
        with scheduler(hosts, client, plugins, {"host_subset_size": subset}) as sched:
            for sp in specs:  # NOTE: warm: each shape asked once
                sched.plan(sp)
            barrier.wait(600)
            for i in range(count):
                start = time.perf_counter()
                result = sched.schedule(specs[(i + index) % len(specs)],
                                        str(uuid.uuid4()), "bench", "bench")
                took = time.perf_counter() - start
                with lock:
                    if not result.placed:
                        failed.append(str(result.reasons))
                    results.append((result, took))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(schedulers)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failed:
        raise RuntimeError("not placed: %s" % failed[0])
    return results, time.perf_counter() - start


def report_together(label: str, results: Sequence[Timed], seconds: float) -> str:
    """One line: decisions/s of all schedulers together, p50, the races
    (Placement's 409 or the host's rejection) and Placement calls per
    decision."""
    raced = sum(1 for r, _ in results for a in r.attempts
                if a.outcome in ("conflict", "rejected"))
    return "  %-20s %7.1f %8.1f %10.2f %10.2f" % (
        label, len(results) / seconds,
        statistics.median(t for _, t in results) * 1e3,
        raced / len(results),
        statistics.mean(r.placement_call_count for r, _ in results))
