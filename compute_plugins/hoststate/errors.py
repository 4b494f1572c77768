"""The host-state store's errors: one class per failure a caller handles
differently, each carrying what the caller needs to act."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Optional

from compute_plugins import exception
from compute_plugins.hoststate.records import AgentLease, HostDecision, MoveRecord


class HostStateError(exception.ComputePluginsError):
    """Base class of the host-state store's errors."""


class StoreUnavailable(HostStateError):
    """The database cannot be reached or did not answer (connection refused,
    lock wait timeout, server gone): a later retry may succeed.

    :param url: the database URL, password hidden.
    :param reason: the driver's message.
    """

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__("host-state database %s is unavailable: %s" % (url, reason))


class Disconnected(StoreUnavailable):
    """The connection was lost before the transaction's commit was sent
    (a server restart, a backend ended, a pooled connection closed since
    its last use): nothing of the transaction was committed, and
    :meth:`Database.retrying
    <compute_plugins.hoststate.database.Database.retrying>` runs it once
    more on a fresh connection. A connection lost during the commit is
    :class:`StoreUnavailable` only (whether it committed is unknown)."""


class StoreCorrupt(HostStateError, exception.InputError):
    """The SQLite file is damaged or is not a database (exit 2 on the
    command line): no retry helps, an operator replaces the file.

    :param url: the database URL.
    :param path: the file.
    :param reason: SQLite's message.
    """

    def __init__(self, url: str, path: str, reason: str) -> None:
        self.url = url
        self.path = path
        self.reason = reason
        super().__init__(
            "host-state database file %s is corrupt (%s): stop the agents and "
            "schedulers that use it, move it aside with its -wal and -shm files "
            "(or restore a backup) and restart them: the agents fill a new store "
            "again from their claims ledgers" % (path, reason))


class SchemaVersionMismatch(HostStateError):
    """The database holds another schema version than this code's.

    :param url: the database URL, password hidden.
    :param found: the version found (None: host-state tables without a
        version, an interrupted creation or a foreign schema).
    :param expected: :data:`compute_plugins.hoststate.schema.SCHEMA_VERSION`.
    :param path: the SQLite file, when it is one.
    """

    def __init__(self, url: str, found: Optional[int], expected: int,
                 path: Optional[str] = None) -> None:
        self.url = url
        self.found = found
        self.expected = expected
        self.path = path
        if found is None:
            what = ("has host-state tables but no schema version (an "
                    "interrupted creation, or tables of another program); "
                    "this compute-plugins expects version %d" % expected)
        elif found > expected:
            what = ("has schema version %d, written by a newer compute-plugins; "
                    "this one expects version %d: run the same compute-plugins "
                    "release on every agent and scheduler that shares it, or"
                    % (found, expected))
        else:
            what = ("has schema version %d, written by an older compute-plugins; "
                    "this one expects version %d" % (found, expected))
        # NOTE: the -wal and -shm files too: they belong to the deleted file
        # (SQLite's "how to corrupt" page: a WAL paired with another file).
        drop = ("delete %s with its -wal and -shm files" % path if path
                else "drop the database")
        super().__init__(
            "host-state database %s %s: to start afresh, stop the agents and "
            "schedulers that use it, %s and restart them (the agents publish "
            "their states again; decisions in flight are lost, the agents' "
            "ledgers keep their claims)" % (url, what, drop))


class GenerationConflict(HostStateError):
    """Compare-and-swap failed: the host's generation is not the one the
    writer read. Read the host again and retry from what it holds.

    :param host: the host.
    :param expected: the generation the writer gave.
    :param actual: the generation in the store (0: no such host).
    """

    def __init__(self, host: str, expected: int, actual: int) -> None:
        self.host = host
        self.expected = expected
        self.actual = actual
        super().__init__(
            "host %s: generation conflict, expected %d, the store has %d"
            % (host, expected, actual))


class ProviderConflict(HostStateError):
    """A host published a resource provider that another host published.

    :param uuid: the provider's uuid.
    :param host: the host that tried to publish it.
    :param owner: the host that holds it in the store.
    """

    def __init__(self, uuid: str, host: str, owner: str) -> None:
        self.uuid = uuid
        self.host = host
        self.owner = owner
        super().__init__(
            "host %s cannot publish resource provider %s: host %s published it"
            % (host, uuid, owner))


class DecisionNotFound(HostStateError):
    """No decision with this id (or for this consumer).

    :param key: the decision id or the consumer uuid looked up.
    """

    def __init__(self, key: object) -> None:
        self.key = key
        super().__init__("no decision %s in the host-state store" % (key,))


class DecisionExists(HostStateError):
    """The consumer already has a decision in force (pending, claimed or
    releasing): release or withdraw it first.

    :param decision: that decision.
    """

    def __init__(self, decision: HostDecision) -> None:
        self.decision = decision
        super().__init__(
            "consumer %s already has decision %d on host %s, %s"
            % (decision.consumer, decision.id, decision.host, decision.status))


class DecisionStatusConflict(HostStateError):
    """A move the decision protocol refuses: a decision's status changes
    only from the statuses its transition starts from (compare-and-swap on
    the status, :data:`compute_plugins.hoststate.protocol.TRANSITIONS`),
    and it is in another one, e.g. already claimed by a retry, or withdrawn
    by the scheduler before the agent claimed it.

    :param decision: the decision as the store holds it now.
    :param target: the status the caller asked for.
    :param allowed: the statuses it may come from.
    :param move: the protocol's name of the move (``claim``...), when known.
    """

    def __init__(self, decision: HostDecision, target: str,
                 allowed: Iterable[str], move: Optional[str] = None) -> None:
        self.decision = decision
        self.target = str(target)
        self.allowed = tuple(str(a) for a in allowed)
        self.move = None if move is None else str(move)
        what = ("decision %d (consumer %s, host %s) is %s"
                % (decision.id, decision.consumer, decision.host, decision.status))
        if self.move is None:
            message = "%s: it can become %s only from %s" % (
                what, self.target, " or ".join(self.allowed))
        else:
            message = "%s refused: %s; %s takes a decision to %s only from %s" % (
                self.move, what, self.move, self.target, " or ".join(self.allowed))
        super().__init__(message)


class AnswerTimeout(HostStateError, TimeoutError):
    """The host did not answer a decision in time (no agent running for it,
    or one that is stuck).

    :param consumer: the consumer.
    :param host: the host the decision was addressed to.
    :param timeout: seconds waited.
    :param withdrawn: True when the store withdrew the decision (pending ->
        released), so that a late agent cannot claim it.
    :param unavailable: the database's error when it could not be reached
        at the end of the wait (the host may have answered unseen, or may
        still claim a decision that could not be withdrawn).
    """

    def __init__(self, consumer: str, host: str, timeout: float,
                 withdrawn: bool, unavailable: Optional[str] = None) -> None:
        self.consumer = consumer
        self.host = host
        self.timeout = timeout
        self.withdrawn = withdrawn
        self.unavailable = unavailable
        if unavailable is not None:
            why = "the host-state database is unavailable: %s" % unavailable
        else:
            why = "is its compute agent running?"
        super().__init__(
            "host %s did not answer the decision for consumer %s within %g s "
            "(%s)%s" % (host, consumer, timeout, why,
                        "; the decision was withdrawn" if withdrawn
                        else "; the decision was not withdrawn"))


def _lease_words(lease: AgentLease) -> str:
    return "node %s (%s), lease until %s UTC" % (
        lease.node, lease.holder, lease.expires_at.isoformat(sep=" ", timespec="seconds"))


class HostDown(HostStateError):
    """The host a decision is addressed to is down: its agent's lease
    expired while a scheduler or a requester waited for it (issue 19,
    item 3). Waiting on would wait out the whole timeout for nothing.

    :param decision: the decision as last read (after a scheduler's
        withdrawal: withdrawn, released).
    :param reason: ``host X is down: its agent's lease expired at T``.
    :param expired_at: when the lease expired (naive UTC; None: unknown).
    """

    def __init__(self, decision: HostDecision, reason: str,
                 expired_at: Optional[datetime.datetime] = None) -> None:
        self.decision = decision
        self.host = decision.host
        self.reason = reason
        self.expired_at = expired_at
        super().__init__("%s (decision %d of consumer %s, %s)"
                         % (reason, decision.id, decision.consumer, decision.status.value))


class AgentLeaseHeld(HostStateError, exception.InputError):
    """Another agent holds the host's lease and it has not expired: one
    agent per host (exit 2 on the command line).

    :param lease: the lease in force.
    """

    def __init__(self, lease: AgentLease) -> None:
        self.lease = lease
        super().__init__(
            "host %s is served by another compute agent: %s; stop that agent "
            "(if it crashed, this one can start once its lease expired: "
            "[compute] agent_lease_duration)" % (lease.host, _lease_words(lease)))


class HostNameTaken(HostStateError, exception.InputError):
    """A host cannot be renamed to a name another host has in the store
    (exit 2 on the command line)."""


class Fenced(HostStateError):
    """This agent's lease is no longer the host's (another agent took it
    over after it expired, or the store has none): its writes are refused
    and it must stop.

    :param host: the host.
    :param epoch: the token the writer carried.
    :param current: the lease in force now (None: the store has none).
    """

    def __init__(self, host: str, epoch: int, current: Optional[AgentLease]) -> None:
        self.host = host
        self.epoch = epoch
        self.current = current
        if current is None:
            why = ("the host-state store holds no lease for it (a new or "
                   "recreated store)")
        else:
            why = "another agent took it over: %s, epoch %d" % (
                _lease_words(current), current.epoch)
        super().__init__("host %s: this compute agent's lease (epoch %d) is "
                         "lost: %s; its writes are refused: the agent stops"
                         % (host, epoch, why))

    @property
    def lost(self) -> bool:
        """True when the store has no lease at all (it may be taken again)."""
        return self.current is None


class MoveExists(HostStateError):
    """The instance has a move in force already (one at a time).

    :param move: that move.
    """

    def __init__(self, move: MoveRecord) -> None:
        self.move = move
        super().__init__("consumer %s is moving (%s): confirm or revert it first"
                         % (move.consumer, move.describe()))


class MoveStatusConflict(HostStateError):
    """A move the move protocol refuses (:data:`compute_plugins.hoststate.
    protocol.MOVE_TRANSITIONS`): the move's status is not one its step
    starts from.

    :param move: the move as the store holds it now.
    :param step: the step's name.
    :param allowed: the statuses it starts from.
    """

    def __init__(self, move: MoveRecord, step: str, allowed: Iterable[str]) -> None:
        self.move = move
        self.step = step
        self.allowed = tuple(str(a) for a in allowed)
        super().__init__("%s refused: the %s of consumer %s is %s; %s starts only "
                         "from %s" % (step, move.kind, move.consumer, move.status.value,
                                      step, " or ".join(self.allowed)))
