"""``compute-plugins schedule``: place a request on a host and have the
host's agent claim it.

Against the configured Placement (``--placement-url``, ``[placement]``, or
the embedded one) and host-state store (``[host_state] connection``, else
the SQLite file in the state directory), where the compute agents
(``compute-plugins report``) publish their hosts and answer decisions. See
:mod:`compute_plugins.scheduler.selection`.

Before it waits for a host's answer, each decision is told on stderr
(``consumer UUID: decision N offered to host H; waiting up to S s for its
agent``): an interrupted scheduler's work can be found. Ctrl-C is exit 130
and one line naming the consumer and what became of its decision (pending:
its agent may still claim it; ``release --consumer`` withdraws it, a re-run
of the same request with ``--consumer`` waits for its answer); with
``--format json`` the instances placed before and ``"interrupted":
{"consumer", "host", "decision", "status"}`` are printed on stdout.

Exit codes: 0 every instance placed, 1 some not (the reasons are printed:
per host and plugin), 2 bad input, 130 interrupted.
"""

from __future__ import annotations

import argparse
import math
import sys
import uuid
from typing import TYPE_CHECKING, Any

from compute_plugins import exception
from compute_plugins.cmd import arguments, common, validate
from compute_plugins.util.text import capped, printable

if TYPE_CHECKING:
    from oslo_config import cfg

    from compute_plugins.hoststate.records import HostDecision
    from compute_plugins.hoststate.store import HostStateStore
    from compute_plugins.runtime import PluginSet
    from compute_plugins.scheduler.selection import ScheduleResult

EXIT_OK, EXIT_NOT_PLACED, EXIT_USAGE = 0, 1, 2
#: ``project_id``/``user_id`` of the allocations when not given.
DEFAULT_PROJECT = "compute-plugins"
#: Most instances one ``schedule`` places (``--count``). Each is its own
#: request, placed one after the other; nova bounds a request by quota, this
#: by a constant: a mistyped count must not hold the store and Placement for
#: hours (nor build millions of consumer uuids first).
MAX_COUNT = 1000


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = arguments.command(
        subparsers, "schedule", "place a flavor (and image, ports) on a host: "
        "Placement, every plugin's fit, the host's agent claims it",
        uses=("format", "placement_url"),
        unused="it reads the hosts from Placement and the host-state store")
    validate.add_request_arguments(parser)
    parser.add_argument("--count", type=int, default=1, metavar="N",
                        help="instances to place (each its own consumer), "
                        "1 to %d" % MAX_COUNT)
    parser.add_argument("--consumer", metavar="UUID",
                        help="the consumer (instance) uuid; default: a new "
                        "one (only with --count 1)")
    parser.add_argument("--timeout", type=float, metavar="S",
                        help="seconds to wait for each host's answer "
                        "(default [scheduler] answer_timeout)")
    parser.add_argument("--project-id", default=DEFAULT_PROJECT,
                        help="project of the allocations")
    parser.add_argument("--user-id", default=DEFAULT_PROJECT,
                        help="user of the allocations")
    parser.set_defaults(func=run)


def _bad(line: str) -> int:
    common.error(line)
    return EXIT_USAGE


def _consumers(args: argparse.Namespace) -> list[str]:
    if not 1 <= args.count <= MAX_COUNT:
        raise ValueError("--count %d: expected 1 to %d" % (args.count, MAX_COUNT))
    if args.consumer is not None:
        if args.count != 1:
            raise ValueError("--consumer names one instance; --count is %d"
                             % args.count)
        try:
            return [str(uuid.UUID(args.consumer))]
        except ValueError:
            raise ValueError("--consumer %r is not a uuid" % args.consumer) from None
    return [str(uuid.uuid4()) for _ in range(args.count)]


def run(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    from compute_plugins.hoststate.store import HostStateStore
    from compute_plugins.placement import connect
    from compute_plugins.request.errors import RequestInputError, RequestValidationError
    from compute_plugins.request.spec import RequestSpec
    from compute_plugins.scheduler.selection import ConsumerAllocated, ConsumerInUse, Scheduler

    try:
        consumers = _consumers(args)
        if args.timeout is not None and not (math.isfinite(args.timeout)
                                             and args.timeout >= 0):
            # NOTE: inf would wait forever for a host with no agent.
            raise ValueError("--timeout %r: expected a finite number of "
                             "seconds >= 0" % args.timeout)
        # NOTE: --project-id and --user-id are checked by main
        # (arguments.check_ids), before Placement's 400 (exit 1).
        inputs = validate.request_input(args)
    except (ValueError, RequestInputError) as err:
        return _bad(str(err))
    manager = common.plugin_manager(conf)
    try:
        spec = RequestSpec.build(manager.plugins, inputs)
    except RequestValidationError as err:
        common.error("invalid request: %d problem(s)" % len(err.problems),
                     *capped(["  %s" % problem for problem in err.problems]))
        return EXIT_USAGE
    results: list[ScheduleResult] = []
    offered: dict[str, HostDecision] = {}
    with connect.placement_client(conf, args.placement_url) as client, \
            HostStateStore.from_config(conf) as store:
        with Scheduler(conf, manager.plugins, client, store,
                       on_offer=lambda d, wait: _tell(offered, d, wait)) as scheduler:
            for consumer in consumers:
                try:
                    results.append(scheduler.schedule(spec, consumer, args.project_id,
                                                      args.user_id, timeout=args.timeout))
                except KeyboardInterrupt:
                    return _interrupted(manager.plugins, args, results, store, consumer,
                                        offered.get(consumer))
                except (ConsumerInUse, ConsumerAllocated) as err:
                    return _bad(str(err))
                except exception.ComputePluginsError:
                    # NOTE: the instances placed before hold resources: their
                    # consumers are printed, or nobody could release them.
                    _print(manager.plugins, args, results)
                    raise
    _print(manager.plugins, args, results)
    return EXIT_OK if all(r.placed for r in results) else EXIT_NOT_PLACED


def _tell(offered: dict[str, HostDecision], decision: HostDecision, wait: float) -> None:
    """Before the wait: which consumer, decision and host (stderr)."""
    offered[decision.consumer] = decision
    print("compute-plugins: consumer %s: decision %d offered to host %s; waiting "
          "up to %g s for its agent" % (decision.consumer, decision.id,
                                        printable(decision.host), wait),
          file=sys.stderr, flush=True)


#: What an interrupted schedule left, by the status of the consumer's
#: decision: the end of the one line.
_LEFT = {
    "pending": "its agent may still claim it; `release --consumer {c}` withdraws "
               "it, `schedule --consumer {c}` with the same request waits for "
               "its answer",
    "claimed": "placed; `release --consumer {c}` frees it",
    "releasing": "being released by its agent",
    "rejected": "nothing held",
    "released": "nothing held",
}


def _interrupted(plugins: PluginSet, args: argparse.Namespace,
                 results: list[ScheduleResult], store: HostStateStore, consumer: str,
                 offered: HostDecision | None) -> int:
    """Ctrl-C while ``consumer`` was being scheduled: the instances placed
    before, then one line naming the consumer and its decision's state as
    the store holds it now (the decision offered when the store cannot be
    read); exit 130."""
    decision = offered
    if offered is not None:
        try:
            decision = store.get_decision(offered.id)
        except Exception:  # noqa: BLE001 - interrupted: say what is known
            decision = offered
    if args.format == "json":
        doc = to_json(results)
        doc["interrupted"] = {
            "consumer": consumer,
            "host": decision.host if decision is not None else None,
            "decision": decision.id if decision is not None else None,
            "status": decision.status.value if decision is not None else None}
        common.print_json(doc)
    elif results:
        _print_text(plugins, results)
    if decision is None:
        detail = "consumer %s: no decision made yet, no host offered it" % consumer
    else:
        detail = "consumer %s: decision %d on host %s is %s: %s" % (
            consumer, decision.id, printable(decision.host), decision.status.value,
            _LEFT[decision.status.value].format(c=consumer))
    return common.interrupted(detail)


def _print(plugins: PluginSet, args: argparse.Namespace,
           results: list[ScheduleResult]) -> None:
    if not results:
        return
    if args.format == "json":
        common.print_json(to_json(results))
    else:
        _print_text(plugins, results)


def to_json(results: list[ScheduleResult]) -> dict[str, Any]:
    """``{"instances": [...], "reasons": [...]}`` (the command's JSON)."""
    instances: list[dict[str, Any]] = []
    reasons: list[dict[str, Any]] = []
    for result in results:
        if result.placed:
            decision = result.spec.decision
            instances.append({
                "consumer": result.consumer, "host": decision.host,
                "nodename": decision.nodename,
                "allocations": {rp: dict(res) for rp, res in decision.allocations.items()},
                "assignments": result.spec.to_dict()["decision"]["assignments"]})
            continue
        for host in result.reasons:
            reasons.extend({"consumer": result.consumer, "host": host.host,
                            "plugin": r.plugin, "provider": r.provider,
                            "reason": r.reason} for r in host.reasons)
        if not result.reasons:
            reasons.append({"consumer": result.consumer, "host": None, "plugin": "",
                            "provider": "", "reason": "no host in the host-state "
                            "store (is any compute agent publishing?)"})
    return {"instances": instances, "reasons": reasons}


def _print_text(plugins: PluginSet, results: list[ScheduleResult]) -> None:
    for result in results:
        if result.placed:
            decision = result.spec.decision
            parts = []
            for name, assignment in decision.assignments.items():
                lines = plugins.describe(name, result.spec.requests[name],
                                         assignment)
                parts.append("%s: %s" % (name, "; ".join(lines)))
            common.say("%s: host %s (%d candidate(s), %d fit, %d Placement call(s)): %s"
                  % (result.consumer, decision.host, result.candidates,
                     result.fitting, result.placement_call_count,
                     printable(" | ".join(parts))))
            continue
        common.say("%s: not placed (%d candidate(s) from Placement, %d fit, %d tried)"
              % (result.consumer, result.candidates, result.fitting,
                 len(result.attempts)))
        if not result.reasons:
            common.say("  no host in the host-state store (is any compute agent "
                  "publishing?)")
        for host in result.reasons:
            common.say("  host %s:" % host.host)
            for r in host.reasons:
                common.say("    %s%s" % ("%s: " % r.plugin if r.plugin else "",
                                    printable(r.reason)))
