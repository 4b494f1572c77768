"""The benchmark's schedulers: the real :class:`Scheduler`, one per process.

The one module of the benchmark that drives the scheduler
(:meth:`Scheduler.schedule` for a boot, :meth:`Scheduler.release` for a
delete), on its own store connection and its own Placement client (over
HTTP, as separate scheduler services would be).

The workload: ``count`` operations, each a delete of one of this
scheduler's placed consumers (with probability ``delete_fraction``, once
it has some) or else a boot of one of the requests of
:data:`bench.schedule.__main__.REQUESTS` (2-node and 8-node pinned, vGPU,
SR-IOV port), chosen at random (seeded). A boot's latency is the
``schedule`` call's (Placement's query, the fit, the allocation, the
decision and the host agent's answer); a delete's is the request's (the
agent frees the claim on its next poll). With ``--concurrency`` N each
process runs its share in N threads on its one scheduler
(:func:`concurrent`).
"""

from __future__ import annotations

import contextlib
import cProfile
import random
import threading
import time
import traceback
import uuid
from multiprocessing.connection import Connection
from typing import Any, Optional

from oslo_config import cfg

from bench.scale import counters, cpu
from bench.schedule import cloud
from compute_plugins import conf as conf_areas
from compute_plugins.hoststate.store import HostStateStore
from compute_plugins.placement import client as pclient
from compute_plugins.request.inputs import RequestInput
from compute_plugins.request.spec import RequestSpec
from compute_plugins.scheduler.selection import Scheduler

#: Where this process's profiles go (``--profile``: the directory and the
#: process's name); each request thread writes ``PROFILE-thread-N.pstats``.
PROFILE: Optional[str] = None
#: This process's profiler (``--profile``): what its start and warm-up
#: cost is written apart (``PROFILE-setup.pstats``) and cleared before the
#: workload, so that the process's profile is the workload's (at 10,000
#: hosts a warm-up of every host is ~95% of a scheduler's CPU).
PROFILER: Optional[cProfile.Profile] = None
PROJECT = "bench-scale-project"
USER = "bench-scale-user"


def requests(plugins: Any) -> list[Any]:
    """The workload's RequestSpecs, one per request of :mod:`bench.schedule`."""
    from bench.schedule.__main__ import REQUESTS

    return [RequestSpec.build(plugins, RequestInput.from_dicts(
        dict(flavor, name=label), None, ports))
        for label, (flavor, ports) in sorted(REQUESTS.items())]


def make_scheduler(store: HostStateStore, placement: pclient.PlacementClient,
                   answer_timeout: float,
                   view_seconds: Optional[float] = None) -> Scheduler:
    """A scheduler on ``store`` and ``placement``, default options but
    ``[scheduler] answer_timeout`` (and ``placement_view_seconds`` unless
    None)."""
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    conf([], default_config_files=[], default_config_dirs=[])
    plugins = cloud.manager("2cell").plugins
    # NOTE: before the scheduler is made: its view reads
    # placement_view_seconds once, when it is made.
    conf.set_override("answer_timeout", answer_timeout, "scheduler")
    if view_seconds is not None:
        conf.set_override("placement_view_seconds", view_seconds, "scheduler")
    return Scheduler(conf, plugins, placement, store)


def warm_up(scheduler: Scheduler, every_host: bool = False) -> float:
    """Plan each of the workload's requests once (nothing written): the
    scheduler's view holds Placement's answer for each request shape and
    the states it fitted, as a scheduler that has been running does
    (kube-scheduler waits for its informers' caches the same way). At
    10,000 hosts one answer is tens of MB; the seconds are reported
    apart from the workload's.

    :param every_host: each plan fits every candidate (``[scheduler]
        hosts_to_score_percentage`` 100 for the warm-up only), as the
        rotation of a scheduler that has run for a while has: its fits
        are kept per host generation, so that the workload's fits are
        those of the hosts that changed, not the first visit of the
        hosts the warm-up's sample left out (at 1,000 hosts, 400
        decisions: of a scheduler's ~1,950 fits, ~930 the warm-up's own,
        ~570 such first visits, ~450 of hosts that published since)."""
    start = time.monotonic()
    if every_host:
        scheduler.conf.set_override("hosts_to_score_percentage", 100, "scheduler")
    try:
        for spec in requests(scheduler.plugins):
            scheduler.plan(spec)
    finally:
        if every_host:
            scheduler.conf.clear_override("hosts_to_score_percentage", "scheduler")
    return time.monotonic() - start


def workload(scheduler: Scheduler, count: int, seed: int,
             delete_fraction: float) -> dict[str, Any]:
    """Run ``count`` boots and deletes (module doc); what happened."""
    rng = random.Random(seed)
    specs = requests(scheduler.plugins)
    placed: list[str] = []
    boots: list[float] = []
    deletes: list[float] = []
    failed: list[str] = []
    booted: list[str] = []
    refused = 0
    outcomes: dict[str, int] = {}
    #: Each boot's first plan, and the rest (its offers, the plans made
    #: again, and with --concurrency the waits for the scheduling cycle).
    plans: list[float] = []
    bindings: list[float] = []
    for _ in range(count):
        if placed and rng.random() < delete_fraction:
            consumer = placed.pop(rng.randrange(len(placed)))
            start = time.perf_counter()
            scheduler.release(consumer)
            deletes.append(time.perf_counter() - start)
            continue
        consumer = str(uuid.uuid4())
        start = time.perf_counter()
        result = scheduler.schedule(rng.choice(specs), consumer, PROJECT, USER)
        boots.append(time.perf_counter() - start)
        booted.append(consumer)
        for attempt in result.attempts:
            outcomes[attempt.outcome] = outcomes.get(attempt.outcome, 0) + 1
        timings = result.timings
        plans.append(sum(timings.get(k, 0.0) for k in ("placement", "store", "fit")))
        bindings.append(timings.get("claim", 0.0))
        if result.placed:
            placed.append(consumer)
            continue
        refused += 1
        if len(failed) < 3:
            failed.append("not placed: " + ("; ".join(
                "%s: %s" % (r.host, r.reasons[0].reason)
                for r in result.reasons[:2] if r.reasons) or "no host"))
    return {"boots": boots, "deletes": deletes, "placed": len(booted) - refused,
            "failed": failed, "all": booted, "outcomes": outcomes,
            "plans": plans, "bindings": bindings}


def concurrent(scheduler: Scheduler, count: int, seed: int, delete_fraction: float,
               concurrency: int) -> dict[str, Any]:
    """:func:`workload` in ``concurrency`` threads of one scheduler (its
    requests at once, as nova's concurrent ``select_destinations`` in one
    scheduler: :class:`Scheduler`'s scheduling and binding cycles), the
    ``count`` operations shared; what happened, all threads together."""
    if concurrency <= 1:
        return workload(scheduler, count, seed, delete_fraction)
    shares = [count // concurrency + (i < count % concurrency) for i in range(concurrency)]
    results: list[Optional[dict[str, Any]]] = [None] * concurrency
    errors: list[BaseException] = []

    def run(index: int) -> None:
        profiler = cProfile.Profile() if PROFILE is not None else None
        try:
            if profiler is not None:
                profiler.enable()
            results[index] = workload(scheduler, shares[index], seed * 1000 + index,
                                      delete_fraction)
        except BaseException as err:  # noqa: BLE001 - raised by the caller
            errors.append(err)
        finally:
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats("%s-thread-%d.pstats" % (PROFILE, index))

    threads = [threading.Thread(target=run, args=(i,), name="request-%d" % i)
               for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    done = [r for r in results if r is not None]
    return {"boots": [s for r in done for s in r["boots"]],
            "deletes": [s for r in done for s in r["deletes"]],
            "placed": sum(r["placed"] for r in done),
            "failed": [f for r in done for f in r["failed"]][:3],
            "all": [c for r in done for c in r["all"]],
            "outcomes": merged(r["outcomes"] for r in done),
            "plans": [s for r in done for s in r["plans"]],
            "bindings": [s for r in done for s in r["bindings"]]}


def merged(counts: Any) -> dict[str, int]:
    """Counts by key, summed."""
    total: dict[str, int] = {}
    for count in counts:
        for key, n in count.items():
            total[key] = total.get(key, 0) + n
    return dict(sorted(total.items()))


def asks(scheduler: Scheduler) -> dict[str, int]:
    """What ``scheduler`` asked Placement so far: its requests by kind
    (``METHOD /path``), and its view's asks about every host and hosts
    asked about tree by tree, by why (``view full: expired``, ``view
    trees: unknown``: :class:`~compute_plugins.scheduler.view.PlacementView`)."""
    view = scheduler.view
    return {**scheduler.placement.calls.snapshot(),
            **{"view full: " + k: n for k, n in view.full_asks.items()},
            **{"view trees: " + k: n for k, n in view.tree_asks.items()}}


def worker(conn: Connection, stats: counters.Slot) -> None:
    """A scheduler process. In: ``("start", (store_url, push_transport_url),
    placement_url,
    count, seed, delete_fraction, answer_timeout, view_seconds, warm,
    concurrency)``, then ``("go",)``, then ``("stop",)``. Out:
    ``("ready", warm_up_seconds)`` (0 unless ``warm``: :func:`warm_up`, of
    every candidate when it is ``"every-host"``), then ``("done", result)``
    (:func:`concurrent`'s, with ``seconds`` and ``asks``: :func:`asks`
    over the workload). Its store's connections are named ``schedulers``
    (:func:`bench.scale.cpu.named`) and closed at ``("stop",)`` only."""
    store = None
    scheduler: Optional[Scheduler] = None
    try:
        (_, store_url, placement_url, count, seed, delete_fraction,
         answer_timeout, view_seconds, warm, concurrency) = conn.recv()
        store = HostStateStore(cpu.named(store_url[0], "schedulers"),
                               push_transport_url=store_url[1])
        for engine in store.db.engines:
            counters.count_statements(engine, stats)
        placement = pclient.PlacementClient.for_url(placement_url)
        stats.placement = placement.calls
        scheduler = make_scheduler(store, placement, answer_timeout, view_seconds)
        warmed = warm_up(scheduler, warm == "every-host") if warm else 0.0
        stats.sync()
        conn.send(("ready", warmed))
        conn.recv()
        if PROFILER is not None and PROFILE is not None:
            PROFILER.disable()
            PROFILER.dump_stats(PROFILE + "-setup.pstats")
            PROFILER.clear()
            PROFILER.enable()
        asked = asks(scheduler)
        start = time.monotonic()
        result = concurrent(scheduler, count, seed, delete_fraction, concurrency)
        result["seconds"] = time.monotonic() - start
        result["asks"] = {k: n - asked.get(k, 0) for k, n in asks(scheduler).items()
                          if n - asked.get(k, 0)}
        stats.sync()
        conn.send(("done", result))
        # NOTE: the store kept open until the main process has read every
        # part's CPU (its backends' time is the store's while they live).
        with contextlib.suppress(EOFError, OSError):
            conn.recv()
    except Exception as err:  # noqa: BLE001 - sent to the main process
        conn.send(("failed", "".join(traceback.format_exception(err))))
    finally:
        if scheduler is not None:
            scheduler.close()
        if store is not None:
            store.close()
