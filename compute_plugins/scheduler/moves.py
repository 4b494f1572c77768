"""Moving an instance between hosts: resize, cold and live migration, and
confirm or revert (issue 21; the design and what is built:
``doc/source/lifecycle.md``).

A move is decided once and executed by the hosts, as a placement is: the
RequestSpec of the move (the new flavor's for a resize, the instance's own
for a migration) is parsed once; the scheduler decides a destination
(:meth:`~compute_plugins.scheduler.selection.Scheduler.schedule`, the source
excluded unless ``[scheduler] allow_resize_to_same_host`` for a resize, or
only the host an operator named), and the destination's agent verifies and
claims the decision with exactly that information. The source keeps what
it holds until the move is confirmed.

Placement as nova does it (:mod:`compute_plugins.placement.migration`): at
the hand-over the source's allocation moves to a **migration consumer** (a
new uuid, the move's record in the store) and the instance's consumer holds
the destination's; the source's decision (its claim) is re-keyed to the
migration consumer in the store, and the source's agent re-keys its ledger
when it sees it (never freeing it: :func:`~compute_plugins.hoststate.
protocol.rekeyed_claims`). The move's record
(:mod:`compute_plugins.hoststate.moves`) changes status only by the steps of
:data:`~compute_plugins.hoststate.protocol.MOVE_TRANSITIONS`:

- **resize / migrate** (:meth:`Mover.resize`, :meth:`Mover.migrate`):
  start, hand-over, then the scheduler places the instance's consumer;
  claimed: "to confirm" (nova's ``VERIFY_RESIZE``); no host: the allocation
  and the decision are given back (roll-back) and every host's reasons
  returned, as ``schedule``'s;
- **live migration** (:meth:`Mover.migrate` with ``live``): as a
  migration, then the command confirms it itself (nova's live migration has
  no confirm step: once the destination's claim holds, post-live-migration
  frees the source); one interrupted before its confirm step ended is
  finished by a re-run or by :meth:`Mover.confirm`;
- **confirm** (:meth:`Mover.confirm`): the source's agent releases the
  migration consumer (its ledger entry, its allocation) as any release;
- **revert** (:meth:`Mover.revert`): the destination's agent releases the
  instance's new decision (ledger, allocation), then the source allocation
  goes back to the instance in one ``POST /allocations`` and the source
  decision is re-keyed back (its agent re-keys its ledger). A move
  interrupted before its destination claimed (the mover killed) is undone
  the same way.

Every step checks before it writes, so a re-run does what is left: a
confirm or revert of a move already confirmed or reverted is a no-op
(``already confirmed``). A command that stops half-way (killed) leaves its
move to the hosts' agents, which finish or undo it at their periodic once
it is left unchanged for ``[compute] move_step_timeout``
(:mod:`compute_plugins.compute.moves`).
"""

from __future__ import annotations

import dataclasses
import uuid as uuidlib
from collections.abc import Callable
from typing import Any, Optional

from oslo_config import cfg
from oslo_log import log as logging

from compute_plugins import exception
from compute_plugins.compute import disable, guest
from compute_plugins.compute import moves as finishing
from compute_plugins.compute.release import request_release
from compute_plugins.hoststate import errors, protocol
from compute_plugins.hoststate.records import (
    DecisionStatus,
    HostDecision,
    MoveRecord,
    MoveStatus,
)
from compute_plugins.hoststate.store import HostStateStore
from compute_plugins.placement import migration as pmigration
from compute_plugins.plugin.contract import Rejection
from compute_plugins.request.spec import RequestSpec
from compute_plugins.request.types import FrozenMap
from compute_plugins.runtime import PluginSet
from compute_plugins.scheduler import liveness
from compute_plugins.scheduler.selection import Plan, Scheduler, ScheduleResult

LOG = logging.getLogger(__name__)

#: ``project_id``/``user_id`` when Placement has none for the instance.
DEFAULT_PROJECT = "compute-plugins"

MoveStep = protocol.MoveStep
#: The reason an evacuated host is fenced with (disabled in the store, kind
#: ``evacuated``: its agent lifts the fence once back and reconciled).
FENCE_REASON = ("evacuated: no new instance until its agent is back and has "
                "dropped the evacuated claims")


class MoveError(exception.ComputePluginsError):
    """A move refused before anything changed (one line).

    :param exit_code: the command line's exit code (1: the consumer is
        unknown or not placed; 2: a move the state refuses).
    """

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _moving(move: MoveRecord) -> MoveError:
    """A move refused: the instance has ``move`` in force (exit 2)."""
    return MoveError("consumer %s is moving already (%s): confirm or revert it first"
                     % (move.consumer, move.describe()))


@dataclasses.dataclass(frozen=True)
class FinishResult:
    """What :meth:`Mover.confirm` or :meth:`Mover.revert` did.

    :param move: the move as it is now.
    :param done: the move is confirmed (or reverted) now.
    :param already: it was before this call (nothing done).
    :param waiting: not done: a host's agent did not free its side in time
        (or its host is down); a re-run finishes it. In words.
    """

    move: MoveRecord
    done: bool
    already: bool = False
    waiting: str = ""


@dataclasses.dataclass(frozen=True)
class MoveResult:
    """What :meth:`Mover.resize` or :meth:`Mover.migrate` did.

    :param move: the move's record as it is now (``to-confirm``: the
        destination claimed; ``rolled-back``: no host took it; a live
        migration: ``confirmed``, or ``confirming`` when the source's agent
        did not free its side in time).
    :param schedule: the scheduler's result (reasons per host and plugin
        when not placed); None when a re-run of ``migrate --live`` only
        finished a live migration interrupted before its confirm step
        ended (nothing scheduled).
    :param guest_xml: ``migrate --live``: the destination's guest XML, with
        the destination's pinning, pages and devices; else None.
    :param confirmed: a live migration: its confirm step (made by the
        command itself); else None.
    """

    move: MoveRecord
    schedule: Optional[ScheduleResult]
    guest_xml: Optional[str] = None
    confirmed: Optional[FinishResult] = None

    @property
    def moved(self) -> bool:
        """The destination claimed the instance (to confirm, or confirmed)."""
        return self.move.dest is not None and self.move.status in (
            MoveStatus.TO_CONFIRM, MoveStatus.CONFIRMING, MoveStatus.CONFIRMED)

    @property
    def waiting(self) -> str:
        """A live migration whose confirm step is not finished: why (the
        source's agent did not free its side in time; a re-run or
        ``confirm`` finishes it); else empty."""
        if self.confirmed is None or self.confirmed.done:
            return ""
        return self.confirmed.waiting


@dataclasses.dataclass(frozen=True)
class EvacuateResult:
    """What :meth:`Mover.evacuate` did.

    :param host: the host evacuated.
    :param fence: the host's disabled record (no decision goes to it).
    :param moves: each instance's move: ``confirmed`` (its new claim holds,
        its allocation on the host deleted) or ``rolled-back`` (no host
        took it: it stays on the dead host, with every host's reasons).
    :param skipped: consumer -> why it was not moved (a move in force, or
        a move refused and rolled back).
    """

    host: str
    fence: Any
    moves: tuple[MoveResult, ...]
    skipped: FrozenMap[str, str]

    @property
    def evacuated(self) -> bool:
        """Every instance moved."""
        return not self.skipped and all(m.move.status == MoveStatus.CONFIRMED
                                        for m in self.moves)


class MoveScheduler(Scheduler):
    """The scheduler of one move: the hosts it may choose are narrowed
    before fitting (the source excluded, or only the named host: the bounded
    fitting must not spend its sample on hosts the move cannot take, nor
    miss the one asked for), the source shown with its reason."""

    def __init__(self, *args: Any, source: str, allow_source: bool,
                 only: Optional[str], migration: Optional[str] = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.source = source
        self.allow_source = allow_source
        self.only = only
        self.migration = migration

    def _free(self, consumer: str, calls: dict[str, int]) -> None:
        """An offer not held (withdrawn, rejected, no answer): its
        allocation freed only while the move's migration consumer holds
        the source (:func:`~compute_plugins.placement.migration.
        free_destination`): a revert that withdrew the offer may have
        given the source back to the instance meanwhile."""
        if self.migration is None:
            super()._free(consumer, calls)
            return
        self._count(calls, "GET", "/allocations/{consumer}")
        pmigration.free_destination(self.placement, consumer, self.migration)

    def _left_out(self, host: str) -> Optional[Rejection]:
        if self.only is not None and host != self.only:
            return Rejection("not the host asked for (%s)" % self.only)
        if host == self.source and not self.allow_source:
            return Rejection("the instance is on this host (a resize may stay "
                             "only with [scheduler] allow_resize_to_same_host)")
        return None

    def _eligible(self, hosts: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(h for h in hosts if self._left_out(h) is None)

    def plan(self, spec: Any, fresh: bool = False,
             since: Optional[float] = None, patience: Optional[float] = None) -> Plan:
        planned = super().plan(spec, fresh=fresh, since=since, patience=patience)
        verdicts = dict(planned.verdicts)
        if self.only is not None:
            verdicts = {h: v for h, v in verdicts.items() if h == self.only}
        elif self.source is not None:
            why = self._left_out(self.source)
            held = tuple(verdicts.get(self.source, ()))
            if why is not None and why not in held:
                verdicts[self.source] = (why,) + held
        ordered = tuple(item for item in planned.ordered
                        if self._left_out(item[1].host) is None)
        return dataclasses.replace(planned, ordered=ordered,
                                   verdicts=FrozenMap(sorted(verdicts.items())))


class Mover:
    """Moves instances (see the module doc); the Python API of ``resize``,
    ``migrate``, ``confirm`` and ``revert``.

    :param conf: the configuration (``[scheduler]`` and ``[compute]``
        registered: a live migration's confirm waits ``[compute]
        release_timeout`` by default).
    :param plugins: the loaded plugins.
    :param placement: a Placement client.
    :param store: the host-state store (decisions and moves).
    :param poll_interval: first delay between polls of an agent's answer.
    :param domain_type: libvirt domain type of a live migration's guest XML.
    :param seed: the destination's draw among equally good hosts
        (:class:`~compute_plugins.scheduler.selection.Scheduler`'s).
    """

    def __init__(self, conf: cfg.ConfigOpts, plugins: PluginSet, placement: Any,
                 store: HostStateStore, poll_interval: float = 0.02,
                 domain_type: str = "kvm", seed: Optional[int] = None) -> None:
        self.conf = conf
        self.plugins = plugins
        self.placement = placement
        self.store = store
        self.poll_interval = poll_interval
        self.domain_type = domain_type
        #: The destination's draw among equally good hosts: from the
        #: system's entropy (None), or the same every run (the demo).
        self.seed = seed
        #: Fault injection (tests): called with the name of each point
        #: between two steps of a move (:meth:`_step`); None: nothing.
        self.inject: Optional[Callable[[str], None]] = None

    # -- checks (nothing written) -------------------------------------------

    def _placed(self, consumer: str) -> HostDecision:
        """The instance's claim, when it may move.

        :raises MoveError: unknown (exit 1), not placed (exit 1), moving
            already, the migration consumer of a move in force, or its
            decision not claimed (exit 2).
        """
        moving = self.store.active_move(consumer)
        if moving is not None:
            raise _moving(moving)
        handed = self.store.get_move(consumer)
        if handed is not None and handed.in_force:
            raise MoveError("consumer %s is the migration consumer of a move in force "
                            "(%s of consumer %s): confirm or revert that move"
                            % (consumer, handed.describe(), handed.consumer))
        decision = self.store.active_decision(consumer)
        if decision is None:
            latest = self.store.latest_decision(consumer)
            if latest is None:
                raise MoveError("consumer %s: no decision was ever made for it"
                                % consumer, 1)
            raise MoveError("consumer %s is not placed (its last decision %d on "
                            "host %s is %s): nothing to move"
                            % (consumer, latest.id, latest.host, latest.status.value), 1)
        if decision.status != DecisionStatus.CLAIMED:
            raise MoveError("consumer %s: its decision %d on host %s is %s: only a "
                            "claimed instance moves" % (consumer, decision.id,
                                                        decision.host,
                                                        decision.status.value))
        return decision

    def _target(self, host: str, source: str) -> None:
        """:raises MoveError: ``host`` unknown, disabled, or the source."""
        if self.store.get_host(host) is None:
            raise MoveError("host %s is not in the host-state store (no agent "
                            "published it)" % host)
        disabled = self.store.disabled_hosts([host]).get(host)
        if disabled is not None:
            raise MoveError(disabled.describe())
        if host == source:
            raise MoveError("the instance is on host %s already: a migration goes "
                            "to another host" % host)

    # -- resize, migrate ---------------------------------------------------

    def resize(self, consumer: str, spec: RequestSpec,
               timeout: Optional[float] = None) -> MoveResult:
        """Resize ``consumer`` to ``spec`` (the new flavor's RequestSpec,
        without a decision): the destination claims it, the instance is
        left "to confirm" (or, no host taking it, as it was).

        :raises MoveError: see :meth:`_placed` (nothing changed); Placement
            refused the hand-over (exit 1, rolled back).
        """
        decision = self._placed(consumer)
        allow = bool(self.conf.scheduler.allow_resize_to_same_host)
        return self._move("resize", consumer, decision, spec.with_decision(None),
                          allow_source=allow, only=None, timeout=timeout)

    def migrate(self, consumer: str, host: Optional[str] = None, live: bool = False,
                timeout: Optional[float] = None,
                confirm_timeout: Optional[float] = None,
                on_claimed: Optional[Callable[[MoveResult], None]] = None) -> MoveResult:
        """Migrate ``consumer`` to another host (``host``: that one, still
        checked by the scheduler) with its own spec.

        ``live``: the result carries the destination's guest XML, and the
        move is confirmed here, once the destination's claim holds (nova's
        live migration has no confirm step: post-live-migration frees the
        source), by :meth:`confirm`. A live migration whose confirm step did
        not end (the source's agent did not free its side in time, or this
        call was interrupted) is finished by a re-run (``live``, ``host``
        None or its destination) or by :meth:`confirm`.

        :param timeout: seconds to wait for the destination's answer (None:
            ``[scheduler] answer_timeout``).
        :param confirm_timeout: ``live``: seconds to wait for the source's
            agent to free its side (None: ``[compute] release_timeout``).
        :param on_claimed: ``live``: called with the move once the
            destination claimed it, before its confirm step (the demo reads
            Placement's consumers there).
        :raises MoveError: see :meth:`_placed`; ``host`` unknown, disabled
            or the instance's own (nothing changed).
        """
        if live:
            moving = self.store.active_move(consumer)
            if (moving is not None and moving.kind == "live-migrate"
                    and moving.status in (MoveStatus.TO_CONFIRM, MoveStatus.CONFIRMING)
                    and host in (None, moving.dest)):
                # NOTE: a re-run of a live migration interrupted before its
                # confirm step ended: that step, nothing scheduled again.
                return self._confirm_live(MoveResult(moving, None, self._dest_xml(moving)),
                                          confirm_timeout)
        decision = self._placed(consumer)
        if host is not None:
            self._target(host, decision.host)
        spec = RequestSpec.from_json(decision.spec, self.plugins).with_decision(None)
        result = self._move("live-migrate" if live else "migrate", consumer, decision,
                            spec, allow_source=False, only=host, timeout=timeout)
        if not live or not result.moved:
            return result
        if on_claimed is not None:
            on_claimed(result)
        return self._confirm_live(result, confirm_timeout)

    def _confirm_live(self, result: MoveResult, timeout: Optional[float]) -> MoveResult:
        """A live migration's confirm step, made by the mover itself (what
        nova's post-live-migration does): :meth:`confirm`, idempotent."""
        if timeout is None:
            timeout = float(self.conf.compute.release_timeout)
        done = self.confirm(result.move.consumer, timeout=timeout)
        return dataclasses.replace(result, move=done.move, confirmed=done)

    def _dest_xml(self, move: MoveRecord) -> Optional[str]:
        """The destination guest XML of a live migration to confirm, from
        its destination's decision (a re-run prints it again)."""
        if move.dest_decision is None:
            return None
        decision = self.store.get_decision(move.dest_decision)
        return self.guest_xml(move.consumer, RequestSpec.from_json(decision.spec,
                                                                   self.plugins))

    def _move(self, kind: str, consumer: str, decision: HostDecision, spec: RequestSpec,
              allow_source: bool, only: Optional[str],
              timeout: Optional[float]) -> MoveResult:
        migration = str(uuidlib.uuid4())
        try:
            move = self.store.start_move(migration, consumer, kind, decision.host,
                                         decision.id, spec.to_json())
        except errors.MoveExists as err:
            # NOTE: another mover started one since the check
            raise _moving(err.move) from None
        try:
            self._step("started")
            # NOTE: the claim first, by compare-and-swap from claimed: a
            # release that landed since the check wins (nothing moved), and
            # one that lands after finds nothing of the instance's in force.
            try:
                self.store.rekey_decision(decision.id, consumer, migration,
                                          statuses=(DecisionStatus.CLAIMED,))
            except errors.HostStateError:
                raise MoveError("consumer %s is being released: not moved"
                                % consumer) from None
            self._step("rekeyed")
            held = pmigration.move_allocations(self.placement, consumer, migration,
                                               pmigration.MIGRATION, pmigration.INSTANCE)
            self._step("allocations-moved")
            move = protocol.apply_move(self.store, move, MoveStep.HAND_OVER)
            self._step("handed-over")
            with MoveScheduler(self.conf, self.plugins, self.placement, self.store,
                               poll_interval=self.poll_interval,
                               source=decision.host, allow_source=allow_source,
                               only=only, migration=migration, seed=self.seed) as scheduler:
                result = scheduler.schedule(spec, consumer,
                                            held.project_id or DEFAULT_PROJECT,
                                            held.user_id or DEFAULT_PROJECT, timeout=timeout)
        except Exception as err:
            self._give_back(move)
            protocol.apply_move(self.store, move, MoveStep.ROLL_BACK)
            if isinstance(err, pmigration.MoveConflict):
                # NOTE: Placement refused the hand-over (no allocation to
                # move, or 409s every attempt): rolled back, one line.
                raise MoveError("consumer %s: not moved (rolled back): %s"
                                % (consumer, err), 1) from None
            raise
        if not result.placed:
            self._give_back(move)
            reasons = tuple(r for host in result.reasons for r in host.reasons)
            move = protocol.apply_move(self.store, move, MoveStep.ROLL_BACK,
                                       reasons=reasons)
            return MoveResult(move, result)
        self._step("dest-claimed")
        claimed = self.store.active_decision(consumer)
        assert claimed is not None and result.host is not None
        move = protocol.apply_move(self.store, move, MoveStep.CLAIMED,
                                   dest=result.host, dest_decision=claimed.id)
        xml = None
        if kind == "live-migrate":
            xml = self.guest_xml(consumer, result.spec)
        return MoveResult(move, result, xml)

    # -- evacuate ----------------------------------------------------------

    def evacuate(self, host: str, force_down: bool = False, by: Optional[str] = None,
                 timeout: Optional[float] = None) -> EvacuateResult:
        """Move every instance off ``host``, whose agent is down (its lease
        expired; ``force_down``: an operator's statement). The host is
        fenced first (disabled in the store, :data:`FENCE_REASON`: no
        decision goes to it); then each instance is handed over and placed
        elsewhere with its own spec; only once its new claim holds is its
        allocation on the host deleted and its old claim marked releasing
        (the host's agent drops it from its ledger when it comes back).

        :raises MoveError: ``host`` unknown, or up (exit 2; nothing changed).
        """
        if self.store.get_host(host) is None:
            raise MoveError("host %s is not in the host-state store (no agent "
                            "published it)" % host)
        # NOTE: that host's lease alone (one row), not every host's.
        if not force_down and host not in liveness.split(
                self.store.host_statuses([host])).down:
            raise MoveError("host %s is not down (its agent holds its lease, or "
                            "never took one): evacuate a host whose agent is down, "
                            "or say it is with --force-down" % host)
        fenced = disable.disable_host(self.store, self.placement, host, FENCE_REASON, by,
                                      kind=finishing.EVACUATED)
        self._step("fenced")
        moved: list[MoveResult] = []
        skipped: dict[str, str] = {}
        for decision in self.store.list_decisions(host, DecisionStatus.CLAIMED):
            consumer = decision.consumer
            moving = self.store.active_move(consumer) or self.store.get_move(consumer)
            if moving is not None and moving.in_force:
                skipped[moving.consumer] = "moving (%s): confirm or revert it first" % (
                    moving.describe())
                continue
            spec = RequestSpec.from_json(decision.spec, self.plugins).with_decision(None)
            try:
                result = self._move("evacuate", consumer, decision, spec,
                                    allow_source=False, only=None, timeout=timeout)
            except MoveError as err:
                # NOTE: refused and rolled back (its allocation gone, its
                # release requested meanwhile): said, the others moved.
                skipped[consumer] = str(err)
                continue
            if result.moved:
                self._step("evacuate-claimed")
                move = self._drop_evacuated(result.move)
                self._step("evacuate-dropped")
                result = dataclasses.replace(result, move=protocol.apply_move(
                    self.store, move, MoveStep.EVACUATED))
            moved.append(result)
        return EvacuateResult(host, fenced.record, tuple(moved),
                              FrozenMap(sorted(skipped.items())))

    def _evacuated(self, host: str) -> bool:
        """Whether ``host`` is fenced by :meth:`evacuate` (not enabled since)."""
        fence = self.store.disabled_hosts([host]).get(host)
        return fence is not None and fence.kind == finishing.EVACUATED

    def _drop_evacuated(self, move: MoveRecord) -> MoveRecord:
        """An evacuated instance's side on the host it left (down, fenced):
        its old decision marked releasing (its agent drops the claim when it
        comes back), the migration consumer's allocation deleted. Each
        checked: a re-run does what is left."""
        protocol.request_release(self.store, move.migration)
        self.placement.delete_allocations(move.migration)
        return move

    def guest_xml(self, consumer: str, spec: RequestSpec) -> str:
        """The destination's guest XML of a move (what nova's NUMA live
        migration recomputes): built from the destination's decision, its
        pinning, pages and devices."""
        assert spec.decision is not None
        return guest.domain_xml(spec, spec.decision.assignments, self.plugins,
                                name="instance-%s" % consumer,
                                domain_type=self.domain_type, uuid=consumer)

    def _give_back(self, move: MoveRecord) -> None:
        """The source allocation and decision back to the instance (each
        checked first: a re-run skips what is done;
        :func:`compute_plugins.compute.moves.give_back`, the agents' too)."""
        finishing.give_back(self.placement, self.store, move)

    def _step(self, point: str) -> None:
        """Between two steps of a move: the tests' fault injection
        (:attr:`inject`, called with the point's name: it may raise to
        stop the mover there, as a killed process); nothing otherwise."""
        if self.inject is not None:
            self.inject(point)

    # -- confirm, revert ---------------------------------------------------

    def _finishing(self, consumer: str, final: MoveStatus, verb: str
                   ) -> tuple[Optional[MoveRecord], Optional[FinishResult]]:
        """The move to confirm or revert; or the result when it ended as
        asked already.

        :raises MoveError: no move (exit 1), or one that ended otherwise.
        """
        move = self.store.active_move(consumer)
        if move is not None:
            return move, None
        latest = self.store.latest_move(consumer)
        if latest is None:
            raise MoveError("consumer %s: no move to %s (it never moved)"
                            % (consumer, verb), 1)
        undone = (MoveStatus.REVERTED, MoveStatus.ROLLED_BACK)
        if latest.status == final or (final == MoveStatus.REVERTED
                                      and latest.status in undone):
            return None, FinishResult(latest, True, already=True)
        raise MoveError("consumer %s: its last move (%s) ended %s: nothing to %s"
                        % (consumer, latest.describe(), latest.status.value, verb))

    def confirm(self, consumer: str, timeout: float = 60.0) -> FinishResult:
        """Confirm the instance's move: the source's agent frees the
        migration consumer (its ledger entry, its allocation); an
        interrupted evacuation's, or that of a move off a host evacuated
        since, is dropped here, as :meth:`evacuate` does.

        :param timeout: seconds to wait for the source's agent.
        :raises MoveError: no move to confirm, or one not claimed yet or
            being reverted (exit 2).
        """
        move, finished = self._finishing(consumer, MoveStatus.CONFIRMED, "confirm")
        if finished is not None:
            return finished
        assert move is not None
        if move.status == MoveStatus.TO_CONFIRM:
            move = protocol.apply_move(self.store, move, MoveStep.REQUEST_CONFIRM)
            self._step("confirm-requested")
        if move.status != MoveStatus.CONFIRMING:
            raise MoveError("consumer %s: its move (%s) cannot be confirmed%s"
                            % (consumer, move.describe(), "" if move.status ==
                               MoveStatus.REVERTING else ": revert undoes it"))
        if move.kind == "evacuate" or self._evacuated(move.source):
            # NOTE: an evacuation interrupted once its new claim held, or a
            # move off a host evacuated since: that host is down and
            # fenced, nobody there frees its side; done as evacuate does.
            self._drop_evacuated(move)
            return self._end(move, MoveStep.CONFIRM)
        done = request_release(self.store, move.migration, self.placement,
                               timeout=timeout, poll_interval=self.poll_interval)
        if done.outcome not in ("released", "nothing-in-force", "unknown"):
            return FinishResult(move, False, waiting=self._waiting(
                move.source, done.outcome, timeout))
        self._step("source-freed")
        return self._end(move, MoveStep.CONFIRM)

    def revert(self, consumer: str, timeout: float = 60.0) -> FinishResult:
        """Revert the instance's move (or undo one interrupted before its
        destination claimed): the destination's agent frees the instance's
        new claim, then the source allocation and decision go back to it.

        :raises MoveError: no move to revert, or one being confirmed.
        """
        move, finished = self._finishing(consumer, MoveStatus.REVERTED, "revert")
        if finished is not None:
            return finished
        assert move is not None
        if protocol.MOVE_TRANSITIONS[MoveStep.REQUEST_REVERT].allows(move.status):
            move = protocol.apply_move(self.store, move, MoveStep.REQUEST_REVERT)
            self._step("revert-requested")
        if move.status != MoveStatus.REVERTING:
            raise MoveError("consumer %s: its move (%s) cannot be reverted"
                            % (consumer, move.describe()))
        dest = self.store.active_decision(consumer)
        if dest is not None and dest.id != move.source_decision:
            # NOTE: no Placement here: a pending offer withdrawn has its
            # allocation freed by free_destination (never the source's,
            # should the mover give it back meanwhile).
            done = request_release(self.store, consumer, None,
                                   timeout=timeout, poll_interval=self.poll_interval)
            if done.outcome != "released":
                return FinishResult(move, False, waiting=self._waiting(
                    dest.host, done.outcome, timeout))
            pmigration.free_destination(self.placement, consumer, move.migration)
        self._step("dest-freed")
        self._give_back(move)
        self._step("given-back")
        return self._end(move, MoveStep.REVERT)

    def _end(self, move: MoveRecord, step: MoveStep) -> FinishResult:
        """The final step of a confirm or revert; one that another confirm
        (or revert) of the move made meanwhile (a retry while the first
        still waited) is done already."""
        try:
            return FinishResult(protocol.apply_move(self.store, move, step), True)
        except errors.MoveStatusConflict as err:
            if err.move.status != protocol.MOVE_TRANSITIONS[step].target:
                raise
            return FinishResult(err.move, True, already=True)

    @staticmethod
    def _waiting(host: str, outcome: str, timeout: float) -> str:
        if outcome == "host-down":
            return ("host %s is down: its agent frees its side when it comes back; "
                    "run it again then" % host)
        return ("host %s's agent did not free its side within %g s (is it "
                "running?); run it again" % (host, timeout))


__all__ = ["FinishResult", "MoveError", "MoveResult", "MoveScheduler", "Mover"]
