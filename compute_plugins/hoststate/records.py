"""What the host-state channel carries, whatever its transport: a host as
it published itself, and a decision addressed to a host with its status.

Plain values (no database, no protocol logic), so that the errors, the
decision protocol (:mod:`compute_plugins.hoststate.protocol`) and every
transport (:mod:`compute_plugins.hoststate.transport`) can share them
without importing each other.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Iterable
from typing import Any, Optional

from compute_plugins.plugin.contract import Rejection
from compute_plugins.request.types import FrozenMap


class DecisionStatus(enum.StrEnum):
    """Where a decision addressed to a host stands (the moves between them:
    :data:`compute_plugins.hoststate.protocol.TRANSITIONS`)."""

    PENDING = "pending"
    CLAIMED = "claimed"
    REJECTED = "rejected"
    RELEASING = "releasing"
    RELEASED = "released"


#: Statuses of a decision in force: its consumer cannot get another.
ACTIVE = frozenset({DecisionStatus.PENDING, DecisionStatus.CLAIMED,
                    DecisionStatus.RELEASING})


def statuses(status: DecisionStatus | str | Iterable[DecisionStatus | str]
             ) -> list[DecisionStatus]:
    """One status or several (a list, a set) as a list of statuses: what
    :meth:`~compute_plugins.hoststate.transport.DecisionQueue.list_decisions`
    takes (an agent reads its pending and releasing decisions in one read).

    :raises ValueError: not a decision status.
    """
    if isinstance(status, str):
        return [DecisionStatus(status)]
    return [DecisionStatus(s) for s in status]


@dataclasses.dataclass(frozen=True)
class HostSnapshot:
    """One host as the store holds it, read in one transaction.

    :param host: the compute host (service host name).
    :param generation: bumped by every write of this host (>= 1).
    :param nodename: its node name (the root provider's name).
    :param providers: its resource providers: uuid -> name.
    :param states: plugin name -> the document ``encode_state`` made
        (``{"plugin", "version", "state"}``), a fresh copy per read.
    :param updated_at: when it was last written (naive UTC).
    """

    host: str
    generation: int
    nodename: str
    providers: FrozenMap[str, str]
    states: FrozenMap[str, dict[str, Any]]
    updated_at: datetime.datetime


@dataclasses.dataclass(frozen=True)
class PublishResult:
    """What a host's publish did.

    :param generation: the host's generation now (the one to give next).
    :param written: False when nothing changed: nothing was written and the
        generation is the one given.
    """

    generation: int
    written: bool


@dataclasses.dataclass(frozen=True)
class HostDecision:
    """A decision addressed to a host.

    :param id: its id in the store (increasing: older decisions have
        smaller ids).
    :param consumer: the consumer (instance) uuid.
    :param host: the host it is addressed to.
    :param spec: the serialised RequestSpec carrying the decision
        (``RequestSpec.to_json()``), as the scheduler wrote it.
    :param status: see :class:`DecisionStatus`.
    :param reasons: why the host rejected it (status rejected), else ().
    :param created_at: when the scheduler wrote it (naive UTC).
    :param updated_at: when its status last changed (naive UTC).
    """

    id: int
    consumer: str
    host: str
    spec: str
    status: DecisionStatus
    reasons: tuple[Rejection, ...]
    created_at: datetime.datetime
    updated_at: datetime.datetime

    @property
    def answered(self) -> bool:
        """True once the host answered (or the decision was withdrawn)."""
        return self.status != DecisionStatus.PENDING


@dataclasses.dataclass(frozen=True)
class AgentLease:
    """The lease of the agent that serves a host (one agent per host).

    :param host: the host.
    :param epoch: the fencing token: bumped by every acquisition, so that
        the writes of an agent whose lease was taken over are refused.
    :param node: the holder's node uuid (its state directory's identity).
    :param holder: the holder in words (pid and machine).
    :param expires_at: when it lapses unless renewed (naive UTC).
    """

    host: str
    epoch: int
    node: str
    holder: str
    expires_at: datetime.datetime


@dataclasses.dataclass(frozen=True)
class HostDisabled:
    """A host an operator disabled (``compute-plugins host disable``): no
    new decision goes to it; its instances stay.

    :param host: the host.
    :param reason: the operator's text ("" when none was given).
    :param by: who disabled it (user@machine of the command).
    :param at: when (naive UTC).
    :param kind: who fenced it: ``operator`` (``host disable``: only ``host
        enable`` ends it) or ``evacuated`` (``evacuate``: lifted by the
        host's agent once it is back and reconciled).
    """

    host: str
    reason: str
    by: str
    at: datetime.datetime
    kind: str = "operator"

    def describe(self) -> str:
        """``host X is disabled: REASON`` (what schedule says of it)."""
        return "host %s is disabled%s" % (
            self.host, ": %s" % self.reason if self.reason else " (no reason given)")

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "reason": self.reason, "by": self.by,
                "at": self.at.isoformat() + "Z", "kind": self.kind}


def utc_words(when: datetime.datetime) -> str:
    """A naive UTC time as people read it in a message (to the second)."""
    return "%s UTC" % when.isoformat(sep=" ", timespec="seconds")


@dataclasses.dataclass(frozen=True)
class HostStatus:
    """What a scheduler reads of a host before it reads its states: its
    generation and whether its agent is alive (issue 19, item 3).

    :param host: the host.
    :param generation: its published generation.
    :param lease_expires_at: when its agent's lease lapses unless renewed
        (naive UTC); None when no agent ever took one (a host published by
        a tool, or before the leases existed): such a host is not judged.
    """

    host: str
    generation: int
    lease_expires_at: datetime.datetime | None

    def down(self, now: datetime.datetime) -> bool:
        """Whether its agent's lease expired at ``now`` (naive UTC): the
        agent stopped renewing it (stopped, crashed, hangs, cut off)."""
        return self.lease_expires_at is not None and self.lease_expires_at <= now

    def down_reason(self) -> str:
        """Why the host is down, one line (valid when :meth:`down`)."""
        return down_reason(self.host, self.lease_expires_at)


@dataclasses.dataclass(frozen=True)
class ChangeMark:
    """Where a reader of the hosts' changes stands: the store's change
    counter as it read it (:data:`compute_plugins.hoststate.schema.changes`).

    :param number: the last change number read: every write of a host's
        row numbered up to it was seen.
    :param removals: the deletions of host rows counted then (another
        count: a host's row was deleted since, read every host again).
    :param store: the store's identity then (``hoststate_store``'s uuid,
        made with the store; None: an older store that has none yet):
        another one is another store (recreated under the reader, its
        counter maybe past ``number`` already), read every host again.
    """

    number: int
    removals: int
    store: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class StatusChanges:
    """What changed of the hosts since a reader's :class:`ChangeMark`, and
    which are down now, read in one snapshot
    (:meth:`~compute_plugins.hoststate.transport.HostStatusFeed.host_status_changes`).

    :param mark: where the reader stands now (give it to the next read).
    :param full: every host was read (no mark given, or the store's counter
        is not the one the mark was read from: a host removed, a store
        restored or recreated): ``generations`` replaces what the reader
        held; else it updates it.
    :param generations: host -> generation, of the hosts written since the
        mark (every host when ``full``).
    :param expired: host -> its lease's expiry, of every lease expired at
        the time asked (whether its host published or not): the down hosts.
    :param providers: host -> the uuids of the resource providers it
        published (sorted), of every host in ``generations``: a host's
        providers change only with its generation, so a reader that keeps
        them knows which host published a provider without asking the
        store per provider (a scheduler's
        :meth:`~compute_plugins.scheduler.liveness.KeptLiveness.owners`).
        None: the feed does not say (one written before they were part
        of it): such a reader asks the store, never takes every provider
        for no host's.
    """

    mark: ChangeMark
    full: bool
    generations: FrozenMap[str, int]
    expired: FrozenMap[str, datetime.datetime]
    providers: Optional[FrozenMap[str, tuple[str, ...]]] = None


def down_reason(host: str, expired_at: datetime.datetime | None) -> str:
    """``host X is down: its agent's lease expired at T``."""
    return "host %s is down: its agent's lease expired at %s" % (
        host, "?" if expired_at is None else utc_words(expired_at))


class MoveStatus(enum.StrEnum):
    """Where a move of an instance between hosts stands (the moves between
    them: :data:`compute_plugins.hoststate.protocol.MOVE_TRANSITIONS`)."""

    #: Recorded; Placement not written yet.
    PREPARING = "preparing"
    #: The source's allocation and claim belong to the migration consumer.
    HANDED_OVER = "handed-over"
    #: The destination claimed: nova's ``VERIFY_RESIZE``, "resized, to confirm".
    TO_CONFIRM = "to-confirm"
    CONFIRMING = "confirming"
    REVERTING = "reverting"
    #: Final: the source freed, the instance on the destination.
    CONFIRMED = "confirmed"
    #: Final: the destination freed, the instance back on its source claim.
    REVERTED = "reverted"
    #: Final: no host took it; the instance kept its source claim.
    ROLLED_BACK = "rolled-back"


#: Statuses of a move in force: its instance cannot start another.
MOVE_ACTIVE = frozenset({MoveStatus.PREPARING, MoveStatus.HANDED_OVER,
                         MoveStatus.TO_CONFIRM, MoveStatus.CONFIRMING,
                         MoveStatus.REVERTING})


@dataclasses.dataclass(frozen=True)
class MoveRecord:
    """A move of an instance (resize, migration) as the store holds it.

    :param id: its id in the store.
    :param migration: the migration consumer: it holds the source's
        allocation and claim while the move is in force.
    :param consumer: the instance.
    :param kind: ``resize``, ``migrate``, ``live-migrate`` or ``evacuate``.
    :param source: the host it leaves.
    :param dest: the host that claimed it (None until one did).
    :param status: see :class:`MoveStatus`.
    :param source_decision: the instance's claim on the source.
    :param dest_decision: the destination's claim (None until made).
    :param spec: the move's RequestSpec (``to_json()``).
    :param reasons: why no host took it (rolled back), else ().
    :param created_at: when it started (naive UTC).
    :param updated_at: when its status last changed (naive UTC).
    """

    id: int
    migration: str
    consumer: str
    kind: str
    source: str
    dest: str | None
    status: MoveStatus
    source_decision: int
    dest_decision: int | None
    spec: str
    reasons: tuple[Rejection, ...]
    created_at: datetime.datetime
    updated_at: datetime.datetime

    @property
    def in_force(self) -> bool:
        return self.status in MOVE_ACTIVE

    def describe(self) -> str:
        """``resize from host S to host D (to-confirm)``."""
        return "%s from host %s%s (%s)" % (
            self.kind, self.source, " to host %s" % self.dest if self.dest else "",
            self.status.value)


__all__ = ["ACTIVE", "MOVE_ACTIVE", "AgentLease", "ChangeMark", "DecisionStatus", "HostDecision",
           "HostDisabled", "HostSnapshot", "HostStatus", "MoveRecord", "MoveStatus",
           "PublishResult", "StatusChanges", "down_reason", "statuses", "utc_words"]
