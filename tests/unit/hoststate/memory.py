"""A decision queue in memory: a second transport behind the decision
protocol, which is told of changes instead of polling.

It shows that the protocol (:mod:`compute_plugins.hoststate.protocol`)
needs nothing of the SQL store but the
:class:`~compute_plugins.hoststate.transport.DecisionQueue` methods, and
lets the protocol's tests script the other side of the handshake
(``on_submit``, ``down``).
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Optional

from compute_plugins.hoststate import errors
from compute_plugins.hoststate.records import ACTIVE, DecisionStatus, HostDecision, statuses
from compute_plugins.hoststate.transport import DecisionQueue
from compute_plugins.plugin.contract import Rejection


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


class MemoryDecisionQueue:
    """Decisions in a dict; :meth:`wait_for_change` sleeps on a condition
    every change notifies (no polling).

    :param on_submit: called with each decision just submitted (the test
        plays the agent there).
    """

    def __init__(self, on_submit: Optional[Callable[[HostDecision], None]] = None) -> None:
        self.url = "memory://"
        self.on_submit = on_submit
        #: Set to an error message: every call fails with StoreUnavailable.
        self.down: Optional[str] = None
        #: host -> why it is down (its agent's lease expired): a wait
        #: ``until_host_down`` on a decision of that host stops at once.
        self.hosts_down: dict[str, str] = {}
        self._decisions: dict[int, HostDecision] = {}
        self._ids = itertools.count(1)
        self._changed = threading.Condition()

    def _check_up(self) -> None:
        if self.down is not None:
            raise errors.StoreUnavailable(self.url, self.down)

    def submit_decision(self, consumer: str, host: str, spec: str) -> HostDecision:
        self._check_up()
        with self._changed:
            existing = self._active(consumer)
            if existing is not None:
                raise errors.DecisionExists(existing)
            now = _now()
            decision = HostDecision(next(self._ids), consumer, host, spec,
                                    DecisionStatus.PENDING, (), now, now)
            self._decisions[decision.id] = decision
            self._changed.notify_all()
        if self.on_submit is not None:
            self.on_submit(decision)
        return decision

    def record_cancel(self, consumer: str, host: str, spec: str,
                      reasons: Sequence[Rejection] = ()) -> HostDecision:
        self._check_up()
        with self._changed:
            now = _now()
            decision = HostDecision(next(self._ids), consumer, host, spec,
                                    DecisionStatus.RELEASED, tuple(reasons), now, now)
            self._decisions[decision.id] = decision
            self._changed.notify_all()
        return decision

    def get_decision(self, decision_id: int) -> HostDecision:
        self._check_up()
        with self._changed:
            if decision_id not in self._decisions:
                raise errors.DecisionNotFound(decision_id)
            return self._decisions[decision_id]

    def _active(self, consumer: str) -> Optional[HostDecision]:
        return next((d for d in self._decisions.values()
                     if d.consumer == consumer and d.status in ACTIVE), None)

    def active_decision(self, consumer: str) -> Optional[HostDecision]:
        self._check_up()
        with self._changed:
            return self._active(consumer)

    def latest_decision(self, consumer: str) -> Optional[HostDecision]:
        found = self.history(consumer)
        return found[-1] if found else None

    def history(self, consumer: str) -> list[HostDecision]:
        self._check_up()
        with self._changed:
            return [d for _, d in sorted(self._decisions.items()) if d.consumer == consumer]

    def list_decisions(self, host: str,
                       status: DecisionStatus | str | Iterable[DecisionStatus | str]
                       = DecisionStatus.PENDING,
                       limit: Optional[int] = None) -> list[HostDecision]:
        self._check_up()
        wanted = statuses(status)
        with self._changed:
            found = [d for _, d in sorted(self._decisions.items())
                     if d.host == host and d.status in wanted]
        return found if limit is None else found[:limit]

    def swap_status(self, decision_id: int, sources: Collection[DecisionStatus],
                    target: DecisionStatus, reasons: Sequence[Rejection] = (),
                    *, move: Optional[str] = None) -> HostDecision:
        self._check_up()
        with self._changed:
            if decision_id not in self._decisions:
                raise errors.DecisionNotFound(decision_id)
            decision = self._decisions[decision_id]
            if decision.status not in sources:
                raise errors.DecisionStatusConflict(decision, target, sources, move)
            decision = dataclasses.replace(
                decision, status=target, updated_at=_now(),
                reasons=tuple(reasons) if reasons else decision.reasons)
            self._decisions[decision_id] = decision
            self._changed.notify_all()
            return decision

    def wait_for_change(self, decision: HostDecision, timeout: float, *,
                        poll_interval: float = 0.05,
                        max_poll_interval: float = 1.0,
                        until_host_down: bool = False) -> HostDecision:
        if not timeout >= 0:
            raise ValueError("timeout %r: expected seconds >= 0" % (timeout,))
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                self._check_up()
                now = self._decisions[decision.id]
                if (until_host_down and now.status == decision.status
                        and now.host in self.hosts_down):
                    raise errors.HostDown(now, self.hosts_down[now.host])
                left = deadline - time.monotonic()
                if now.status != decision.status or left <= 0:
                    return now
                self._changed.wait(left)

    def purge_decisions(self, before: datetime.datetime) -> int:
        self._check_up()
        with self._changed:
            gone = [i for i, d in self._decisions.items()
                    if d.status not in ACTIVE and d.updated_at < before]
            for i in gone:
                del self._decisions[i]
            return len(gone)


#: A transport: checked by mypy.
_TRANSPORT: type[DecisionQueue] = MemoryDecisionQueue
