"""The transport between the scheduler and the hosts' agents: what they
ask of it, whatever carries it.

Two channels:

- :class:`HostPublication`: each agent publishes its host (every plugin's
  state, its node name and providers) under a generation written
  compare-and-swap; schedulers read hosts and generations;
- :class:`DecisionQueue`: schedulers address decisions to hosts, agents
  answer them; a decision's status changes only by compare-and-swap.

The transport only stores, swaps and waits: which moves are legal and what
each side does on each status is the decision protocol's
(:mod:`compute_plugins.hoststate.protocol`), which drives any
:class:`DecisionQueue`. The SQL store
(:class:`compute_plugins.hoststate.store.HostStateStore`: SQLite,
PostgreSQL, MySQL) implements both channels; it waits on PostgreSQL's
notifications where it can (:mod:`compute_plugins.hoststate.notify`) and
polls elsewhere. A transport that pushes changes implements the same
methods and waits on its notifications, and wakes idle agents through
:class:`HostWakeups`.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Optional, Protocol, runtime_checkable

from compute_plugins.hoststate.records import (
    AgentLease,
    ChangeMark,
    DecisionStatus,
    HostDecision,
    HostDisabled,
    HostSnapshot,
    HostStatus,
    MoveRecord,
    PublishResult,
    StatusChanges,
)
from compute_plugins.plugin.contract import Rejection


class HostPublication(Protocol):
    """Hosts as their agents published them."""

    def publish(self, host: str, states: Mapping[str, Mapping[str, Any]],
                expected_generation: int, *, nodename: Optional[str] = None,
                providers: Optional[Mapping[str, str]] = None) -> PublishResult:
        """Replace ``host``'s published states, compare-and-swap on its
        generation (0: it never published); nothing is written when nothing
        changed.

        :raises GenerationConflict: the host is at another generation.
        :raises ProviderConflict: a provider uuid another host published.
        """

    def get_host(self, host: str) -> Optional[HostSnapshot]:
        """``host`` as last published (None: it never published)."""

    def get_hosts(self, hosts: Optional[Iterable[str]] = None) -> dict[str, HostSnapshot]:
        """Several hosts (None: every host) in one consistent read."""

    def generations(self, hosts: Optional[Iterable[str]] = None) -> dict[str, int]:
        """host -> generation (None: every host), without the states."""

    def host_statuses(self, hosts: Optional[Iterable[str]] = None) -> dict[str, HostStatus]:
        """host -> its generation and its agent's lease expiry (None: every
        host), in one read: which hosts changed, which are down."""

    def hosts_for_providers(self, uuids: Iterable[str]) -> dict[str, str]:
        """provider uuid -> the host that published it (unknown ones absent)."""

    def disabled_hosts(self, hosts: Optional[Iterable[str]] = None) -> dict[str, HostDisabled]:
        """host -> why an operator disabled it, for the disabled ones of
        ``hosts`` (None: every disabled host)."""


class DecisionQueue(Protocol):
    """Decisions addressed to hosts (the protocol's moves:
    :mod:`compute_plugins.hoststate.protocol`)."""

    def submit_decision(self, consumer: str, host: str, spec: str) -> HostDecision:
        """Add a pending decision for ``consumer`` addressed to ``host``.

        :param spec: the RequestSpec with its decision, ``to_json()``.
        :raises DecisionExists: the consumer has a decision in force.
        """

    def record_cancel(self, consumer: str, host: str, spec: str,
                      reasons: Sequence[Rejection] = ()) -> HostDecision:
        """Record a decision of ``consumer`` that is released already (the
        protocol's ``cancel``: a release asked while none was in force),
        whatever else the consumer has; never in force."""

    def get_decision(self, decision_id: int) -> HostDecision:
        """:raises DecisionNotFound: no decision with this id."""

    def active_decision(self, consumer: str) -> Optional[HostDecision]:
        """The consumer's decision in force (pending, claimed, releasing)."""

    def latest_decision(self, consumer: str) -> Optional[HostDecision]:
        """The consumer's most recent decision, whatever its status."""

    def list_decisions(self, host: str,
                       status: DecisionStatus | str | Iterable[DecisionStatus | str]
                       = DecisionStatus.PENDING,
                       limit: Optional[int] = None) -> list[HostDecision]:
        """The decisions addressed to ``host`` in ``status`` (or in any of
        several statuses: one read), oldest first."""

    def swap_status(self, decision_id: int, sources: Collection[DecisionStatus],
                    target: DecisionStatus, reasons: Sequence[Rejection] = (),
                    *, move: Optional[str] = None) -> HostDecision:
        """Move the decision to ``target`` if, and only if, its status is one
        of ``sources`` (atomically), recording ``reasons`` when given.

        :param move: the protocol's name of the move, for the error.
        :returns: the decision as it is now.
        :raises DecisionNotFound: no decision with this id.
        :raises DecisionStatusConflict: its status is not one of ``sources``.
        """

    def wait_for_change(self, decision: HostDecision, timeout: float, *,
                        poll_interval: float = 0.05,
                        max_poll_interval: float = 1.0,
                        until_host_down: bool = False) -> HostDecision:
        """The decision once its status is not ``decision.status`` any more,
        or as last seen after ``timeout`` seconds.

        :param poll_interval: first delay of a transport that polls (> 0),
            doubling up to ``max_poll_interval``; one that is told of
            changes ignores both.
        :param until_host_down: stop when the decision's host is down (its
            agent's lease expired), checked at once and then while waiting.
        :raises StoreUnavailable: the transport could not be reached at the
            deadline (it is tried again until then).
        :raises HostDown: ``until_host_down`` and the host is down while the
            decision is unchanged.
        """

class HostStateTransport(HostPublication, DecisionQueue, Protocol):
    """Both channels: what a scheduler and a compute agent talk to."""


@runtime_checkable
class Wakeup(Protocol):
    """One waiter's subscription to pushed changes."""

    @property
    def live(self) -> bool:
        """Whether changes are pushed now (False: the channel is down,
        poll meanwhile)."""

    @property
    def safety_poll_interval(self) -> float:
        """Seconds between the waiter's reads of the transport while
        nothing is pushed (a lost notification)."""

    def wait(self, timeout: float) -> bool:
        """True once something changed (or may have: the channel
        reconnected) since the last wait; False after ``timeout`` seconds."""

    def on_wake(self, callback: Optional[Callable[[], None]]) -> None:
        """Also call ``callback`` (it must not block) at every wake-up, and
        at once when one is pending (None: no callback)."""

    def close(self) -> None:
        """Stop listening."""


@runtime_checkable
class HostWakeups(Protocol):
    """What a transport that pushes changes offers the agents: a wake-up
    when something the host's agent acts on changed (a decision addressed
    to the host changed by someone else, the host disabled or enabled)."""

    def host_changes(self, host: str) -> Optional[Wakeup]:
        """``host``'s subscription (None: nothing is pushed, poll)."""


@runtime_checkable
class AgentLeases(Protocol):
    """What a transport that keeps one agent per host offers the agents
    (the SQL store: :mod:`compute_plugins.hoststate.agents`). An agent on a
    transport without it runs unfenced."""

    def store_id(self) -> str:
        """The store's uuid (another one: a new or recreated store)."""

    def acquire_lease(self, host: str, node: str, holder: str,
                      duration: float) -> AgentLease:
        """:raises AgentLeaseHeld: another node's lease is in force."""

    def renew_lease(self, lease: AgentLease, duration: float) -> AgentLease:
        """:raises Fenced: it is not the host's lease any more."""

    def end_lease(self, lease: AgentLease) -> bool:
        """Let ``lease`` lapse now (its agent stops cleanly)."""

    def fenced(self, lease: AgentLease) -> Any:
        """This transport, every write carrying ``lease``'s token."""

    def restore_claim(self, consumer: str, host: str, spec: str) -> HostDecision:
        """A claimed decision the ledger holds and the store lacks.

        :raises DecisionExists: the consumer has a decision in force.
        """


@runtime_checkable
class HostStatusFeed(Protocol):
    """What a transport that numbers its changes offers a long-running
    scheduler (the SQL store: :mod:`compute_plugins.hoststate.changes`):
    the hosts changed since its last read and the down ones, not every
    host's generation and lease per decision. A scheduler on a transport
    without it reads every host
    (:meth:`HostPublication.host_statuses`)."""

    def host_status_changes(self, since: Optional[ChangeMark],
                            now: Optional[datetime.datetime] = None) -> StatusChanges:
        """The hosts written since ``since`` (None: every host) and the
        leases expired at ``now`` (naive UTC; default: now), in one read."""


@runtime_checkable
class HostMoves(Protocol):
    """What a transport that records the moves of instances offers the
    agents (the SQL store: :mod:`compute_plugins.hoststate.moves`): they
    finish or undo the moves their commands left
    (:mod:`compute_plugins.compute.moves`). An agent on a transport
    without it only executes decisions."""

    def get_move(self, migration: str) -> Optional[MoveRecord]:
        """The move whose migration consumer is ``migration``."""

    def moves_in_force(self, host: Optional[str] = None) -> list[MoveRecord]:
        """Every move in force (``host``: its source or destination)."""


__all__ = ["AgentLeases", "DecisionQueue", "HostMoves", "HostPublication",
           "HostStateTransport", "HostStatusFeed", "HostWakeups", "Wakeup"]
