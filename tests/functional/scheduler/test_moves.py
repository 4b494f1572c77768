"""Resize, migration, confirm and revert (issue 21) against real Placement
(embedded), a real host-state store and each host's real agent running
(:mod:`tests.functional.scheduler.cloud`): Placement's consumers as nova
keeps them (the migration consumer on the source, the instance on the
destination), both ledgers, and the invariants after every step."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from compute_plugins.compute.release import ReleaseRefused
from compute_plugins.hoststate.records import DecisionStatus, MoveStatus
from compute_plugins.scheduler import audit, liveness
from compute_plugins.scheduler.moves import FENCE_REASON, MoveError
from tests.functional.request.hosts import HEADERS, cell
from tests.functional.scheduler.moving import (
    check_invariants,
    killed_at,
    ledger_keys,
    mover,
    on_host,
    settled,
)
from tests.functional.scheduler.test_host_disable import cli  # noqa: F401 - fixture
from tests.functional.scheduler.test_schedule import new_consumer, pinned, spec_of


def two_hosts(cloud):
    a = cloud.add_host("a", [cell(4, 4096)], dedicated="0-3")
    b = cloud.add_host("b", [cell(4, 4096)], dedicated="0-3")
    return a, b


def boot(cloud, sched, spec):
    consumer = new_consumer()
    result = sched.schedule(spec, consumer, "p", "u")
    assert result.placed, result.reasons
    return consumer, cloud.hosts[result.host]


def test_resize_to_another_host_then_confirm(cloud):
    a, b = two_hosts(cloud)
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    dest = b if source is a else a
    before = cloud.allocations(consumer)

    moved = mv.resize(consumer, spec_of(sched, *pinned(1, 3, 2048)))
    assert moved.moved, moved.schedule.reasons
    move = moved.move
    assert (move.kind, move.source, move.dest, move.status) == (
        "resize", source.name, dest.name, MoveStatus.TO_CONFIRM)
    # Placement as nova: the migration consumer holds the source's
    # allocation, the instance the destination's (the new flavor's)
    assert cloud.allocations(move.migration) == before
    after = cloud.allocations(consumer)
    assert set(after) <= set(dest.providers)
    assert sum(r.get("PCPU", 0) for r in after.values()) == 3
    # both ledgers: the source's claim is the migration consumer's now
    settled(cloud)
    assert ledger_keys(source) == {move.migration}
    assert ledger_keys(dest) == {consumer}
    check_invariants(cloud)
    # the audit agrees: each consumer's allocation is its decision's
    assert audit.audit(mv.placement, cloud.store, {}) == []
    # a second move of a moving instance, and its release, are refused
    with pytest.raises(MoveError, match="is moving already .*resize from host %s to "
                       "host %s \\(to-confirm\\)" % (source.name, dest.name)) as err:
        mv.migrate(consumer)
    assert err.value.exit_code == 2

    done = mv.confirm(consumer, timeout=10)
    assert done.done and not done.already
    assert done.move.status == MoveStatus.CONFIRMED
    assert cloud.allocations(move.migration) == {}
    assert not on_host(cloud, source, consumer) and ledger_keys(source) == set()
    assert cloud.usage(source) == {}
    check_invariants(cloud)
    again = mv.confirm(consumer, timeout=10)
    assert again.done and again.already
    # the instance is released as any, from its new host
    assert sched.release(consumer, timeout=10).outcome == "released"
    check_invariants(cloud)
    assert cloud.usage(dest) == {}


def test_migrate_then_revert_gives_the_source_claim_back(cloud):
    a, b = two_hosts(cloud)
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    dest = b if source is a else a
    original = cloud.store.active_decision(consumer)
    before = cloud.allocations(consumer)

    moved = mv.migrate(consumer)
    assert moved.moved and moved.move.dest == dest.name
    check_invariants(cloud)

    done = mv.revert(consumer, timeout=10)
    assert done.done and done.move.status == MoveStatus.REVERTED
    assert cloud.allocations(consumer) == before
    assert cloud.allocations(moved.move.migration) == {}
    assert not on_host(cloud, dest, consumer) and cloud.usage(dest) == {}
    # the original claim, the same decision, the instance's again
    assert cloud.store.active_decision(consumer) == cloud.store.get_decision(original.id)
    assert cloud.store.active_decision(consumer).consumer == consumer
    settled(cloud)
    assert ledger_keys(source) == {consumer}
    assert source.agent.ledger.get(consumer).decision_id == original.id
    check_invariants(cloud)
    assert mv.revert(consumer, timeout=10).already
    with pytest.raises(MoveError, match="ended reverted: nothing to confirm"):
        mv.confirm(consumer)


def test_resize_to_the_same_host_only_when_allowed(cloud):
    only = cloud.add_host("only", [cell(4, 4096)], dedicated="0-3")
    sched = cloud.scheduler()
    consumer, _ = boot(cloud, sched, spec_of(sched, *pinned(1, 1, 512)))
    bigger = spec_of(sched, *pinned(1, 2, 1024))

    refused = mover(cloud).resize(consumer, bigger)
    assert not refused.moved and refused.move.status == MoveStatus.ROLLED_BACK
    assert [r.reason for h in refused.schedule.reasons for r in h.reasons
            if h.host == only.name][0].startswith("the instance is on this host")
    check_invariants(cloud)
    assert cloud.store.active_decision(consumer).consumer == consumer

    moved = mover(cloud, allow_resize_to_same_host=True).resize(consumer, bigger)
    assert moved.moved and moved.move.dest == only.name
    settled(cloud)
    # the host holds both until confirm, as in nova
    assert ledger_keys(only) == {consumer, moved.move.migration}
    assert sum(r.get("PCPU", 0) for r in cloud.usage(only).values()) == 3
    check_invariants(cloud)
    assert mover(cloud).confirm(consumer, timeout=10).done
    settled(cloud)
    assert ledger_keys(only) == {consumer}
    assert sum(r.get("PCPU", 0) for r in cloud.usage(only).values()) == 2
    check_invariants(cloud)


def test_a_flavor_that_fits_nowhere_changes_nothing(cloud):
    a, b = two_hosts(cloud)
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    before = cloud.allocations(consumer)
    result = mv.resize(consumer, spec_of(sched, *pinned(1, 8, 1024)))
    assert not result.moved and result.move.status == MoveStatus.ROLLED_BACK
    assert {h.host for h in result.schedule.reasons} == {a.name, b.name}
    assert all(h.reasons for h in result.schedule.reasons)
    assert cloud.allocations(consumer) == before
    assert cloud.allocations(result.move.migration) == {}
    settled(cloud)
    assert ledger_keys(source) == {consumer}
    check_invariants(cloud)
    # the instance may move again (no move in force)
    assert mv.migrate(consumer).moved


def test_bad_input_is_one_line_and_changes_nothing(cloud, cli):  # noqa: F811
    a, b = two_hosts(cloud)
    sched = cloud.scheduler()
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    other = b if source is a else a
    unknown = new_consumer()
    assert cli("migrate", "--consumer", unknown) == (
        1, "", "compute-plugins: error: consumer %s: no decision was ever made for "
        "it\n" % unknown)
    assert cli("confirm", "--consumer", consumer) == (
        1, "", "compute-plugins: error: consumer %s: no move to confirm (it never "
        "moved)\n" % consumer)
    assert cli("migrate", "--consumer", consumer, "--host", "nowhere") == (
        2, "", "compute-plugins: error: host nowhere is not in the host-state store "
        "(no agent published it)\n")
    assert cli("migrate", "--consumer", consumer, "--host", source.name)[0] == 2
    cloud.store.disable_host(other.name, "firmware", "ops@desk")
    assert cli("migrate", "--consumer", consumer, "--host", other.name) == (
        2, "", "compute-plugins: error: host %s is disabled: firmware\n" % other.name)
    assert cloud.store.latest_move(consumer) is None
    check_invariants(cloud)
    cloud.store.enable_host(other.name)

    code, out, err = cli("migrate", "--consumer", consumer, "--host", other.name,
                         "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert (doc["status"], doc["source"], doc["dest"]) == ("to-confirm", source.name,
                                                            other.name)
    code, out, err = cli("release", "--consumer", consumer)
    assert (code, out) == (2, "")
    assert "is moving (migrate from host %s to host %s (to-confirm)): confirm or " \
        "revert it first" % (source.name, other.name) in err
    code, out, err = cli("confirm", "--consumer", consumer)
    assert (code, err) == (0, "")
    assert out.startswith("consumer %s: migrate confirmed: host %s freed"
                          % (consumer, source.name))
    code, out, err = cli("confirm", "--consumer", consumer)
    assert (code, err) == (0, "")
    assert out == ("consumer %s: already confirmed (migrate from host %s to host %s "
                   "(confirmed)); nothing changed" % (consumer, source.name, other.name))
    assert cli("revert", "--consumer", consumer)[0] == 2
    check_invariants(cloud)


def test_live_migration_yields_the_destinations_pinning_and_confirms_itself(cloud):
    a = cloud.add_host("a", [cell(4, 4096)], dedicated="0-3")
    b = cloud.add_host("b", [cell(4, 4096)], dedicated="0-3")
    sched, mv = cloud.scheduler(), mover(cloud)
    # a first guest takes its host's first CPUs; the second goes to the
    # other host and migrates onto the first's: its pinning there differs
    first, _ = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    assert source.name != cloud.store.active_decision(first).host
    dest = b if source is a else a
    before = cloud.allocations(consumer)
    seen = []

    def on_claimed(result):
        # the destination claimed, the confirm step not made yet: Placement
        # as nova's live migration has it then, both consumers held
        seen.append(result.move.status)
        assert cloud.allocations(result.move.migration) == before
        assert set(cloud.allocations(consumer)) <= set(dest.providers)
        settled(cloud)
        assert ledger_keys(source) == {result.move.migration}
        check_invariants(cloud)

    moved = mv.migrate(consumer, live=True, on_claimed=on_claimed)
    assert seen == [MoveStatus.TO_CONFIRM]
    assert moved.moved and moved.move.kind == "live-migrate"
    xml = moved.guest_xml
    assert xml is not None and "instance-%s" % consumer in xml
    dest_cpus = sorted(h for part in moved.schedule.spec.decision.assignments[
        "numa"].cells for h in part.pinning.values())
    assert dest_cpus == [2, 3]
    for cpu in dest_cpus:
        assert 'cpuset="%d"' % cpu in xml
    # no confirm step for the caller: the source is freed already, as
    # nova's post-live-migration does
    assert moved.move.status == MoveStatus.CONFIRMED and not moved.waiting
    assert moved.confirmed.done and not moved.confirmed.already
    assert cloud.allocations(moved.move.migration) == {}
    assert not on_host(cloud, source, consumer) and cloud.usage(source) == {}
    assert on_host(cloud, dest, consumer)
    assert cloud.store.active_move(consumer) is None
    check_invariants(cloud)
    # a confirm after it is a no-op; a revert is refused (it ended confirmed)
    assert mv.confirm(consumer, timeout=10).already
    with pytest.raises(MoveError, match="ended confirmed: nothing to revert"):
        mv.revert(consumer)


def test_a_live_migration_whose_source_agent_is_stopped_is_finished_by_a_rerun(
        cloud, cli):  # noqa: F811
    """The source's agent does not free its side in time: ``migrate --live``
    says the move is claimed and its confirm not finished (exit 1, run it
    again); re-run once the agent is back, it finishes the confirm (nothing
    scheduled again) and prints the destination's XML again."""
    a, b = two_hosts(cloud)
    sched = cloud.scheduler()
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    dest = b if source is a else a
    source.stop()
    code, out, err = cli("migrate", "--consumer", consumer, "--live", "--timeout", "0.5")
    assert code == 1
    move = cloud.store.active_move(consumer)
    assert (move.kind, move.status, move.dest) == ("live-migrate", MoveStatus.CONFIRMING,
                                                   dest.name)
    assert err == ("compute-plugins: error: consumer %s: live-migrated from host %s to "
                   "host %s, its confirm not finished: host %s's agent did not free its "
                   "side within 0.5 s (is it running?); run it again (or "
                   "`compute-plugins confirm --consumer %s`)\n"
                   % (consumer, source.name, dest.name, source.name, consumer))
    assert "<domain" in out and "instance-%s" % consumer in out
    # the source still holds its side (the migration consumer's)
    assert set(cloud.allocations(move.migration)) <= set(source.providers)
    # a cold migrate, or a live one to another host, is refused meanwhile
    assert cli("migrate", "--consumer", consumer)[0] == 2
    assert cli("migrate", "--consumer", consumer, "--live", "--host", source.name)[0] == 2

    cloud.restart(source)
    code, out, err = cli("migrate", "--consumer", consumer, "--live", "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert (doc["status"], doc["source"], doc["dest"], doc["waiting"]) == (
        "confirmed", source.name, dest.name, None)
    assert doc["migration"] == move.migration and doc["destination"] is None
    assert "instance-%s" % consumer in doc["guest_xml"]
    assert cloud.allocations(move.migration) == {}
    settled(cloud)
    assert not on_host(cloud, source, consumer)
    check_invariants(cloud)
    code, out, err = cli("confirm", "--consumer", consumer)
    assert (code, err) == (0, "") and "already confirmed" in out


def test_migrate_live_says_it_confirmed_and_prints_the_destination_xml(
        cloud, cli):  # noqa: F811
    a, b = two_hosts(cloud)
    sched = cloud.scheduler()
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    dest = b if source is a else a
    code, out, err = cli("migrate", "--consumer", consumer, "--live")
    assert (code, err) == (0, "")
    move = cloud.store.latest_move(consumer)
    assert move.status == MoveStatus.CONFIRMED
    said = "%s: live-migrated from host %s to host %s, confirmed: host %s freed " \
        "(migration consumer %s released)" % (consumer, source.name, dest.name,
                                               source.name, move.migration)
    text, xml = out.split("<domain", 1)
    # NOTE: the line is wrapped at 100 columns; the XML follows it
    assert " ".join(text.split()).endswith(said)
    assert xml.rstrip().endswith("</domain>") and "instance-%s" % consumer in xml
    assert cloud.usage(source) == {}
    check_invariants(cloud)


def test_a_live_migration_interrupted_before_its_confirm_is_finished_by_confirm(cloud):
    """The command killed once the destination claimed, before its confirm
    step: the move is to confirm, and ``confirm`` finishes it as the
    command would have."""
    two_hosts(cloud)
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))

    class Killed(Exception):
        pass

    def killed(result):
        raise Killed

    with pytest.raises(Killed):
        mv.migrate(consumer, live=True, on_claimed=killed)
    assert cloud.store.active_move(consumer).status == MoveStatus.TO_CONFIRM
    check_invariants(cloud)
    done = mv.confirm(consumer, timeout=10)
    assert done.done and done.move.status == MoveStatus.CONFIRMED
    assert not on_host(cloud, source, consumer)
    check_invariants(cloud)


def test_a_source_agent_stopped_during_the_move_rekeys_its_ledger_on_restart(cloud):
    a, b = two_hosts(cloud)
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    source.stop()
    moved = mv.migrate(consumer)
    assert moved.moved
    # the stopped agent's ledger still names the instance; its restart
    # (a new agent, the ledger read from disk) re-keys it, frees nothing
    assert ledger_keys(source) == {consumer}
    result = cloud.restart(source)
    assert result.ok and not result.releases
    assert ledger_keys(source) == {moved.move.migration}
    check_invariants(cloud)
    assert mv.revert(consumer, timeout=10).done
    settled(cloud)
    assert ledger_keys(source) == {consumer}
    check_invariants(cloud)


class RacingWriter:
    """The real Placement client, except that before its first ``POST
    /allocations`` another writer rewrites the instance's allocation (same
    resources, a new consumer generation): Placement's 409, for real."""

    def __init__(self, client, consumer):
        self._client = client
        self._consumer = consumer
        self.conflicts = 0

    def __getattr__(self, name):
        return getattr(self._client, name)

    def post(self, path, body=None, **kw):
        if path == "/allocations" and not self.conflicts:
            held = self._client.get("/allocations/%s" % self._consumer)
            self._client.put("/allocations/%s" % self._consumer, {
                "allocations": {rp: {"resources": a["resources"]}
                                for rp, a in held["allocations"].items()},
                "project_id": held["project_id"], "user_id": held["user_id"],
                "consumer_generation": held["consumer_generation"],
                "consumer_type": "INSTANCE"})
            self.conflicts += 1
        return self._client.post(path, body, **kw)


def test_a_consumer_generation_conflict_is_read_again_and_retried(cloud):
    two_hosts(cloud)
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    before = cloud.allocations(consumer)
    mv.placement = racing = RacingWriter(mv.placement, consumer)
    moved = mv.migrate(consumer)
    assert racing.conflicts == 1 and moved.moved
    assert cloud.allocations(moved.move.migration) == before
    check_invariants(cloud)


def hand_over(cloud, mv, consumer, source, decision):
    """A migration's first steps as its mover makes them (the move
    recorded, the allocation handed to the migration consumer, the decision
    re-keyed, the status handed-over), then nothing more: a mover killed
    there."""
    from compute_plugins.hoststate import protocol
    from compute_plugins.placement import migration

    move = cloud.store.start_move(new_consumer(), consumer, "migrate", source.name,
                                  decision.id, decision.spec)
    migration.move_allocations(mv.placement, consumer, move.migration,
                               migration.MIGRATION, migration.INSTANCE)
    cloud.store.rekey_decision(decision.id, consumer, move.migration)
    protocol.apply_move(cloud.store, move, protocol.MoveStep.HAND_OVER)
    return move


def test_a_move_whose_mover_stopped_after_the_hand_over_is_undone_by_revert(cloud):
    a, b = two_hosts(cloud)
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    decision = cloud.store.active_decision(consumer)
    before = cloud.allocations(consumer)
    # the mover's first steps, then it is killed (nothing offered to a host)
    hand_over(cloud, mv, consumer, source, decision)
    check_invariants(cloud)
    with pytest.raises(MoveError, match="is moving already"):
        mv.migrate(consumer)
    with pytest.raises(MoveError, match="cannot be confirmed: revert undoes it"):
        mv.confirm(consumer)

    done = mv.revert(consumer, timeout=10)
    assert done.done and done.move.status == MoveStatus.REVERTED
    assert cloud.allocations(consumer) == before
    assert cloud.store.active_decision(consumer).id == decision.id
    settled(cloud)
    assert ledger_keys(source) == {consumer}
    check_invariants(cloud)
    assert mv.migrate(consumer).moved


def test_evacuate_a_down_host_fences_it_and_its_agent_drops_the_claims_on_return(
        cloud, cli):  # noqa: F811
    dead = cloud.add_host("dead", [cell(4, 4096)], dedicated="0-3", lease_duration=1.0)
    sched = cloud.scheduler()
    on_dead = [boot(cloud, sched, spec_of(sched, *pinned(1, 1, 512)))[0]
               for _ in range(2)]
    spare = cloud.add_host("spare", [cell(4, 4096)], dedicated="0-3")
    # an up host is refused, nothing changed
    code, out, err = cli("evacuate", "--host", dead.name)
    assert (code, out) == (2, "")
    assert "host %s is not down" % dead.name in err
    assert cloud.store.disabled_hosts() == {}

    dead.stop()
    settle = time.monotonic() + 10
    while dead.name not in liveness.read(cloud.store).down:
        assert time.monotonic() < settle, "the lease did not expire"
        time.sleep(0.1)
    code, out, err = cli("evacuate", "--host", dead.name, "--format", "json")
    assert (code, err) == (0, ""), out
    doc = json.loads(out)
    assert doc["fence"]["reason"] == FENCE_REASON
    assert sorted(i["consumer"] for i in doc["instances"]) == sorted(on_dead)
    assert {(i["status"], i["dest"]) for i in doc["instances"]} == {
        ("confirmed", spare.name)}
    for item in doc["instances"]:
        # the instance on the spare host; nothing of it in Placement on the dead one
        assert cloud.store.active_decision(item["consumer"]).host == spare.name
        assert cloud.allocations(item["migration"]) == {}
        assert set(cloud.allocations(item["consumer"])) <= set(spare.providers)
    assert cloud.usage(dead) == {}
    fence = cloud.store.disabled_hosts()[dead.name]
    assert fence.kind == "evacuated"
    # fenced: no decision goes to it while it is down
    assert sched.schedule(spec_of(sched, *pinned(1, 1, 512)), new_consumer(), "p",
                          "u").host == spare.name
    # the dead agent's ledger still holds its claims; back, it drops them,
    # and then lifts its evacuation's fence (the trait too)
    assert len(dead.agent.ledger.entries()) == 2
    result = cloud.restart(dead)
    assert result.ok
    settled(cloud)
    assert ledger_keys(dead) == set()
    check_invariants(cloud)
    assert cloud.store.disabled_hosts() == {}
    assert "COMPUTE_STATUS_DISABLED" not in cloud.placement.session.request(
        cloud.placement.emb_url("/resource_providers/%s/traits" % dead.root), "GET",
        headers=HEADERS).json()["traits"]


def test_evacuate_reads_the_liveness_of_its_host_only(cloud):
    """Whether the host to evacuate is down is read for that host alone
    (one row), not for every host of the store (one row per host: 10,000
    at 10,000 hosts, for one answer)."""
    up = cloud.add_host("up", [cell(4, 4096)], dedicated="0-3")
    cloud.add_host("other", [cell(4, 4096)], dedicated="0-3")
    real = cloud.store
    asked: list[Any] = []

    class Recording:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def host_statuses(self, hosts: Any = None) -> Any:
            asked.append(None if hosts is None else sorted(hosts))
            return real.host_statuses(hosts)

    mv = mover(cloud)
    mv.store = Recording()
    with pytest.raises(MoveError, match="host %s is not down" % up.name):
        mv.evacuate(up.name)
    assert asked == [[up.name]]
    assert real.disabled_hosts() == {}


def test_a_revert_while_the_destination_agent_is_stopped_finishes_when_run_again(
        cloud, cli):  # noqa: F811
    a, b = two_hosts(cloud)
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    before = cloud.allocations(consumer)
    moved = mv.migrate(consumer)
    dest = cloud.hosts[moved.move.dest]
    dest.stop()
    code, out, err = cli("revert", "--consumer", consumer, "--timeout", "0.3")
    assert (code, out) == (1, "")
    assert err == ("compute-plugins: error: consumer %s: revert requested, not "
                   "finished: host %s's agent did not free its side within 0.3 s (is "
                   "it running?); run it again\n" % (consumer, dest.name))
    assert cloud.store.active_move(consumer).status == MoveStatus.REVERTING
    # nothing given back yet: the destination still holds its claim
    assert set(cloud.allocations(consumer)) <= set(dest.providers)
    # its agent back (a restart: the ledger read from disk), the revert re-run
    cloud.restart(dest)
    code, out, err = cli("revert", "--consumer", consumer)
    assert (code, err) == (0, "")
    assert out == ("consumer %s: migrate reverted: host %s freed; the instance keeps "
                   "its claim on host %s" % (consumer, dest.name, source.name))
    assert cloud.allocations(consumer) == before
    assert not on_host(cloud, dest, consumer)
    settled(cloud)
    check_invariants(cloud)


def test_the_migration_consumer_is_not_released_behind_the_move(cloud, cli):  # noqa: F811
    """``release`` of the migration consumer a move printed would free the
    source behind the move (its revert then has nothing to give back):
    refused as the instance's release is, nothing changed."""
    two_hosts(cloud)
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    before = cloud.allocations(consumer)
    moved = mv.migrate(consumer)
    assert moved.moved
    code, out, err = cli("release", "--consumer", moved.move.migration)
    assert (code, out) == (2, "")
    assert err == ("compute-plugins: error: consumer %s is the migration consumer of "
                   "a move in force (%s): confirm or revert it\n"
                   % (moved.move.migration, moved.move.describe()))
    assert cloud.allocations(moved.move.migration) == before
    assert mv.revert(consumer, timeout=10).done
    assert cloud.allocations(consumer) == before
    settled(cloud)
    check_invariants(cloud)


def test_an_instance_without_allocation_is_refused_not_left_moving(cloud):
    """Its allocation gone from Placement (deleted behind its back): the
    move is refused in one line and rolled back; the instance is not left
    with a move in force nobody can end."""
    two_hosts(cloud)
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    mv.placement.delete_allocations(consumer)
    with pytest.raises(MoveError, match="has no allocation in Placement") as err:
        mv.migrate(consumer)
    assert err.value.exit_code == 1
    assert cloud.store.active_move(consumer) is None
    assert cloud.store.latest_move(consumer).status == MoveStatus.ROLLED_BACK
    assert cloud.store.active_decision(consumer).consumer == consumer
    assert sched.release(consumer, timeout=10).outcome == "released"


def test_an_evacuation_interrupted_before_its_end_is_finished_by_confirm(cloud):
    """The evacuating command killed once the new claim held (before the
    old allocation was deleted): the re-run skips the instance ("confirm or
    revert it first"), and confirm finishes it though the host is down:
    nothing of the instance left on the dead host."""
    dead = cloud.add_host("dead", [cell(4, 4096)], dedicated="0-3", lease_duration=1.0)
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer, _ = boot(cloud, sched, spec_of(sched, *pinned(1, 1, 512)))
    spare = cloud.add_host("spare", [cell(4, 4096)], dedicated="0-3")
    dead.stop()
    settle = time.monotonic() + 10
    while dead.name not in liveness.read(cloud.store).down:
        assert time.monotonic() < settle, "the lease did not expire"
        time.sleep(0.1)
    # what `evacuate` does for the instance, up to its new claim; then killed
    decision = cloud.store.active_decision(consumer)
    from compute_plugins.request.spec import RequestSpec

    spec = RequestSpec.from_json(decision.spec, mv.plugins).with_decision(None)
    held = mv._move("evacuate", consumer, decision, spec, allow_source=False, only=None,
                    timeout=10)
    assert held.moved and held.move.dest == spare.name
    again = mv.evacuate(dead.name)
    assert not again.evacuated and consumer in again.skipped

    done = mv.confirm(consumer, timeout=1)
    assert done.done, done.waiting
    assert done.move.status == MoveStatus.CONFIRMED
    assert cloud.allocations(held.move.migration) == {}
    assert cloud.usage(dead) == {}
    assert cloud.store.active_decision(consumer).host == spare.name
    # back, its agent drops the claim
    assert cloud.restart(dead).ok
    settled(cloud)
    assert not on_host(cloud, dead, consumer) and ledger_keys(dead) == set()
    check_invariants(cloud)


@pytest.mark.parametrize("wait", [False, True], ids=["releasing", "released"])
def test_a_release_between_the_movers_check_and_its_start_wins(cloud, cli, wait):  # noqa: F811
    """``release`` of the instance landing between the mover's check and
    the move's start: the hand-over (from claimed only) refuses the claim
    being released, the move is rolled back (exit 2) and the release done;
    the instance is not moved to another host instead of being freed.
    ``released``: the host's agent was quick, the release is done (the
    decision released, not releasing) before the hand-over; giving back
    finds nothing in force (it raised "cannot be given ... released")."""
    two_hosts(cloud)
    sched, mv = cloud.scheduler(), mover(cloud)
    store = cloud.store
    consumer, _ = boot(cloud, sched, spec_of(sched, *pinned(1, 1, 512)))
    real_start = store.start_move
    answers = []

    def release_first(migration_id, instance, *args):
        answers.append(cli("release", "--consumer", instance,
                           *(() if wait else ("--no-wait",))))
        if wait:  # the release command waited for the agent
            assert store.latest_decision(instance).status == DecisionStatus.RELEASED
        return real_start(migration_id, instance, *args)

    store.start_move = release_first
    try:
        with pytest.raises(MoveError, match="being released") as err:
            mv.migrate(consumer)
    finally:
        del store.start_move
    assert err.value.exit_code == 2 and answers[0][0] == 0
    assert store.latest_move(consumer).status == MoveStatus.ROLLED_BACK
    settled(cloud)
    assert store.active_decision(consumer) is None and cloud.allocations(consumer) == {}
    assert all(cloud.usage(h) == {} for h in cloud.hosts.values())
    check_invariants(cloud)


def test_a_move_off_a_host_evacuated_since_is_confirmed_without_that_host(cloud):
    """A migration to confirm, then its source dies and is evacuated (the
    instance skipped: its move is in force): confirm frees the source's
    side as evacuate does, instead of waiting for a fenced dead host."""
    src = cloud.add_host("src", [cell(4, 4096)], dedicated="0-3", lease_duration=1.0)
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer, _ = boot(cloud, sched, spec_of(sched, *pinned(1, 1, 512)))
    dst = cloud.add_host("dst", [cell(4, 4096)], dedicated="0-3")
    moved = mv.migrate(consumer)
    assert moved.moved and moved.move.dest == dst.name
    src.stop()
    settle = time.monotonic() + 10
    while src.name not in liveness.read(cloud.store).down:
        assert time.monotonic() < settle, "the lease did not expire"
        time.sleep(0.1)
    evacuated = mv.evacuate(src.name)
    assert consumer in evacuated.skipped and not evacuated.moves

    done = mv.confirm(consumer, timeout=1)
    assert done.done, done.waiting
    assert cloud.allocations(moved.move.migration) == {} and cloud.usage(src) == {}
    assert cloud.restart(src).ok
    settled(cloud)
    assert not on_host(cloud, src, consumer) and ledger_keys(src) == set()
    check_invariants(cloud)


def test_a_moves_migration_consumer_is_not_moved_itself(cloud):
    """The migration consumer a move printed, given to ``migrate`` or
    ``resize``: refused (exit 2), nothing changed; the move it belongs to
    still confirms."""
    a, b = two_hosts(cloud)
    cloud.add_host("c", [cell(4, 4096)], dedicated="0-3")
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    moved = mv.migrate(consumer)
    held = cloud.allocations(moved.move.migration)
    for attempt in (lambda: mv.migrate(moved.move.migration),
                    lambda: mv.resize(moved.move.migration,
                                      spec_of(sched, *pinned(1, 1, 512)))):
        with pytest.raises(MoveError, match="is the migration consumer of a move in "
                           "force") as err:
            attempt()
        assert err.value.exit_code == 2
    assert cloud.store.latest_move(moved.move.migration) is None
    assert cloud.allocations(moved.move.migration) == held
    assert mv.confirm(consumer, timeout=10).done
    assert not on_host(cloud, source, consumer) and cloud.usage(source) == {}
    check_invariants(cloud)


def test_a_confirm_or_revert_that_another_one_finished_meanwhile_is_done_already(
        cloud, monkeypatch):
    """Two confirms (or reverts) of the same move at once, as a retry while
    the first still waits: the one that finishes second says "already"
    (exit 0), not an error."""
    from compute_plugins.hoststate import protocol
    from compute_plugins.scheduler import moves

    two_hosts(cloud)
    sched, mv = cloud.scheduler(), mover(cloud)
    kept, _ = boot(cloud, sched, spec_of(sched, *pinned(1, 1, 512)))
    back, _ = boot(cloud, sched, spec_of(sched, *pinned(1, 1, 512)))
    assert mv.migrate(kept).moved and mv.migrate(back).moved
    real_release, real_give_back = moves.request_release, mv._give_back

    def release_then_the_other_confirms(store, consumer, *args, **kw):
        done = real_release(store, consumer, *args, **kw)
        protocol.apply_move(store, store.get_move(consumer), protocol.MoveStep.CONFIRM)
        return done

    def give_back_then_the_other_reverts(move):
        real_give_back(move)
        protocol.apply_move(cloud.store, move, protocol.MoveStep.REVERT)

    monkeypatch.setattr(moves, "request_release", release_then_the_other_confirms)
    confirmed = mv.confirm(kept, timeout=10)
    monkeypatch.setattr(moves, "request_release", real_release)
    monkeypatch.setattr(mv, "_give_back", give_back_then_the_other_reverts)
    reverted = mv.revert(back, timeout=10)
    monkeypatch.undo()
    assert (confirmed.done, confirmed.already, confirmed.move.status) == (
        True, True, MoveStatus.CONFIRMED)
    assert (reverted.done, reverted.already, reverted.move.status) == (
        True, True, MoveStatus.REVERTED)
    settled(cloud)
    check_invariants(cloud)


def test_an_instance_evacuate_cannot_move_does_not_stop_the_others(cloud):
    """One instance on the dead host without its allocation in Placement:
    evacuate moves the others and says why that one was not (skipped),
    rather than stopping at it."""
    dead = cloud.add_host("dead", [cell(4, 4096)], dedicated="0-3", lease_duration=1.0)
    sched, mv = cloud.scheduler(), mover(cloud)
    instances = [boot(cloud, sched, spec_of(sched, *pinned(1, 1, 512)))[0]
                 for _ in range(3)]
    spare = cloud.add_host("spare", [cell(4, 4096)], dedicated="0-3")
    broken = sorted(instances, key=lambda c: cloud.store.active_decision(c).id)[0]
    mv.placement.delete_allocations(broken)
    dead.stop()
    settle = time.monotonic() + 10
    while dead.name not in liveness.read(cloud.store).down:
        assert time.monotonic() < settle, "the lease did not expire"
        time.sleep(0.1)
    done = mv.evacuate(dead.name)
    assert not done.evacuated
    assert list(done.skipped) == [broken]
    assert "has no allocation in Placement" in done.skipped[broken]
    assert {m.move.consumer for m in done.moves} == set(instances) - {broken}
    for result in done.moves:
        assert result.move.status == MoveStatus.CONFIRMED
        assert cloud.store.active_decision(result.move.consumer).host == spare.name
    assert cloud.store.active_move(broken) is None


def test_a_reverted_claim_is_verified_again_on_its_source(cloud, caplog):
    """The revert gives the instance its source claim back (the same
    decision, never freed); the source's agent runs the plugins' verify on
    it again: the host lost memory meanwhile, so it no longer holds: one
    ERROR line naming the consumer and the plugin's reason; the claim is
    kept (the guest runs there)."""
    from tests.functional.request.hosts import host_info

    a, b = two_hosts(cloud)
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    moved = mv.migrate(consumer)
    assert moved.moved
    settled(cloud)
    # a verify of the same claim on the unchanged host holds
    assert source.agent._claims_for_host().verify_held(moved.move.migration) == []
    # reverted while the source's agent is stopped; it comes back on a
    # smaller host (a DIMM gone) and follows the re-key back
    source.stop()
    assert mv.revert(consumer, timeout=10).done
    shrunk = host_info(source.name, [cell(4, 512)])
    source.discover = lambda: shrunk
    caplog.clear()
    with caplog.at_level("ERROR", logger="compute_plugins.compute.agent"):
        cloud.restart(source)
    errors = [r.getMessage() for r in caplog.records
              if r.levelname == "ERROR" and "revert" in r.getMessage()]
    assert len(errors) == 1, errors
    assert errors[0].startswith("host %s: consumer %s: its claim given back by a "
                                "revert no longer holds on this host: " % (
                                    source.name, consumer))
    assert "numa" in errors[0] or "memory" in errors[0].lower(), errors[0]
    # kept: the same decision, in the ledger
    assert source.agent.ledger.get(consumer).decision_id == \
        cloud.store.active_decision(consumer).id


def test_the_python_apis_release_refuses_a_moving_consumer_as_the_cli(cloud):
    """``Scheduler.release`` (the Python API of ``release``) of a moving
    instance, or of its move's migration consumer, is refused as the
    command line's is: nothing changed. (Released behind the move, the
    migration consumer's source claim would be gone and a revert would
    leave the instance with no claim anywhere.)"""
    two_hosts(cloud)
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    before = cloud.allocations(consumer)
    moved = mv.migrate(consumer)
    assert moved.moved
    held = cloud.allocations(consumer)
    with pytest.raises(ReleaseRefused, match="consumer %s is the migration consumer "
                       "of a move in force" % moved.move.migration):
        sched.release(moved.move.migration, timeout=10)
    with pytest.raises(ReleaseRefused, match="consumer %s is moving" % consumer):
        sched.release(consumer, timeout=10)
    assert cloud.allocations(moved.move.migration) == before
    assert cloud.allocations(consumer) == held
    assert mv.revert(consumer, timeout=10).done
    assert cloud.allocations(consumer) == before
    assert cloud.store.active_decision(consumer).host == source.name
    settled(cloud)
    check_invariants(cloud)
    assert sched.release(consumer, timeout=10).outcome == "released"
    check_invariants(cloud)


def test_a_move_started_between_the_release_check_and_its_request_is_refused(
        cloud, monkeypatch):
    """A move of the instance starts right after ``release``'s check (its
    hand-over re-keyed the instance's claim to the migration consumer):
    the release finds nothing of the instance in force. It is refused as a
    moving consumer's (nothing released), never reported as done ("nothing
    in force to release", exit 0) while the instance stays placed."""
    from compute_plugins.compute import release as releasing
    from compute_plugins.scheduler import selection

    two_hosts(cloud)
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    # an earlier move: the instance has a decision that is not in force
    assert mv.migrate(consumer).moved and mv.revert(consumer, timeout=10).done
    checked = []

    def check_then_move(store, who):
        releasing.refuse_moving(store, who)
        if not checked:
            checked.append(who)
            killed_at(mv, "rekeyed", lambda: mv.migrate(consumer))

    monkeypatch.setattr(selection, "refuse_moving", check_then_move)
    with pytest.raises(ReleaseRefused, match="consumer %s is moving" % consumer):
        sched.release(consumer, timeout=10)
    monkeypatch.undo()
    assert mv.revert(consumer, timeout=10).done
    assert cloud.store.active_decision(consumer).host == source.name
    settled(cloud)
    check_invariants(cloud)
    assert sched.release(consumer, timeout=10).outcome == "released"
    check_invariants(cloud)


def test_two_give_backs_at_once_both_find_the_source_given_back(cloud):
    """A revert and its mover's roll-back (or an agent's) give the source
    allocation back at once: the one whose two reads straddle the other's
    ``POST /allocations`` (the migration consumer holding, then the
    instance holding) finds it given back, not "both hold: not moved"."""
    from compute_plugins.placement import migration

    two_hosts(cloud)
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    decision = cloud.store.active_decision(consumer)
    before = cloud.allocations(consumer)
    move = hand_over(cloud, mv, consumer, source, decision)

    class OtherGivesBackBetween:
        """The Placement client of one give-back; the other's POST lands
        between its read of the migration consumer and of the instance."""

        def __init__(self, client):
            self.client, self.done = client, False

        def __getattr__(self, name):
            return getattr(self.client, name)

        def get(self, path, *args, **kwargs):
            if path == "/allocations/%s" % consumer and not self.done:
                self.done = True
                migration.move_allocations(self.client, move.migration, consumer,
                                           migration.INSTANCE, migration.MIGRATION)
            return self.client.get(path, *args, **kwargs)

    held = migration.move_allocations(OtherGivesBackBetween(mv.placement),
                                      move.migration, consumer, migration.INSTANCE,
                                      migration.MIGRATION)
    assert held.allocations == before
    assert cloud.allocations(consumer) == before
    assert cloud.allocations(move.migration) == {}
    assert mv.revert(consumer, timeout=10).done
    assert cloud.store.active_decision(consumer).id == decision.id
    settled(cloud)
    check_invariants(cloud)


def test_a_revert_racing_its_movers_roll_back_never_deletes_the_source(cloud):
    """``revert`` of a move whose mover is still scheduling: the revert
    withdraws the pending offer; the mover, its offer gone, frees the
    offer's allocation and gives the source back -- between the revert's
    withdrawal and its freeing of the offer's allocation. The revert frees
    only the destination's: the source allocation given back is kept."""
    from compute_plugins.hoststate import protocol
    from compute_plugins.placement import migration

    a, b = two_hosts(cloud)
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    dest = b if source is a else a
    decision = cloud.store.active_decision(consumer)
    before = cloud.allocations(consumer)
    move = cloud.store.start_move(new_consumer(), consumer, "migrate", source.name,
                                  decision.id, decision.spec)
    cloud.store.rekey_decision(decision.id, consumer, move.migration)
    migration.move_allocations(mv.placement, consumer, move.migration,
                               migration.MIGRATION, migration.INSTANCE)
    move = protocol.apply_move(cloud.store, move, protocol.MoveStep.HAND_OVER)
    # the mover's scheduler offers the destination (its agent slow)
    dest.stop()
    by_name = {name: rp for rp, name in dest.providers.items()}
    mv.placement.put("/allocations/%s" % consumer, {
        "allocations": {by_name[source.providers[rp].replace(source.name, dest.name)]:
                        {"resources": res} for rp, res in before.items()},
        "project_id": "p", "user_id": "u", "consumer_generation": None,
        "consumer_type": "INSTANCE"})
    cloud.store.submit_decision(consumer, dest.name, decision.spec)
    client = mv.placement

    class TheMoverRollsBackMeanwhile:
        """The revert's Placement client: the mover's roll-back lands right
        after the revert withdrew the offer (its first Placement call)."""

        def __init__(self):
            self.done = False

        def __getattr__(self, name):
            return getattr(client, name)

        def _mover(self):
            if not self.done:
                self.done = True
                client.delete_allocations(consumer)     # the scheduler's free
                migration.move_allocations(client, move.migration, consumer,
                                           migration.INSTANCE, migration.MIGRATION)

        def get(self, path, *args, **kwargs):
            self._mover()
            return client.get(path, *args, **kwargs)

        def delete_allocations(self, who):
            self._mover()
            return client.delete_allocations(who)

    mv.placement = TheMoverRollsBackMeanwhile()
    done = mv.revert(consumer, timeout=10)
    mv.placement = client
    assert done.done and done.move.status == MoveStatus.REVERTED
    assert cloud.allocations(consumer) == before
    assert cloud.allocations(move.migration) == {}
    assert cloud.store.active_decision(consumer).id == decision.id
    assert cloud.restart(dest).ok
    settled(cloud)
    check_invariants(cloud)


def test_a_mover_whose_offer_a_revert_withdrew_never_frees_the_source(
        cloud, monkeypatch):
    """While the mover waits for its destination's answer, a ``revert``
    withdraws the offer, frees it and gives the source back; the mover's
    scheduler, its offer gone, frees the instance's allocation only while
    the migration consumer holds the source: the source given back is
    kept."""
    from compute_plugins.hoststate import errors, protocol

    a, b = two_hosts(cloud)
    sched, mv, other = cloud.scheduler(), mover(cloud), mover(cloud)
    consumer, source = boot(cloud, sched, spec_of(sched, *pinned(1, 2, 1024)))
    dest = b if source is a else a
    decision = cloud.store.active_decision(consumer)
    before = cloud.allocations(consumer)
    dest.stop()
    wait_for_answer = protocol.wait_for_answer
    reverted = []

    def revert_first(store, who, *args, **kwargs):
        if who == consumer and not reverted:
            reverted.append(other.revert(consumer, timeout=10))
        return wait_for_answer(store, who, *args, **kwargs)

    monkeypatch.setattr(protocol, "wait_for_answer", revert_first)
    # the mover says its move ended otherwise meanwhile (one line)
    with pytest.raises(errors.MoveStatusConflict, match="is reverted"):
        mv.migrate(consumer, timeout=5)
    monkeypatch.undo()
    assert reverted and reverted[0].done
    assert cloud.store.latest_move(consumer).status == MoveStatus.REVERTED
    assert cloud.allocations(consumer) == before
    assert cloud.store.active_decision(consumer).id == decision.id
    assert cloud.restart(dest).ok
    settled(cloud)
    check_invariants(cloud)
