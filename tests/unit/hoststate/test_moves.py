"""The moves of instances on the SQL store (SQLite) and the move protocol's
table: one move in force per instance, status changes only by the table's
steps (compare-and-swap), and a decision re-keyed to the migration consumer
and back."""

from __future__ import annotations

import pytest

from compute_plugins import hoststate
from compute_plugins.hoststate import errors, protocol
from compute_plugins.hoststate.records import MOVE_ACTIVE, MoveStatus
from tests.unit.hoststate.cases import SPEC

C, M, M2 = ("00000000-0000-0000-0000-00000000000c", "00000000-0000-0000-0000-00000000000a",
            "00000000-0000-0000-0000-00000000000b")
Step = protocol.MoveStep


def claimed(store, consumer=C, host="h1"):
    decision = store.submit_decision(consumer, host, SPEC)
    return protocol.claim(store, decision.id)


def test_the_move_table():
    table = protocol.MOVE_TRANSITIONS
    assert set(table) == set(Step)
    assert all(t.meaning and t.sides for t in table.values())
    assert table[Step.START].allows(None) and table[Step.START].allows(MoveStatus.CONFIRMED)
    assert not table[Step.START].allows(MoveStatus.TO_CONFIRM)
    # the finals are reached only by their own step, and leave no move in force
    finals = {MoveStatus.CONFIRMED, MoveStatus.REVERTED, MoveStatus.ROLLED_BACK}
    assert {t.target for t in table.values()} - MOVE_ACTIVE == finals
    for t in table.values():
        assert not set(t.sources) & finals, t.step
    assert table[Step.CONFIRM].sources == (MoveStatus.CONFIRMING,)
    assert MoveStatus.CONFIRMING not in table[Step.REQUEST_REVERT].sources


def test_one_move_in_force_and_steps_by_compare_and_swap(store):
    decision = claimed(store)
    move = store.start_move(M, C, "resize", "h1", decision.id, SPEC)
    assert (move.status, move.dest, store.active_move(C)) == (MoveStatus.PREPARING,
                                                             None, move)
    with pytest.raises(errors.MoveExists, match="consumer %s is moving" % C):
        store.start_move(M2, C, "migrate", "h1", decision.id, SPEC)
    with pytest.raises(errors.MoveStatusConflict,
                       match="request-confirm refused: .* is preparing"):
        protocol.apply_move(store, move, Step.REQUEST_CONFIRM)
    move = protocol.apply_move(store, move, Step.HAND_OVER)
    move = protocol.apply_move(store, move, Step.CLAIMED, dest="h2", dest_decision=7)
    assert (move.status, move.dest, move.dest_decision) == (MoveStatus.TO_CONFIRM,
                                                           "h2", 7)
    move = protocol.apply_move(store, move, Step.REQUEST_CONFIRM)
    move = protocol.apply_move(store, move, Step.CONFIRM)
    assert move.status == MoveStatus.CONFIRMED
    assert store.active_move(C) is None and store.latest_move(C) == move
    # a new move once the last ended
    assert store.start_move(M2, C, "migrate", "h2", decision.id, SPEC).migration == M2


def test_a_decision_is_rekeyed_and_back(store):
    decision = claimed(store)
    moved = store.rekey_decision(decision.id, C, M)
    assert (moved.id, moved.consumer, moved.status) == (decision.id, M, "claimed")
    assert store.active_decision(C) is None and store.active_decision(M) == moved
    # done already: the same answer
    assert store.rekey_decision(decision.id, C, M) == moved
    # the instance's new decision, then the way back is refused while it is in force
    new = claimed(store, C, "h2")
    with pytest.raises(hoststate.DecisionExists):
        store.rekey_decision(decision.id, M, C)
    protocol.release(store, new.id)
    assert store.rekey_decision(decision.id, M, C).consumer == C
    protocol.release(store, decision.id)
    with pytest.raises(hoststate.HostStateError, match="not in force|released"):
        store.rekey_decision(decision.id, C, M)


def test_rekeyed_claims_are_not_stale():
    decision = hoststate.HostDecision(5, M, "h1", SPEC, hoststate.DecisionStatus.CLAIMED,
                                      (), None, None)
    recorded = {C: 5, "gone": 3}
    current = {M: decision}
    assert protocol.rekeyed_claims(recorded, current) == {C: M}
    assert protocol.stale_claims(recorded, current) == ["gone"]
