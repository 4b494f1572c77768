"""The decision protocol: its transition table, and what each side does on
each status, on the in-memory transport (the SQL store runs the same
transitions in ``test_store_sqlite`` and ``tests/functional/hoststate``).

Here the test plays the other side of the handshake: the agent answers
from the queue's ``on_submit`` hook, the queue goes ``down`` on cue.
"""

from __future__ import annotations

import threading

import pytest

from compute_plugins import hoststate
from compute_plugins.hoststate import protocol
from compute_plugins.plugin.contract import Rejection
from tests.unit.hoststate.cases import (  # noqa: F401 - collected here
    CLAIMED,
    LEGAL,
    NEW_DECISION,
    PENDING,
    REASONS,
    REJECTED,
    RELEASED,
    RELEASING,
    SPEC,
    Move,
    TestTransitions,
    decision_in,
)
from tests.unit.hoststate.memory import MemoryDecisionQueue

Side = protocol.Side


@pytest.fixture
def store():
    """The transport of :class:`TestTransitions` here: in memory."""
    return MemoryDecisionQueue()


# -- the table ---------------------------------------------------------------

def test_the_table():
    rows = {(t.move, t.sides, t.sources, t.target)
            for t in protocol.TRANSITIONS.values()}
    assert rows == {
        (Move.SUBMIT, (Side.SCHEDULER,), (), PENDING),
        (Move.CLAIM, (Side.AGENT,), (PENDING,), CLAIMED),
        (Move.REJECT, (Side.AGENT,), (PENDING,), REJECTED),
        (Move.WITHDRAW_HOST_DOWN, (Side.SCHEDULER,), (PENDING,), RELEASED),
        (Move.WITHDRAW, (Side.SCHEDULER, Side.REQUESTER), (PENDING,), RELEASED),
        (Move.REQUEST_RELEASE, (Side.REQUESTER,), (CLAIMED,), RELEASING),
        (Move.RELEASE, (Side.AGENT,), (CLAIMED, RELEASING), RELEASED),
        (Move.CANCEL, (Side.REQUESTER,), (), RELEASED),
        (Move.EXPIRE, (Side.AUDITOR,), (PENDING,), RELEASED),
    }
    assert set(protocol.TRANSITIONS) == set(Move)
    assert all(t.meaning for t in protocol.TRANSITIONS.values())


@pytest.mark.parametrize("status", list(hoststate.DecisionStatus))
@pytest.mark.parametrize("move", [m for m in Move if m not in NEW_DECISION])
def test_legal_is_the_specification(move, status):
    assert protocol.legal(move, status) == ((status, move) in LEGAL)


def test_submit_is_legal_when_nothing_is_in_force():
    assert protocol.legal(Move.SUBMIT, None)
    assert [s for s in hoststate.DecisionStatus if protocol.legal("submit", s)] == [
        REJECTED, RELEASED]


def test_cancel_records_a_released_decision_only_when_none_is_in_force(store):
    """A requester's release while nothing is in force (a scheduler between
    two hosts): a released decision, newer than the scheduler's, never in
    force; a scheduler sees it (cancelled_since)."""
    assert [s for s in hoststate.DecisionStatus if protocol.legal("cancel", s)] == [
        REJECTED, RELEASED]
    assert protocol.cancel(store, "c1") is None  # never had a decision
    d = protocol.submit(store, "c1", "h1", SPEC)
    assert protocol.cancel(store, "c1") is None  # one in force: release that
    protocol.reject(store, d.id, [{"plugin": "numa", "reason": "taken"}])
    assert protocol.cancelled_since(store, "c1", d.id) is None
    cancelled = protocol.cancel(store, "c1")
    assert (cancelled.status, cancelled.host) == (RELEASED, "h1")
    assert cancelled.id > d.id and store.active_decision("c1") is None
    assert protocol.cancelled_since(store, "c1", d.id) == cancelled
    assert protocol.cancelled_since(store, "c1", cancelled.id) is None


def test_moves_from_each_status():
    moves = {s: tuple(m for m in Move if m not in NEW_DECISION and protocol.legal(m, s))
             for s in hoststate.DecisionStatus}
    assert moves == {
        PENDING: (Move.CLAIM, Move.REJECT, Move.WITHDRAW, Move.WITHDRAW_HOST_DOWN,
                  Move.EXPIRE),
        CLAIMED: (Move.REQUEST_RELEASE, Move.RELEASE),
        RELEASING: (Move.RELEASE,),
        REJECTED: (),
        RELEASED: (),
    }
    final = {s for s, out in moves.items() if not out}
    assert final == {REJECTED, RELEASED} and final.isdisjoint(hoststate.ACTIVE)


def test_submit_is_no_move_on_a_decision(store):
    d = protocol.submit(store, "c1", "h1", SPEC)
    with pytest.raises(ValueError):
        protocol.apply(store, d.id, Move.SUBMIT)


def test_a_rejection_needs_a_reason(store):
    d = protocol.submit(store, "c1", "h1", SPEC)
    for bad in ([], ["no reason"], [{"plugin": "numa"}]):
        with pytest.raises(ValueError):
            protocol.reject(store, d.id, bad)
    rejected = protocol.reject(store, d.id, [{"plugin": "vgpu", "reason": "no mdev"}])
    assert rejected.reasons == (Rejection(reason="no mdev", provider="", plugin="vgpu"),)


# -- the requester -----------------------------------------------------------

def test_requester_table():
    assert dict(protocol.REQUESTER_ON) == {
        PENDING: Move.WITHDRAW, CLAIMED: Move.REQUEST_RELEASE, RELEASING: None}
    assert set(protocol.REQUESTER_ON) == hoststate.ACTIVE


class ClaimedUnderTheRequester(MemoryDecisionQueue):
    """The agent claims the decision between the requester's read and its
    withdrawal."""

    def active_decision(self, consumer):
        found = super().active_decision(consumer)
        if found is not None and found.status == PENDING:
            protocol.claim(self, found.id)
        return found


def test_a_release_request_follows_a_decision_that_moved():
    queue = ClaimedUnderTheRequester()
    d = protocol.submit(queue, "c1", "h1", SPEC)
    done = protocol.request_release(queue, "c1")
    assert (done.id, done.status) == (d.id, RELEASING)


# -- the scheduler -----------------------------------------------------------

class Allocation:
    """The scheduler's Placement allocation: freed or not."""

    def __init__(self):
        self.freed = 0

    def free(self):
        self.freed += 1


def offered(*moves, timeout=5.0):
    """Offer a decision whose host makes ``moves`` on it at once."""
    queue = MemoryDecisionQueue()

    def host_answers(decision):
        for move in moves:
            protocol.apply(queue, decision.id, move, REASONS if move == Move.REJECT else ())
    queue.on_submit = host_answers
    allocation = Allocation()
    result = protocol.offer(queue, "c1", "h1", SPEC, timeout, free=allocation.free)
    return queue, result, allocation


def test_scheduler_table():
    assert dict(protocol.SCHEDULER_ON_ANSWER) == {
        CLAIMED: protocol.Outcome.CLAIMED, REJECTED: protocol.Outcome.REJECTED,
        RELEASED: protocol.Outcome.WITHDRAWN, RELEASING: protocol.Outcome.WITHDRAWN}
    assert protocol.HELD_BY_HOST == {CLAIMED, RELEASING}


def test_claimed_keeps_the_allocation():
    queue, answer, allocation = offered(Move.CLAIM)
    assert answer.outcome == "claimed" and answer.decision.status == CLAIMED
    assert allocation.freed == 0


def test_rejected_frees_it_with_the_reasons():
    queue, answer, allocation = offered(Move.REJECT)
    assert answer.outcome == "rejected" and answer.reasons == REASONS
    assert allocation.freed == 1


@pytest.mark.parametrize("moves, status", [
    ((Move.WITHDRAW,), RELEASED),                     # a requester withdrew it
    ((Move.CLAIM, Move.REQUEST_RELEASE), RELEASING),  # claimed, release asked
])
def test_released_before_the_answer_frees_it(moves, status):
    queue, answer, allocation = offered(*moves)
    assert answer.outcome == "withdrawn" and answer.decision.status == status
    assert allocation.freed == 1


def test_a_host_down_while_waiting_is_withdrawn_and_freed_at_once():
    """Issue 19, item 3: the host's agent lease expired while the
    scheduler waited: the decision is withdrawn (its own move, the reason
    recorded) and freed, and the scheduler may try another host at once."""
    queue = MemoryDecisionQueue()
    queue.hosts_down["h1"] = "host h1 is down: its agent's lease expired at T"
    allocation = Allocation()
    answer = protocol.offer(queue, "c1", "h1", SPEC, 60, free=allocation.free,
                            until_host_down=True)
    assert answer.outcome == "host-down" and answer.decision.status == RELEASED
    assert [r.reason for r in answer.reasons] == [queue.hosts_down["h1"]]
    assert allocation.freed == 1
    transition = protocol.TRANSITIONS[Move.WITHDRAW_HOST_DOWN]
    assert (transition.sides, transition.sources, transition.target) == (
        (protocol.Side.SCHEDULER,), (PENDING,), RELEASED)


def test_no_answer_withdraws_then_frees():
    queue, answer, allocation = offered(timeout=0.05)
    assert answer.outcome == "timeout" and answer.decision is None
    assert queue.latest_decision("c1").status == RELEASED
    assert allocation.freed == 1


class GoesDownWhileWaiting(MemoryDecisionQueue):
    def wait_for_change(self, decision, timeout, **kwargs):
        self.down = "connection refused"
        return super().wait_for_change(decision, timeout, **kwargs)


def test_no_answer_and_no_withdrawal_keeps_it():
    """The queue is gone at the deadline: the host may still claim the
    decision, so the allocation stays."""
    queue = GoesDownWhileWaiting()
    allocation = Allocation()
    with pytest.raises(hoststate.AnswerTimeout) as info:
        protocol.offer(queue, "c1", "h1", SPEC, 0.05, free=allocation.free)
    assert not info.value.withdrawn and info.value.unavailable == "connection refused"
    assert isinstance(info.value.__cause__, hoststate.StoreUnavailable)
    assert allocation.freed == 0
    queue.down = None
    assert queue.active_decision("c1").status == PENDING


def test_an_answer_at_the_deadline_wins_over_the_withdrawal(monkeypatch):
    real_withdraw = protocol.withdraw

    def claimed_first(queue, decision_id):
        protocol.claim(queue, decision_id)
        return real_withdraw(queue, decision_id)
    monkeypatch.setattr(protocol, "withdraw", claimed_first)
    queue, answer, allocation = offered(timeout=0)
    assert answer.outcome == "claimed" and allocation.freed == 0


def test_a_consumer_in_force_frees_the_new_allocation():
    queue = MemoryDecisionQueue()
    first = protocol.submit(queue, "c1", "h0", SPEC)
    allocation = Allocation()
    with pytest.raises(hoststate.DecisionExists) as info:
        protocol.offer(queue, "c1", "h1", SPEC, 1, free=allocation.free)
    assert info.value.decision == first and allocation.freed == 1


class SubmitFails(MemoryDecisionQueue):
    """The submit fails: before its commit, or after it (the answer lost),
    with ``meanwhile`` run between the commit and the failure."""

    def __init__(self, committed, meanwhile=None):
        super().__init__()
        self.committed = committed
        self.meanwhile = meanwhile

    def submit_decision(self, consumer, host, spec):
        if self.committed:
            decision = super().submit_decision(consumer, host, spec)
            if self.meanwhile is not None:
                self.meanwhile(self, decision)
        raise hoststate.StoreUnavailable(self.url, "server closed the connection")


@pytest.mark.parametrize("queue, freed, status", [
    # never in: nobody holds it
    (SubmitFails(committed=False), 1, None),
    # in, and withdrawn now: nobody holds it
    (SubmitFails(committed=True), 1, RELEASED),
    # in, and claimed by the host meanwhile: the host holds it
    (SubmitFails(True, lambda q, d: protocol.claim(q, d.id)), 0, CLAIMED),
    # in, and rejected meanwhile: nobody holds it
    (SubmitFails(True, lambda q, d: protocol.reject(q, d.id, REASONS)), 1, REJECTED),
    # in, and the queue gone: the host may hold it
    (SubmitFails(True, lambda q, d: setattr(q, "down", "gone")), 0, PENDING),
])
def test_in_doubt_after_a_failed_submit(queue, freed, status):
    allocation = Allocation()
    with pytest.raises(hoststate.StoreUnavailable):
        protocol.offer(queue, "c1", "h1", SPEC, 1, free=allocation.free)
    assert allocation.freed == freed
    queue.down = None
    latest = queue.latest_decision("c1")
    assert (latest.status if latest else None) == status


def test_wait_for_answer_is_told_not_polling():
    """On a transport that is told of changes the answer comes as soon as
    the agent gives it."""
    queue = MemoryDecisionQueue()
    d = protocol.submit(queue, "c1", "h1", SPEC)
    timer = threading.Timer(0.1, protocol.claim, (queue, d.id))
    timer.start()
    try:
        answer = protocol.wait_for_answer(queue, "c1", timeout=60)
    finally:
        timer.join()
    assert (answer.id, answer.status) == (d.id, CLAIMED)


def test_wait_for_answer_refuses_an_endless_timeout(store):
    protocol.submit(store, "c1", "h1", SPEC)
    for timeout in (float("nan"), -1):
        with pytest.raises(ValueError):
            protocol.wait_for_answer(store, "c1", timeout)


# -- the agent ---------------------------------------------------------------

@pytest.mark.parametrize("recorded, step", [
    (None, protocol.ClaimStep.EXECUTE),
    ("this", protocol.ClaimStep.ANSWER_RECORDED),
    ("older", protocol.ClaimStep.REPLACE_STALE),
])
def test_agent_on_a_pending_decision(store, recorded, step):
    older = decision_in(store, RELEASED)
    pending = decision_in(store, PENDING)
    ids = {None: None, "this": pending.id, "older": older.id}
    assert protocol.on_pending(pending, ids[recorded]) == step


@pytest.mark.parametrize("status", [CLAIMED, REJECTED, RELEASING, RELEASED])
def test_agent_claims_only_pending_decisions(store, status):
    with pytest.raises(ValueError):
        protocol.on_pending(decision_in(store, status), None)


def test_reconcile_after_a_restart(store):
    """The ledger's claims against the decisions in force on the host: a
    claim is kept only while its own decision is in force there."""
    kept = decision_in(store, CLAIMED, "kept")
    asked = decision_in(store, RELEASING, "asked")
    released = decision_in(store, RELEASED, "released")
    replaced = decision_in(store, RELEASED, "replaced")
    newer = decision_in(store, PENDING, "replaced")
    moved = decision_in(store, PENDING, "moved", host="h2")
    in_force = protocol.in_force(store, "h1")
    assert in_force == {"kept": kept, "asked": asked, "replaced": newer}
    recorded = {"kept": kept.id, "asked": asked.id, "released": released.id,
                "replaced": replaced.id, "moved": moved.id, "purged": 999}
    assert protocol.stale_claims(recorded, in_force) == [
        "released", "replaced", "moved", "purged"]
    assert protocol.stale_claims({}, in_force) == []


def test_a_second_cancel_records_nothing_more(store):
    d = protocol.submit(store, "c1", "h1", SPEC)
    protocol.withdraw(store, d.id)
    first = protocol.cancel(store, "c1")
    assert protocol.cancel(store, "c1") == first
    assert [x.id for x in store.history("c1")] == [d.id, first.id]
