"""The decision protocol: how a scheduler and a host's agent agree that a
consumer is placed on a host.

The scheduler decides on the state the host published; the host's agent
verifies that decision on its live state and executes it, or rejects it
(the host changed since). They talk through a decision queue, any
:class:`~compute_plugins.hoststate.transport.DecisionQueue`: a decision
has a status, and only the moves of :data:`TRANSITIONS` change it, each one
compare-and-swap (two sides racing on one decision: one wins, the other
gets :class:`~compute_plugins.hoststate.errors.DecisionStatusConflict`)::

    move             made by               from                 to
    submit           scheduler             (none in force)      pending
    claim            agent                 pending              claimed
    reject           agent                 pending              rejected
    withdraw         scheduler, requester  pending              released
    withdraw-down    scheduler             pending              released
    request-release  requester             claimed              releasing
    release          agent                 claimed, releasing   released
    cancel           requester             (none in force)      released
    expire           auditor               pending              released

Every other move is refused, naming the move, the status and the statuses
the move starts from. Rejected and released are final: the consumer may
get a new decision (one in force at a time: pending, claimed, releasing).

What each side does on each status:

- **scheduler** (:func:`offer`): after ``PUT /allocations`` it submits the
  decision and waits for the answer (:func:`wait_for_answer`). Claimed: the
  consumer is placed, the allocation stays. Rejected: the allocation is
  freed and the next host tried. Released (withdrawn by a requester) or
  releasing: the allocation is freed and no other host is tried, the
  consumer's release was asked for (:data:`SCHEDULER_ON_ANSWER`). Still
  pending at its deadline: it
  withdraws the decision so that no late agent claims it, then frees the
  allocation; an answer that lands first wins over the withdrawal.
- **host down** (issue 19, item 3): the scheduler waits only while the
  host's agent holds its lease in the store; once it expired (the agent
  stopped renewing it) the decision is withdrawn at once by its own move,
  ``withdraw-down``, the reason recorded (``host X is down: its agent's
  lease expired at T``), its allocation freed and the next host tried
  (:data:`Outcome.HOST_DOWN`). The agent that comes back finds it
  released and claims nothing.
- **in doubt**: a submit or a withdrawal whose outcome is unknown (the
  transport failed after it may have committed) leaves the allocation in
  place whenever the host may hold the decision (:func:`in_doubt`,
  :data:`HELD_BY_HOST`): freeing it would let the host run what Placement
  no longer accounts for.
- **agent** (:mod:`compute_plugins.compute.claims`): pending decisions
  addressed to its host are verified and claimed (recorded in the ledger
  first, then answered) or rejected with every reason (:func:`on_pending`
  says what to do given the ledger); a claim answered "not pending any
  more" (withdrawn meanwhile) is undone. Releasing ones are freed (ledger,
  allocations), then released.
- **requester** (:func:`request_release`, ``compute-plugins release``): a
  pending decision is withdrawn at once (its allocation freed by the
  requester), a claimed one becomes releasing and its agent frees it
  (:data:`REQUESTER_ON`).
- **a release between two hosts** (``cancel``): a requester that finds
  no decision in force while the consumer has older ones (a scheduler is
  between a rejection and its next offer, or planning again after a race)
  records a released decision (:func:`cancel`). A scheduler stops placing
  a consumer whose latest decision is released and is not its own
  (:func:`cancelled_since`): the release wins.
- **expiry** (``expire``, ``compute-plugins audit --fix``): a decision
  still pending after a grace period was left by a scheduler that stopped
  (killed, interrupted) before its host answered, and its host is not
  claiming it (down, or no agent). The auditor withdraws it and frees its
  allocation; an agent that claims it first wins (compare-and-swap). An
  agent cannot do this for a host that is down, hence the auditor.
- **reconcile after a restart** (the agent's first periodic): a ledger
  claim whose decision is no longer in force on the host is freed
  (:func:`stale_claims`); a pending decision the ledger already holds was
  executed before the restart and is answered without executing it again.
  A claim whose decision is in force under another consumer was re-keyed
  by a move (:func:`rekeyed_claims`): its ledger entry follows, never freed.

**Moves** (resize, migration: :mod:`compute_plugins.scheduler.moves`) have
their own record and table, :data:`MOVE_TRANSITIONS` (steps made by the
mover and the requester, and by the hosts' agents ending a move whose
command stopped, :mod:`compute_plugins.compute.moves`; compare-and-swap as
here): at a move's hand-over
the instance's source decision is re-keyed to the move's migration
consumer, and the destination's claim is a new decision of the instance,
by the moves above.
"""

from __future__ import annotations

import dataclasses
import enum
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, Optional

from oslo_log import log as logging

from compute_plugins.hoststate import errors
from compute_plugins.hoststate.records import (
    ACTIVE,
    MOVE_ACTIVE,
    DecisionStatus,
    HostDecision,
    MoveRecord,
    MoveStatus,
)
from compute_plugins.hoststate.transport import DecisionQueue
from compute_plugins.plugin.contract import Rejection

LOG = logging.getLogger(__name__)

PENDING = DecisionStatus.PENDING
CLAIMED = DecisionStatus.CLAIMED
REJECTED = DecisionStatus.REJECTED
RELEASING = DecisionStatus.RELEASING
RELEASED = DecisionStatus.RELEASED


class Side(enum.StrEnum):
    """Who makes a move."""

    #: The one that decided: submits, waits, withdraws at its deadline.
    SCHEDULER = "scheduler"
    #: The agent of the host the decision is addressed to.
    AGENT = "agent"
    #: Whoever asks for a consumer's release (``compute-plugins release``).
    REQUESTER = "requester"
    #: ``compute-plugins audit --fix``: ends work nobody else will end.
    AUDITOR = "auditor"
    #: ``compute-plugins resize`` / ``migrate``: moves an instance
    #: (:data:`MOVE_TRANSITIONS`).
    MOVER = "mover"


class Move(enum.StrEnum):
    """The moves of the protocol (:data:`TRANSITIONS`)."""

    SUBMIT = "submit"
    CLAIM = "claim"
    REJECT = "reject"
    WITHDRAW = "withdraw"
    WITHDRAW_HOST_DOWN = "withdraw-down"
    REQUEST_RELEASE = "request-release"
    RELEASE = "release"
    CANCEL = "cancel"
    EXPIRE = "expire"


@dataclasses.dataclass(frozen=True)
class Transition:
    """One row of the protocol's table.

    :param move: the move.
    :param sides: who makes it.
    :param sources: the statuses it starts from; () for :attr:`Move.SUBMIT`,
        which makes a new decision for a consumer with none in force.
    :param target: the status it ends in.
    :param meaning: what it means, in words.
    """

    move: Move
    sides: tuple[Side, ...]
    sources: tuple[DecisionStatus, ...]
    target: DecisionStatus
    meaning: str

    def allows(self, status: Optional[DecisionStatus]) -> bool:
        """Whether the move is legal from ``status``: the decision's status,
        or for a submit the status of the consumer's latest decision (None:
        it has none)."""
        return _starts_from(self.sources, status, ACTIVE)


#: The protocol's table, move -> transition (see the module docstring).
TRANSITIONS: Mapping[Move, Transition] = types.MappingProxyType({t.move: t for t in (
    Transition(Move.SUBMIT, (Side.SCHEDULER,), (), PENDING,
               "address a decision to a host; the consumer has none in force"),
    Transition(Move.CLAIM, (Side.AGENT,), (PENDING,), CLAIMED,
               "the host verified and executed it (in its ledger first)"),
    Transition(Move.REJECT, (Side.AGENT,), (PENDING,), REJECTED,
               "the host changed since it published: every reason recorded"),
    Transition(Move.WITHDRAW, (Side.SCHEDULER, Side.REQUESTER), (PENDING,), RELEASED,
               "given up before an answer: no agent may claim it any more"),
    Transition(Move.WITHDRAW_HOST_DOWN, (Side.SCHEDULER,), (PENDING,), RELEASED,
               "the host's agent lease expired before an answer: no agent may "
               "claim it any more; the reason recorded, the next host tried"),
    Transition(Move.REQUEST_RELEASE, (Side.REQUESTER,), (CLAIMED,), RELEASING,
               "the host's agent is asked to free it"),
    Transition(Move.RELEASE, (Side.AGENT,), (CLAIMED, RELEASING), RELEASED,
               "the host freed it (ledger, Placement allocations)"),
    Transition(Move.CANCEL, (Side.REQUESTER,), (), RELEASED,
               "a release while none is in force (a scheduler between two "
               "hosts): recorded released, the scheduler places it nowhere"),
    Transition(Move.EXPIRE, (Side.AUDITOR,), (PENDING,), RELEASED,
               "pending past a grace period (its scheduler stopped, its host "
               "does not answer): withdrawn, its allocation freed"),
)})


def _starts_from(sources: tuple[Any, ...], status: Any, active: frozenset[Any]) -> bool:
    """Whether a row starting from ``sources`` is legal from ``status``: ()
    makes a new record, legal when none is in force (``active``)."""
    if not sources:
        return status is None or status not in active
    return status in sources


def legal(move: Move | str, status: Optional[DecisionStatus]) -> bool:
    """Whether ``move`` is legal from ``status`` (see :meth:`Transition.allows`)."""
    return TRANSITIONS[Move(move)].allows(status)


# -- the moves ---------------------------------------------------------------

def apply(queue: DecisionQueue, decision_id: int, move: Move | str,
          reasons: Iterable[Rejection] = ()) -> HostDecision:
    """Make ``move`` on a decision: one compare-and-swap of the transport.

    :raises DecisionStatusConflict: the decision is in a status the move
        does not start from (the error names both).
    :raises DecisionNotFound: no such decision.
    """
    transition = TRANSITIONS[Move(move)]
    if not transition.sources:
        raise ValueError("%s makes a new decision: use submit()" % transition.move)
    return queue.swap_status(decision_id, transition.sources, transition.target,
                             tuple(reasons), move=transition.move.value)


def submit(queue: DecisionQueue, consumer: str, host: str, spec: str) -> HostDecision:
    """Scheduler: address a decision to ``host`` (pending).

    :param spec: the RequestSpec with its decision, ``to_json()``.
    :raises DecisionExists: the consumer has a decision in force.
    """
    return queue.submit_decision(consumer, host, spec)


def claim(queue: DecisionQueue, decision_id: int) -> HostDecision:
    """Agent: pending -> claimed, the decision is executed on the host.

    :raises DecisionStatusConflict: not pending (claimed already by a
        retry or another agent, or withdrawn: undo the claim).
    """
    return apply(queue, decision_id, Move.CLAIM)


def _rejection(item: Rejection | Mapping[str, Any]) -> Rejection:
    if isinstance(item, Rejection):
        return item
    if not isinstance(item, Mapping) or not isinstance(item.get("reason"), str):
        raise ValueError("a rejection reason is a Rejection or a mapping "
                         "with a reason, got %r" % (item,))
    return Rejection(reason=item["reason"], provider=str(item.get("provider") or ""),
                     plugin=str(item.get("plugin") or ""))


def reject(queue: DecisionQueue, decision_id: int,
           reasons: Iterable[Rejection | Mapping[str, Any]]) -> HostDecision:
    """Agent: pending -> rejected, with every plugin's reason.

    :param reasons: Rejections (or ``{plugin, provider, reason}``), at
        least one.
    :raises DecisionStatusConflict: not pending.
    """
    listed = tuple(_rejection(r) for r in reasons)
    if not listed:
        raise ValueError("a rejection needs at least one reason")
    return apply(queue, decision_id, Move.REJECT, listed)


def withdraw(queue: DecisionQueue, decision_id: int) -> HostDecision:
    """Scheduler or requester: pending -> released, given up before an
    answer.

    :raises DecisionStatusConflict: answered already (``.decision`` says
        how).
    """
    return apply(queue, decision_id, Move.WITHDRAW)


def release(queue: DecisionQueue, decision_id: int) -> HostDecision:
    """Agent: claimed or releasing -> released, the host freed it.

    :raises DecisionStatusConflict: in another status.
    """
    return apply(queue, decision_id, Move.RELEASE)


def expire(queue: DecisionQueue, decision_id: int) -> HostDecision:
    """Auditor: pending -> released, a decision nobody will answer.

    :raises DecisionStatusConflict: answered or withdrawn meanwhile.
    """
    return apply(queue, decision_id, Move.EXPIRE)


#: The reason a cancel records.
CANCEL_REASON = ("released by a requester while no decision was in force: a "
                 "schedule in progress places the consumer nowhere")


def cancel(queue: DecisionQueue, consumer: str) -> Optional[HostDecision]:
    """Requester: the consumer has no decision in force; record a released
    one, so that a scheduler still placing it (between two hosts) stops
    (:func:`cancelled_since`).

    :returns: the decision recorded; None when the consumer never had a
        decision (nothing can be placing it through this queue yet) or has
        one in force again (release that one instead).
    """
    latest = queue.latest_decision(consumer)
    if latest is None or not legal(Move.CANCEL, latest.status):
        return None
    if latest.status == RELEASED and any(r.reason == CANCEL_REASON
                                         for r in latest.reasons):
        return latest  # NOTE: cancelled already: one record is enough
    return queue.record_cancel(consumer, latest.host, latest.spec,
                               (Rejection(CANCEL_REASON),))


def in_force_and_latest(queue: DecisionQueue, consumer: str
                        ) -> tuple[Optional[HostDecision], Optional[HostDecision]]:
    """Scheduler: the consumer's decision in force and its latest decision
    (None each: none), in one read where the queue can
    (:meth:`~compute_plugins.hoststate.decisions.SqlDecisionQueue.in_force_and_latest`),
    else as two."""
    both = getattr(queue, "in_force_and_latest", None)
    if both is not None:
        found: tuple[Optional[HostDecision], Optional[HostDecision]] = both(consumer)
        return found
    return queue.active_decision(consumer), queue.latest_decision(consumer)


def cancelled_since(queue: DecisionQueue, consumer: str, known: int,
                    below: Optional[int] = None) -> Optional[HostDecision]:
    """Scheduler: a released decision of ``consumer`` newer than ``known``
    (the newest decision it knows of: its own last one, or the latest when
    it started) and older than ``below`` (its own new one, when given): a
    requester released the consumer meanwhile."""
    if below is None:
        latest = queue.latest_decision(consumer)
        if latest is not None and latest.id > known and latest.status == RELEASED:
            return latest
        return None
    history = getattr(queue, "history", None)
    if history is None:
        return None
    return next((d for d in history(consumer) if known < d.id < below
                 and d.status == RELEASED), None)


# -- the requester -----------------------------------------------------------

#: What a release request does to the consumer's decision in force, by its
#: status (None: nothing, the agent is freeing it already).
REQUESTER_ON: Mapping[DecisionStatus, Optional[Move]] = types.MappingProxyType({
    PENDING: Move.WITHDRAW,
    CLAIMED: Move.REQUEST_RELEASE,
    RELEASING: None,
})

#: Attempts of a release request whose decision keeps moving under it.
_REQUEST_ATTEMPTS = 4


def request_release(queue: DecisionQueue, consumer: str,
                    in_force: Optional[HostDecision] | Literal["unread"] = "unread"
                    ) -> Optional[HostDecision]:
    """Requester: ask the host to free the consumer (:data:`REQUESTER_ON`:
    pending -> released at once, never claimed; claimed -> releasing, for
    its agent; releasing stays).

    :param in_force: the consumer's decision in force as the caller has
        just read it (None: none), not read again for the first attempt;
        a swap that finds it changed reads it again. ``"unread"``: read.
    :returns: the decision as it is now; None when nothing is in force.
    """
    for attempt in range(_REQUEST_ATTEMPTS):
        if attempt == 0 and not isinstance(in_force, str):
            decision = in_force
        else:
            decision = queue.active_decision(consumer)
        if decision is None:
            return None
        move = REQUESTER_ON[decision.status]
        if move is None:
            return decision
        try:
            return apply(queue, decision.id, move)
        except errors.DecisionStatusConflict:
            continue  # NOTE: claimed or released in between
    raise errors.HostStateError("consumer %s: could not request its release "
                                "(its decision keeps changing)" % consumer)


# -- the scheduler -----------------------------------------------------------

class Outcome(enum.StrEnum):
    """How a host answered a decision the scheduler offered it."""

    CLAIMED = "claimed"
    REJECTED = "rejected"
    #: Released by someone else before an answer (or right after a claim).
    WITHDRAWN = "withdrawn"
    #: No answer by the deadline: withdrawn by the scheduler.
    TIMEOUT = "timeout"
    #: The host's agent lease expired before an answer: withdrawn by the
    #: scheduler at once (``withdraw-down``), the next host may be tried.
    HOST_DOWN = "host-down"


#: What the scheduler makes of the status the host's answer left: claimed
#: keeps the allocation, every other frees it; after a rejection the next
#: host is tried, after a withdrawal (a requester's release) none is.
SCHEDULER_ON_ANSWER: Mapping[DecisionStatus, Outcome] = types.MappingProxyType({
    CLAIMED: Outcome.CLAIMED,
    REJECTED: Outcome.REJECTED,
    RELEASED: Outcome.WITHDRAWN,
    RELEASING: Outcome.WITHDRAWN,
})

#: Statuses in which the host holds the decision or frees it itself: when
#: the scheduler cannot tell what became of its decision, an allocation
#: stays while the decision may be in one of them.
HELD_BY_HOST = frozenset({CLAIMED, RELEASING})


@dataclasses.dataclass(frozen=True)
class Answer:
    """The host's answer to a decision (:func:`offer`).

    :param outcome: see :class:`Outcome`.
    :param decision: the decision as the queue holds it (None after a
        timeout: withdrawn).
    """

    outcome: Outcome
    decision: Optional[HostDecision]

    @property
    def reasons(self) -> tuple[Rejection, ...]:
        """Why the host rejected it (outcome rejected), why it was
        withdrawn (host down), else ()."""
        return self.decision.reasons if self.decision is not None else ()


def wait_for_answer(queue: DecisionQueue, consumer: str, timeout: float, *,
                    withdraw_on_timeout: bool = True, poll_interval: float = 0.05,
                    max_poll_interval: float = 1.0,
                    until_host_down: bool = False,
                    decision: Optional[HostDecision] = None) -> HostDecision:
    """Scheduler: wait until the host answers the consumer's latest decision.

    A transport that is unavailable while it waits (a database restart, a
    fail-over) is tried again until the deadline: the decision stays
    pending meanwhile, and giving up early would leave it to a late agent
    while the caller moved on.

    :param poll_interval: see :meth:`DecisionQueue.wait_for_change`.
    :param until_host_down: stop waiting once the host is down (its agent's
        lease expired): the decision is withdrawn at once
        (:func:`withdraw_host_down`).
    :param decision: that decision, as the caller submitted it just now
        (:func:`offer`): not read again before the wait, which reads it
        once subscribed anyway (None: read).
    :returns: the decision once it is not pending (claimed, rejected, or
        released by a withdrawal).
    :raises HostDown: ``until_host_down`` and the host went down; its
        ``decision`` is the withdrawn one. An answer that lands before
        the withdrawal is returned instead.
    :raises DecisionNotFound: the consumer has no decision.
    :raises AnswerTimeout: still pending after ``timeout`` seconds. With
        ``withdraw_on_timeout`` the decision is withdrawn first (pending
        -> released) so that a late agent cannot claim it; an answer that
        lands just before is returned instead. ``withdrawn`` is False when
        the transport could not be reached to withdraw it: the host may
        still claim it.
    """
    # NOTE: "not >=": NaN too (it never passes the deadline).
    if not timeout >= 0:
        raise ValueError("timeout %r: expected seconds >= 0" % (timeout,))
    if decision is None:
        decision = queue.latest_decision(consumer)
    if decision is None:
        raise errors.DecisionNotFound(consumer)
    unavailable: Optional[errors.StoreUnavailable] = None
    if not decision.answered:
        try:
            decision = queue.wait_for_change(decision, timeout,
                                             poll_interval=poll_interval,
                                             max_poll_interval=max_poll_interval,
                                             until_host_down=until_host_down)
        except errors.StoreUnavailable as err:
            unavailable = err
        except errors.HostDown as err:
            return withdraw_host_down(queue, err)
    if decision.answered:
        return decision
    withdrawn = False
    if withdraw_on_timeout:
        try:
            withdraw(queue, decision.id)
            withdrawn = True
        except errors.DecisionStatusConflict as err:
            return err.decision
        except errors.StoreUnavailable as err:
            unavailable = err
    raise errors.AnswerTimeout(
        consumer, decision.host, timeout, withdrawn=withdrawn,
        unavailable=None if unavailable is None else unavailable.reason
    ) from unavailable


def withdraw_host_down(queue: DecisionQueue, down: errors.HostDown) -> HostDecision:
    """Scheduler: withdraw a pending decision whose host is down
    (``withdraw-down``, the reason recorded with it).

    :returns: the host's answer when it landed first (claimed, rejected).
    :raises HostDown: withdrawn; its ``decision`` is the withdrawn one.
    """
    try:
        withdrawn = apply(queue, down.decision.id, Move.WITHDRAW_HOST_DOWN,
                          (Rejection(down.reason),))
    except errors.DecisionStatusConflict as err:
        return err.decision
    raise errors.HostDown(withdrawn, down.reason, down.expired_at) from None


def in_doubt(queue: DecisionQueue, consumer: str, host: str) -> bool:
    """Scheduler, after a submit that failed: whether a decision of
    ``consumer`` for ``host`` may still be held by the host. One that went
    in anyway (its commit landed, its answer was lost) is withdrawn; True
    when that failed because the host claimed it meanwhile
    (:data:`HELD_BY_HOST`), or when the queue cannot be read."""
    try:
        active = queue.active_decision(consumer)
        if active is None or active.host != host:
            return False
        withdraw(queue, active.id)
        return False
    except errors.DecisionStatusConflict as err:
        LOG.warning("consumer %s: its decision on %s was %s before it "
                    "could be withdrawn", consumer, host, err.decision.status.value)
        return err.decision.status in HELD_BY_HOST
    except errors.HostStateError as err:
        LOG.warning("consumer %s: cannot tell whether host %s got its "
                    "decision (%s): its allocation stays", consumer, host, err)
        return True


def offer(queue: DecisionQueue, consumer: str, host: str, spec: str,
          timeout: float, *, free: Callable[[], object],
          poll_interval: float = 0.05, until_host_down: bool = False,
          on_submitted: Optional[Callable[[HostDecision], object]] = None) -> Answer:
    """Scheduler: submit a decision whose allocation is written, wait for
    the host's answer, and free the allocation whenever the host does not
    hold the decision (``free``: deletes the consumer's allocation).

    :param on_submitted: called with the decision once submitted, before
        the wait (the scheduler tells whoever runs it which consumer and
        decision it waits for: an interrupted wait leaves it pending).
    :raises DecisionExists: the consumer has a decision in force already
        (freed first: the allocation was this offer's).
    :raises AnswerTimeout: no answer and the decision could not be
        withdrawn: the host may still claim it, the allocation stays.
    :raises HostStateError: the submit failed; freed unless the host may
        hold the decision (:func:`in_doubt`).

    With ``until_host_down``, a host whose agent's lease expires while it
    waits is given up at once: withdrawn, freed, :data:`Outcome.HOST_DOWN`
    (the decision withdrawn, its reason recorded).
    """
    try:
        submitted = submit(queue, consumer, host, spec)
    except errors.DecisionExists:
        free()
        raise
    except BaseException:
        if not in_doubt(queue, consumer, host):
            free()
        raise
    if on_submitted is not None:
        on_submitted(submitted)
    try:
        answered = wait_for_answer(queue, consumer, timeout, poll_interval=poll_interval,
                                   until_host_down=until_host_down, decision=submitted)
    except errors.AnswerTimeout as err:
        if not err.withdrawn:
            raise
        free()
        return Answer(Outcome.TIMEOUT, None)
    except errors.HostDown as err:
        free()
        return Answer(Outcome.HOST_DOWN, err.decision)
    outcome = SCHEDULER_ON_ANSWER[answered.status]
    if outcome is not Outcome.CLAIMED:
        free()
    return Answer(outcome, answered)


# -- the agent ---------------------------------------------------------------

class ClaimStep(enum.StrEnum):
    """What the agent does with a pending decision addressed to its host."""

    #: Verify it on the live state: claim it (ledger first) or reject it.
    EXECUTE = "execute"
    #: Executed before a restart (in the ledger, unanswered): answer
    #: claimed, never execute it again.
    ANSWER_RECORDED = "answer-recorded"
    #: The ledger holds a claim of an older decision of the consumer
    #: (withdrawn or released since, never answered): forget it, then
    #: execute this one.
    REPLACE_STALE = "replace-stale"


def on_pending(decision: HostDecision, recorded: Optional[int]) -> ClaimStep:
    """Agent: what to do with a pending ``decision``, given the decision id
    its ledger records for the consumer (None: no claim)."""
    if decision.status != PENDING:
        raise ValueError("decision %d is %s, not pending" % (decision.id, decision.status))
    if recorded is None:
        return ClaimStep.EXECUTE
    if recorded == decision.id:
        return ClaimStep.ANSWER_RECORDED
    return ClaimStep.REPLACE_STALE


def in_force(queue: DecisionQueue, host: str) -> dict[str, HostDecision]:
    """consumer -> its decision in force addressed to ``host``."""
    return {d.consumer: d for d in queue.list_decisions(host, (CLAIMED, RELEASING, PENDING))}


def stale_claims(recorded: Mapping[str, int],
                 current: Mapping[str, HostDecision]) -> list[str]:
    """Agent, reconciling: the consumers whose ledger claim (``recorded``:
    consumer -> decision id) is not their decision in force on the host
    (``current``, :func:`in_force`): released or withdrawn by another path,
    purged, or replaced by a newer decision. Their claims are freed.

    A claim whose decision is in force under another consumer is not stale:
    a move gave it to its migration consumer (or back): re-keyed first
    (:func:`rekeyed_claims`), never freed."""
    moved = rekeyed_claims(recorded, current)
    return [consumer for consumer, decision_id in recorded.items()
            if consumer not in moved
            and (consumer not in current or current[consumer].id != decision_id)]


def rekeyed_claims(recorded: Mapping[str, int],
                   current: Mapping[str, HostDecision]) -> dict[str, str]:
    """Agent: the ledger's claims whose decision is in force on the host
    under another consumer (a move's hand-over gave the instance's source
    claim to its migration consumer; a revert gives it back): ledger
    consumer -> the consumer the store says. Only a claimed or releasing
    decision is a re-keyed claim: a pending one with the same id is a new
    decision of a store that reused ids (restored from a backup)."""
    by_id = {d.id: consumer for consumer, d in current.items()
             if d.status in HELD_BY_HOST}
    return {consumer: by_id[decision_id] for consumer, decision_id in recorded.items()
            if decision_id in by_id and by_id[decision_id] != consumer}


# -- moves -------------------------------------------------------------------

class MoveStep(enum.StrEnum):
    """The steps of the move protocol (:data:`MOVE_TRANSITIONS`)."""

    START = "start"
    HAND_OVER = "hand-over"
    CLAIMED = "dest-claimed"
    ROLL_BACK = "roll-back"
    REQUEST_CONFIRM = "request-confirm"
    CONFIRM = "confirm"
    REQUEST_REVERT = "request-revert"
    REVERT = "revert"
    EVACUATED = "evacuated"


@dataclasses.dataclass(frozen=True)
class MoveTransition:
    """One row of the move protocol's table (as :class:`Transition`).

    :param step: the step.
    :param sides: who makes it.
    :param sources: the statuses it starts from; () for :attr:`MoveStep.START`
        (the instance has no move in force).
    :param target: the status it ends in.
    :param meaning: what it does, in Placement, the store and the ledgers.
    """

    step: MoveStep
    sides: tuple[Side, ...]
    sources: tuple[MoveStatus, ...]
    target: MoveStatus
    meaning: str

    def allows(self, status: Optional[MoveStatus]) -> bool:
        """Whether the step is legal from ``status`` (for a start: the
        status of the instance's latest move, None: it has none)."""
        return _starts_from(self.sources, status, MOVE_ACTIVE)


_MS = MoveStatus
#: The move protocol's table, step -> transition. Each step is one
#: compare-and-swap of the move's status, made after the writes it names
#: (each checked before it is made again: a re-run skips what is done).
#: The destination's claim is a decision as any (:data:`TRANSITIONS`: submit,
#: claim or reject by the destination's agent); the source's release at
#: confirm too (request-release, release by the source's agent).
MOVE_TRANSITIONS: Mapping[MoveStep, MoveTransition] = types.MappingProxyType(
    {t.step: t for t in (
        MoveTransition(MoveStep.START, (Side.MOVER,), (), _MS.PREPARING,
                       "the move recorded; the instance has none in force"),
        MoveTransition(MoveStep.HAND_OVER, (Side.MOVER,), (_MS.PREPARING,),
                       _MS.HANDED_OVER,
                       "the source decision re-keyed to the migration consumer "
                       "(from claimed only: a release requested first wins; its "
                       "agent re-keys its ledger), then POST /allocations: the "
                       "source allocation to it"),
        MoveTransition(MoveStep.CLAIMED, (Side.MOVER, Side.AGENT), (_MS.HANDED_OVER,),
                       _MS.TO_CONFIRM,
                       "the destination's agent claimed the instance's new decision "
                       "(its allocation written by the scheduler): to confirm"),
        MoveTransition(MoveStep.ROLL_BACK, (Side.MOVER, Side.AGENT),
                       (_MS.PREPARING, _MS.HANDED_OVER), _MS.ROLLED_BACK,
                       "no host took it: POST /allocations back to the instance, "
                       "the source decision re-keyed back; the reasons recorded "
                       "(the source's agent: a move its mover left past "
                       "[compute] move_step_timeout)"),
        MoveTransition(MoveStep.REQUEST_CONFIRM, (Side.REQUESTER,), (_MS.TO_CONFIRM,),
                       _MS.CONFIRMING,
                       "the source's agent is asked to release the migration "
                       "consumer (ledger, allocation)"),
        MoveTransition(MoveStep.CONFIRM, (Side.REQUESTER, Side.AGENT),
                       (_MS.CONFIRMING,), _MS.CONFIRMED,
                       "the source's agent released it: final (made by the "
                       "source's agent itself when the command stopped)"),
        MoveTransition(MoveStep.REQUEST_REVERT, (Side.REQUESTER, Side.AGENT),
                       (_MS.PREPARING, _MS.HANDED_OVER, _MS.TO_CONFIRM),
                       _MS.REVERTING,
                       "the destination's agent is asked to release the instance's "
                       "new decision (ledger, allocation); an interrupted move is "
                       "undone the same way (the source's agent: a move left "
                       "handed-over with a destination decision)"),
        MoveTransition(MoveStep.REVERT, (Side.REQUESTER, Side.AGENT), (_MS.REVERTING,),
                       _MS.REVERTED,
                       "POST /allocations back to the instance, the source decision "
                       "re-keyed back (its agent re-keys its ledger): final"),
        MoveTransition(MoveStep.EVACUATED, (Side.MOVER, Side.AGENT), (_MS.TO_CONFIRM,),
                       _MS.CONFIRMED,
                       "evacuate: the new claim holds; the migration consumer's "
                       "allocation on the dead host deleted, its decision "
                       "releasing (its agent drops it when it comes back): final"),
    )})


def apply_move(store: Any, move: MoveRecord, step: MoveStep | str,
               seen: bool = False, **fields: Any) -> MoveRecord:
    """Make ``step`` on ``move``: one compare-and-swap of the store
    (:meth:`~compute_plugins.hoststate.moves.SqlMoves.swap_move_status`).

    :param seen: only from ``move.status``, the status its maker read (an
        agent ending a move: a step that another side made meanwhile, its
        mover slow but alive, is a conflict, even where this step also
        starts from the new status: a revert requested of a move left
        handed-over never reverts one recorded to confirm since).
    :raises MoveStatusConflict: the move is in a status the step does not
        start from (``seen``: not in ``move.status`` any more).
    """
    transition = MOVE_TRANSITIONS[MoveStep(step)]
    if not transition.sources:
        raise ValueError("%s records a new move: use start_move()" % transition.step)
    sources = transition.sources
    if seen:
        sources = tuple(s for s in sources if s == move.status)
    result: MoveRecord = store.swap_move_status(
        move.migration, sources, transition.target,
        step=transition.step.value, **fields)
    return result


__all__ = ["CANCEL_REASON", "HELD_BY_HOST", "MOVE_TRANSITIONS", "REQUESTER_ON",
           "SCHEDULER_ON_ANSWER", "TRANSITIONS", "Answer", "ClaimStep", "Move",
           "MoveStep", "MoveTransition", "Outcome", "Side",
           "Transition", "apply", "apply_move", "cancel", "cancelled_since", "claim",
           "expire", "in_doubt", "in_force", "in_force_and_latest", "legal", "rekeyed_claims",
           "offer", "on_pending", "reject", "release",
           "request_release", "stale_claims", "submit", "wait_for_answer",
           "withdraw", "withdraw_host_down"]
