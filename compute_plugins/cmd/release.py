"""``compute-plugins release --consumer UUID``: free a consumer's claim.

Asks the host-state store to release the consumer's decision in force
(:meth:`HostStateStore.request_release`): a pending decision is released at
once (it was never claimed); a claimed one becomes ``releasing`` and the
host's agent frees it (ledger, Placement allocations) at its next poll. The
command waits for that up to ``--timeout`` (default ``[compute]
release_timeout``), or returns at once with ``--no-wait``.

Exit codes: 0 released (or requested, with ``--no-wait``; or nothing was in
force), 1 the consumer is unknown or the agent did not answer in time, 2 bad
usage.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import uuid
from typing import Any, Optional

from oslo_config import cfg

EXIT_OK, EXIT_FAILED = 0, 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "release", help="release a consumer's claim: the host's agent frees "
        "its resources and its Placement allocations")
    parser.add_argument("--consumer", required=True, type=_consumer, metavar="UUID",
                        help="the consumer (instance) uuid")
    parser.add_argument("--timeout", type=_seconds, metavar="S",
                        help="seconds to wait for the host's agent (default: "
                        "[compute] release_timeout)")
    parser.add_argument("--no-wait", action="store_true",
                        help="request the release and return at once")
    parser.set_defaults(func=run)


def _consumer(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            "invalid consumer %r: must be a uuid" % text) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            "invalid value %r: must be a number of seconds" % text) from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            "invalid value %r: must be a finite number of seconds >= 0" % text)
    return value


def wait_released(store: Any, decision_id: int, timeout: float,
                  poll_interval: float = 0.05, max_poll_interval: float = 1.0) -> Any:
    """The decision once released, or as it is after ``timeout`` seconds
    (polls with back-off from ``poll_interval`` to ``max_poll_interval``)."""
    from compute_plugins.hoststate.store import DecisionStatus

    deadline = time.monotonic() + timeout
    delay = poll_interval
    decision = store.get_decision(decision_id)
    while decision.status != DecisionStatus.RELEASED:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(delay, left))
        delay = min(delay * 2, max_poll_interval)
        decision = store.get_decision(decision_id)
    return decision


def run(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    from compute_plugins.hoststate.store import DecisionStatus, HostStateStore

    consumer = args.consumer
    timeout = conf.compute.release_timeout if args.timeout is None else args.timeout
    with HostStateStore.from_config(conf) as store:
        before = store.active_decision(consumer)
        decision = store.request_release(consumer)
        if decision is None:
            latest = store.latest_decision(consumer)
            if latest is None:
                return _say(args, consumer, None, "unknown",
                            "consumer %s: no decision was ever made for it" % consumer,
                            EXIT_FAILED)
            return _say(args, consumer, latest, "nothing-in-force",
                        "consumer %s: nothing in force to release (its last "
                        "decision %d on host %s is %s)"
                        % (consumer, latest.id, latest.host, latest.status.value),
                        EXIT_OK)
        if decision.status == DecisionStatus.RELEASED:
            # NOTE: it was pending: never claimed, released at once.
            was = before.status.value if before is not None else "pending"
            return _say(args, consumer, decision, "released",
                        "consumer %s: decision %d on host %s was %s: released "
                        "(never claimed)" % (consumer, decision.id, decision.host, was),
                        EXIT_OK)
        if args.no_wait:
            return _say(args, consumer, decision, "releasing",
                        "consumer %s: release of decision %d requested; host "
                        "%s's agent frees it at its next poll"
                        % (consumer, decision.id, decision.host), EXIT_OK)
        done = wait_released(store, decision.id, timeout)
    if done.status == DecisionStatus.RELEASED:
        return _say(args, consumer, done, "released",
                    "consumer %s: released by host %s (decision %d): its "
                    "resources and Placement allocations are free"
                    % (consumer, done.host, done.id), EXIT_OK)
    return _say(args, consumer, done, "releasing",
                "consumer %s: host %s's agent did not free decision %d within "
                "%gs; the release stays requested (is the agent running?)"
                % (consumer, done.host, done.id, timeout), EXIT_FAILED)


def _say(args: argparse.Namespace, consumer: str, decision: Optional[Any],
         outcome: str, line: str, code: int) -> int:
    from compute_plugins.cmd import common
    from compute_plugins.text import printable

    if args.format == "json":
        common.print_json({
            "consumer": consumer, "outcome": outcome,
            "decision": None if decision is None else decision.id,
            "host": None if decision is None else decision.host,
            "status": None if decision is None else decision.status.value,
        })
    elif code == EXIT_OK:
        print(printable(line))
    if code != EXIT_OK:
        print("compute-plugins: error: %s" % printable(line), file=sys.stderr)
    return code
