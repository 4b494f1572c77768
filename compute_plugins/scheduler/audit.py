"""Placement against the host-state store's decisions: what nothing holds,
and what Placement lacks (``compute-plugins audit``; nova-manage placement
audit is the anchor).

The store's decisions are the scheduler side's view of every host: a
consumer is held on a host while its decision there is in force (pending,
claimed, releasing). :func:`audit` reads the allocations of every provider
of every host the store knows (one ``GET
/resource_providers/{uuid}/allocations`` per provider) and the decisions in
force, and finds:

``orphan-allocation``
    a consumer's allocation on a host's tree that no decision in force
    holds: a scheduler killed between its ``PUT /allocations`` and its
    decision, a cleanup that failed (Placement down, or a ``DELETE`` that
    was committed but never answered), a decision released while its
    allocation stayed. Fix: ``DELETE /allocations/{consumer}``.
``missing-allocation``
    a claimed decision whose consumer has no allocation in Placement
    (deleted behind the scheduler's back, a Placement restored from an
    older backup). Fix: the decision's allocation written again (``PUT
    /allocations/{consumer}``, a new consumer).
``mismatched-allocation``
    a decision in force whose consumer's allocation is not the decision's
    (on another host's tree, or other amounts). Not fixed automatically:
    an operator decides which is right.
``expired-decision``
    a decision still pending after the grace period: its scheduler stopped
    (Ctrl-C, killed) before its host answered, and its host is not claiming
    it (down, no agent). The agent of a host that is down cannot end it,
    so the audit does. Fix: the protocol's ``expire`` (pending ->
    released; an agent's claim that lands first wins), then its allocation
    deleted.

**The grace period** (``older_than``): in-flight work is never touched.
A decision's finding is as old as the time since the decision last
changed. An orphan allocation is as old as the time since an audit first
saw it (the ``seen`` map the command keeps in the state directory): never
older, because Placement does not say when it was written, and a consumer
released long ago may be scheduled again right now (between its new ``PUT``
and its new decision). So an orphan is freed by the first audit at least
``older_than`` seconds after one saw it, and its age is forgotten once
freed (the consumer's next allocation is new work). Every ``DELETE`` of
the fix is followed by a look at the store: a decision submitted meanwhile
gets its allocation written back. Findings younger than the grace are
listed, marked, and left.

NOTE: sightings are samples: a consumer freed by someone else and written
again between two audits keeps its first sighting's age, and an orphan
freed while a scheduler sits between its ``PUT`` and its decision longer
than the fix's check, ``DELETE`` and check leaves that decision without an
allocation (the next audit reports it ``missing-allocation`` and restores
it).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping, MutableMapping
from typing import Any, Optional

from compute_plugins.hoststate import errors as store_errors
from compute_plugins.hoststate import protocol
from compute_plugins.hoststate.records import DecisionStatus, HostDecision
from compute_plugins.hoststate.transport import HostStateTransport
from compute_plugins.placement import client as pclient
from compute_plugins.placement import exception as pexc

ORPHAN = "orphan-allocation"
MISSING = "missing-allocation"
MISMATCHED = "mismatched-allocation"
EXPIRED = "expired-decision"

#: The kinds ``fix`` repairs (the others are only reported).
FIXABLE = frozenset({ORPHAN, MISSING, EXPIRED})

Allocations = dict[str, dict[str, int]]


@dataclasses.dataclass(frozen=True)
class Finding:
    """One thing Placement and the store disagree on.

    :param kind: :data:`ORPHAN`, :data:`MISSING`, :data:`MISMATCHED` or
        :data:`EXPIRED`.
    :param consumer: the consumer.
    :param host: the host whose tree holds the allocation, or the
        decision's host.
    :param allocations: the consumer's allocation in Placement (provider
        -> resources), on the hosts' trees.
    :param decision: the consumer's decision (in force, else its latest),
        if any.
    :param age: seconds since the decision last changed or the finding was
        first seen.
    :param action: what :func:`fix` did (``freed``, ``restored``,
        ``expired``, ``in grace period``, ``left: ...``, ``failed: ...``);
        "" before.
    """

    kind: str
    consumer: str
    host: str
    allocations: Mapping[str, Mapping[str, int]]
    decision: Optional[HostDecision]
    age: float
    action: str = ""

    @property
    def failed(self) -> bool:
        """The fix was tried and did not work, or the kind is not fixed."""
        return self.action.startswith(("failed", "left"))

    def to_dict(self) -> dict[str, Any]:
        """The finding as ``--format json`` prints it."""
        d = self.decision
        return {"kind": self.kind, "consumer": self.consumer, "host": self.host,
                "allocations": {rp: dict(res) for rp, res in self.allocations.items()},
                "decision": None if d is None else d.id,
                "status": None if d is None else d.status.value,
                "age_s": round(self.age, 1), "action": self.action}


def _seconds_since(when: datetime.datetime, now: datetime.datetime) -> float:
    return max(0.0, (now - when).total_seconds())


def decision_allocations(decision: HostDecision) -> Allocations:
    """The allocation a decision takes (its spec's decision), provider ->
    resources; {} when the spec holds none (or cannot be read)."""
    try:
        doc = json.loads(decision.spec)
        found = (doc.get("decision") or {}).get("allocations") or {}
        return {str(rp): {str(rc): int(n) for rc, n in res.items() if n}
                for rp, res in found.items()}
    except (ValueError, TypeError, AttributeError):
        return {}


def _placement_allocations(placement: pclient.PlacementClient, providers: Mapping[str, str]
                           ) -> dict[str, Allocations]:
    """consumer -> provider -> resources, on ``providers`` (uuid -> host)."""
    found: dict[str, Allocations] = {}
    for rp in sorted(providers):
        try:
            body = placement.get("/resource_providers/%s/allocations" % rp)
        except pexc.NotFound:
            continue  # NOTE: deleted since the host published its tree
        for consumer, entry in (body.get("allocations") or {}).items():
            resources = {rc: int(n) for rc, n in (entry.get("resources") or {}).items() if n}
            if resources:
                found.setdefault(consumer, {})[rp] = resources
    return found


def audit(placement: pclient.PlacementClient, store: HostStateTransport,
          seen: MutableMapping[str, float], now: Optional[datetime.datetime] = None
          ) -> list[Finding]:
    """Every disagreement between Placement and the store's decisions on
    the hosts the store knows (see the module doc); nothing changed.

    :param seen: consumer -> when (POSIX seconds) an audit first saw its
        allocation without a decision in force; updated here (new ones
        added, those no longer found removed).
    :param now: naive UTC (tests); default now.
    """
    now = now or datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    stamp = now.replace(tzinfo=datetime.UTC).timestamp()
    snapshots = store.get_hosts(sorted(store.generations()))
    owner = {rp: host for host, snap in snapshots.items() for rp in snap.providers}
    allocated = _placement_allocations(placement, owner)
    in_force: dict[str, HostDecision] = {}
    for host in sorted(snapshots):
        in_force.update(protocol.in_force(store, host))
    findings: list[Finding] = []
    unexplained: set[str] = set()
    for consumer, allocs in sorted(allocated.items()):
        hosts = sorted({owner[rp] for rp in allocs})
        decision = in_force.get(consumer)
        if decision is None:
            latest = store.latest_decision(consumer)
            unexplained.add(consumer)
            age = max(0.0, stamp - seen.setdefault(consumer, stamp))
            findings.append(Finding(ORPHAN, consumer, hosts[0], allocs, latest, age))
            continue
        if decision.status == protocol.PENDING:
            continue  # NOTE: in flight; an expired one is listed below
        expected = decision_allocations(decision)
        if allocs != expected:
            findings.append(Finding(MISMATCHED, consumer, decision.host, allocs, decision,
                                    _seconds_since(decision.updated_at, now)))
    for consumer in [c for c in seen if c not in unexplained]:
        del seen[consumer]
    for consumer, decision in sorted(in_force.items()):
        age = _seconds_since(decision.updated_at, now)
        if decision.status == protocol.PENDING:
            findings.append(Finding(EXPIRED, consumer, decision.host,
                                    allocated.get(consumer, {}), decision, age))
        elif decision.status == protocol.CLAIMED and consumer not in allocated:
            elsewhere = placement.get("/allocations/%s" % consumer).get("allocations") or {}
            kind = MISMATCHED if elsewhere else MISSING
            findings.append(Finding(kind, consumer, decision.host, {
                rp: dict(body.get("resources") or {}) for rp, body in elsewhere.items()},
                decision, age))
    return findings


def fix(placement: pclient.PlacementClient, store: HostStateTransport,
        findings: list[Finding], older_than: float, project_id: str, user_id: str,
        consumer_type: Optional[str] = None) -> list[Finding]:
    """Repair each finding past the grace period (``older_than`` seconds);
    the findings with what was done (:attr:`Finding.action`).

    An expired decision is ended through the protocol (``expire``: an agent
    that claims it first wins, and it is left); an orphan allocation is
    freed only when the consumer still has no decision in force (checked
    again just before, and after: a decision submitted meanwhile gets its
    allocation written back); a missing allocation is written again while
    its decision is still claimed (checked before and after the write: a
    release that landed meanwhile has the written allocation deleted again;
    a new consumer: if one was written meanwhile, Placement refuses and it
    is left).
    """
    done: list[Finding] = []
    for finding in findings:
        if finding.age < older_than:
            done.append(dataclasses.replace(finding, action="in grace period"))
            continue
        if finding.kind not in FIXABLE:
            done.append(dataclasses.replace(
                finding, action="left: an operator decides which allocation is right"))
            continue
        try:
            action = _fix_one(placement, store, finding, project_id, user_id,
                              consumer_type)
        except (pexc.PlacementError, store_errors.HostStateError) as err:
            action = "failed: %s" % err
        done.append(dataclasses.replace(finding, action=action))
    return done


def _fix_one(placement: pclient.PlacementClient, store: HostStateTransport,
             finding: Finding, project_id: str, user_id: str,
             consumer_type: Optional[str]) -> str:
    consumer = finding.consumer
    if finding.kind == EXPIRED:
        assert finding.decision is not None
        try:
            protocol.expire(store, finding.decision.id)
        except store_errors.DecisionStatusConflict as err:
            return "left: %s meanwhile" % err.decision.status.value
        late = _free(placement, store, consumer, project_id, user_id, consumer_type)
        return "expired; allocation freed" + late
    if finding.kind == ORPHAN:
        if store.active_decision(consumer) is not None:
            return "left: a decision was made meanwhile"
        late = _free(placement, store, consumer, project_id, user_id, consumer_type)
        return "freed" + late
    assert finding.decision is not None
    return _restore(placement, store, finding.decision, project_id, user_id, consumer_type)


def _free(placement: pclient.PlacementClient, store: HostStateTransport, consumer: str,
          project_id: str, user_id: str, consumer_type: Optional[str]) -> str:
    """Delete ``consumer``'s allocation, which no decision holds; "" or what
    was done about a decision that came meanwhile.

    NOTE: a scheduler writes its allocation before its decision (a re-run
    ``schedule --consumer``, one that was between the two): a decision
    submitted while the allocation was deleted gets its allocation back (the
    decision's own), else its host would hold a guest Placement does not
    count."""
    placement.delete_allocations(consumer)
    late = store.active_decision(consumer)
    if late is None:
        return ""
    return "; a decision was made meanwhile: " + _restore(
        placement, store, late, project_id, user_id, consumer_type,
        (protocol.PENDING, protocol.CLAIMED))


def _restore(placement: pclient.PlacementClient, store: HostStateTransport,
             decision: HostDecision, project_id: str, user_id: str,
             consumer_type: Optional[str],
             statuses: tuple[DecisionStatus, ...] = (protocol.CLAIMED,)) -> str:
    """Write ``decision``'s allocation again, while it is still the
    consumer's decision in one of ``statuses``: checked before, and again after the write (a release
    that landed meanwhile had its agent free the consumer, maybe before the
    write: the allocation written is deleted again, else it would leak)."""
    consumer = decision.consumer
    expected = decision_allocations(decision)
    if not expected:
        return "failed: the decision records no allocation"

    def still_claimed() -> Optional[str]:
        current = store.active_decision(consumer)
        if current is None or current.id != decision.id:
            return "released"
        if current.status not in statuses:
            return current.status.value
        return None

    moved = still_claimed()
    if moved is not None:
        return "left: %s meanwhile" % moved
    pclient.allocate_new_consumer(placement, consumer, expected, project_id, user_id,
                                  consumer_type)
    moved = still_claimed()
    if moved is not None:
        placement.delete_allocations(consumer)
        return "left: %s meanwhile" % moved
    return "restored"


__all__ = ["EXPIRED", "FIXABLE", "MISMATCHED", "MISSING", "ORPHAN", "Finding", "audit",
           "decision_allocations", "fix"]
