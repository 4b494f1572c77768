"""The demo's steps, as data (:func:`run_demo`); :mod:`.render` prints them.

1. **Report every host**: one periodic of each agent (discover the
   snapshot, the plugins' provider tree, sync to Placement, publish the host
   state); the operator adds the shared storage's sharing provider. The
   trees are read back from Placement.
2. **Boot the requests** (``requests.json``): each is parsed once into a
   RequestSpec and scheduled (Placement's linear queries, every plugin's
   ``fit`` on each candidate's published state, the best host's agent
   verifies and claims the recorded decision, in its own thread).
3. **The request that fits nowhere**: the scheduler's answer, and every
   plugin's reason on every host (its ``fit`` on each host's published
   state, whether Placement already excluded the host or not).
4. **Two moves** (:func:`_moves`): a resize of one instance (``RESIZE``)
   and a live migration of another (``LIVE_MIGRATE``), each decided by the
   scheduler and claimed by the destination's agent; Placement's consumers
   (the instance's and the migration consumer's allocation, per provider)
   while the move is to confirm and once it is confirmed (the resize by
   ``confirm``, the live migration by itself), and the live migration's
   destination guest XML pinning, from the destination's decision.
5. **The final state**: each provider's usage from Placement, and one more
   periodic of every agent, which makes no Placement call.

A second run in the same state directory releases the instances the
previous run placed (``demo.json``: each agent frees its claim and the
Placement allocation, as ``compute-plugins release`` does), then boots the
list again: the same requests land on the same hosts, and Placement keeps
one provider per device (the uuids are derived from host and device).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any, Optional

from compute_plugins import demo, exception
from compute_plugins.compute import guest
from compute_plugins.demo.cluster import (
    SHARED_STORAGE_NAME,
    SHARED_STORAGE_UUID,
    Cluster,
    Progress,
    calls_since,
    calls_total,
    merge_calls,
    scheduler_conf,
)
from compute_plugins.hoststate.records import MoveStatus
from compute_plugins.placement import exception as pexc
from compute_plugins.plugin.contract import Rejection
from compute_plugins.plugin.state import StateFormatError
from compute_plugins.request.inputs import RequestInput
from compute_plugins.request.spec import RequestSpec
from compute_plugins.runtime.manager import PluginManager
from compute_plugins.scheduler.moves import Mover, MoveResult
from compute_plugins.scheduler.selection import Scheduler, ScheduleResult
from compute_plugins.util import files, jsonload

#: The file in the state directory that lists the instances a run placed.
INSTANCES_FILE = "demo.json"
PROJECT = "compute-plugins-demo"
#: The scheduler's and the mover's draw among equally good hosts, fixed:
#: the walk-through the docs show is the same every run.
DRAW_SEED = 1
#: Seconds to wait for an agent to free an earlier run's instance.
RELEASE_TIMEOUT = 30.0
#: The domain elements whose children step 4 shows for a live migration:
#: what the numa plugin writes (pinned CPUs, memory's host cells).
PINNING = ("cputune", "numatune")
#: Step 4's resize: the request whose instance is resized, and its new
#: flavor. Its host is the only one with dedicated CPUs and 1 GiB pages:
#: the demo's mover has ``[scheduler] allow_resize_to_same_host`` (nova's
#: option), and the host holds both flavors until confirm.
RESIZE = ("pinned-2node", {
    "name": "pinned.2node.large", "vcpus": 12, "memory_mb": 12288, "root_gb": 20,
    "extra_specs": {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2",
                    "hw:mem_page_size": "1GB"}})
#: Step 4's live migration: the request whose instance migrates (it fits
#: on every host: the scheduler chooses another one).
LIVE_MIGRATE = "small"
RESIZE_ABOUT = ("12 dedicated vCPUs on 1 GiB pages: only its own host has them; the "
                "host holds both flavors until confirm")


def load_requests(path: Optional[str] = None) -> list[dict[str, Any]]:
    with open(path or demo.requests_file(), encoding="utf-8") as handle:
        return list(json.load(handle))


def _reasons(rejections: Any, host: Optional[str] = None) -> list[dict[str, str]]:
    out = []
    for rejection in rejections:
        item = {"plugin": rejection.plugin, "reason": rejection.reason}
        if host is not None:
            item = {"host": host, **item}
        out.append(item)
    return out


def _verdicts(result: ScheduleResult, spec: RequestSpec) -> dict[str, dict[str, str]]:
    """host -> plugin -> ``ok`` or its reason; a host Placement left out has
    only Placement's reason (the plugins did not run there)."""
    verdicts: dict[str, dict[str, str]] = {}
    for host, rejections in result.verdicts.items():
        by_plugin: dict[str, str] = {}
        for rejection in rejections:
            key = rejection.plugin or "host"
            by_plugin[key] = ("%s; %s" % (by_plugin[key], rejection.reason)
                              if key in by_plugin else rejection.reason)
        if "placement" not in by_plugin:
            for plugin in spec.requests:
                by_plugin.setdefault(plugin, "ok")
        verdicts[host] = dict(sorted(by_plugin.items()))
    return verdicts


def _scheduler_reasons(result: ScheduleResult) -> list[dict[str, str]]:
    """The scheduler's reasons on every host: what went wrong where a host
    was tried, and every host's verdict (Placement's, or its plugins' fit).
    Not ``result.reasons``: that is the best ``[scheduler]
    max_reported_hosts`` hosts only, and the demo shows every host."""
    reasons = []
    for attempt in result.attempts:
        reasons += [{"host": attempt.host, "plugin": r.plugin, "reason": r.reason,
                     "source": "scheduler"} for r in attempt.reasons]
    for host, rejections in sorted(result.verdicts.items()):
        reasons += [{"host": host, "plugin": r.plugin, "reason": r.reason,
                     "source": "scheduler"} for r in rejections]
    return reasons


def _explain(cluster: Cluster, manager: PluginManager,
             spec: RequestSpec) -> list[dict[str, str]]:
    """Every plugin's reason on every host: every requested plugin's ``fit``
    on each host's published state (offline, as ``compute-plugins fit``),
    whether Placement already left the host out or not."""
    assert cluster.store is not None
    reasons: list[dict[str, str]] = []
    for host, snapshot in sorted(cluster.store.get_hosts().items()):
        states: dict[str, object] = {}
        rejections: list[Rejection] = []
        for name in spec.requests:
            try:
                states[name] = manager.plugins.decode_state(
                    name, snapshot.states[name])
            except (KeyError, StateFormatError) as err:
                rejections.append(Rejection("no usable published state: %s" % err,
                                            plugin=name))
        if not rejections:
            rejections = list(manager.plugins.fit(states, spec, host=host).rejections)
        reasons.extend({"host": host, "plugin": r.plugin, "reason": r.reason,
                        "source": "fit"} for r in rejections)
    return reasons


def _placed(result: ScheduleResult, manager: PluginManager,
            name: str) -> dict[str, Any]:
    decision = result.spec.decision
    assignments = result.spec.to_dict()["decision"]["assignments"]
    describe = {}
    for plugin, assignment in decision.assignments.items():
        describe[plugin] = manager.plugins.describe(
            plugin, result.spec.requests[plugin], assignment)
    xml = guest.domain_xml(result.spec, decision.assignments, manager.plugins,
                           name=name)
    return {
        "host": decision.host,
        "assignments": assignments,
        "allocations": {rp: dict(res) for rp, res in decision.allocations.items()},
        "describe": describe,
        "guest_xml": guest.summary(xml).splitlines(),
        "xml": xml,
    }


def _consumers(cluster: Cluster, names: dict[str, str],
               move: Any) -> dict[str, dict[str, dict[str, int]]]:
    """Placement's allocations of a move's two consumers, per provider:
    provider name -> ``instance``/``migration`` -> resource class -> amount
    (the operator's reads, two ``GET /allocations/{consumer}``)."""
    assert cluster.operator is not None
    out: dict[str, dict[str, dict[str, int]]] = {}
    for role, consumer in (("instance", move.consumer), ("migration", move.migration)):
        held = cluster.operator.get("/allocations/%s" % consumer)["allocations"]
        for provider, allocation in held.items():
            out.setdefault(names.get(provider, provider), {})[role] = dict(
                sorted(allocation["resources"].items()))
    return dict(sorted(out.items()))


def _move_entry(kind: str, entry: dict[str, Any], moved: MoveResult,
                manager: PluginManager, seconds: float,
                calls: dict[str, int]) -> dict[str, Any]:
    move = moved.move
    out: dict[str, Any] = {
        "kind": kind, "name": entry["name"], "consumer": move.consumer,
        "migration": move.migration, "source": move.source, "dest": move.dest,
        "status": move.status.value, "seconds": round(seconds, 3),
        "placement_calls": calls_total(calls), "calls": calls,
        "assignments": {}, "allocations": {}, "describe": {}, "guest_xml": [],
        "reasons": []}
    if moved.schedule is not None and moved.schedule.placed:
        out.update(_placed(moved.schedule, manager, entry["name"]))
        out.pop("xml")
    elif moved.schedule is not None:
        out["reasons"] = _reasons(r for h in moved.schedule.reasons for r in h.reasons)
    return out


def _moves(cluster: Cluster, manager: PluginManager, mover: Mover,
           entries: dict[str, dict[str, Any]], names: dict[str, str],
           progress: Progress) -> list[dict[str, Any]]:
    """Step 4: :data:`RESIZE`, confirmed, and :data:`LIVE_MIGRATE` (which
    confirms itself); Placement's consumers of each while it is to confirm
    and once confirmed."""
    client = mover.placement
    out = []
    name, flavor = RESIZE
    entry = entries.get(name)
    if entry is not None and entry["placed"]:
        progress("resizing %s to %s" % (name, flavor["name"]))
        request = entry["request"]
        spec = RequestSpec.build(manager.plugins, RequestInput.from_dicts(
            flavor, request.get("image"), request.get("ports", ())))
        before, began = client.calls.snapshot(), time.monotonic()
        resized = mover.resize(entry["consumer"], spec)
        item = _move_entry("resize", entry, resized, manager, time.monotonic() - began,
                           calls_since(client, before))
        item["flavor"], item["about"] = flavor["name"], RESIZE_ABOUT
        if resized.moved:
            item["consumers"] = {"to_confirm": _consumers(cluster, names, resized.move)}
            progress("confirming the resize of %s" % name)
            began = time.monotonic()
            done = mover.confirm(entry["consumer"], timeout=RELEASE_TIMEOUT)
            item["confirm_seconds"] = round(time.monotonic() - began, 3)
            item["status"] = done.move.status.value
            item["consumers"]["confirmed"] = _consumers(cluster, names, done.move)
        out.append(item)
    entry = entries.get(LIVE_MIGRATE)
    if entry is not None and entry["placed"]:
        progress("live-migrating %s" % LIVE_MIGRATE)
        seen: dict[str, Any] = {}

        def claimed(result: MoveResult) -> None:
            seen["to_confirm"] = _consumers(cluster, names, result.move)

        before, began = client.calls.snapshot(), time.monotonic()
        migrated = mover.migrate(entry["consumer"], live=True,
                                 confirm_timeout=RELEASE_TIMEOUT, on_claimed=claimed)
        item = _move_entry("live-migrate", entry, migrated, manager,
                           time.monotonic() - began, calls_since(client, before))
        if migrated.moved:
            item["consumers"] = {**seen, "confirmed": _consumers(cluster, names,
                                                                 migrated.move)}
            assert migrated.guest_xml is not None
            item["pinning"] = {"source": guest.pinning(entry["xml"], PINNING),
                               "dest": guest.pinning(migrated.guest_xml, PINNING)}
        out.append(item)
    return out


class DemoStateError(exception.InputError):
    """The state directory holds something the demo did not write."""


def earlier_instances(state_dir: str) -> list[str]:
    """The consumers ``demo.json`` in ``state_dir`` lists (none without it).

    :raises DemoStateError: the file is not the demo's.
    """
    path = os.path.join(state_dir, INSTANCES_FILE)
    if not os.path.lexists(path):
        return []
    try:
        doc = jsonload.loads(files.read_text(path))
        consumers = [str(uuid.UUID(c)) for c in doc["consumers"]]
    except (files.UnreadableFile, jsonload.JSONInputError, KeyError, TypeError,
            ValueError, AttributeError) as err:
        raise DemoStateError(
            "%s: not the demo's list of instances ({\"consumers\": [uuid, ...]}): "
            "%s; remove it, or use another --state-dir" % (path, err)) from None
    return consumers


def _release_earlier(cluster: Cluster, scheduler: Scheduler, mover: Mover,
                     progress: Progress) -> list[str]:
    """Free the instances ``demo.json`` lists; returns those that were in
    force (an instance an interrupted run recorded but never placed has
    nothing to free). Each one freed is struck off ``demo.json`` at once,
    so that an interruption here loses none of the others. A move an
    interrupted run left in force is ended first (confirmed when its
    confirm was requested, else reverted)."""
    consumers = earlier_instances(cluster.state_dir)
    assert cluster.store is not None and cluster.operator is not None
    released = []
    left = list(consumers)
    for consumer in consumers:
        moving = cluster.store.active_move(consumer)
        if moving is not None:
            progress("ending the %s of instance %s of the previous run"
                     % (moving.kind, consumer))
            end = mover.confirm if moving.status == MoveStatus.CONFIRMING else mover.revert
            if not end(consumer, timeout=RELEASE_TIMEOUT).done:
                raise RuntimeError("the %s of instance %s of the previous run did not "
                                   "end within %g s" % (moving.kind, consumer,
                                                        RELEASE_TIMEOUT))
        outcome = scheduler.release(consumer)
        if outcome.outcome in ("unknown", "nothing-in-force"):
            # NOTE: a run interrupted between writing the allocation and
            # submitting the decision leaves an allocation with no decision.
            try:
                cluster.operator.delete("/allocations/%s" % consumer)
            except pexc.NotFound:
                pass
        else:
            progress("releasing instance %s of the previous run" % consumer)
            deadline = time.monotonic() + RELEASE_TIMEOUT
            while cluster.store.active_decision(consumer) is not None:
                if time.monotonic() > deadline:
                    raise RuntimeError("instance %s of the previous run was not "
                                       "released within %g s"
                                       % (consumer, RELEASE_TIMEOUT))
                time.sleep(0.05)
            released.append(consumer)
        left.remove(consumer)
        _save_instances(cluster, left)
    return released


def _save_instances(cluster: Cluster, consumers: list[str]) -> None:
    """Write ``demo.json`` (atomically): the instances to free next time."""
    text = json.dumps({"consumers": consumers}, indent=2) + "\n"
    dir_fd = files.open_dir(cluster.state_dir)
    try:
        files.write_atomic(dir_fd, INSTANCES_FILE, text, mode=files.PRIVATE_FILE_MODE)
    finally:
        os.close(dir_fd)


def _usage(cluster: Cluster,
           earlier: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """provider name -> its host (its root's name; ``null`` for the shared
    storage), inventories, usages, traits and aggregates, from Placement
    (``earlier``: a previous result, whose traits and aggregates are kept)."""
    known = {doc["uuid"]: doc for doc in (earlier or {}).values()}
    providers = list(cluster.providers(known))
    roots = {p["uuid"]: p["name"] for p in providers if not p["parent_provider_uuid"]}
    usage = {}
    for provider in providers:
        usage[provider["name"]] = {
            "uuid": provider["uuid"],
            "host": (None if provider["uuid"] == SHARED_STORAGE_UUID
                     else roots.get(provider["root_provider_uuid"])),
            "parent_provider_uuid": provider["parent_provider_uuid"],
            "inventories": provider["inventories"],
            "usages": {rc: used for rc, used in provider["usages"].items()},
            "traits": provider["traits"],
            "aggregates": provider["aggregates"],
        }
    return dict(sorted(usage.items()))


def run_demo(state_dir: str, progress: Progress,
             requests: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
    """Run the demo in ``state_dir``; returns the report (see the module)."""
    started = time.monotonic()
    requests = load_requests() if requests is None else requests
    report: dict[str, Any] = {"state_dir": os.path.abspath(state_dir)}
    if not state_dir:
        raise DemoStateError("--state-dir '': an empty path; name a directory, or "
                             "leave the option out for a temporary one")
    if os.path.lexists(state_dir) and not os.path.isdir(state_dir):
        what = ("a symbolic link to %s, which does not exist" % os.readlink(state_dir)
                if os.path.islink(state_dir) and not os.path.exists(state_dir)
                else "not a directory")
        raise DemoStateError("--state-dir %s: %s" % (state_dir, what))
    try:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
    except OSError as err:
        raise DemoStateError("--state-dir %s: cannot create it: %s"
                             % (state_dir, err.strerror or err)) from None
    # NOTE: read before anything starts: a bad file stops the demo at once.
    earlier_instances(state_dir)
    with Cluster(state_dir, progress) as cluster:
        assert cluster.store is not None and cluster.service is not None
        # -- 1. every host reports ------------------------------------------
        hosts: list[dict[str, Any]] = []
        for demo_host in cluster.hosts:
            progress("host %s: first periodic (discover, provider tree, "
                     "Placement, host state)" % demo_host.name)
            result = cluster.report(demo_host)
            hosts.append({"name": demo_host.name, "snapshot": demo_host.dirname,
                          "placement_calls": result.placement_calls,
                          "calls": dict(sorted(result.calls.items())),
                          "store_writes": result.store_writes})
        progress("operator: shared storage provider")
        operator_calls = cluster.ensure_shared_storage()
        usage_before = _usage(cluster)
        for host in hosts:
            host["providers"] = [
                {"name": name, **{k: v for k, v in doc.items() if k != "host"}}
                for name, doc in usage_before.items() if doc["host"] == host["name"]]
        report["hosts"] = hosts
        report["operator"] = {"placement_calls": calls_total(operator_calls),
                              "calls": operator_calls,
                              "shared_storage": usage_before[SHARED_STORAGE_NAME]}

        # -- 2. and 3. boot the requests --------------------------------------
        conf = scheduler_conf(cluster.store_url)
        manager = PluginManager(conf)
        client = cluster.service.client()
        # NOTE: a fixed seed: the draw among equally good hosts (the live
        # migration's destination) is the same every run, as the docs show.
        scheduler = Scheduler(conf, manager.plugins, client, cluster.store, seed=DRAW_SEED)
        # NOTE: the resize stays on its host (the only one with dedicated
        # CPUs and 1 GiB pages), as nova's option allows.
        mover_conf = scheduler_conf(cluster.store_url)
        mover_conf.set_override("allow_resize_to_same_host", True, "scheduler")
        mover = Mover(mover_conf, manager.plugins, client, cluster.store, seed=DRAW_SEED)
        cluster.start_agents()
        try:
            report["released_earlier"] = _release_earlier(cluster, scheduler, mover,
                                                          progress)
            placed_consumers: list[str] = []
            results = []
            for request in requests:
                progress("scheduling %s" % request["name"])
                spec = RequestSpec.build(manager.plugins, RequestInput.from_dicts(
                    request["flavor"], request.get("image"), request.get("ports", ())))
                consumer = str(uuid.uuid4())
                # NOTE: recorded before it is scheduled: a run interrupted
                # (Ctrl-C) while the instance is being placed leaves it for
                # the next run to free.
                _save_instances(cluster, placed_consumers + [consumer])
                began = time.monotonic()
                scheduled = scheduler.schedule(spec, consumer, PROJECT, PROJECT)
                entry: dict[str, Any] = {
                    "name": request["name"], "about": request.get("about", ""),
                    "plugins": sorted(spec.requests),
                    "expect": request.get("expect", "any"),
                    "placed": scheduled.placed, "consumer": consumer,
                    "host": scheduled.host,
                    "query": list(scheduled.queries),
                    "candidates": scheduled.candidates, "fitting": scheduled.fitting,
                    "verdicts": _verdicts(scheduled, spec),
                    "attempts": [{"host": a.host, "outcome": a.outcome,
                                  "reasons": _reasons(a.reasons)}
                                 for a in scheduled.attempts],
                    "placement_calls": scheduled.placement_call_count,
                    "calls": dict(scheduled.placement_calls),
                    "seconds": round(time.monotonic() - began, 3),
                    "assignments": {}, "allocations": {}, "reasons": [],
                }
                if scheduled.placed:
                    entry.update(_placed(scheduled, manager, request["name"]))
                    placed_consumers.append(consumer)
                else:
                    progress("explaining %s: every plugin's fit on every host"
                             % request["name"])
                    entry["reasons"] = _scheduler_reasons(scheduled) + _explain(
                        cluster, manager, spec)
                results.append(entry)
            _save_instances(cluster, placed_consumers)

            # -- 4. two moves --------------------------------------------------
            names = {doc["uuid"]: name for name, doc in usage_before.items()}
            entries = {entry["name"]: dict(entry, request=request)
                       for entry, request in zip(results, requests, strict=True)}
            report["moves"] = _moves(cluster, manager, mover, entries, names, progress)
        finally:
            scheduler.close()
            cluster.stop_agents()
        for entry in results:
            entry.pop("xml", None)
        report["requests"] = results

        # -- 5. the final state ------------------------------------------------
        progress("final state: usage from Placement, one more periodic per host")
        report["usage"] = _usage(cluster, usage_before)
        final = {}
        for demo_host in cluster.hosts:
            final[demo_host.name] = cluster.report(demo_host).placement_calls
        report["final_periodic"] = final
        report["final_periodic_calls"] = sum(final.values())
        report["agents"] = {
            h.name: {"claimed": sum(len(r.claimed) for r in h.results),
                     "rejected": sum(len(r.rejected) for r in h.results),
                     "released": sum(len(r.releases) for r in h.results)}
            for h in cluster.hosts}
        report["placement_calls"] = merge_calls(
            [h.placement.calls.snapshot() for h in cluster.hosts])
    report["seconds"] = round(time.monotonic() - started, 2)
    return report
