"""The fault matrix of the moves (issue 21): for each move kind, the mover
(the command's process) is stopped between every pair of its steps, or the
source's or the destination's agent is; the stopped agent is restarted (a
new agent, its ledger read from disk), and the hosts' agents finish or undo
the move on their own at their periodic (``[compute] move_step_timeout``
0 here) -- no command is run again. After each fault, and once the agents
are done, :func:`~tests.functional.scheduler.moving.check_invariants`.

The mover is stopped by its fault-injection hook (``Mover.inject``, called
with the name of each point between two steps), raising an exception that
is no ``Exception``, as a killed process runs no ``except`` clause.
Placement is the real one (embedded), the agents real, the store SQLite.

One cloud per module (two hosts; the evacuations' own two), and one
instance that every case moves in turn (each case ends with no move in
force): fast enough to run every boundary."""

from __future__ import annotations

import datetime

import pytest
import sqlalchemy as sa

from compute_plugins.compute.moves import MoveFinisher
from compute_plugins.hoststate import protocol
from compute_plugins.hoststate.records import MoveStatus
from compute_plugins.hoststate.schema import moves as t_moves
from compute_plugins.scheduler.moves import FENCE_REASON
from tests.functional.request.hosts import cell
from tests.functional.scheduler.cloud import Cloud
from tests.functional.scheduler.moving import (
    Killed,
    check_instances,
    check_invariants,
    killed_at,
    ledger_keys,
    mover,
    on_host,
    settled,
)
from tests.functional.scheduler.test_schedule import new_consumer, pinned, spec_of

#: The mover's points of a resize or migration, in order; then those of the
#: confirm and of the revert that follow it.
MOVE_POINTS = ("started", "rekeyed", "allocations-moved", "handed-over", "dest-claimed")
CONFIRM_POINTS = ("confirm-requested", "source-freed")
REVERT_POINTS = ("revert-requested", "dest-freed", "given-back")
POINTS = MOVE_POINTS + CONFIRM_POINTS + REVERT_POINTS
#: (kind, point) of the mover's faults: every boundary of resize and cold
#: migration, through their confirm and revert; a live migration's own
#: boundaries (its confirm and revert are a cold one's).
MOVER_CASES = ([(kind, point) for kind in ("resize", "migrate") for point in POINTS]
               + [("live-migrate", point) for point in MOVE_POINTS])
#: Seconds the mover waits for an agent's answer (a stopped agent's side).
SHORT = 0.3


def shared_cloud(placement, directory, *labels):
    """A cloud of hosts ``labels`` for a module's cases, with one scheduler
    and one mover (building them loads the plugins)."""
    cloud = Cloud(placement, directory)
    for label in labels:
        cloud.add_host(label, [cell(4, 4096)], dedicated="0-3")
    cloud.sched = cloud.scheduler()
    cloud.mover = mover(cloud)
    cloud.instance = None
    return cloud


@pytest.fixture(scope="module")
def pair(placement, tmp_path_factory):
    """Two hosts with their agents, shared by the module's cases."""
    cloud = shared_cloud(placement, str(tmp_path_factory.mktemp("faults")), "a", "b")
    yield cloud
    cloud.close()


@pytest.fixture
def mv(request):
    """The module's cloud's mover, its injection hook reset after the case."""
    cloud = request.getfixturevalue("trio" if "evacuat" in request.node.name
                                    else "pair")
    yield cloud.mover
    cloud.mover.inject = None


def agents_finish(cloud: Cloud, rounds: int = 3) -> None:
    """Every host's periodic, a few rounds (the source's and the
    destination's agents each own a step): the moves left by a stopped
    command are ended by them, past a timeout of 0."""
    for _ in range(rounds):
        for host in cloud.hosts.values():
            assert host.running, host.name
            host.agent.move_step_timeout = 0.0
            assert host.agent.run_once().ok
        if all(m.status == MoveStatus.TO_CONFIRM for m in cloud.store.moves_in_force()):
            return


def restart_stopped(cloud: Cloud) -> None:
    for host in cloud.hosts.values():
        if not host.running:
            assert cloud.restart(host).ok


def run(cloud, mv, kind, consumer, flow_to, timeout, finish_timeout=None):
    """The move of ``kind`` (waiting ``timeout`` s for the destination's
    claim), then a confirm or a revert when ``flow_to`` asks for it (a
    point of theirs; waiting ``finish_timeout`` s, default ``timeout``)."""
    if kind == "resize":
        mv.resize(consumer, spec_of(cloud.sched, *pinned(1, 2, 1024)), timeout=timeout)
    else:
        mv.migrate(consumer, live=kind == "live-migrate", timeout=timeout)
    finish_timeout = timeout if finish_timeout is None else finish_timeout
    if flow_to in CONFIRM_POINTS:
        mv.confirm(consumer, timeout=finish_timeout)
    elif flow_to in REVERT_POINTS:
        mv.revert(consumer, timeout=finish_timeout)


def boot(cloud):
    """A new instance (1 dedicated CPU)."""
    sched = cloud.sched
    consumer = new_consumer()
    result = sched.schedule(spec_of(sched, *pinned(1, 1, 512)), consumer, "p", "u")
    assert result.placed, result.reasons
    return consumer, cloud.hosts[result.host]


def instance(cloud):
    """The module's instance (booted by the first case), and its host."""
    if cloud.instance is None:
        cloud.instance, _ = boot(cloud)
    decision = cloud.store.active_decision(cloud.instance)
    assert decision.status == "claimed" and cloud.store.active_move(cloud.instance) is None
    return cloud.instance, cloud.hosts[decision.host]


def end_case(cloud, mv, consumer):
    """The cloud as the next case expects it: every agent running, the
    instance without a move in force (one to confirm reverted)."""
    restart_stopped(cloud)
    if cloud.store.active_move(consumer) is not None:
        assert mv.revert(consumer, timeout=10).done
    settled(cloud)
    check_invariants(cloud)
    check_instances(cloud, [consumer])


def expected_after_mover_killed(point):
    if point in MOVE_POINTS[:-1]:
        return MoveStatus.ROLLED_BACK
    if point in CONFIRM_POINTS:
        return MoveStatus.CONFIRMED
    # NOTE: the destination claimed but the move was never recorded so:
    # undone as a revert (the destination freed first).
    return MoveStatus.REVERTED


@pytest.mark.parametrize("kind,point", MOVER_CASES)
def test_the_mover_stopped_between_two_steps(pair, mv, kind, point):
    cloud = pair
    consumer, source = instance(cloud)
    original = cloud.store.active_decision(consumer)
    before = cloud.allocations(consumer)

    def kill(at):
        if at == point:
            raise Killed(at)

    mv.inject = kill
    with pytest.raises(Killed):
        run(cloud, mv, kind, consumer, point, 10)
    check_invariants(cloud)
    move = cloud.store.latest_move(consumer)
    assert move.in_force, move

    agents_finish(cloud)
    move = cloud.store.latest_move(consumer)
    assert move.status == expected_after_mover_killed(point), move
    settled(cloud)
    check_invariants(cloud)
    check_instances(cloud, [consumer])
    dest = [h for h in cloud.hosts.values() if h is not source][0]
    if move.status == MoveStatus.CONFIRMED:
        assert not on_host(cloud, source, consumer)
        assert cloud.store.active_decision(consumer).host == dest.name
    else:
        # the instance keeps its source claim: the same decision, allocation
        assert cloud.store.active_decision(consumer).id == original.id
        assert cloud.allocations(consumer) == before
        assert not on_host(cloud, dest, consumer)
        assert source.agent.ledger.get(consumer).decision_id == original.id
    assert cloud.allocations(move.migration) == {}
    # idempotent: the command run again afterwards is done already
    again = (mv.confirm if move.status == MoveStatus.CONFIRMED else mv.revert)(
        consumer, timeout=10)
    assert again.done and again.already
    end_case(cloud, mv, consumer)


def test_the_mover_stopped_after_the_destinations_allocation_before_its_decision(
        pair, mv):
    """Inside the scheduler: its ``PUT /allocations/C`` on the destination
    made, the mover stopped before it submitted the decision (written here
    as the scheduler writes it). The source's agent deletes that orphan
    (no decision, the move past its timeout) and rolls back."""
    cloud = pair
    consumer, source = instance(cloud)
    dest = [h for h in cloud.hosts.values() if h is not source][0]
    before = cloud.allocations(consumer)

    killed_at(mv, "handed-over", lambda: mv.migrate(consumer))
    move = cloud.store.latest_move(consumer)
    held = mv.placement.get("/allocations/%s" % move.migration)
    # the same resources on the destination's providers of the same names
    by_name = {name: rp for rp, name in dest.providers.items()}
    mv.placement.put("/allocations/%s" % consumer, {
        "allocations": {
            by_name[source.providers[rp].replace(source.name, dest.name)]:
                {"resources": item["resources"]}
            for rp, item in held["allocations"].items()},
        "project_id": held["project_id"], "user_id": held["user_id"],
        "consumer_generation": None, "consumer_type": "INSTANCE"})
    assert set(cloud.allocations(consumer)) <= set(dest.providers)

    agents_finish(cloud)
    assert cloud.store.latest_move(consumer).status == MoveStatus.ROLLED_BACK
    assert cloud.allocations(consumer) == before
    settled(cloud)
    check_invariants(cloud)
    check_instances(cloud, [consumer])
    end_case(cloud, mv, consumer)


@pytest.fixture
def patient(pair):
    """Both agents of ``pair`` with a real ``move_step_timeout`` (60 s; the
    other cases leave it 0), restored after the case."""
    was = {h.name: h.agent.move_step_timeout for h in pair.hosts.values()}
    for host in pair.hosts.values():
        host.agent.move_step_timeout = 60.0
    yield pair
    for host in pair.hosts.values():
        host.agent.move_step_timeout = was[host.name]


def backdate(cloud, migration, seconds):
    """The move's last change ``seconds`` ago (its mover slow since)."""
    with cloud.store.db.write() as conn:
        row = conn.execute(sa.select(t_moves.c.updated_at).where(
            t_moves.c.migration == migration)).one()
        conn.execute(sa.update(t_moves).where(t_moves.c.migration == migration).values(
            updated_at=row.updated_at - datetime.timedelta(seconds=seconds)))


def test_a_slow_mover_whose_destination_just_claimed_is_not_overtaken(patient, mv):
    """The scheduler's wait for the destination took longer than the
    agents' ``move_step_timeout`` (the move unchanged since its hand-over);
    the destination claimed just now and the mover, alive, is about to
    record it. The agents' periodic there leaves the move to its mover: a
    move's progress is its destination's answer too."""
    cloud = patient
    consumer, source = instance(cloud)
    dest = [h for h in cloud.hosts.values() if h is not source][0]

    def slow(at):
        if at == "dest-claimed":
            backdate(cloud, cloud.store.active_move(consumer).migration, 120)
            for host in (source, dest):
                assert host.agent.run_once().ok

    mv.inject = slow
    result = mv.migrate(consumer, timeout=10)
    mv.inject = None
    assert result.moved and result.move.status == MoveStatus.TO_CONFIRM, result.move
    assert cloud.store.active_decision(consumer).host == dest.name
    assert mv.confirm(consumer, timeout=10).done
    settled(cloud)
    check_invariants(cloud)
    check_instances(cloud, [consumer])
    assert not on_host(cloud, source, consumer)
    end_case(cloud, mv, consumer)


def test_a_slow_mover_between_two_hosts_is_not_rolled_back(patient, mv):
    """The scheduler's first destination did not answer within its wait
    (longer than the agents' ``move_step_timeout``): its offer withdrawn
    just now, the scheduler alive, about to try the next host. The source's
    agent leaves the move (its scheduler's withdrawal is progress); once
    the move is left unchanged past the timeout (here: the mover stopped
    there), the agent rolls it back."""
    cloud = patient
    consumer, source = instance(cloud)
    dest = [h for h in cloud.hosts.values() if h is not source][0]

    killed_at(mv, "handed-over", lambda: mv.migrate(consumer, timeout=10))
    move = cloud.store.active_move(consumer)
    # what the scheduler writes of an offer its destination did not answer
    dest.stop()
    offer = cloud.store.submit_decision(consumer, dest.name, move.spec)
    protocol.withdraw(cloud.store, offer.id)
    backdate(cloud, move.migration, 120)

    assert source.agent.run_once().ok
    assert cloud.store.active_move(consumer).status == MoveStatus.HANDED_OVER
    check_invariants(cloud, up_only=True)

    assert cloud.restart(dest).ok
    agents_finish(cloud)
    assert cloud.store.latest_move(consumer).status == MoveStatus.ROLLED_BACK
    settled(cloud)
    check_invariants(cloud)
    check_instances(cloud, [consumer])
    end_case(cloud, mv, consumer)


def test_an_agent_makes_a_step_only_from_the_status_it_saw(patient, mv):
    """The source's agent read the move handed-over with a claimed
    destination (its mover stopped there, past the timeout); before the
    agent's step the mover -- slow, not dead -- recorded the claim (to
    confirm). The agent's revert request, from handed-over, is refused by
    the store: a move to confirm is the operator's, never reverted behind
    its back."""
    cloud = patient
    consumer, source = instance(cloud)

    killed_at(mv, "dest-claimed", lambda: mv.migrate(consumer, timeout=10))
    move = cloud.store.active_move(consumer)
    assert move.status == MoveStatus.HANDED_OVER
    claimed = cloud.store.active_decision(consumer)
    backdate(cloud, move.migration, 120)

    def the_mover_records_the_claim():
        if cloud.store.active_move(consumer).status == MoveStatus.HANDED_OVER:
            protocol.apply_move(cloud.store, move, protocol.MoveStep.CLAIMED,
                                dest=claimed.host, dest_decision=claimed.id)

    def no_release(consumer, decision):
        raise AssertionError("released %s" % consumer)

    finisher = MoveFinisher(source.name, cloud.store, mv.placement, 60.0,
                            follow=the_mover_records_the_claim, release=no_release)
    assert finisher.finish() == []
    assert cloud.store.active_move(consumer).status == MoveStatus.TO_CONFIRM
    assert mv.confirm(consumer, timeout=10).done
    settled(cloud)
    check_invariants(cloud)
    check_instances(cloud, [consumer])
    end_case(cloud, mv, consumer)


def expected_after_agent_stopped(who, point):
    if who == "dest" and point in MOVE_POINTS[:-1]:
        # NOTE: nobody claims: the scheduler withdraws, the mover rolls back
        return MoveStatus.ROLLED_BACK
    if point in CONFIRM_POINTS:
        return MoveStatus.CONFIRMED
    if point in REVERT_POINTS:
        return MoveStatus.REVERTED
    return MoveStatus.TO_CONFIRM


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("who", ["source", "dest"])
def test_an_agent_stopped_between_two_steps_and_restarted(pair, mv, who, point):
    """A cold migration's command goes on (a side it needs waits ``SHORT``
    s and says so); the agent restarted, the agents end what is left. (A
    resize's steps are a migration's: the agents see no difference.)"""
    cloud, kind = pair, "migrate"
    consumer, source = instance(cloud)
    dest = [h for h in cloud.hosts.values() if h is not source][0]
    stopped = source if who == "source" else dest

    def stop(at):
        if at == point:
            stopped.stop()

    mv.inject = stop
    # NOTE: only a wait for the stopped agent is short (a running one may
    # be slow on a loaded machine): the destination's claim, the source's
    # release at confirm, the destination's at revert.
    run(cloud, mv, kind, consumer, point,
        SHORT if who == "dest" and point in MOVE_POINTS[:-1] else 10,
        SHORT if (who, point in CONFIRM_POINTS) == ("source", True)
        or (who, point in REVERT_POINTS) == ("dest", True) else 10)
    mv.inject = None
    assert not stopped.running
    check_invariants(cloud)

    assert cloud.restart(stopped).ok
    agents_finish(cloud)
    move = cloud.store.latest_move(consumer)
    assert move.status == expected_after_agent_stopped(who, point), move
    settled(cloud)
    check_invariants(cloud)
    check_instances(cloud, [consumer])
    end_case(cloud, mv, consumer)


# -- evacuate -----------------------------------------------------------------

EVACUATE_POINTS = ("fenced",) + MOVE_POINTS + ("evacuate-claimed", "evacuate-dropped")


@pytest.fixture(scope="module")
def trio(placement, tmp_path_factory):
    """A host to evacuate and a spare, shared by the evacuation cases."""
    cloud = shared_cloud(placement, str(tmp_path_factory.mktemp("evacuate")), "dead",
                         "spare")
    yield cloud
    cloud.close()


@pytest.mark.parametrize("point", EVACUATE_POINTS)
def test_an_evacuation_stopped_between_two_steps(trio, mv, point):
    """The evacuating command killed at ``point`` while the host is down
    (its agent stopped; ``--force-down``); the host's agent comes back:
    the instance is either on the spare (its claims on the host dropped) or
    still on the host (rolled back), and the evacuation's fence is lifted
    once the agent reconciled."""
    cloud = trio
    dead, spare = (h for h in cloud.hosts.values())
    cloud.store.disable_host(spare.name, "booting on the other", "test")
    consumer, host = boot(cloud)
    cloud.store.enable_host(spare.name)
    assert host is dead

    dead.stop()
    killed_at(mv, point, lambda: mv.evacuate(dead.name, force_down=True, timeout=10))
    fence = cloud.store.disabled_hosts()[dead.name]
    assert (fence.kind, fence.reason) == ("evacuated", FENCE_REASON)
    check_invariants(cloud, up_only=True)

    assert cloud.restart(dead).ok
    agents_finish(cloud)
    move = cloud.store.latest_move(consumer)
    settled(cloud)
    check_invariants(cloud)
    check_instances(cloud, [consumer])
    if point in ("evacuate-claimed", "evacuate-dropped", "dest-claimed"):
        # the new claim held: the evacuation completed by the host's agent
        assert move.status == MoveStatus.CONFIRMED, move
        assert cloud.store.active_decision(consumer).host == spare.name
        assert not on_host(cloud, dead, consumer) and ledger_keys(dead) == set()
    else:
        assert move is None or move.status == MoveStatus.ROLLED_BACK, move
        assert cloud.store.active_decision(consumer).host == dead.name
    # back and reconciled: its fence lifted, by its agent
    assert cloud.store.disabled_hosts() == {}
    assert cloud.sched.release(consumer, timeout=10).outcome == "released"
    settled(cloud)
    check_invariants(cloud)


def test_an_operators_disable_is_never_lifted_by_the_evacuated_agent(trio, mv):
    """An operator disabled the evacuated host meanwhile (``host
    disable``): its record is the operator's now; the agent, back and
    reconciled, leaves it."""
    cloud = trio
    dead, spare = (h for h in cloud.hosts.values())
    dead.stop()
    done = mv.evacuate(dead.name, force_down=True, timeout=10)
    assert done.evacuated
    cloud.store.disable_host(dead.name, "motherboard swap", "ops@desk")
    assert cloud.restart(dead).ok
    agents_finish(cloud)
    record = cloud.store.disabled_hosts()[dead.name]
    assert (record.kind, record.reason) == ("operator", "motherboard swap")
    cloud.store.enable_host(dead.name)
    assert dead.agent.run_once().ok
