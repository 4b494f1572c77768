"""Asking for a consumer's release, and waiting for it.

The requester's side of a release (``compute-plugins release``, an
operator's tool; :func:`compute_plugins.hoststate.protocol.request_release`):
a pending decision is withdrawn at once (no agent claimed it, so its
allocations are deleted here); a claimed one becomes ``releasing`` and its
host's agent frees it (:meth:`compute_plugins.compute.claims.Claims.release`),
which this waits for, up to a timeout. When the host is down (its agent's
lease in the store expired, issue 19 item 3) nothing is waited for: the
release stays recorded (releasing) and the agent executes it when it comes
back.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from typing import Optional

from compute_plugins import exception
from compute_plugins.hoststate import errors, protocol
from compute_plugins.hoststate.records import DecisionStatus, HostDecision
from compute_plugins.hoststate.transport import DecisionQueue
from compute_plugins.placement import client as pclient


@dataclasses.dataclass(frozen=True)
class ReleaseOutcome:
    """What :func:`request_release` did for a consumer.

    :param consumer: the consumer.
    :param outcome: ``released`` (by the agent, or at once when it was
        pending), ``releasing`` (requested, the agent has not freed it yet),
        ``host-down`` (requested, and the host is down: its agent frees it
        when it comes back), ``nothing-in-force`` (its last decision was
        answered already) or ``unknown`` (no decision was ever made for it).
    :param decision: its decision as it is now (None when unknown).
    :param was: the decision's status before the request (None when none
        was in force).
    :param allocations_deleted: a pending decision's allocations were
        deleted in Placement here (its agent never claimed it).
    :param lease_expired_at: ``host-down``: when the host's agent lease
        expired (naive UTC).
    """

    consumer: str
    outcome: str
    decision: Optional[HostDecision]
    was: Optional[DecisionStatus] = None
    allocations_deleted: bool = False
    lease_expired_at: Optional[datetime.datetime] = None


class ReleaseRefused(exception.ComputePluginsError):
    """A release refused before anything changed (one line): the consumer
    is moving, or is the migration consumer of a move in force."""


def refuse_moving(store: DecisionQueue, consumer: str) -> None:
    """The requester's check before a release of ``consumer`` (``release``
    and :meth:`~compute_plugins.scheduler.selection.Scheduler.release`):
    a moving instance, or the migration consumer of a move in force (its
    source claim), is freed by the move's confirm or revert, never behind
    its back (a revert would then give nothing back). :func:`request_release`
    itself does not check: the moves free exactly these consumers through it.

    :raises ReleaseRefused: it is (nothing changed).
    """
    active_move = getattr(store, "active_move", None)
    get_move = getattr(store, "get_move", None)
    if active_move is None or get_move is None:
        return      # NOTE: a transport without moves (nothing moves there)
    moving = active_move(consumer)
    if moving is not None:
        raise ReleaseRefused("consumer %s is moving (%s): confirm or revert it first"
                             % (consumer, moving.describe()))
    handed = get_move(consumer)
    if handed is not None and handed.in_force:
        raise ReleaseRefused("consumer %s is the migration consumer of a move in force "
                             "(%s): confirm or revert it"
                             % (consumer, handed.describe()))


def refuse_moved_meanwhile(store: DecisionQueue, done: ReleaseOutcome) -> None:
    """After :func:`request_release` found nothing of the consumer in force:
    a move that started since :func:`refuse_moving`'s check (its hand-over
    re-keyed the instance's claim to the migration consumer) is refused
    as a moving consumer's, never reported as "nothing to release".

    :raises ReleaseRefused: it is moving now (its release did nothing).
    """
    if done.outcome in ("unknown", "nothing-in-force"):
        refuse_moving(store, done.consumer)


def _released(decision: HostDecision) -> bool:
    return decision.status == DecisionStatus.RELEASED


def _cancel(store: DecisionQueue, consumer: str
            ) -> tuple[Optional[HostDecision], Optional[DecisionStatus]]:
    """Nothing in force: a scheduler may still be placing the consumer
    (between a rejection and its next offer). A cancel is recorded
    (:func:`compute_plugins.hoststate.protocol.cancel`) so that it places
    it nowhere; a decision it submitted meanwhile is released as any.

    :returns: the consumer's decision in force, released as asked (a
        scheduler's submit that landed just before the cancel), and its
        status before; else ``(None, None)``.
    """
    protocol.cancel(store, consumer)
    active = store.active_decision(consumer)
    if active is None:
        return None, None
    return protocol.request_release(store, consumer, active), active.status


def request_release(store: DecisionQueue, consumer: str,
                    placement: Optional[pclient.PlacementClient] = None,
                    timeout: float = 0.0,
                    poll_interval: float = 0.05,
                    max_poll_interval: float = 1.0) -> ReleaseOutcome:
    """Release ``consumer``: a pending decision at once (and its
    allocations in Placement, when ``placement`` is given: no agent claimed
    it), a claimed one by its host's agent, waited for up to ``timeout``
    seconds (0: return once requested).

    :param store: the decision queue (the host-state store).
    :param poll_interval: see
        :meth:`~compute_plugins.hoststate.transport.DecisionQueue.wait_for_change`.
    :raises PlacementError: deleting a pending decision's allocations
        failed (other than 404; the decision is released).
    """
    before = store.active_decision(consumer)
    # NOTE: nothing in force now, or a decision submitted since: the cancel
    # below reads it again (one read less per release).
    decision = protocol.request_release(store, consumer, before)
    if decision is None:
        latest = store.latest_decision(consumer)
        if latest is None:
            return ReleaseOutcome(consumer, "unknown", None)
        decision, was = _cancel(store, consumer)
        if decision is None:
            return ReleaseOutcome(consumer, "nothing-in-force", latest)
    else:
        was = before.status if before is not None else None
    if _released(decision):
        deleted = placement is not None and placement.delete_allocations(consumer)
        return ReleaseOutcome(consumer, "released", decision, was, deleted)
    deadline = time.monotonic() + timeout
    try:
        # NOTE: the host's liveness is read at once, even without a wait: a
        # host that is down frees nothing before its agent comes back.
        decision = store.wait_for_change(decision, timeout, poll_interval=poll_interval,
                                         max_poll_interval=max_poll_interval,
                                         until_host_down=True)
        while not _released(decision):
            left = deadline - time.monotonic()
            if left <= 0:
                return ReleaseOutcome(consumer, "releasing", decision, was)
            # NOTE: releasing moves only to released (the protocol's table).
            decision = store.wait_for_change(decision, left, poll_interval=poll_interval,
                                             max_poll_interval=max_poll_interval,
                                             until_host_down=True)
    except errors.HostDown as down:
        return ReleaseOutcome(consumer, "host-down", down.decision, was,
                              lease_expired_at=down.expired_at)
    return ReleaseOutcome(consumer, "released", decision, was)
