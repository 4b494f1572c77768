"""The scheduler against Placement's own allocation candidates, same run.

Hosts of four shapes (:mod:`bench.schedule.cloud`: 2 cells, 8 cells, GPU,
SR-IOV) on one embedded Placement (in-process, in-memory SQLite, configured
for wide trees) and one host-state store (SQLite file). Per request:

- **ours**: :meth:`Scheduler.plan` + :meth:`Scheduler.decide` (Placement's
  ``GET /resource_providers`` per group shape, the store read, every
  candidate's ``fit``, the weighers, the allocation of the best host;
  nothing written), split into the time in Placement's answers and our own;
- **Placement**: every alternative of the derived ``GET
  /allocation_candidates`` query (what a scheduler built on allocation
  candidates sends), with how many hosts its candidates leave after
  :func:`~compute_plugins.scheduler.query.accept`.

Printed per host count and request: medians of ``-n`` runs (interleaved),
the ratio Placement's query / our whole path, our own time as a fraction
of Placement's query, and the hosts each side finds.

Then whole decisions (:mod:`bench.schedule.decisions`): ``--decisions``
per scheduler, the scheduler without its view (Placement asked and every
candidate fitted on every decision) and with it (the defaults) taking
turns: decisions/s, latency, Placement calls per decision, and the ratio.

``--hosts 100,1000`` (default 100: setting up 1000 hosts takes minutes
here). Run ``python -m bench.schedule [-n N] [--hosts 100,1000]
[--decisions N]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from oslo_config import cfg

from bench.schedule import cloud, decisions
from compute_plugins import conf as conf_areas
from compute_plugins.hoststate.store import HostStateStore
from compute_plugins.placement import embedded
from compute_plugins.request.inputs import RequestInput
from compute_plugins.request.spec import RequestSpec
from compute_plugins.scheduler import query
from compute_plugins.scheduler.query import preview
from compute_plugins.scheduler.selection import Scheduler

REQUESTS = {
    "2-node pinned": ({"vcpus": 8, "memory_mb": 4096, "extra_specs": {
        "hw:numa_nodes": "2", "hw:cpu_policy": "dedicated"}}, []),
    "8-node pinned": ({"vcpus": 16, "memory_mb": 8192, "extra_specs": {
        "hw:numa_nodes": "8", "hw:cpu_policy": "dedicated"}}, []),
    "vGPU": ({"vcpus": 4, "memory_mb": 4096, "extra_specs": {
        "resources:VGPU": "1"}}, []),
    "SR-IOV port": ({"vcpus": 4, "memory_mb": 4096, "extra_specs": {}},
                    [{"vnic_type": "direct", "physnet": "physnet1"}]),
}


class TimedClient:
    """The Placement client, adding up the time spent in its requests."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get(self, path: str, **kw: Any) -> Any:
        start = time.perf_counter()
        try:
            return self._client.get(path, **kw)
        finally:
            self.seconds += time.perf_counter() - start


def ours(scheduler: Scheduler, timed: TimedClient, spec: Any) -> tuple[float, float, set]:
    """(total, Placement part, hosts that fit)."""
    timed.seconds = 0.0
    start = time.perf_counter()
    planned = scheduler.plan(spec)
    if planned.ordered:
        scheduler.decide(spec, planned)
    total = time.perf_counter() - start
    return total, timed.seconds, {f.host for _, f in planned.ordered}


def allocation_candidates(client: Any, spec: Any, roots: dict) -> tuple[float, set]:
    """(seconds for every alternative, hosts with an accepted candidate)."""
    found = set()
    start = time.perf_counter()
    for alt in preview(spec).alternatives:
        answer = client.get("/allocation_candidates?" + alt.to_querystring())
        summaries = answer["provider_summaries"]
        for req in query.accepted(alt, answer):
            for rp in req["allocations"]:
                host = roots.get(summaries[rp]["root_provider_uuid"])
                if host:
                    found.add(host)
    return time.perf_counter() - start, found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.schedule")
    parser.add_argument("-n", type=int, default=3, help="runs per case")
    parser.add_argument("--hosts", default="100",
                        help="host counts, comma-separated (e.g. 100,1000)")
    parser.add_argument("--decisions", type=int, default=30,
                        help="whole decisions per scheduler (0: none)")
    parser.add_argument("--schedulers", type=int, default=4,
                        help="then as many schedulers at once, each placing "
                        "--decisions guests (1: not run)")
    args = parser.parse_args(argv)
    try:
        counts = [int(c) for c in args.hosts.split(",")]
    except ValueError:
        parser.error("--hosts %r: expected host counts, comma-separated" % args.hosts)
    if min(counts) < 1 or args.n < 1 or args.decisions < 0 or args.schedulers < 1:
        parser.error("--hosts, -n, --schedulers: expected >= 1; --decisions: >= 0")
    logging.disable(logging.WARNING)
    for count in counts:
        with tempfile.TemporaryDirectory() as tmp, \
                embedded.EmbeddedPlacement("sqlite://") as service, \
                HostStateStore("sqlite:///" + os.path.join(tmp, "hs.sqlite")) as store:
            client = service.client()
            start = time.perf_counter()
            managers: dict[str, Any] = {}
            made = cloud.build(client, store, count, managers)
            print("%d hosts (%s) set up in %.1f s" % (
                count, ", ".join("%d %s" % (n, s) for s, n in sorted(made.items())),
                time.perf_counter() - start), flush=True)
            roots = {}
            for host, snap in store.get_hosts().items():
                for uuid, name in snap.providers.items():
                    if name == snap.nodename:
                        roots[uuid] = host
            conf = cfg.ConfigOpts()
            conf_areas.register_all(conf)
            conf([], default_config_files=[], default_config_dirs=[])
            # NOTE: the whole path on every run, as each decision took it
            # before the scheduler kept its view (the decisions below
            # compare with the view).
            for name, value in decisions.MODES["baseline (no view)"].items():
                conf.set_override(name, value, "scheduler")
            plugins = cloud.manager("2cell")
            timed = TimedClient(client)
            scheduler = Scheduler(conf, plugins.plugins, timed, store)
            specs = [RequestSpec.build(plugins.plugins, RequestInput.from_dicts(
                dict(flavor, name=label), None, ports))
                for label, (flavor, ports) in REQUESTS.items()]
            print("  %-14s %9s %9s %9s %12s %7s %9s %s" % (
                "request", "ours ms", "own ms", "rp ms", "a_c ms", "a_c/us",
                "own/a_c", "hosts (ours / a_c)"))
            for label, (flavor, ports) in REQUESTS.items():
                spec = RequestSpec.build(plugins.plugins, RequestInput.from_dicts(
                    dict(flavor, name=label), None, ports))
                totals, placement_parts, ac_times = [], [], []
                for _ in range(args.n):
                    total, in_placement, hosts_ours = ours(scheduler, timed, spec)
                    totals.append(total)
                    placement_parts.append(in_placement)
                    seconds, hosts_ac = allocation_candidates(client, spec, roots)
                    ac_times.append(seconds)
                total = statistics.median(totals)
                own = statistics.median(t - p for t, p in zip(totals, placement_parts,
                                                               strict=True))
                ac = statistics.median(ac_times)
                print("  %-14s %9.1f %9.1f %9.1f %12.1f %7.1f %8.0f%% %d / %d" % (
                    label, total * 1e3, own * 1e3, (total - own) * 1e3, ac * 1e3,
                    ac / total, 100 * own / ac, len(hosts_ours), len(hosts_ac)),
                    flush=True)
            scheduler.close()
            if args.decisions:
                print("  decisions at %d hosts: %d per scheduler, taking turns, the "
                      "hosts answering at once" % (count, args.decisions), flush=True)
                done = decisions.run(store, client, managers, plugins.plugins, specs,
                                     args.decisions)
                for line in decisions.report(done):
                    print(line, flush=True)
            if args.decisions and args.schedulers > 1:
                print("  %d schedulers at once (threads), %d decisions each, by "
                      "[scheduler] host_subset_size" % (args.schedulers, args.decisions))
                print("  %-20s %7s %8s %10s %10s" % (
                    "host_subset_size", "dec/s", "p50 ms", "races/dec", "calls/dec"))
                for subset in (1, 2 * args.schedulers):
                    together, seconds = decisions.run_together(
                        store, client, managers, plugins.plugins, specs,
                        args.decisions, args.schedulers, subset)
                    print(decisions.report_together(str(subset), together, seconds),
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
