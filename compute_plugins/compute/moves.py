"""The hosts' agents finish or undo the moves their commands left (issue 21;
``doc/source/lifecycle.md``, "Agents finish the moves").

A move (:mod:`compute_plugins.scheduler.moves`) is made by its commands
(``resize``, ``migrate``, ``evacuate``, ``confirm``, ``revert``). A command
that stops half-way (killed, its machine lost) leaves the move in a status
that is not final; the owner of each status finishes or undoes it at its
periodic (:meth:`MoveFinisher.finish`), once the move has not changed for
``[compute] move_step_timeout`` seconds (a live command is never
overtaken), ledger first, then Placement, then the store's status:

==============  ====================  ==========================================
status          made by               how
==============  ====================  ==========================================
preparing,      the source's agent    no destination decision: roll-back (an
handed-over                           allocation of the instance without a
                                      decision deleted, the allocation back to
                                      the instance consumer, the decision
                                      re-keyed back); a pending
                                      destination decision: left to its
                                      scheduler; a claimed one, unchanged
                                      for the timeout too: request-revert
                                      (an evacuation whose destination claimed:
                                      dest-claimed, then as below)
confirming      the source's agent    releases the migration consumer (ledger,
                                      allocation), then confirm
reverting       the destination's     frees the instance's new decision
                agent
reverting       the source's agent    once the destination is freed: the swap
                                      back (Placement, decision re-keyed, its
                                      ledger follows), then revert
to-confirm      the source's agent    an evacuation only (its command stopped
(evacuate)                            once the new claim held): the migration
                                      consumer dropped, then evacuated
==============  ====================  ==========================================

Every step is checked before it is made (a re-run, or a command running
again, does what is left): the Placement swap is skipped when done
(:func:`compute_plugins.placement.migration.move_allocations`), the re-key
when the decision is the target's already, and each status change is a
compare-and-swap from the status the agent read; one that another side
made meanwhile (a slow mover, alive) is left as it is.

:func:`give_back` is also the mover's own roll-back and revert
(:class:`~compute_plugins.scheduler.moves.Mover`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Optional

from oslo_log import log as logging

from compute_plugins.compute.release import request_release
from compute_plugins.hoststate import database, errors, protocol
from compute_plugins.hoststate.records import (
    ACTIVE,
    DecisionStatus,
    HostDecision,
    MoveRecord,
    MoveStatus,
)
from compute_plugins.placement import migration as pmigration
from compute_plugins.plugin.contract import Rejection

LOG = logging.getLogger(__name__)

MoveStep = protocol.MoveStep
#: The fence kind of an evacuated host (``hoststate_disabled.kind``): lifted
#: by its agent once it is back and reconciled (:meth:`MoveFinisher.lift_fence`).
EVACUATED = "evacuated"


def give_back(placement: Any, store: Any, move: MoveRecord) -> None:
    """The source allocation and decision back to the instance consumer
    (each checked first: a re-run skips what is done): ``POST
    /allocations`` from the migration consumer to the instance at both
    consumers' generations, then the source decision re-keyed back. The
    source's agent re-keys its ledger when it sees it.

    :raises MoveConflict: Placement refused (409 every attempt), or the
        instance holds another allocation while the migration consumer
        still holds the source's (a destination not freed yet).
    """
    try:
        pmigration.move_allocations(placement, move.migration, move.consumer,
                                    pmigration.INSTANCE, pmigration.MIGRATION)
    except pmigration.MoveConflict:
        if pmigration.read(placement, move.migration).allocations or \
                pmigration.read(placement, move.consumer).allocations:
            raise
        # NOTE: neither consumer holds anything (the instance's allocation
        # was deleted behind its back before the hand-over): nothing to give
        # back; the move must still end.
        LOG.warning("consumer %s: no allocation in Placement on either side of "
                    "its move (migration consumer %s): nothing given back",
                    move.consumer, move.migration)
    try:
        store.rekey_decision(move.source_decision, move.migration, move.consumer)
    except errors.HostStateError:
        if store.get_decision(move.source_decision).status in ACTIVE:
            raise
        # NOTE: a release of the instance that won against the hand-over was
        # carried out meanwhile: its claim is gone, nothing to give back.
        LOG.info("consumer %s: its source decision %d is no longer in force "
                 "(released): nothing given back", move.consumer,
                 move.source_decision)


@dataclasses.dataclass
class MoveFinisher:
    """What one host's agent does about the moves its commands left (module
    doc). Built by the agent for each periodic.

    :param host: the agent's host.
    :param store: the store the agent writes through (its lease's token).
    :param placement: the agent's Placement client.
    :param timeout: ``[compute] move_step_timeout``: seconds a move stays
        unchanged before the agent ends it.
    :param follow: makes the ledger follow the store's re-keys now.
    :param release: frees one of the host's decisions now (ledger,
        allocation, the protocol's release), as the agent's releases.
    """

    host: str
    store: Any
    placement: Any
    timeout: float
    follow: Callable[[], None]
    release: Callable[[str, HostDecision], None]

    def finish(self) -> list[MoveRecord]:
        """Finish or undo every move in force of this host (source or
        destination) left unchanged past the timeout.

        :returns: the moves it changed, as they are now.
        """
        changed: list[MoveRecord] = []
        now = database.utcnow()
        due = [m for m in self.store.moves_in_force(host=self.host)
               if (now - m.updated_at).total_seconds() >= self.timeout]
        if due:
            # NOTE: before any release: the ledger names each claim as the
            # store does (a release by consumer must not free the other side).
            self.follow()
        for move in due:
            try:
                done = self._one(move, now)
            except errors.MoveStatusConflict as err:
                # NOTE: its command (running again) made the step meanwhile
                LOG.info("host %s: move of consumer %s: %s", self.host,
                         move.consumer, err)
                continue
            if done is not None and done != move:
                changed.append(done)
        return changed

    def _one(self, move: MoveRecord, now: Any) -> Optional[MoveRecord]:
        status = move.status
        age = (now - move.updated_at).total_seconds()
        if status in (MoveStatus.PREPARING, MoveStatus.HANDED_OVER):
            if move.source != self.host:
                return None
            # NOTE: the move's progress is its scheduler's too: a mover
            # whose scheduler waited long for a host is alive while it
            # records a claim just made, or tries the next host after one
            # withdrawn just now (never overtaken by a step of the agent).
            age = (now - self._last_change(move)).total_seconds()
            if age < self.timeout:
                return None
            dest = self._destination(move)
            if dest is None:
                return self._roll_back(move, age)
            if dest.status == DecisionStatus.PENDING:
                # NOTE: the scheduler's offer is in flight: its destination
                # answers it, or the scheduler (or the auditor) withdraws it.
                return None
            if move.kind == "evacuate":
                # NOTE: the instance was rebuilt where its new claim holds:
                # an evacuation is completed, not undone (a pending claim
                # is left to the destination's agent to answer).
                if status != MoveStatus.HANDED_OVER or dest.status != DecisionStatus.CLAIMED:
                    return None
                move = self._apply(move, MoveStep.CLAIMED,
                                           dest=dest.host, dest_decision=dest.id)
                return self._drop_source(move, MoveStep.EVACUATED)
            LOG.warning("host %s: %s left %s for %.0f s with a destination "
                        "decision: reverted by this host's agent", self.host,
                        move.describe(), status.value, age)
            move = self._apply(move, MoveStep.REQUEST_REVERT)
            status = move.status
        if status == MoveStatus.REVERTING:
            return self._revert(move)
        if status == MoveStatus.CONFIRMING and move.source == self.host:
            return self._drop_source(move, MoveStep.CONFIRM)
        if status == MoveStatus.TO_CONFIRM and move.kind == "evacuate" \
                and move.source == self.host:
            return self._drop_source(move, MoveStep.EVACUATED)
        return None

    def _apply(self, move: MoveRecord, step: MoveStep, **fields: Any) -> MoveRecord:
        """``step`` on ``move`` from the status this agent read only (a
        step its mover, slow but alive, made since is a conflict)."""
        return protocol.apply_move(self.store, move, step, seen=True, **fields)

    def _last_change(self, move: MoveRecord) -> Any:
        """When the move last changed, or the latest decision its scheduler
        made for the instance since (submitted, answered or withdrawn)."""
        latest: Optional[HostDecision] = self.store.latest_decision(move.consumer)
        if latest is not None and latest.id > move.source_decision:
            return max(move.updated_at, latest.updated_at)
        return move.updated_at

    def _destination(self, move: MoveRecord) -> Optional[HostDecision]:
        """The instance's new decision in force (the destination's), if any."""
        dest: Optional[HostDecision] = self.store.active_decision(move.consumer)
        if dest is None or dest.id == move.source_decision:
            return None
        return dest

    def _roll_back(self, move: MoveRecord, age: float) -> MoveRecord:
        """Ledger, Placement, the store: the move its mover left before any
        destination decision, undone."""
        self.follow()
        if pmigration.read(self.placement, move.migration).allocations and \
                pmigration.read(self.placement, move.consumer).allocations:
            # NOTE: the instance holds an allocation and no decision while
            # the migration consumer holds the source's: the destination's
            # PUT of a scheduler stopped before it submitted its decision.
            # Nobody else frees it (the move is past its timeout).
            LOG.warning("host %s: consumer %s: its allocation without a decision "
                        "(its move's scheduler stopped between the destination's "
                        "allocation and its decision) deleted", self.host,
                        move.consumer)
            self.placement.delete_allocations(move.consumer)
        give_back(self.placement, self.store, move)
        self.follow()
        LOG.warning("host %s: %s left %s for %.0f s (its command stopped): rolled "
                    "back by this host's agent", self.host, move.describe(),
                    move.status.value, age)
        # NOTE: from either status: its give-back is made already, the
        # move must end rolled back whichever its mover reached meanwhile.
        return protocol.apply_move(self.store, move, MoveStep.ROLL_BACK, reasons=(
            Rejection("the move's command stopped (left %s for %.0f s): rolled back "
                      "by host %s's agent" % (move.status.value, age, self.host)),))

    def _revert(self, move: MoveRecord) -> Optional[MoveRecord]:
        """The destination's agent frees the instance's new decision; the
        source's, once it is freed, gives the source back."""
        dest = self._destination(move)
        if dest is not None:
            if dest.host != self.host:
                return None     # NOTE: the destination's agent frees it
            # NOTE: no Placement in the request: a pending offer withdrawn
            # has its allocation freed by free_destination (never the
            # source's, should its mover give it back meanwhile).
            outcome = request_release(self.store, move.consumer, None)
            if outcome.decision is not None and outcome.decision.status == \
                    DecisionStatus.RELEASING:
                self.release(move.consumer, outcome.decision)
            elif outcome.outcome == "released":
                pmigration.free_destination(self.placement, move.consumer,
                                            move.migration)
            if self._destination(move) is not None:
                return None
        if move.source != self.host:
            return None         # NOTE: the source's agent gives it back
        give_back(self.placement, self.store, move)
        self.follow()
        LOG.warning("host %s: %s reverted by this host's agent (its command "
                    "stopped)", self.host, move.describe())
        return self._apply(move, MoveStep.REVERT)

    def _drop_source(self, move: MoveRecord, step: MoveStep) -> Optional[MoveRecord]:
        """The source's agent frees the migration consumer (its ledger
        entry, its allocation), then the move's final step."""
        self.follow()
        outcome = request_release(self.store, move.migration, self.placement)
        if outcome.decision is not None and outcome.decision.status == \
                DecisionStatus.RELEASING:
            self.release(move.migration, outcome.decision)
        if self.store.active_decision(move.migration) is not None:
            return None
        self.placement.delete_allocations(move.migration)
        LOG.warning("host %s: %s: the migration consumer %s freed by this host's "
                    "agent (its command stopped): %s", self.host, move.describe(),
                    move.migration, protocol.MOVE_TRANSITIONS[step].target.value)
        return self._apply(move, step)

    def lift_fence(self) -> bool:
        """An evacuated host's fence (disabled, kind :data:`EVACUATED`)
        lifted once its agent is back and reconciled: no claim of the host
        left to release, no evacuation from it in force. An operator's
        ``host disable`` (another kind) is never lifted here.

        :returns: whether it was lifted now.
        """
        fence = self.store.disabled_hosts([self.host]).get(self.host)
        if fence is None or fence.kind != EVACUATED:
            return False
        if self.store.list_decisions(self.host, DecisionStatus.RELEASING):
            return False
        if any(m.kind == "evacuate" and m.source == self.host
               for m in self.store.moves_in_force(host=self.host)):
            return False
        if self.store.enable_host(self.host, kind=EVACUATED) is None:
            return False
        LOG.warning("host %s: back and reconciled after its evacuation (its "
                    "evacuated claims dropped): its fence is lifted, it takes new "
                    "instances again", self.host)
        return True


__all__ = ["EVACUATED", "MoveFinisher", "give_back"]
