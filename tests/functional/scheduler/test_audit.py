"""``compute-plugins audit [--fix]`` (issue 20 item 4): Placement's
allocations on the hosts' trees against the host-state store's decisions,
with real Placement (served over HTTP), a real store and real agents."""

from __future__ import annotations

import json
import uuid

import pytest

from compute_plugins.hoststate.records import DecisionStatus
from tests import cli
from tests.functional.request.hosts import cell
from tests.functional.scheduler.cloud import expected_allocation
from tests.functional.scheduler.test_in_doubt import InterruptedWhileWaiting
from tests.functional.scheduler.test_schedule import spec_of


@pytest.fixture
def audit_command(cloud, placement_url, tmp_path):
    """``compute-plugins audit ARGS`` run in this process
    (:func:`tests.cli.run`): its exit code and output."""
    config = tmp_path / "audit.conf"
    config.write_text("[compute_plugins]\nstate_dir = %s\n%s"
                      % (tmp_path / "auditor", cloud.host_state_config()))

    def run(*args):
        return cli.run("--config-file", str(config), "--placement-url", placement_url,
                       "audit", *args)
    return run


@pytest.fixture
def audit(audit_command):
    """``compute-plugins audit ARGS``: (exit code, stdout lines)."""
    def run(*args):
        done = audit_command(*args)
        code, out = done.returncode, done.stdout
        if "--format" in args:
            return code, out.splitlines()
        lines: list[str] = []
        for ln in out.splitlines():  # NOTE: wrapped at 100 columns: joined back
            if ln.startswith(" ") and lines:
                lines[-1] += " " + ln.strip()
            else:
                lines.append(ln)
        return code, lines
    return run


def numa0(host):
    (rp,) = [rp for rp, name in host.providers.items() if name.endswith("_NUMA0")]
    return rp


def orphan(cloud, host):
    """A scheduler killed between its PUT /allocations and its decision."""
    consumer = str(uuid.uuid4())
    cloud.placement.emb.client().put("/allocations/%s" % consumer, {
        "allocations": {numa0(host): {"resources": {"MEMORY_MB": 256}}},
        "project_id": "p", "user_id": "u", "consumer_generation": None,
        "consumer_type": "INSTANCE"})
    return consumer


def test_nothing_found_when_placement_and_the_store_agree(cloud, audit):
    host = cloud.add_host("agree", [cell(4, 4096)])
    sched = cloud.scheduler()
    assert sched.schedule(spec_of(sched, {}, 2, 1024), str(uuid.uuid4()), "p", "u").placed
    assert audit() == (0, ["nothing found: Placement and the host-state store agree "
                           "on 1 host(s)"])
    code, out = audit("--format", "json")
    assert code == 0 and json.loads("\n".join(out))["findings"] == []
    assert cloud.usage(host)


def test_an_orphan_allocation_is_found_and_freed_after_the_grace(cloud, audit):
    host = cloud.add_host("orph", [cell(4, 4096)], start=False)
    consumer = orphan(cloud, host)
    # seen for the first time: in its grace period, listed, not a failure
    code, (line,) = audit()
    assert code == 0
    assert line.startswith("orphan-allocation: consumer %s on host %s (no decision "
                           "ever; %s MEMORY_MB:256; " % (consumer, host.name, numa0(host)))
    assert line.endswith(": in grace period")
    code, (line,) = audit("--fix")  # the default grace: 300 s
    assert code == 0 and line.endswith("in grace period")
    assert cloud.allocations(consumer) == {numa0(host): {"MEMORY_MB": 256}}
    # without a grace it is a finding (exit 1) until fixed
    code, (line,) = audit("--older-than", "0")
    assert code == 1 and not line.endswith("period")
    code, (line,) = audit("--fix", "--older-than", "0")
    assert code == 0 and line.endswith(": freed")
    assert cloud.allocations(consumer) == {}
    assert audit("--older-than", "0")[0] == 0


def test_an_interrupted_scheduler_s_decision_expires_with_its_allocation(cloud, audit):
    """The scheduler was killed while it waited; the host is down (no agent
    will ever answer): the audit withdraws the decision and frees it."""
    host = cloud.add_host("down", [cell(4, 4096)], start=False)
    sched = cloud.scheduler()
    consumer = str(uuid.uuid4())
    sched.store = InterruptedWhileWaiting(sched.store)
    with pytest.raises(KeyboardInterrupt):
        sched.schedule(spec_of(sched, {}, 2, 1024), consumer, "p", "u")
    assert cloud.allocations(consumer)
    code, out = audit("--format", "json", "--older-than", "0")
    assert code == 1
    (finding,) = json.loads("\n".join(out))["findings"]
    assert (finding["kind"], finding["consumer"], finding["host"], finding["status"]) == (
        "expired-decision", consumer, host.name, "pending")
    code, (line,) = audit("--fix", "--older-than", "0")
    assert code == 0 and line.startswith("expired-decision: consumer %s" % consumer)
    assert line.endswith(": expired; allocation freed")
    assert cloud.store.latest_decision(consumer).status == DecisionStatus.RELEASED
    assert cloud.allocations(consumer) == {} and cloud.usage(host) == {}
    # a late agent does not claim it
    host.start()
    assert audit("--older-than", "0") == (0, [
        "nothing found: Placement and the host-state store agree on 1 host(s)"])
    assert host.assignments.get("numa", []) == []


def test_a_claim_whose_allocation_was_lost_is_restored(cloud, audit):
    host = cloud.add_host("lost", [cell(4, 4096)])
    sched = cloud.scheduler()
    consumer = str(uuid.uuid4())
    result = sched.schedule(spec_of(sched, {}, 2, 1024), consumer, "p", "u")
    assert result.placed
    cloud.placement.emb.client().delete_allocations(consumer)
    code, (line,) = audit("--older-than", "0")
    assert code == 1 and line.startswith("missing-allocation: consumer %s on host %s"
                                         % (consumer, host.name))
    code, (line,) = audit("--fix", "--older-than", "0")
    assert code == 0 and line.endswith(": restored")
    assert cloud.allocations(consumer) == expected_allocation(result.decision)
    assert cloud.usage(host) == cloud.ledger_usage(host)


def test_bad_grace_is_usage(audit_command):
    done = audit_command("--older-than", "-1")
    assert done.returncode == 2
    assert "--older-than: invalid value '-1'" in done.stderr


def test_an_orphan_s_grace_counts_from_the_first_audit_that_saw_it(cloud, audit):
    """Placement does not say when an allocation was written: the first
    audit that sees an orphan only notes it; one at least --older-than
    seconds later frees it."""
    import time

    host = cloud.add_host("grace", [cell(4, 4096)], start=False)
    consumer = orphan(cloud, host)
    code, (line,) = audit("--fix", "--older-than", "1")
    assert code == 0 and line.endswith(": in grace period")
    assert cloud.allocations(consumer)
    time.sleep(1.1)
    code, (line,) = audit("--fix", "--older-than", "1")
    assert code == 0 and line.endswith(": freed")
    assert cloud.allocations(consumer) == {}


def test_a_lost_allocation_released_meanwhile_is_not_restored(cloud):
    """The claim was released between the audit and its fix (the agent
    freed it): restoring its allocation would leak it for good."""
    from compute_plugins.scheduler import audit as auditing

    host = cloud.add_host("gone", [cell(4, 4096)])
    sched = cloud.scheduler()
    consumer = str(uuid.uuid4())
    assert sched.schedule(spec_of(sched, {}, 2, 1024), consumer, "p", "u").placed
    cloud.placement.emb.client().delete_allocations(consumer)
    findings = auditing.audit(cloud.placement.emb.client(), cloud.store, {})
    assert [f.kind for f in findings] == [auditing.MISSING]
    sched.release(consumer, timeout=10)
    assert cloud.store.latest_decision(consumer).status == DecisionStatus.RELEASED
    from compute_plugins.scheduler.selection import CONSUMER_TYPE, CONSUMER_TYPE_VERSION

    client = cloud.placement.emb.client()
    kind = CONSUMER_TYPE if client.microversion >= CONSUMER_TYPE_VERSION else None
    (done,) = auditing.fix(client, cloud.store, findings, 0, "p", "u", kind)
    assert done.action.startswith("left: ")
    assert cloud.allocations(consumer) == {} and cloud.usage(host) == {}


class _AuditedBetweenPutAndDecision:
    """The scheduler's store, except that an ``audit --fix --older-than 0``
    runs between its PUT /allocations and its decision, and the decision
    lands after the fix checked for one but before its DELETE."""

    def __init__(self, store, client):
        self._store, self._placement = store, client
        self.actions = []

    def __getattr__(self, name):
        return getattr(self._store, name)

    def submit_decision(self, consumer, host, spec):
        from compute_plugins.scheduler import audit as auditing
        from compute_plugins.scheduler.selection import CONSUMER_TYPE, CONSUMER_TYPE_VERSION

        submitted = []
        real = self._placement

        class Late:
            def __getattr__(self, name):
                return getattr(real, name)

            def delete_allocations(self, who):
                submitted.append(store.submit_decision(consumer, host, spec))
                return real.delete_allocations(who)

        store = self._store
        findings = auditing.audit(real, store, {})
        kind = CONSUMER_TYPE if real.microversion >= CONSUMER_TYPE_VERSION else None
        self.actions = [f.action for f in auditing.fix(Late(), store, findings, 0, "p", "u",
                                                       kind)]
        return submitted[0]


def test_a_decision_made_while_its_orphan_was_freed_gets_its_allocation_back(cloud):
    host = cloud.add_host("late", [cell(4, 4096)])
    sched = cloud.scheduler()
    consumer = str(uuid.uuid4())
    sched.store = _AuditedBetweenPutAndDecision(sched.store, cloud.placement.emb.client())
    result = sched.schedule(spec_of(sched, {}, 2, 1024), consumer, "p", "u")
    assert result.placed
    assert sched.store.actions == ["freed; a decision was made meanwhile: restored"]
    assert cloud.allocations(consumer) == expected_allocation(result.decision)
    assert cloud.usage(host) == cloud.ledger_usage(host)


def test_a_rerun_scheduled_while_an_expired_decision_is_freed_keeps_its_allocation(cloud):
    """The audit expired an interrupted scheduler's decision; before its
    DELETE, the allocation was freed and the consumer scheduled again
    (``schedule --consumer``): the new claim keeps an allocation."""
    from compute_plugins.scheduler import audit as auditing
    from compute_plugins.scheduler.selection import CONSUMER_TYPE, CONSUMER_TYPE_VERSION

    host = cloud.add_host("rerun", [cell(4, 4096)], start=False)
    sched = cloud.scheduler()
    consumer = str(uuid.uuid4())
    spec = spec_of(sched, {}, 2, 1024)
    real_store = sched.store
    sched.store = InterruptedWhileWaiting(real_store)
    with pytest.raises(KeyboardInterrupt):
        sched.schedule(spec, consumer, "p", "u")
    sched.store = real_store
    real = cloud.placement.emb.client()
    placed = []

    class Rescheduled:
        def __getattr__(self, name):
            return getattr(real, name)

        def delete_allocations(self, who):
            real.delete_allocations(who)
            host.start()
            placed.append(sched.schedule(spec, consumer, "p", "u"))
            return real.delete_allocations(who)

    findings = auditing.audit(real, cloud.store, {})
    assert [f.kind for f in findings] == [auditing.EXPIRED]
    kind = CONSUMER_TYPE if real.microversion >= CONSUMER_TYPE_VERSION else None
    (done,) = auditing.fix(Rescheduled(), cloud.store, findings, 0, "p", "u", kind)
    (result,) = placed
    assert result.placed
    assert done.action == ("expired; allocation freed; a decision was made meanwhile: "
                           "restored")
    assert cloud.allocations(consumer) == expected_allocation(result.decision)
    assert cloud.usage(host) == cloud.ledger_usage(host)


def test_an_unwritable_state_directory_still_prints_what_was_found_and_fixed(
        cloud, audit, tmp_path):
    """The ages cannot be kept: the audit still says what it found and did
    (a repair done and never told is worse than one age lost)."""
    host = cloud.add_host("ro", [cell(4, 4096)], start=False)
    consumer = orphan(cloud, host)
    (tmp_path / "auditor").write_text("not a directory")
    code, (line,) = audit("--fix", "--older-than", "0")
    assert code == 0 and line.startswith("orphan-allocation: consumer %s" % consumer)
    assert line.endswith(": freed")
    assert cloud.allocations(consumer) == {}


def test_a_freed_orphan_s_consumer_written_again_gets_a_new_grace(cloud, audit):
    """Once an orphan is freed, its consumer's next allocation (a re-run
    ``schedule --consumer``, between its PUT and its decision) is new
    work: its age starts again, it is not freed on sight."""
    import time

    host = cloud.add_host("again", [cell(4, 4096)], start=False)
    consumer = orphan(cloud, host)
    assert audit("--fix", "--older-than", "1")[1][0].endswith(": in grace period")
    time.sleep(1.1)
    assert audit("--fix", "--older-than", "1")[1][0].endswith(": freed")
    cloud.placement.emb.client().put("/allocations/%s" % consumer, {
        "allocations": {numa0(host): {"resources": {"MEMORY_MB": 256}}},
        "project_id": "p", "user_id": "u", "consumer_generation": None,
        "consumer_type": "INSTANCE"})
    code, (line,) = audit("--fix", "--older-than", "1")
    assert code == 0 and line.endswith(": in grace period")
    assert cloud.allocations(consumer) == {numa0(host): {"MEMORY_MB": 256}}
