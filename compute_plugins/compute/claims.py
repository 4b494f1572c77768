"""Executing the scheduler's decisions on this host: claim and release.

A decision addressed to the host carries the RequestSpec the scheduler
serialised, with its decision (host, node, allocation, mappings and every
plugin's assignment). The compute side reads that spec back
(:meth:`RequestSpec.from_json`: the typed requests and the decision, never
the flavor's extra specs or the image's properties; through a
:class:`~compute_plugins.request.spec.SpecReader`, which decodes the
request part of a flavor's decisions once), builds each plugin's
live host state under the claims already in force (the ledger's
assignments) and runs every plugin's ``verify``
(:meth:`compute_plugins.runtime.PluginSet.verify`), built from the same
checks as the ``fit`` the scheduler ran. So a claim fails only when the
host changed since the state the scheduler decided on: then every plugin's
rejection goes back to the scheduler (the protocol's ``reject``), which
frees the allocation and tries another host. A claim that holds is
recorded in the ledger first, then answered (``claim``): a crash in between
leaves a claim the restarted agent finds in its ledger and answers without
executing it again (:func:`compute_plugins.hoststate.protocol.on_pending`).

Release undoes a claim: the ledger forgets it, the consumer's allocations
are deleted in Placement (``DELETE /allocations/{consumer}``, a 404 is
fine: already gone) and the decision is released.
"""

from __future__ import annotations

import dataclasses
import uuid as uuidlib
from collections.abc import Callable, Sequence
from typing import Any, Optional

from oslo_log import log as logging

from compute_plugins.compute import guest
from compute_plugins.compute.ledger import Ledger
from compute_plugins.hoststate import errors as store_errors
from compute_plugins.hoststate import protocol
from compute_plugins.hoststate.records import HostDecision
from compute_plugins.hoststate.transport import DecisionQueue
from compute_plugins.placement import client as pclient
from compute_plugins.plugin.contract import Rejection
from compute_plugins.request.errors import RequestFormatError
from compute_plugins.request.spec import RequestSpec, SpecReader
from compute_plugins.runtime.manager import PluginManager

LOG = logging.getLogger(__name__)

#: The ``plugin`` of a rejection that is the framework's, not a plugin's.
FRAMEWORK = "framework"
#: :attr:`ClaimResult.note` of a claim answered from the ledger.
RECORDED_EARLIER = "recorded in the ledger earlier, answered now"


@dataclasses.dataclass(frozen=True)
class ClaimResult:
    """How the host answered one decision.

    :param decision_id: the store decision.
    :param consumer: its consumer.
    :param claimed: True when the claim holds (recorded and answered).
    :param reasons: every rejection when it does not (plugin, provider,
        reason), as the store records them.
    :param guest_xml: the libvirt domain of the claimed decision (not
        started), None when rejected.
    :param spec: the spec read from the decision (None when unreadable).
    :param note: how it was answered when not executed now
        (``"recorded in the ledger earlier, answered now"``: the agent
        stopped, or the store was unreachable, between the two;
        ``"released before it was claimed"``: withdrawn by the scheduler
        meanwhile), else "".
    """

    decision_id: int
    consumer: str
    claimed: bool
    reasons: tuple[Rejection, ...] = ()
    guest_xml: Optional[str] = None
    spec: Optional[RequestSpec] = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"decision": self.decision_id, "consumer": self.consumer,
                               "claimed": self.claimed}
        if self.reasons:
            out["reasons"] = [dataclasses.asdict(r) for r in self.reasons]
        if self.note:
            out["note"] = self.note
        return out


@dataclasses.dataclass(frozen=True)
class ReleaseResult:
    """What one release freed.

    :param consumer: the consumer.
    :param decision_id: its store decision (None: a ledger claim whose
        decision is gone from the store).
    :param ledger: whether the ledger held a claim for it.
    :param allocations_deleted: whether Placement held allocations (False:
        404, already gone).
    """

    consumer: str
    decision_id: Optional[int]
    ledger: bool
    allocations_deleted: bool

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _uuid_or_none(text: str) -> Optional[str]:
    try:
        return str(uuidlib.UUID(text))
    except ValueError:
        return None


class Claims:
    """Claims and releases on one host.

    :param host: the host's name in the store (decisions addressed to it).
    :param nodename: its node name (the root provider's name).
    :param manager: the PluginManager, after a discovery.
    :param ledger: the claims in force.
    :param store: the decision queue (the host-state store).
    :param domain_type: libvirt domain type of the guest XML (``kvm``,
        ``test`` on libvirt's test driver).
    """

    def __init__(self, host: str, nodename: str, manager: PluginManager, ledger: Ledger,
                 store: DecisionQueue, domain_type: str = "kvm") -> None:
        self.host = host
        self.nodename = nodename
        self.manager = manager
        self.ledger = ledger
        self.store = store
        self.domain_type = domain_type
        #: The decisions' specs, read with their request parts kept.
        self.specs = SpecReader()

    def states(self) -> tuple[dict[str, object], list[Rejection]]:
        """The live host states under the ledger's assignments."""
        return self.manager.host_states(self.nodename, self.ledger.assignments(),
                                        host=self.host)

    def verify_held(self, consumer: str) -> list[Rejection]:
        """The plugins' ``verify`` of ``consumer``'s claim in the ledger
        against the host's state under every other claim: why it would not
        be claimed now ([] when it holds; nothing changed)."""
        entry = self.ledger.get(consumer)
        if entry is None:
            return []
        others: dict[str, list[Any]] = {}
        for held in sorted(self.ledger.entries().values(), key=lambda e: e.decision_id):
            if held.consumer == consumer:
                continue
            assert held.spec.decision is not None
            for plugin, assignment in held.spec.decision.assignments.items():
                others.setdefault(plugin, []).append(assignment)
        states, broken = self.manager.host_states(self.nodename, others, host=self.host)
        plugins = self.manager.plugins
        return [r for r in broken if r.plugin in entry.spec.requests] + list(
            plugins.only(states).verify(states, entry.spec, host=self.host))

    def guest_xml(self, consumer: str, spec: RequestSpec) -> str:
        """The libvirt domain of ``consumer``'s claimed ``spec`` (named
        ``instance-<consumer>``; not defined nor started here).

        :raises GuestConfigError: a plugin's fragment cannot be merged.
        """
        assert spec.decision is not None
        return guest.domain_xml(spec, spec.decision.assignments, self.manager.plugins,
                                name="instance-%s" % consumer,
                                domain_type=self.domain_type,
                                uuid=_uuid_or_none(consumer))

    # -- claim --------------------------------------------------------------

    def _problems(self, decision: HostDecision
                  ) -> tuple[Optional[RequestSpec], list[Rejection], Optional[str]]:
        """The spec, every reason not to claim it, and its guest XML."""
        try:
            spec = self.specs.read(decision.spec, self.manager.plugins)
        except RequestFormatError as err:
            return None, [Rejection("the spec cannot be read: %s" % err,
                                    plugin=FRAMEWORK)], None
        chosen = spec.decision
        if chosen is None:
            return spec, [Rejection("the spec carries no decision",
                                    plugin=FRAMEWORK)], None
        if chosen.host != self.host or (chosen.nodename
                                        and chosen.nodename != self.nodename):
            return spec, [Rejection(
                "the decision is for host %r node %r; this is host %r node %r"
                % (chosen.host, chosen.nodename, self.host, self.nodename),
                plugin=FRAMEWORK)], None
        plugins = self.manager.plugins
        states, broken = self.states()
        broken = [r for r in broken if r.plugin in spec.requests]
        missing = [Rejection("the plugin is not loaded on this host",
                             plugin=n) for n in spec.requests if n not in plugins]
        reasons = missing + broken + list(
            plugins.only(states).verify(states, spec, host=self.host))
        if reasons:
            return spec, reasons, None
        try:
            xml = self.guest_xml(decision.consumer, spec)
        except guest.GuestConfigError as err:
            return spec, [Rejection(err.reason, plugin=err.plugin)], None
        except Exception as err:  # noqa: BLE001 - a plugin's bug: a rejection
            LOG.exception("consumer %s: the guest XML failed", decision.consumer)
            return spec, [Rejection("the guest configuration failed: %s: %s"
                                    % (type(err).__name__, err),
                                    plugin=FRAMEWORK)], None
        return spec, [], xml

    def claim(self, decision: HostDecision,
              before_answer: Optional[Callable[[], None]] = None) -> ClaimResult:
        """Execute one pending decision addressed to this host.

        :param before_answer: called once the claim is in the ledger and
            before it is answered (the agent publishes the new state there:
            a scheduler that hears "claimed" reads a state that shows it).
        :returns: claimed (recorded in the ledger, then the protocol's
            ``claim``) or rejected (``reject``, with every reason).
        :raises LedgerError: the ledger cannot be written (the decision
            stays pending).
        :raises StoreUnavailable: the store cannot be reached (a claim
            recorded meanwhile is answered on the next try).
        """
        held = self.ledger.get(decision.consumer)
        step = protocol.on_pending(decision, None if held is None else held.decision_id)
        if step is protocol.ClaimStep.ANSWER_RECORDED:
            assert held is not None
            return self._answer_claimed(decision, held.spec, None,
                                        RECORDED_EARLIER)
        if step is protocol.ClaimStep.REPLACE_STALE:
            assert held is not None
            # NOTE: its allocation was freed by whoever released the older
            # decision, and the consumer's allocation now is this
            # decision's: only the stale claim goes, before the verify
            # counts its resources as used.
            LOG.warning("consumer %s: its claim of decision %d is not in force "
                        "(decision %d is): forgetting it", decision.consumer,
                        held.decision_id, decision.id)
            self.ledger.remove(decision.consumer)
        spec, reasons, xml = self._problems(decision)
        if reasons:
            return self._answer_rejected(decision, spec, reasons)
        assert spec is not None
        self.ledger.record(decision.consumer, decision.id, spec, decision.spec)
        if before_answer is not None:
            before_answer()
        return self._answer_claimed(decision, spec, xml, "")

    def _answer_claimed(self, decision: HostDecision, spec: RequestSpec,
                        xml: Optional[str], note: str) -> ClaimResult:
        try:
            protocol.claim(self.store, decision.id)
        except store_errors.DecisionStatusConflict as err:
            # NOTE: withdrawn (the scheduler stopped waiting) or released
            # meanwhile: the claim must not stay in force.
            self.ledger.remove(decision.consumer)
            LOG.warning("decision %d of consumer %s was %s before the claim "
                        "was answered: claim undone", decision.id,
                        decision.consumer, err.decision.status)
            return ClaimResult(decision.id, decision.consumer, False, (), None, spec,
                               "%s before it was claimed" % err.decision.status)
        if xml is None and note:
            try:
                xml = self.guest_xml(decision.consumer, spec)
            except Exception:  # noqa: BLE001 - claimed already; XML optional
                LOG.exception("consumer %s: the guest XML failed", decision.consumer)
                xml = None
        LOG.info("consumer %s: decision %d claimed on %s", decision.consumer,
                 decision.id, self.host)
        return ClaimResult(decision.id, decision.consumer, True, (), xml, spec, note)

    def _answer_rejected(self, decision: HostDecision, spec: Optional[RequestSpec],
                         reasons: Sequence[Rejection]) -> ClaimResult:
        try:
            protocol.reject(self.store, decision.id, reasons)
        except store_errors.DecisionStatusConflict as err:
            return ClaimResult(decision.id, decision.consumer, False, tuple(reasons),
                               None, spec, "%s before it was answered"
                               % err.decision.status)
        LOG.info("consumer %s: decision %d rejected on %s: %s", decision.consumer,
                 decision.id, self.host,
                 "; ".join("%s: %s" % (r.plugin, r.reason) for r in reasons))
        return ClaimResult(decision.id, decision.consumer, False, tuple(reasons),
                           None, spec)

    # -- release ------------------------------------------------------------

    def release(self, consumer: str, decision: Optional[HostDecision],
                placement: Optional[pclient.PlacementClient],
                before_answer: Optional[Callable[[], None]] = None) -> ReleaseResult:
        """Free ``consumer``: forget its claim, delete its allocations in
        Placement, release ``decision`` (when it is claimed or releasing:
        the protocol's ``release``). Safe to repeat after a failure half-way.

        :param placement: None leaves the allocations alone (they belong to
            a newer decision of the consumer).
        :param before_answer: called once the claim is gone from the ledger
            and Placement, before the decision is answered released (the
            agent publishes the host's room there, so whoever waited for the
            release and schedules next sees it, as for a claim).

        :raises PlacementError: Placement failed (other than 404); the
            decision stays releasing and is retried.
        """
        removed = self.ledger.remove(consumer) is not None
        deleted = placement is not None and placement.delete_allocations(consumer)
        if before_answer is not None:
            before_answer()
        decision_id = None
        if decision is not None:
            decision_id = decision.id
            if protocol.legal(protocol.Move.RELEASE, decision.status):
                try:
                    protocol.release(self.store, decision.id)
                except store_errors.DecisionStatusConflict:
                    pass  # NOTE: released meanwhile by another path
        LOG.info("consumer %s released on %s (ledger: %s, allocations: %s)",
                 consumer, self.host, removed, "deleted" if deleted else "none")
        return ReleaseResult(consumer, decision_id, removed, deleted)


__all__ = ["FRAMEWORK", "RECORDED_EARLIER", "ClaimResult", "Claims", "ReleaseResult"]
