"""The scheduler: a RequestSpec in, a host that claimed it out (or why not).

:meth:`Scheduler.schedule`:

1. the hosts the store knows, their generations and their agents' leases,
   kept in memory and brought up to date per plan by one read of what
   changed (the hosts written since the last plan, the leases expired): a
   host whose lease expired is down, no candidate (:mod:`.liveness`:
   :class:`~.liveness.KeptLiveness`); Placement says which of the others have room
   (:mod:`.providers`: one ``GET /resource_providers`` per distinct group
   shape, never
   ``/allocation_candidates``, whose combinations explode on wide trees),
   an answer the scheduler keeps while it stands (:mod:`.view`: a decision
   on known hosts asks Placement nothing before its allocation);
2. the candidates' published states (read only for hosts that published
   since they were last read) and every plugin's ``fit`` on each
   (:mod:`.fitting`), until enough fit (``[scheduler]
   hosts_to_score_percentage``, as kube-scheduler's
   ``percentageOfNodesToScore``: :func:`.view.scoring_target`);
3. the hosts that fit, by weight (:mod:`.weighers`); the first offered is
   drawn at random among those as good as the best (within 1 % of one
   plugin's weight range, :func:`.view.draw`, as kube-scheduler's
   ``selectHost``),
   and with ``[scheduler] host_subset_size`` > 1 among at least that many
   of the best;
4. for the best: the allocation its assignments take (:mod:`.allocation`)
   written with ``PUT /allocations/{consumer}`` (``consumer_generation``
   null: a new consumer; ``consumer_type`` INSTANCE). Placement checks the
   capacity atomically: on a 409 (another scheduler took the room since the
   host published its state) the candidates are planned again on fresh
   state (a race, below);
5. the decision recorded in the spec and addressed to the host in the
   store; the scheduler waits for the host's agent. Claimed: done.
   Rejected (the host changed since it published), or no answer in
   ``[scheduler] answer_timeout`` (the decision is withdrawn first), or
   the host went down meanwhile (its agent's lease expired: withdrawn at
   once, :mod:`.liveness`): the
   allocation is freed and the next host tried, up to ``[scheduler]
   max_attempts`` hosts. After a rejection the candidates are planned
   again on fresh states: the host that rejected is tried again only when
   it published a new state since (another claim landed there first; the
   fit may now choose other CPUs or devices).

**Races do not refuse** (issue 20, item 5): a rejection by a host that
published a new state since the fit, and Placement's 409, are races with
other schedulers, not a lack of room: they do not count against
``max_attempts``; the scheduler plans again on fresh state, waiting up to
:data:`RACE_SETTLE` seconds for the racers' in-flight allocations to settle
when it finds no room. At most ``[scheduler] max_races`` races per request
are not counted (then each counts as an attempt again), so a request makes
at most ``max_attempts + max_races`` offers: it cannot loop forever.

When nothing is placed, :class:`ScheduleResult` says why per host and per
plugin, the best few hosts first (those where the fewest plugins refused).

**Several requests at once** (issue 19): steps 1-3 and the choice of the
host offered are one scheduler's *scheduling cycle*, one at a time; steps
4-5 (the *binding*) run concurrently, the host assumed meanwhile so that
the next cycles plan around it (:class:`Scheduler`).
"""

from __future__ import annotations

import collections
import dataclasses
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Optional, Self, Union

from oslo_config import cfg
from oslo_log import log as logging

from compute_plugins import exception
from compute_plugins.compute.release import (
    ReleaseOutcome,
    refuse_moved_meanwhile,
    refuse_moving,
    request_release,
)
from compute_plugins.hoststate import errors as store_errors
from compute_plugins.hoststate import protocol
from compute_plugins.hoststate.records import HostDecision
from compute_plugins.hoststate.transport import HostStateTransport
from compute_plugins.placement import client as pclient
from compute_plugins.placement import exception as pexc
from compute_plugins.plugin.contract import Rejection
from compute_plugins.request.errors import RequestFormatError
from compute_plugins.request.groups import Decision
from compute_plugins.request.spec import RequestSpec
from compute_plugins.request.types import FrozenMap
from compute_plugins.runtime import PluginSet
from compute_plugins.scheduler import (
    allocation,
    fitting,
    liveness,
    providers,
    view,
    weighers,
)

LOG = logging.getLogger(__name__)

#: Placement microversion of ``consumer_type`` in ``PUT /allocations``.
CONSUMER_TYPE_VERSION = (1, 38)
CONSUMER_TYPE = "INSTANCE"
#: Seconds a refit after a race waits, at most, for the racers' in-flight
#: allocations to settle when the fresh state shows no room
#: (:meth:`Scheduler._refit_after_race`).
RACE_SETTLE = 2.0
#: Seconds past its request's answer timeout (the caller's ``timeout``,
#: else ``[scheduler] answer_timeout``) a binding of this scheduler is
#: waited for, at most, by a plan that finds room only on hosts in flight
#: (:meth:`Scheduler.plan`): a binding is the allocation, the decision and
#: the host's answer (at most that timeout), then a free.
BINDING_SLACK = 30.0
#: Hosts whose last assume a scheduler remembers (:meth:`Scheduler._assume`:
#: a plan older than a host's last assume does not offer it); the oldest
#: forgotten first. A plan older than the newest assume forgotten offers
#: no host it does not remember (it re-plans).
MAX_ASSUMED_AT = 10_000
#: Why a plan leaves a host out while another request of the same
#: scheduler is being placed there.
IN_FLIGHT = ("another request of this scheduler is being placed there (in flight); "
             "planned around it")


class ConsumerInUse(exception.ComputePluginsError):
    """The consumer already has a decision in force (scheduled before)."""

    def __init__(self, consumer: str, host: str, status: str) -> None:
        self.consumer = consumer
        self.host = host
        self.status = status
        super().__init__("consumer %s already has a decision on host %s (%s); "
                         "release it first" % (consumer, host, status))


class ConsumerAllocated(exception.ComputePluginsError):
    """The consumer has allocations in Placement but no decision in force.

    Placement refused ``PUT /allocations/{consumer}`` because the consumer
    exists there already with allocations
    (:class:`~compute_plugins.placement.exception.ConsumerAllocated`). That
    is the same on every host, so no other host is tried, and the
    allocations (written by another scheduler of this consumer that is
    between its PUT and its decision, or by one that stopped there) are
    left alone.
    """

    def __init__(self, consumer: str, providers: list[str], detail: str) -> None:
        self.consumer = consumer
        self.providers = providers
        super().__init__(
            "consumer %s already has allocations in Placement (on %s) but no "
            "decision in force: another schedule of it is running, or one "
            "stopped between writing its allocation and addressing the host; "
            "once none runs, free them (DELETE /allocations/%s) and schedule "
            "again (Placement: %s)"
            % (consumer, ", ".join(providers) or "no provider", consumer, detail))


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One host tried after the fit.

    :param host: the host.
    :param outcome: ``claimed``, ``conflict`` (Placement refused the
        allocation: 409), ``rejected`` (the agent refused: see reasons),
        ``timeout`` (no answer; withdrawn and freed), ``down`` (the host's
        agent lease expired before an answer: withdrawn and freed at once,
        the next host tried), ``withdrawn`` (released
        by someone else before an answer), ``unbuildable`` (no allocation
        could be built from the assignments).
    :param reasons: why, per plugin.
    :param seconds: how long the attempt took.
    """

    host: str
    outcome: str
    reasons: tuple[Rejection, ...] = ()
    seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class HostReasons:
    """Why one host got nothing: every plugin's rejection (or the attempt's)."""

    host: str
    reasons: tuple[Rejection, ...]


_MISSING: Any = object()


class Verdicts(Mapping[str, tuple[Rejection, ...]]):
    """host -> why it got nothing (empty: it fits), read through layers:
    the first layer that holds a host says its verdict.

    A plan's verdicts are every host Placement's answer excluded (as many
    as there are hosts, kept by the view from decision to decision) under
    what the plan found itself (the hosts it fitted, the down ones, those
    in flight: as many as it looked at); a request's are its own under its
    plans'. Copying and sorting them all per decision made a warm
    decision's CPU grow with the number of hosts: the layers are read in
    place, and sorted only when the whole map is read (a refusal's
    reasons, a report), once.

    Read-only, iterated in host order, hashable and equal to any mapping
    of the same items (as the :class:`FrozenMap` it stands for). The
    layers given must not change afterwards.

    :param layers: mappings host -> rejections, the first wins.
    """

    __slots__ = ("_layers", "_hosts", "_hash")

    def __init__(self, *layers: Mapping[str, tuple[Rejection, ...]]) -> None:
        flat: list[Mapping[str, tuple[Rejection, ...]]] = []
        for layer in layers:
            if isinstance(layer, Verdicts):
                flat.extend(layer._layers)
            elif layer:
                flat.append(layer)
        self._layers: tuple[Mapping[str, tuple[Rejection, ...]], ...] = tuple(flat)
        self._hosts: Optional[list[str]] = None
        self._hash: Optional[int] = None

    def __getitem__(self, host: str) -> tuple[Rejection, ...]:
        for layer in self._layers:
            found = layer.get(host, _MISSING)
            if found is not _MISSING:
                return found  # type: ignore[no-any-return]
        raise KeyError(host)

    def __contains__(self, host: object) -> bool:
        return any(host in layer for layer in self._layers)

    def _sorted(self) -> list[str]:
        if self._hosts is None:
            self._hosts = sorted(set().union(*self._layers))
        return self._hosts

    def __iter__(self) -> Iterator[str]:
        return iter(self._sorted())

    def __len__(self) -> int:
        if len(self._layers) == 1:
            return len(self._layers[0])
        return len(self._sorted())

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self.items()))
        return self._hash

    def __repr__(self) -> str:
        return "Verdicts(%r)" % (dict(self.items()),)


@dataclasses.dataclass(frozen=True)
class ScheduleResult:
    """What :meth:`Scheduler.schedule` did.

    :param placed: a host claimed the decision.
    :param consumer: the consumer (instance) uuid.
    :param host: the host that claimed it (None when not placed).
    :param spec: the spec, with its decision when placed.
    :param candidates: hosts Placement said have room.
    :param fitting: of those, hosts where every plugin fits.
    :param verdicts: host -> every plugin's rejection (empty: it fits), for
        every host the store knows.
    :param attempts: the hosts tried, in order.
    :param reasons: when not placed, the best few hosts' reasons.
    :param queries: the Placement queries, decoded.
    :param placement_calls: requests sent to Placement, by ``METHOD path``
        template.
    :param timings: seconds per phase (``placement``, ``store``, ``fit``,
        ``claim``).
    """

    placed: bool
    consumer: str
    host: Optional[str]
    spec: Any
    candidates: int
    fitting: int
    verdicts: Mapping[str, tuple[Rejection, ...]]
    attempts: tuple[Attempt, ...]
    reasons: tuple[HostReasons, ...]
    queries: tuple[str, ...]
    placement_calls: Mapping[str, int]
    timings: Mapping[str, float]

    @property
    def decision(self) -> Optional[Decision]:
        return self.spec.decision if self.placed else None

    @property
    def placement_call_count(self) -> int:
        return sum(self.placement_calls.values())


@dataclasses.dataclass(frozen=True)
class Plan:
    """Candidates, fits and order of one request (:meth:`Scheduler.plan`).

    :param found: Placement's answer by host (its ``calls``: the
        requests sent for this plan, 0 when the view's answer served).
    :param fits: fitted candidate host -> its fit.
    :param verdicts: every known host -> its rejections (empty: fits),
        but the candidates not fitted (``unscored``).
    :param ordered: ``(weight, fit)`` of the hosts that fit, best first
        (the first drawn among the equally good, or the best
        ``[scheduler] host_subset_size``: :func:`.view.draw`).
    :param timings: seconds: ``placement``, ``store``, ``fit``.
    :param unscored: candidates not fitted: enough others fit
        (``[scheduler] hosts_to_score_percentage``).
    :param busy: candidates left out: another request of this scheduler
        is being placed there (:meth:`Scheduler._assume`).
    :param serial: the scheduler's assumes made before this plan: a host
        assumed since (by another of its requests) is not offered from it.
    :param calls: the requests sent to Placement for this plan in all its
        rounds (the waits for hosts in flight, a re-ask on a stale view,
        a refit's tries after a race); ``found.calls`` counts the last
        round's only.
    """

    found: providers.ProviderCandidates
    fits: Mapping[str, fitting.HostFit]
    verdicts: Mapping[str, tuple[Rejection, ...]]
    ordered: tuple[tuple[float, fitting.HostFit], ...]
    timings: Mapping[str, float]
    unscored: int = 0
    busy: tuple[str, ...] = ()
    serial: int = 0
    calls: int = 0


class Scheduler:
    """Chooses a host for a RequestSpec and has its agent claim it.

    :param conf: the service configuration (``[scheduler]`` is registered).
    :param plugins: the loaded plugins (those the specs were built with).
    :param placement_client: a
        :class:`~compute_plugins.placement.client.PlacementClient`.
    :param store: the host-state transport the agents publish to and
        answer on (the SQL :class:`~compute_plugins.hoststate.store.HostStateStore`).
    :param poll_interval: first delay between polls of the host's answer.
    :param on_offer: called with each decision once submitted and the
        seconds it will wait, before the wait: whoever runs the scheduler
        tells which consumer and host it waits for, so that an interrupted
        or killed scheduler's work can be found (``compute-plugins
        schedule`` prints it on stderr).
    :param seed: the draw among equally good hosts (:func:`.view.draw`):
        None, from the system's entropy (schedulers draw differently); a
        number, the same draws every run.

    **Several requests at once** (kube-scheduler's scheduling and binding
    cycles): :meth:`schedule` may be called from several threads. Each
    request's *scheduling cycle* (:meth:`plan`: candidates, fit, order, and
    the choice of the host offered) runs one at a time per scheduler; the
    host chosen is *assumed* (:meth:`_assume`) before the cycle ends, and
    the next cycles plan around it (the host is left out, ``busy``) until
    the request's *binding* on it (the ``PUT /allocations``, the decision,
    the wait for the agent's answer) ends: bindings run concurrently. So two
    requests of one scheduler never get the same CPUs, pages or devices.
    A rejection (Placement's 409, the agent's refusal, no answer) un-assumes
    the host before the request plans again, as any race; a claim
    un-assumes it once the agent answered, by when its new state (the
    claim's) is published (the agent publishes before it answers).

    Placement's answer for the request's shape is brought up to date in
    the view before the cycle (:meth:`_prefetch`), so that asking
    Placement about every host holds up no other request.

    The assume is per host, not per resource: the plugins' states are
    opaque to the scheduler, and a state with one more assignment is only
    the agent's to build (``host_state`` from its view). A request that
    finds room only on hosts in flight waits for one of those bindings to
    end (each within its request's timeout + :data:`BINDING_SLACK`) and
    plans again, for at most its own timeout + :data:`BINDING_SLACK`
    (:meth:`plan`): then refused with them "in flight".
    """

    def __init__(self, conf: cfg.ConfigOpts, plugins: PluginSet, placement_client: Any,
                 store: HostStateTransport, poll_interval: float = 0.02,
                 on_offer: Optional[Callable[[HostDecision, float], object]] = None,
                 seed: Optional[int] = None) -> None:
        from compute_plugins.conf import scheduler as scheduler_conf

        scheduler_conf.register_opts(conf)
        self.conf = conf
        self.plugins = plugins
        self.placement = placement_client
        self.store = store
        self.poll_interval = poll_interval
        self.on_offer = on_offer
        #: Decoded host states, kept per host generation.
        self.states = fitting.StateCache()
        #: The hosts' generations and the down ones, kept and read by change.
        self.liveness = liveness.KeptLiveness()
        #: Placement's answers, kept while they stand (:mod:`.view`).
        self.view = view.PlacementView(conf.scheduler.placement_view_seconds)
        #: Draws the first host among the best (equal weights, or the best
        #: ``host_subset_size``), and
        #: where fitting starts; seeded per scheduler from the system's
        #: entropy (``seed`` None), so that schedulers draw differently; a
        #: fixed ``seed`` draws the same every run (the demo's walk-through).
        #: None: no draw, the best by weight then by host name.
        self.rng: Optional[random.Random] = random.Random(seed)
        self.rotation = view.Rotation(self.rng.randrange(1 << 30))
        self.factors = weighers.multipliers(conf, sorted(plugins))
        #: Hosts this close to the best weight are drawn among (:func:`.view.draw`).
        self.tie_tolerance = view.tie_tolerance(self.factors)
        #: The scheduling cycle (plan and choice), one at a time; notified
        #: when a binding ends (a host un-assumed).
        self._cycle = threading.Condition(threading.RLock())
        #: Hosts assumed: a request of this scheduler is being placed there
        #: (host -> the consumer).
        self._assumed: dict[str, str] = {}
        #: When each assumed host's binding ends at the latest
        #: (``time.monotonic()``: its request's answer timeout +
        #: :data:`BINDING_SLACK` from the assume).
        self._binding_ends: dict[str, float] = {}
        #: Assumes made so far, and each host's last one (at most
        #: :data:`MAX_ASSUMED_AT` hosts, the oldest forgotten first).
        self._assumes = 0
        self._assumed_at: collections.OrderedDict[str, int] = collections.OrderedDict()
        #: The newest assume forgotten (0: none).
        self._forgotten = 0
        #: Request shapes whose Placement answer a request is bringing up
        #: to date (:meth:`_prefetch`), set once it is kept.
        self._prefetching: dict[Any, threading.Event] = {}
        #: Requests in :meth:`schedule` now: a lone one prefetches only a
        #: re-ask of every host (:meth:`_prefetch`).
        self._requests = 0

    def close(self) -> None:
        """Stop the scheduler's background work: no renewal of Placement's
        answers is started any more, and those running are waited for
        (:meth:`.view.PlacementView.close`), so that none uses the
        Placement client or the store once the caller closes them. The
        scheduler still schedules (a kept answer is asked again once
        expired, on the decision's path). Closing again does nothing."""
        self.view.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- Placement --------------------------------------------------------

    def _count(self, calls: dict[str, int], method: str, path: str) -> None:
        key = "%s %s" % (method, path.split("?")[0])
        calls[key] = calls.get(key, 0) + 1

    def _allocate(self, consumer: str, decision: Decision, project_id: str,
                  user_id: str, calls: dict[str, int]) -> None:
        """Write the allocation of a new consumer
        (:func:`compute_plugins.placement.client.allocate_new_consumer`).

        :raises ConsumerAllocated: the consumer has allocations already.
        :raises Conflict: Placement refused it for this host (capacity,
            a provider race).
        :raises ProviderGone: one of the host's providers was deleted since
            the query.
        """
        consumer_type = (CONSUMER_TYPE if self.placement.microversion
                         >= CONSUMER_TYPE_VERSION else None)
        try:
            pclient.allocate_new_consumer(
                self.placement, consumer,
                {rp: dict(res) for rp, res in decision.allocations.items()},
                project_id, user_id, consumer_type,
                on_request=lambda method, path: self._count(calls, method, path))
        except pexc.ConsumerAllocated as err:
            raise ConsumerAllocated(consumer, list(err.providers),
                                    err.detail or str(err)) from None

    def _free(self, consumer: str, calls: dict[str, int]) -> None:
        """Delete the consumer's allocation (gone already is fine)."""
        self._count(calls, "DELETE", "/allocations/{consumer}")
        self.placement.delete_allocations(consumer)

    # -- scheduling -------------------------------------------------------

    # -- the scheduling cycle: assumed hosts -------------------------------

    def _assume(self, host: str, consumer: str, serial: int,
                wait: Optional[float] = None) -> bool:
        """Assume ``host`` for ``consumer`` (the cycle held): the next plans
        leave it out until :meth:`_unassume`. False, nothing assumed, when
        another request of this scheduler is being placed there, or was
        since the plan (made after ``serial`` assumes) was made: its fit
        there is stale.

        :param wait: the seconds the request waits for the host's answer
            (its caller's ``timeout``; None: ``[scheduler]
            answer_timeout``): the binding ends within that +
            :data:`BINDING_SLACK`, as long as a plan waits for it.
        """
        with self._cycle:
            # NOTE: a host not remembered was last assumed before the
            # oldest forgotten assume, if ever: a plan older than that one
            # cannot tell, and does not offer it.
            last = self._assumed_at.get(host, 0)
            if host in self._assumed or last > serial or \
                    (host not in self._assumed_at and self._forgotten > serial):
                return False
            self._assumes += 1
            self._assumed[host] = consumer
            if wait is None:
                wait = self.conf.scheduler.answer_timeout
            self._binding_ends[host] = time.monotonic() + wait + BINDING_SLACK
            self._assumed_at[host] = self._assumes
            self._assumed_at.move_to_end(host)
            while len(self._assumed_at) > MAX_ASSUMED_AT:
                _host, self._forgotten = self._assumed_at.popitem(last=False)
            return True

    def _unassume(self, host: str) -> None:
        """The binding on ``host`` ended (claimed, refused, given up): the
        next plans may choose it again; a plan waiting for it goes on."""
        with self._cycle:
            self._assumed.pop(host, None)
            self._binding_ends.pop(host, None)
            self._cycle.notify_all()

    def _prefetch(self, spec: Any, wait: float) -> tuple[int, tuple[str, ...]]:
        """Placement's answer for ``spec``'s shape brought up to date in
        the view before the scheduling cycle (the plan then serves it, kept):
        a ``GET /resource_providers`` of every host (2-3 MB at 1,000 hosts,
        when the kept answer expired) or of a few trees holds up no other
        request of this scheduler. One request per shape at a time asks;
        the others of that shape wait for its answer. Nothing without a
        view (``placement_view_seconds`` 0: the plan asks anyway).

        Nothing either for a lone request (no other in :meth:`schedule`)
        while the view's kept answer for the shape stands: no other request
        to hold up, and its plan reads the liveness and the view anyway;
        prefetching would read them twice per decision (one request at a
        time behaves as before issue 19 but for the re-ask of every host,
        brought forward).

        :param wait: the request's answer timeout (its caller's): the most
            it waits for another request's prefetch.
        :returns: the requests sent to Placement, and its queries.
        """
        if self.view.seconds <= 0:
            return 0, ()
        key = providers.needs(spec.groups)
        with self._cycle:
            if self._requests <= 1 and self.view.stands(spec.groups):
                return 0, ()
            running = self._prefetching.get(key)
            if running is None:
                running = self._prefetching[key] = threading.Event()
                mine = True
            else:
                mine = False
        if not mine:
            # NOTE: another request of this scheduler is asking Placement
            # about the same shape: its answer, once kept, serves this one
            # (the requests at once do not all ask about every host).
            running.wait(wait)
            return 0, ()
        try:
            alive = self.liveness.read(self.store)
            found, _asked = self.view.find(self.placement, self.store, spec.groups,
                                           alive.hosts, owners=self._owners)
            return found.calls, found.queries if found.calls else ()
        finally:
            with self._cycle:
                del self._prefetching[key]
            running.set()

    def _owners(self, uuids: Sequence[str]) -> Mapping[str, str]:
        """Which host published each provider of Placement's answers: the
        liveness's kept mapping (:meth:`.liveness.KeptLiveness.owners`),
        read with the hosts' generations, not a read of the store per ask."""
        return self.liveness.owners(self.store, uuids)

    def in_flight(self) -> dict[str, str]:
        """host -> consumer: this scheduler's bindings in flight."""
        with self._cycle:
            return dict(self._assumed)

    def plan(self, spec: Any, fresh: bool = False,
             since: Optional[float] = None, patience: Optional[float] = None) -> Plan:
        """Steps 1 to 3 (module doc): candidates, fit, order; no writes.

        One plan at a time per scheduler (the scheduling cycle): the hosts
        where another of its requests is being placed are left out (class
        doc); when only they could fit, it waits for one of those bindings
        to end and plans again, as long as one of them may last: each
        binding ends within its own request's answer timeout (its caller's
        ``timeout``) + :data:`BINDING_SLACK` from its assume. The bound is
        taken again at every round from the bindings in flight then, so a
        request is not refused "in flight" while the others' bindings keep
        ending and starting; only bindings past their bound (stuck) end the
        wait, or the plan's own bound: ``patience`` + :data:`BINDING_SLACK`
        from its first wait (as long as a binding of its own request may
        last), so that a request whose hosts other requests keep taking
        (wake-ups are not first come, first served) is refused with the
        hosts "in flight" instead of waiting without end.

        :param fresh: ask Placement even when the view's answer stands
            (it is asked anyway when nothing fits on the kept one).
        :param since: the view's time (``view.now()``) the request began:
            an answer the view took since (the request's prefetch) is as
            fresh as asking now, and a refusal stands on it.
        :param patience: the request's answer timeout (its caller's
            ``timeout``; None: ``[scheduler] answer_timeout``).
        """
        last = False
        # NOTE: the requests every round sent, not the last round's only.
        calls = 0
        give_up: Optional[float] = None
        with self._cycle:
            while True:
                planned = self._plan_once(spec, fresh, waits=not last, since=since)
                calls += planned.calls
                if planned.ordered or not planned.busy or last:
                    return dataclasses.replace(planned, calls=calls)
                now = time.monotonic()
                if give_up is None:
                    give_up = now + BINDING_SLACK + (
                        self.conf.scheduler.answer_timeout if patience is None
                        else patience)
                deadline = min(give_up, max(self._binding_ends.get(host, now)
                                            for host in planned.busy))
                if deadline <= now:
                    # NOTE: every binding waited for is past its bound: the
                    # last round (Placement asked again where it must be).
                    last = True
                    continue
                self._cycle.wait(deadline - now)

    def _plan_once(self, spec: Any, fresh: bool = False, waits: bool = False,
                   since: Optional[float] = None) -> Plan:
        """:meth:`plan` around the hosts assumed now (the cycle held).

        :param waits: when nothing fits but hosts are in flight, the plan
            waits for them (:meth:`plan`): Placement is not asked again
            about the hosts its kept answer excluded (a full re-ask, under
            the cycle, on every binding's end); it is once none is in
            flight, or the wait is over.
        """
        timings: dict[str, float] = {}
        start = time.monotonic()
        busy = frozenset(self._assumed)
        serial = self._assumes
        # NOTE: what is kept of the hosts brought up to date by what
        # changed since the last plan (a read of every host: everything),
        # not by a look at every host per decision; the changes taken with
        # the read, not after it (a prefetch's read in between would hand
        # this plan changes its generations predate).
        alive, changed = self.states.read_pruned(self.liveness, self.store)
        generations = alive.generations
        if changed is None:
            self.view.forget_gone(set(generations) | set(alive.down))
        found, _asked = self.view.find(self.placement, self.store, spec.groups,
                                       alive.hosts, fresh=fresh, since=since,
                                       owners=self._owners)
        timings["placement"] = time.monotonic() - start
        eligible = self._eligible(found.hosts)
        left_out = tuple(h for h in eligible if h in busy) if busy else ()
        fits, scored, tree_changed = self._fit_enough(
            spec, tuple(h for h in eligible if h not in busy) if left_out else eligible,
            generations, timings)
        nothing = not any(f.result.fits for f in fits.values())
        reask = nothing and not (waits and left_out)
        if not found.complete and (tree_changed or reask):
            # NOTE: a host's tree changed (the view asks about that host
            # again), or nothing fits on the kept answer (the view asks
            # again about the hosts it excluded): never refuse on a stale
            # view.
            again = self._plan_once(spec, fresh=reask, waits=waits, since=since)
            return dataclasses.replace(again, calls=found.calls + again.calls)
        start = time.monotonic()
        # NOTE: the plan's own verdicts over the excluded hosts of
        # Placement's answer (every host it left out, kept by the view):
        # layered, not copied per decision (Verdicts).
        verdicts: dict[str, tuple[Rejection, ...]] = dict(alive.down)
        for host in left_out:
            verdicts[host] = (Rejection(IN_FLIGHT),)
        for host in scored:
            if host not in fits:
                verdicts[host] = (Rejection(
                    "the host published no state (it left the store)"),)
        for host, fit in fits.items():
            verdicts[host] = fit.result.rejections
        ordered = weighers.weigh(self.plugins, [f for f in fits.values() if f.result.fits],
                                 self.factors)
        first = view.draw([w for w, _ in ordered], self.conf.scheduler.host_subset_size,
                          self.rng, self.tie_tolerance)
        if first:
            ordered.insert(0, ordered.pop(first))
        timings["fit"] += time.monotonic() - start
        return Plan(found=found, fits=fits, verdicts=Verdicts(verdicts, found.excluded),
                    ordered=tuple(ordered), timings=FrozenMap(timings),
                    unscored=len(found.hosts) - len(scored) - len(left_out),
                    busy=left_out, serial=serial, calls=found.calls)

    def _eligible(self, hosts: tuple[str, ...]) -> tuple[str, ...]:
        """The candidates this scheduler may fit at all (all of them; a
        move's scheduler leaves out the instance's own host or keeps only
        the one asked for, before the bounded fitting samples)."""
        return hosts

    def _fit_enough(self, spec: Any, candidates: tuple[str, ...],
                    generations: Mapping[str, int], timings: dict[str, float]
                    ) -> tuple[dict[str, fitting.HostFit], list[str], bool]:
        """Fit candidates, from where the last decision stopped, until
        :func:`.view.scoring_target` of them fit or none is left; their
        states read (those that published since) one batch at a time.

        :returns: the fits, the candidates fitted (or found without a
            state), and whether one of them published other providers
            than before (its Placement answer is stale).
        """
        group = self.conf.scheduler
        target = view.scoring_target(len(candidates), group.hosts_to_score_percentage,
                                     group.min_hosts_to_score)
        order = (list(candidates) if target >= len(candidates)
                 else self.rotation.order(candidates))
        fits: dict[str, fitting.HostFit] = {}
        found = 0
        done = 0
        tree_changed = False
        timings.update(store=0.0, fit=0.0)
        while done < len(order) and found < target:
            batch = order[done:done + max(target - found, min(view.MIN_BATCH, target))]
            done += len(batch)
            start = time.monotonic()
            decoded = self.states.get(self.plugins, self.store, batch, generations)
            timings["store"] += time.monotonic() - start
            start = time.monotonic()
            for host, state in decoded.items():
                tree_changed |= self.view.providers_seen(host, state.snapshot.providers)
            fitted = fitting.fit_hosts(self.plugins, spec, decoded, self.states.fits)
            found += sum(1 for fit in fitted.values() if fit.result.fits)
            fits.update(fitted)
            timings["fit"] += time.monotonic() - start
        self.rotation.advance(done, len(order))
        return fits, order[:done], tree_changed

    def decide(self, spec: Any, planned: Plan, index: int = 0) -> Union[Decision, Rejection]:
        """The decision for the ``index``-th best host of ``planned``
        (its allocation built from the assignments); nothing written."""
        fit = planned.ordered[index][1]
        return allocation.build_decision(self.plugins, spec, fit,
                                         planned.found.room[fit.host])

    def schedule(self, spec: Any, consumer: str, project_id: str,
                 user_id: str, timeout: Optional[float] = None) -> ScheduleResult:
        """Place ``spec`` for ``consumer`` (see the module doc).

        :param timeout: seconds to wait for each host's answer (default
            ``[scheduler] answer_timeout``); with :data:`BINDING_SLACK`,
            how long the other requests of this scheduler wait for this
            one's binding on a host (:meth:`plan`).
        :raises ConsumerInUse: the consumer has a decision in force for
            another request, or one being released (the same request's
            pending or claimed decision is resumed: :meth:`_resume`).
        :raises PlacementError: Placement unreachable or refusing a query
            (anything but a 409 on the allocation).
        :raises StoreUnavailable: the host-state store cannot be reached.
        """
        with self._cycle:
            self._requests += 1
        try:
            return self._schedule(spec, consumer, project_id, user_id, timeout)
        finally:
            with self._cycle:
                self._requests -= 1

    def _schedule(self, spec: Any, consumer: str, project_id: str,
                  user_id: str, timeout: Optional[float]) -> ScheduleResult:
        """:meth:`schedule`, counted in the requests at once."""
        group = self.conf.scheduler
        wait = group.answer_timeout if timeout is None else timeout
        # NOTE: the consumer's decision in force and its newest decision
        # (one read): the newest this scheduler knows of; a released one
        # newer than it is a requester's (the release wins).
        active, latest = protocol.in_force_and_latest(self.store, consumer)
        if active is not None:
            resumed = self._resume(spec, consumer, active, wait)
            if resumed is not None:
                return resumed
            # NOTE: the resume may have ended the decision in force.
            latest = self.store.latest_decision(consumer)
        known = [latest.id if latest is not None else 0]
        calls: dict[str, int] = {}
        since = self.view.now()
        asked, prefetched = self._prefetch(spec, wait)
        # NOTE: the first plan and the choice of its first host are one
        # scheduling cycle (class doc): the cycle is held until a host is
        # assumed, and released for the binding.
        self._cycle.acquire()
        holding = True
        try:
            planned = self.plan(spec, since=since, patience=wait)
            found, ordered = planned.found, planned.ordered
            # NOTE: this request's verdicts over its plans' (the latest
            # first): layered, not copied (Verdicts).
            own: dict[str, tuple[Rejection, ...]] = {}
            layers: list[Mapping[str, tuple[Rejection, ...]]] = [own, planned.verdicts]
            serial = planned.serial
            timings = dict(planned.timings)
            calls["GET /resource_providers"] = asked + planned.calls
            start = time.monotonic()
            attempts: list[Attempt] = []
            tried = 0
            placed: Optional[Any] = None
            # NOTE: a host given up (409, timeout...) is not tried again; a
            # host that rejected is, once it published a new state (another
            # generation): its agent had claimed for someone else since, and
            # the fit on its new state may choose other CPUs or devices.
            given_up: set[str] = set()
            rejected_at: dict[str, int] = {}
            races = 0
            queue = list(ordered)
            # NOTE: a host of the plan assumed by another request of this
            # scheduler since it was made (the plan's fit there is stale):
            # planned again (in one cycle) when the plan runs out.
            skipped = False

            def follow(replanned: Plan) -> None:
                """Go on with a new plan (its hosts next, its verdicts kept)."""
                nonlocal found, ordered, queue, serial, skipped, own
                calls["GET /resource_providers"] += replanned.calls
                found = replanned.found
                own = {}
                layers[:0] = [own, replanned.verdicts]
                queue = list(replanned.ordered)
                ordered = replanned.ordered
                serial = replanned.serial
                skipped = False

            while tried < group.max_attempts:
                if not holding:
                    self._cycle.acquire()
                    holding = True
                if not queue:
                    if skipped:
                        follow(self.plan(spec, patience=wait))
                        continue
                    if found.complete:
                        break
                    # NOTE: every host of a kept answer given up (409s past
                    # max_races): never refuse on a stale view; asked once.
                    follow(self.plan(spec, fresh=True, patience=wait))
                    continue
                _weight, fit = queue.pop(0)
                if fit.host in given_up or rejected_at.get(fit.host) == fit.generation:
                    continue
                if not self._assume(fit.host, consumer, serial, wait):
                    skipped = True
                    continue
                # NOTE: from the assume on, whatever is raised (an
                # interrupt at the release included) un-assumes the host.
                try:
                    self._cycle.release()
                    holding = False
                    began = time.monotonic()
                    step, attempt, decided = self._bind(spec, consumer, fit, found,
                                                        project_id, user_id, wait,
                                                        calls, known)
                finally:
                    self._unassume(fit.host)
                attempt = dataclasses.replace(attempt, seconds=time.monotonic() - began)
                attempts.append(attempt)
                if step == "cancelled":
                    break
                if step == "unbuildable":
                    own[fit.host] = attempt.reasons
                    given_up.add(fit.host)
                    continue
                if step == "conflict":
                    # NOTE: no room there for this shape, whatever the view
                    # kept: the refit leaves the host out.
                    self.view.refused(spec.groups, fit.host, attempt.reasons[0])
                    if races < group.max_races:
                        # NOTE: another scheduler's allocation took the room
                        # first: refit on fresh state (item 5 of issue 20).
                        races += 1
                        follow(self._refit_after_race(spec, wait))
                        continue
                    given_up.add(fit.host)
                    continue
                if step == "gone":
                    # NOTE: one of this host's providers was deleted since
                    # the query (a device removed, the host decommissioned):
                    # the next host.
                    self.view.forget(fit.host)
                    given_up.add(fit.host)
                    continue
                if attempt.outcome == "claimed":
                    placed = decided
                    break
                if attempt.outcome == "withdrawn":
                    # NOTE: a requester released the consumer meanwhile:
                    # placing it on another host would undo that release
                    # (and the requester's delete of the allocation could
                    # hit the new one).
                    break
                if attempt.outcome != "rejected":
                    tried += 1
                    given_up.add(fit.host)
                    continue
                rejected_at[fit.host] = fit.generation
                raced = races < group.max_races and self._raced(fit)
                if raced:
                    races += 1
                else:
                    tried += 1
                if tried < group.max_attempts:
                    follow(self._refit_after_race(spec, wait) if raced
                           else self.plan(spec, patience=wait))
        finally:
            if holding:
                self._cycle.release()
        timings["claim"] = time.monotonic() - start
        verdicts = Verdicts(*layers)
        reasons: tuple[HostReasons, ...] = ()
        if placed is None:
            reasons = self._best_reasons(verdicts, attempts, [f.host for _, f in ordered])
        return ScheduleResult(
            placed=placed is not None, consumer=consumer,
            host=placed.decision.host if placed is not None else None,
            spec=placed if placed is not None else spec,
            candidates=len(found.hosts), fitting=len(ordered),
            verdicts=verdicts,
            attempts=tuple(attempts), reasons=reasons,
            # NOTE: the kept answer's queries, and those the prefetch sent
            # that it does not hold (trees asked about and merged in).
            queries=found.queries + tuple(q for q in prefetched
                                          if q not in found.queries),
            placement_calls=FrozenMap(sorted((k, n) for k, n in calls.items() if n)),
            timings=FrozenMap(timings))

    # -- in-doubt work (issue 20, item 4) ---------------------------------

    def _submitted(self, decision: HostDecision, wait: float, known: list[int]) -> None:
        """A decision went to its host: a release that landed since the
        last check (a cancel older than it) withdraws it at once (or, when
        its host claimed it first, asks its host to release it); then
        :attr:`on_offer` is told, before the wait."""
        cancelled = protocol.cancelled_since(self.store, decision.consumer, known[0],
                                             below=decision.id)
        known[0] = decision.id
        if cancelled is not None:
            try:
                protocol.withdraw(self.store, decision.id)
            except store_errors.DecisionStatusConflict as err:
                # NOTE: answered already: the wait reads the answer. A claim
                # that beat the withdrawal is released as any claim (the
                # requester asked first; it was told nothing is in force).
                if err.decision.status == protocol.CLAIMED:
                    try:
                        protocol.apply(self.store, decision.id,
                                       protocol.Move.REQUEST_RELEASE)
                    except store_errors.DecisionStatusConflict:
                        pass  # NOTE: released by someone else meanwhile
        if self.on_offer is not None:
            self.on_offer(decision, wait)

    def _resume(self, spec: Any, consumer: str, active: HostDecision,
                wait: float) -> Optional[ScheduleResult]:
        """A decision of the consumer is in force when it is scheduled: a
        re-run of an interrupted or killed scheduler. For the same request
        (the spec equal but for the decision), its outcome is the result,
        never a second placement: claimed, it is placed; pending, its host's
        answer is waited for (as the first run would have; told to
        :attr:`on_offer`). Rejected, or not answered in time (withdrawn,
        freed), the request is scheduled anew (None).

        :raises ConsumerInUse: another request, or a release in progress.
        """
        if active.status not in (protocol.PENDING, protocol.CLAIMED) or \
                not _same_request(active.spec, spec, self.plugins):
            raise ConsumerInUse(consumer, active.host, active.status.value)
        start = time.monotonic()
        decision = active
        calls: dict[str, int] = {}
        if active.status == protocol.PENDING:
            if self.on_offer is not None:
                self.on_offer(active, wait)
            try:
                decision = protocol.wait_for_answer(self.store, consumer, wait,
                                                    poll_interval=self.poll_interval)
            except store_errors.AnswerTimeout as err:
                if not err.withdrawn:
                    raise
                self._free(consumer, calls)
                return None
            outcome = protocol.SCHEDULER_ON_ANSWER[decision.status]
            if outcome is not protocol.Outcome.CLAIMED:
                self._free(consumer, calls)
                if outcome is protocol.Outcome.REJECTED:
                    return None
                attempt = Attempt(decision.host, "withdrawn", (Rejection(
                    "the decision was released before host %s answered"
                    % decision.host),), time.monotonic() - start)
                return self._resumed(spec, consumer, None, attempt, calls, start)
        placed = RequestSpec.from_json(decision.spec, self.plugins)
        return self._resumed(placed, consumer, decision.host,
                             Attempt(decision.host, "claimed", (),
                                     time.monotonic() - start), calls, start)

    def _resumed(self, spec: Any, consumer: str, host: Optional[str], attempt: Attempt,
                 calls: dict[str, int], start: float) -> ScheduleResult:
        return ScheduleResult(
            placed=host is not None, consumer=consumer, host=host, spec=spec,
            candidates=0, fitting=0, verdicts=FrozenMap(()), attempts=(attempt,),
            reasons=() if host is not None else (HostReasons(attempt.host,
                                                             attempt.reasons),),
            queries=(), placement_calls=FrozenMap(sorted(calls.items())),
            timings=FrozenMap({"claim": time.monotonic() - start}))

    # -- races (issue 20, item 5) ------------------------------------------

    def _raced(self, fit: fitting.HostFit) -> bool:
        """Whether the host that rejected ``fit`` published a new state
        since it was fitted: another consumer's claim landed there first
        (the agent publishes a claim's state before answering it), so the
        rejection says nothing about the room left, only that the fit was
        stale."""
        generation = self.store.generations([fit.host]).get(fit.host)
        return generation is not None and generation != fit.generation

    def _refit_after_race(self, spec: Any, wait: float) -> Plan:
        """A new plan on fresh state after a race (a rejection caused by
        another claim, or Placement's 409 on the allocation).

        The racers' allocations are in flight: one whose decision is being
        rejected is freed a moment later. When the fresh plan finds no host,
        it is made again, with back-off, for at most :data:`RACE_SETTLE`
        seconds (never more than the answer timeout): a request is refused
        only when no host has room once the race settled."""
        deadline = time.monotonic() + min(RACE_SETTLE, wait)
        delay = max(self.poll_interval, 0.01)
        calls = 0
        while True:
            planned = self.plan(spec, patience=wait)
            calls += planned.calls
            if planned.ordered or time.monotonic() + delay > deadline:
                return dataclasses.replace(planned, calls=calls)
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def release(self, consumer: str, timeout: float = 0.0) -> ReleaseOutcome:
        """Free ``consumer``, as ``compute-plugins release`` does
        (:func:`compute_plugins.compute.release.request_release`, the one
        implementation): a pending decision (never claimed) is released at
        once and its allocation deleted here; a claimed one becomes
        ``releasing`` and its host's agent frees its ledger entry, its state
        and the Placement allocation, waited for up to ``timeout`` seconds
        (0: return once requested).

        :raises ReleaseRefused: the consumer is moving, or is a move's
            migration consumer (nothing changed; confirm or revert it).
        """
        refuse_moving(self.store, consumer)
        done = request_release(self.store, consumer, self.placement,
                               timeout=timeout, poll_interval=self.poll_interval)
        refuse_moved_meanwhile(self.store, done)
        return done

    def _bind(self, spec: Any, consumer: str, fit: fitting.HostFit,
              found: providers.ProviderCandidates, project_id: str, user_id: str,
              wait: float, calls: dict[str, int], known: list[int]
              ) -> tuple[str, Attempt, Optional[Any]]:
        """The binding of ``spec`` on the assumed ``fit.host``: the
        allocation written, the decision offered, the agent's answer
        waited for; run outside the scheduling cycle (class doc).

        :returns: what happened (``cancelled``: released before the offer;
            ``unbuildable``; ``conflict``: Placement's 409; ``gone``: a
            provider deleted since the query; ``offered``: the host
            answered, or not, as the attempt says), the attempt, and the
            decided spec (``offered`` only).
        """
        cancelled = protocol.cancelled_since(self.store, consumer, known[0])
        if cancelled is not None:
            return "cancelled", Attempt(fit.host, "withdrawn", (Rejection(
                "the consumer was released before host %s was offered it"
                % fit.host),)), None
        decision = allocation.build_decision(self.plugins, spec, fit,
                                             found.room[fit.host])
        if isinstance(decision, Rejection):
            return "unbuildable", Attempt(fit.host, "unbuildable", (decision,)), None
        try:
            self._allocate(consumer, decision, project_id, user_id, calls)
        except pexc.Conflict as err:
            return "conflict", Attempt(fit.host, "conflict", (Rejection(
                "Placement refused the allocation (409 %s): %s"
                % (err.code or "conflict", err), plugin=providers.PLACEMENT),)), None
        except pexc.ProviderGone as err:
            return "gone", Attempt(fit.host, "conflict", (Rejection(
                "Placement refused the allocation (400): %s" % err,
                plugin=providers.PLACEMENT),)), None
        decided = spec.with_decision(decision)
        return "offered", self._claim(consumer, fit.host, decided, wait, calls,
                                      known), decided

    def _claim(self, consumer: str, host: str, decided: Any, wait: float,
               calls: dict[str, int], known: list[int]) -> Attempt:
        """Offer the decision to ``host`` and wait for its agent
        (:func:`compute_plugins.hoststate.protocol.offer`: the allocation is
        freed whenever the host does not hold the decision).

        :param known: the newest decision of the consumer the scheduler
            knows of; set to the new one (:meth:`_submitted`).
        """
        try:
            answer = protocol.offer(self.store, consumer, host, decided.to_json(), wait,
                                    free=lambda: self._free(consumer, calls),
                                    poll_interval=self.poll_interval,
                                    until_host_down=True,
                                    on_submitted=lambda d: self._submitted(d, wait, known))
        except store_errors.DecisionExists as err:
            raise ConsumerInUse(consumer, err.decision.host,
                                err.decision.status.value) from None
        if answer.outcome is protocol.Outcome.CLAIMED:
            return Attempt(host, "claimed")
        if answer.outcome is protocol.Outcome.REJECTED:
            return Attempt(host, "rejected", answer.reasons or (
                Rejection("the host rejected the decision without a reason"),))
        if answer.outcome is protocol.Outcome.HOST_DOWN:
            return self._host_down(host, answer)
        if answer.outcome is protocol.Outcome.TIMEOUT:
            return Attempt(host, "timeout", (Rejection(
                "host %s did not answer within %g s (is its agent running?); "
                "the decision was withdrawn and its allocation freed"
                % (host, wait)),))
        return Attempt(host, "withdrawn", (Rejection(
            "the decision was released before host %s answered" % host),))

    @staticmethod
    def _host_down(host: str, answer: protocol.Answer) -> Attempt:
        """The attempt on a host that went down while the scheduler waited
        (:data:`~compute_plugins.hoststate.protocol.Outcome.HOST_DOWN`):
        given up at once, the next host tried."""
        why = answer.reasons[0].reason if answer.reasons else "host %s is down" % host
        return Attempt(host, "down", (Rejection(
            "%s; the decision was withdrawn and its allocation freed" % why),))

    def _best_reasons(self, verdicts: Mapping[str, tuple[Rejection, ...]],
                      attempts: list[Attempt], fitting_hosts: list[str]
                      ) -> tuple[HostReasons, ...]:
        """The hosts closest to fitting first: those tried (with what went
        wrong), then by how few plugins refused."""
        by_host: dict[str, tuple[Rejection, ...]] = {}
        for attempt in attempts:
            by_host[attempt.host] = by_host.get(attempt.host, ()) + attempt.reasons
        rest = sorted((h for h, r in verdicts.items() if h not in by_host and r),
                      key=lambda h: (len({r.plugin for r in verdicts[h]}),
                                     len(verdicts[h]), h))
        for host in fitting_hosts:
            if host not in by_host:
                by_host[host] = (Rejection(
                    "fits, not tried: [scheduler] max_attempts (%d) hosts "
                    "were tried first" % self.conf.scheduler.max_attempts),)
        ordered = list(by_host.items()) + [(h, verdicts[h]) for h in rest]
        limit = self.conf.scheduler.max_reported_hosts
        return tuple(HostReasons(h, r) for h, r in ordered[:limit])


def _same_request(stored: str, spec: RequestSpec, plugins: PluginSet) -> bool:
    """Whether a decision's spec (``to_json()``) asks what ``spec`` asks:
    equal but for the decision, as read (not as written: a scheduler of
    another release writes the same request at another format version,
    with other fields left out, or with its plugins' older data versions).
    One this reader cannot read is another request."""
    try:
        theirs = RequestSpec.from_json(stored, plugins)
    except RequestFormatError:
        return False
    return all(getattr(theirs, f.name) == getattr(spec, f.name)
               for f in dataclasses.fields(RequestSpec)
               if f.name not in _NOT_THE_REQUEST)


#: The fields of a spec that are not what it asks (:func:`_same_request`).
_NOT_THE_REQUEST = frozenset({"decision", "plugin_versions"})
