"""The host-state store's errors: one class per failure a caller handles
differently, each carrying what the caller needs to act."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Optional

from compute_plugins import exception

if TYPE_CHECKING:
    from compute_plugins.hoststate.store import HostDecision


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
        drop = "delete %s" % path if path else "drop the database"
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
    """A decision's status changes only from given statuses (compare-and-swap
    on the status): it is in another one, e.g. already claimed by a retry, or
    withdrawn by the scheduler before the agent claimed it.

    :param decision: the decision as the store holds it now.
    :param target: the status the caller asked for.
    :param allowed: the statuses it may come from.
    """

    def __init__(self, decision: HostDecision, target: str,
                 allowed: Iterable[str]) -> None:
        self.decision = decision
        self.target = target
        self.allowed = tuple(allowed)
        super().__init__(
            "decision %d (consumer %s, host %s) is %s: it can become %s only "
            "from %s" % (decision.id, decision.consumer, decision.host,
                         decision.status, target, " or ".join(self.allowed)))


class AnswerTimeout(HostStateError, TimeoutError):
    """The host did not answer a decision in time (no agent running for it,
    or one that is stuck).

    :param consumer: the consumer.
    :param host: the host the decision was addressed to.
    :param timeout: seconds waited.
    :param withdrawn: True when the store withdrew the decision (pending ->
        released), so that a late agent cannot claim it.
    """

    def __init__(self, consumer: str, host: str, timeout: float,
                 withdrawn: bool) -> None:
        self.consumer = consumer
        self.host = host
        self.timeout = timeout
        self.withdrawn = withdrawn
        super().__init__(
            "host %s did not answer the decision for consumer %s within %g s "
            "(is its compute agent running?)%s"
            % (host, consumer, timeout,
               "; the decision was withdrawn" if withdrawn else ""))
