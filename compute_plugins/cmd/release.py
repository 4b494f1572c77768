"""``compute-plugins release --consumer UUID``: free a consumer's claim.

Asks the host-state store to release the consumer's decision in force
(:func:`compute_plugins.compute.release.request_release`): a pending decision
is released at once (it was never claimed) and its allocations deleted in
Placement (``--placement-url``, ``[placement]`` or the embedded one); a
claimed one becomes ``releasing`` and the
host's agent frees it (ledger, Placement allocations) at its next poll. The
command waits for that up to ``--timeout`` (default ``[compute]
release_timeout``), or returns at once with ``--no-wait``. When the host is
down (its agent's lease in the host-state store expired) it returns at once:
the release stays recorded and the agent frees the consumer when it comes
back.

Exit codes: 0 released (or requested, with ``--no-wait`` or on a host that
is down; or nothing was in force), 1 the consumer is unknown or the agent
did not answer in time, 2 bad usage, or the consumer is moving (a resize or
migration to confirm or revert first) or is the migration consumer of a
move in force.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from typing import TYPE_CHECKING, Any

from compute_plugins.cmd import arguments

if TYPE_CHECKING:
    from oslo_config import cfg

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = arguments.command(
        subparsers, "release", "release a consumer's claim: the host's agent "
        "frees its resources and its Placement allocations",
        uses=("format", "placement_url"),
        unused="the consumer's host is found through Placement")
    parser.add_argument("--consumer", required=True, type=consumer_uuid, metavar="UUID",
                        help="the consumer (instance) uuid")
    parser.add_argument("--timeout", type=arguments.seconds, metavar="S",
                        help="seconds to wait for the host's agent (default: "
                        "[compute] release_timeout)")
    parser.add_argument("--no-wait", action="store_true",
                        help="request the release and return at once")
    parser.set_defaults(func=run)


def consumer_uuid(text: str) -> str:
    """``--consumer``'s type: a uuid, in its canonical form."""
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            "invalid consumer %r: must be a uuid" % text) from None




def run(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    from compute_plugins.compute.release import (
        ReleaseRefused,
        refuse_moved_meanwhile,
        refuse_moving,
        request_release,
    )
    from compute_plugins.hoststate import protocol
    from compute_plugins.hoststate.store import HostStateStore
    from compute_plugins.placement import connect

    consumer = args.consumer
    timeout = conf.compute.release_timeout if args.timeout is None else args.timeout
    wait = 0.0 if args.no_wait else timeout
    with HostStateStore.from_config(conf) as store:
        try:
            refuse_moving(store, consumer)
        except ReleaseRefused as err:
            print("compute-plugins: error: %s" % err, file=sys.stderr)
            return EXIT_USAGE
        active = store.active_decision(consumer)
        if active is not None and \
                protocol.REQUESTER_ON[active.status] is protocol.Move.WITHDRAW:
            # NOTE: no agent claimed it: its allocation is freed here (and
            # should the agent claim it meanwhile, its release is waited
            # for as for any claimed decision).
            with connect.placement_client(conf, args.placement_url) as placement:
                done = request_release(store, consumer, placement, timeout=wait)
        else:
            done = request_release(store, consumer, timeout=wait)
        try:
            refuse_moved_meanwhile(store, done)
        except ReleaseRefused as err:
            print("compute-plugins: error: %s" % err, file=sys.stderr)
            return EXIT_USAGE
    decision = done.decision
    if done.outcome == "unknown":
        return _say(args, done, "consumer %s: no decision was ever made for it"
                    % consumer, EXIT_FAILED)
    assert decision is not None
    if done.outcome == "nothing-in-force":
        return _say(args, done, "consumer %s: nothing in force to release (its "
                    "last decision %d on host %s is %s)"
                    % (consumer, decision.id, decision.host, decision.status.value),
                    EXIT_OK)
    if done.outcome == "released" and done.was is not None \
            and done.was.value == "pending":
        return _say(args, done, "consumer %s: decision %d on host %s was pending: "
                    "released (never claimed)%s"
                    % (consumer, decision.id, decision.host,
                       "; its allocations deleted" if done.allocations_deleted
                       else ""), EXIT_OK)
    if done.outcome == "released":
        return _say(args, done, "consumer %s: released by host %s (decision %d): "
                    "its resources and Placement allocations are free"
                    % (consumer, decision.host, decision.id), EXIT_OK)
    if done.outcome == "host-down":
        return _say(args, done, "consumer %s: host %s is down (its agent's lease "
                    "expired at %s): the release of decision %d is recorded; the "
                    "host frees it when its agent comes back"
                    % (consumer, decision.host, _when(done.lease_expired_at),
                       decision.id), EXIT_OK)
    if args.no_wait:
        return _say(args, done, "consumer %s: release of decision %d requested; "
                    "host %s's agent frees it at its next poll"
                    % (consumer, decision.id, decision.host), EXIT_OK)
    return _say(args, done, "consumer %s: host %s's agent did not free decision "
                "%d within %gs; the release stays requested (is the agent "
                "running?)" % (consumer, decision.host, decision.id, timeout),
                EXIT_FAILED)


def _when(moment: Any) -> str:
    from compute_plugins.hoststate.records import utc_words

    return "?" if moment is None else utc_words(moment)


def _say(args: argparse.Namespace, done: Any, line: str, code: int) -> int:
    from compute_plugins.cmd import common
    from compute_plugins.util.text import printable

    decision = done.decision
    if args.format == "json":
        common.print_json({
            "consumer": done.consumer, "outcome": done.outcome,
            "decision": None if decision is None else decision.id,
            "host": None if decision is None else decision.host,
            "status": None if decision is None else decision.status.value,
        })
    elif code == EXIT_OK:
        common.say(printable(line))
    if code != EXIT_OK:
        print("compute-plugins: error: %s" % printable(line), file=sys.stderr)
    return code
