"""The compute agent: the periodic, the published host state and the claims.

"The scheduler decides, the compute executes." Each periodic
(:meth:`ComputeAgent.run_once`):

1. discovers the host (a failed discovery keeps the last view);
2. lets the plugins update the provider tree and sends Placement what
   changed (:class:`~compute_plugins.placement.report.ReportClient`), then
   commits the plugins' contributions (discards them when Placement was not
   reached); the root's ``COMPUTE_STATUS_DISABLED`` trait follows the
   store's record of an operator disabling the host (``compute-plugins
   host disable``, :func:`status_trait_update`): the scheduler sends a
   disabled host no new decision; its agent keeps running, reporting and
   releasing;
3. publishes every plugin's host state, built under the claims in force
   (the ledger's assignments), to the host-state store, only when it
   changed: in steady state a periodic makes no Placement call and no store
   write. The store generation is kept in memory and read again only on a
   compare-and-swap conflict;
4. executes the decisions addressed to the host (claims, then releases,
   :mod:`compute_plugins.compute.claims`) and publishes the state again
   after each change (a claim's before it is answered).

Between periodics the agent waits for decisions. Where the store pushes
(through a broker, ``[host_state] push_transport_url``, or PostgreSQL's
``LISTEN``/``NOTIFY``: :mod:`compute_plugins.hoststate.notify`)
it is woken when a decision addressed to its host is submitted or changed
by someone else, or the host is disabled or enabled, and only then reads the
store; an idle agent's periodics and polls read nothing from the store
(:meth:`ComputeAgent._quiet`), its lease renewal aside, but for a full read
every ``[host_state] push_safety_poll_interval`` seconds (a lost
notification). Elsewhere :meth:`ComputeAgent.run` polls the store every
``[compute] claim_poll_interval`` seconds (one indexed read, no write).
A restarted agent reads its ledger, publishes the state
it implies and answers a decision it had recorded but not answered without
executing it again. At start it compares Placement's allocations on
its tree with the ledger and reports every mismatch
(:meth:`ComputeAgent._check_placement`: reported, nothing deleted), then
again every ``[compute] placement_audit_interval`` seconds
(:meth:`ComputeAgent._audit_placement`: a mismatch two audits in a row
saw, once; ``compute-plugins audit --fix`` repairs); a
ledger claim whose decision is no longer in force is forgotten, and its
allocation deleted only when it is still that claim's
(:meth:`ComputeAgent._allocation_is_ours`). A claim a move gave to another
consumer (its decision re-keyed to the move's migration consumer, or back:
:mod:`compute_plugins.scheduler.moves`) is re-keyed in the ledger, never
freed (:meth:`ComputeAgent._follow_rekeys`).

One agent per host, nothing given twice (issue 20): the node's identity
(:mod:`compute_plugins.compute.identity`) is checked before anything; the
agent takes its host's lease in the store before its first periodic and
renews it every third of ``lease_duration``, and every write it makes
carries the lease's epoch (a fenced agent stops, :class:`~compute_plugins.
hoststate.errors.Fenced`). Before it executes anything it checks that its
ledger did not lose claims the store or Placement still show
(:meth:`ComputeAgent._check_ledger`), and at each periodic that the store is
the one its ledger was reconciled with: a new or recreated store gets the
ledger's claims back (:meth:`ComputeAgent._adopt_store`), so that no claim
is freed because the store forgot it.

A store outage (unreachable, read-only, locked) is tried again at every
poll on a fresh connection and said twice, when it starts and when it ends
(:meth:`ComputeAgent._store_unavailable`), not at every poll; a corrupt
store stops the agent (:class:`~compute_plugins.hoststate.errors.StoreCorrupt`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Optional, cast

from oslo_log import log as logging

from compute_plugins import exception
from compute_plugins.compute import identity
from compute_plugins.compute.claims import ClaimResult, Claims, ReleaseResult
from compute_plugins.compute.disable import DISABLED_TRAIT
from compute_plugins.compute.ledger import Ledger, LedgerEntry, LedgerError, LedgerMissing
from compute_plugins.compute.moves import MoveFinisher
from compute_plugins.conf import compute as compute_conf
from compute_plugins.host.model import HostInfo
from compute_plugins.hoststate import errors as store_errors
from compute_plugins.hoststate import protocol
from compute_plugins.hoststate.records import AgentLease, DecisionStatus, HostDecision
from compute_plugins.hoststate.transport import (
    AgentLeases,
    HostMoves,
    HostStateTransport,
    HostWakeups,
    Wakeup,
)
from compute_plugins.placement import exception as pexc
from compute_plugins.placement import report as preport
from compute_plugins.placement.report.periodic import calls_between
from compute_plugins.plugin.contract import Rejection
from compute_plugins.request.types import encodes_alike_when_equal
from compute_plugins.runtime.manager import PluginManager

LOG = logging.getLogger(__name__)

#: Seconds between :meth:`ComputeAgent.run`'s checks of its stop event while
#: it waits for pushed changes (a local wake-up: nothing is read).
_STOP_CHECK = 0.2


@dataclasses.dataclass(frozen=True)
class Mismatch:
    """Placement and the ledger disagree about one consumer (checked once
    per start, :meth:`ComputeAgent.run_once`). Reported, never resolved by
    deleting: see :meth:`ComputeAgent._check_placement`.

    :param consumer: the consumer.
    :param reason: what disagrees, and what was done (nothing).
    :param providers: this host's providers it has allocations on.
    """

    consumer: str
    reason: str
    providers: tuple[str, ...] = ()


@dataclasses.dataclass
class AgentResult:
    """What one periodic (or one poll between periodics) did.

    :param periodic: the Placement periodic's result (None for a poll).
    :param store_writes: host-state store writes (publishes that wrote,
        decisions answered).
    :param claims: the decisions answered, claimed or rejected.
    :param releases: the consumers freed.
    :param calls: Placement calls by template, the periodic's and the
        releases' together.
    :param mismatches: Placement's allocations on the host and the ledger
        disagreeing (the first periodic that reaches Placement only).
    :param error: a failure of the claims side (store unreachable, a
        release's Placement call failing), one line; the periodic's own is
        ``periodic.error``. A ledger that cannot be written is raised
        (LedgerError), not reported here.
    """

    periodic: Optional[preport.PeriodicResult] = None
    store_writes: int = 0
    claims: list[ClaimResult] = dataclasses.field(default_factory=list)
    releases: list[ReleaseResult] = dataclasses.field(default_factory=list)
    calls: dict[str, int] = dataclasses.field(default_factory=dict)
    mismatches: list[Mismatch] = dataclasses.field(default_factory=list)
    error: Optional[str] = None

    @property
    def claimed(self) -> list[ClaimResult]:
        return [c for c in self.claims if c.claimed]

    @property
    def rejected(self) -> list[ClaimResult]:
        return [c for c in self.claims if not c.claimed]

    @property
    def placement_calls(self) -> int:
        """Every Placement call of this run."""
        return sum(self.calls.values())

    @property
    def ok(self) -> bool:
        return self.error is None and (self.periodic is None or self.periodic.ok)

    @property
    def active(self) -> bool:
        """Whether it did anything worth telling (a poll usually does not)."""
        return bool(self.claims or self.releases or self.store_writes or self.error)

    def claims_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "claimed": [c.consumer for c in self.claimed],
            "rejected": [c.to_dict() for c in self.rejected],
            "released": [r.consumer for r in self.releases],
            "store_writes": self.store_writes,
        }
        if self.mismatches:
            out["mismatches"] = [dataclasses.asdict(m) for m in self.mismatches]
        if self.error is not None:
            out["error"] = self.error
        return out

    def to_dict(self) -> dict[str, Any]:
        """The periodic's ``to_dict()`` with ``claims`` added (a poll: only
        ``claims``)."""
        out = self.periodic.to_dict() if self.periodic is not None else {}
        out["claims"] = self.claims_dict()
        return out


def _count(n: int, word: str) -> str:
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


def _listed(names: Any, limit: int = 5) -> str:
    """The first ``limit`` names, then how many more."""
    items = sorted(names)
    text = ", ".join(items[:limit])
    if len(items) > limit:
        text += " and %d more" % (len(items) - limit)
    return text


def _same_spec(recorded: str, stored: str) -> bool:
    """Whether a ledger claim's spec and a decision's are the same document."""
    try:
        return bool(json.loads(recorded) == json.loads(stored))
    except ValueError:
        return False


def run_periodic(client: preport.ReportClient, manager: PluginManager,
                 nodename: str, disabled: Optional[bool] = None) -> preport.PeriodicResult:
    """One Placement periodic with a ``PluginManager(auto_commit=False)``:
    the plugins' contributions are committed when the sync reached
    Placement, discarded when it failed (the next periodic diffs against
    what Placement last accepted).

    :param disabled: whether an operator disabled the host (the store's
        record): the root gets, or loses, ``COMPUTE_STATUS_DISABLED``
        (:func:`status_trait_update`); None (unknown: the store could not
        be read) leaves the trait as Placement has it.
    """
    result = client.periodic(status_trait_update(manager.update_provider_tree, disabled),
                             nodename)
    if result.ok:
        manager.commit()
    else:
        manager.discard()
    return result


def status_trait_update(update_tree: preport.UpdateTree,
                        disabled: Optional[bool]) -> preport.UpdateTree:
    """``update_tree`` that also makes the root's ``COMPUTE_STATUS_DISABLED``
    trait say ``disabled``, as nova's compute sets it from its service's
    disabled flag: the agent and the operator (``compute-plugins host
    disable``, which sets the trait and the store's record) agree, and a
    trait lost or half-written (the command interrupted, Placement
    unreachable then) is put right at the next periodic. No plugin
    contributes the trait, so the plugins' merge never removes it.

    The trait is set before the plugins update the tree (after, on a root
    the first update creates): the plugins' manager then sees the tree as
    it will be in Placement, and skips its next update when nothing else
    changed.
    """
    if disabled is None:
        return update_tree

    def set_trait(tree: Any, nodename: str) -> None:
        if disabled:
            tree.add_traits(nodename, DISABLED_TRAIT)
        else:
            tree.remove_traits(nodename, DISABLED_TRAIT)

    def update(tree: Any, nodename: str, allocations: Optional[dict[str, Any]]) -> None:
        existed = tree.exists(nodename)
        if existed:
            set_trait(tree, nodename)
        update_tree(tree, nodename, allocations)
        if not existed:
            set_trait(tree, nodename)
    return update


def pinned_nodename(state: dict[str, Any], hostname: str) -> str:
    """The nodename of the first periodic, for as long as the agent runs.

    A hostname that changes under a running agent (DHCP, a rename) would
    otherwise register a second compute node and leave the first one's
    inventory advertised: the agent keeps reporting under the name it
    started with and says, once, that a restart is needed (nova's compute
    refuses a renamed node too).
    """
    nodename = str(state.setdefault("nodename", hostname))
    if hostname != nodename and state.get("renamed") != hostname:
        state["renamed"] = hostname
        LOG.error("the host's name changed from %s to %s: still reporting as %s; "
                  "restart the agent to register it under the new name (and "
                  "remove the old compute node)", nodename, hostname, nodename)
    return nodename


def domain_type(host: HostInfo) -> str:
    """libvirt's test driver only defines ``test`` domains; real hosts kvm."""
    return "test" if host.source.startswith("test:") else "kvm"


def load_host(conf: Any, discover: Callable[[], HostInfo],
              check: Optional[Callable[[Any], None]] = None,
              lock: Optional[Callable[[Any], None]] = None
              ) -> tuple[Any, HostInfo, Ledger]:
    """What an agent starts from, before Placement is contacted: the
    enabled plugins (``PluginManager(auto_commit=False)``, contributions
    checkpointed in ``[compute_plugins] state_dir``), the host discovered
    once into them, and the host's ledger from the state directory.

    :param check: called with ``conf`` once the plugins registered their
        options, before the discovery (the command line reads every value
        there, so that a bad one is named before anything runs).
    :param lock: called with ``conf`` once the host was discovered and
        the plugins' options were checked, before anything in the state
        directory is read or written (the command line takes the state
        directory's lock there: a bad option or host name creates nothing).
    :raises ConfigError: a plugin's options are wrong.
    :raises LedgerError: the ledger cannot be read.
    :raises HostRenamed: the host's name is not the one its state
        directory belongs to (:func:`compute_plugins.compute.identity.ensure`).
    :raises MachineChanged: the state directory was made on another
        machine (``[compute] machine_id_file``).
    """
    from compute_plugins.conf import plugins as plugins_conf
    from compute_plugins.runtime.manager import PluginManager

    state_dir = plugins_conf.state_dir(conf)
    manager = PluginManager(conf, auto_commit=False, checkpoint_dir=state_dir)
    if check is not None:
        check(conf)
    first = discover()
    manager.discover(first)
    manager.raise_config_errors()
    if lock is not None:
        lock(conf)
    # NOTE: before the ledger: a renamed host must not start on an empty
    # ledger of its new name (identity.ensure raises HostRenamed).
    identity.ensure(state_dir, first.hostname,
                    identity.machine_id(conf.compute.machine_id_file))
    return manager, first, Ledger.load(state_dir, first.hostname, manager.plugins)


class ComputeAgent:
    """One compute host's agent (see the module docstring).

    :param manager: a ``PluginManager(auto_commit=False)``.
    :param client: the report client (its Placement client deletes the
        allocations of released consumers).
    :param store: the host-state transport (the SQL
        :class:`~compute_plugins.hoststate.store.HostStateStore`).
    :param ledger: the host's claims (:meth:`Ledger.load`).
    :param discover: returns the host as it is now (libvirt or snapshot);
        a :class:`~compute_plugins.exception.ComputePluginsError` keeps the
        last view.
    :param first: the host already discovered into ``manager`` (the command
        line discovers it before Placement, to fail fast): the first
        periodic uses it instead of discovering again.
    :param host: the host's name in the store (default: its node name, the
        first discovery's host name).
    :param claim_poll_interval: seconds between polls for decisions in
        :meth:`run`.
    :param node: the node's identity (default: the one recorded in the
        ledger's directory, recorded there now when missing).
    :param lease_duration: seconds of the agent's lease on its host in the
        store (``[compute] agent_lease_duration``), renewed every third of
        it; at least 3 x ``claim_poll_interval``.
    :param rebuild_ledger: at start, fill a missing or empty ledger with
        the claims the store holds for the host (``report
        --rebuild-ledger``), instead of refusing to start.
    :param move_step_timeout: seconds a move of this host may stay unchanged
        before its periodic finishes or undoes it (``[compute]
        move_step_timeout``; :mod:`compute_plugins.compute.moves`).
    """

    def __init__(self, manager: PluginManager, client: preport.ReportClient,
                 store: HostStateTransport, ledger: Ledger,
                 discover: Callable[[], HostInfo], *,
                 first: Optional[HostInfo] = None, host: Optional[str] = None,
                 claim_poll_interval: float = 1.0,
                 node: Optional[identity.NodeIdentity] = None,
                 lease_duration: float = compute_conf.AGENT_LEASE_DURATION,
                 rebuild_ledger: bool = False,
                 placement_audit_interval: float = 0.0,
                 move_step_timeout: float = 600.0) -> None:
        if not claim_poll_interval > 0:
            raise ValueError("claim_poll_interval %r: expected seconds > 0"
                             % (claim_poll_interval,))
        if not lease_duration >= 3 * claim_poll_interval:
            raise exception.ConfigError(
                "[compute] agent_lease_duration %g: must be at least 3 x "
                "[compute] claim_poll_interval (%g): the agent renews its "
                "lease between polls" % (lease_duration, claim_poll_interval))
        self.manager = manager
        self.client = client
        #: The store as given (no fencing token): reads, and the leases.
        self._unfenced = store
        #: The store the agent writes through: once it holds its lease,
        #: every write carries the lease's token.
        self.store = store
        self.node = node if node is not None else identity.ensure(
            os.path.dirname(ledger.path) or ".", ledger.host)
        self.lease_duration = lease_duration
        self.rebuild_ledger = rebuild_ledger
        self._lease: Optional[AgentLease] = None
        #: time.monotonic() at which the lease is renewed next.
        self._renew_at = 0.0
        #: True while the store could not be reached to take or renew it.
        self._lease_outage = False
        #: time.monotonic() at which the lease in hand ends (measured from
        #: before the call that took or renewed it).
        self._lease_until = 0.0
        #: True once the ledger was checked against the store and Placement
        #: (once per start, :meth:`_check_ledger`).
        self._ledger_checked = False
        self.ledger = ledger
        self._discover = discover
        self._first = first
        self._names: dict[str, Any] = {}
        self._host_info: Optional[HostInfo] = first
        if first is not None:
            pinned_nodename(self._names, first.hostname)
        self._host = host
        self.claim_poll_interval = claim_poll_interval
        #: The store generation last written or read (None: not read yet).
        self._generation: Optional[int] = None
        #: Each plugin's state last encoded and its document (encoded
        #: again only when its state changed: :meth:`states_documents`).
        self._encoded: dict[str, tuple[object, dict[str, Any]]] = {}
        #: What was last published: (states, nodename, providers).
        self._published: Optional[tuple[dict[str, Any], str, Optional[dict[str, str]]]] = None
        self._providers: Optional[dict[str, str]] = None
        self._claims: Optional[Claims] = None
        self._broken: frozenset[Any] = frozenset()
        #: True until a publish got through, and after one that failed.
        self._unpublished = True
        #: What stopped :meth:`run` (a LedgerError...), None while it runs.
        self.failure: Optional[BaseException] = None
        #: True once Placement's allocations on the tree were compared with
        #: the ledger (once per start).
        self._placement_checked = False
        #: Seconds between audits of the tree after the start's (0: none;
        #: :meth:`_audit_placement`).
        self.placement_audit_interval = placement_audit_interval
        #: time.monotonic() of the last audit of the tree.
        self._audited_at = 0.0
        #: Consumers the last audit found in mismatch; those reported.
        self._suspects: set[str] = set()
        self._reported: set[str] = set()
        self._lock = threading.Lock()
        #: Whether an operator disabled the host, as last read (None: not read).
        self._disabled: Optional[bool] = None
        #: time.monotonic() at which the store became unavailable (None: it
        #: answers); said once when it starts and once when it ends.
        self._store_down_since: Optional[float] = None
        #: Whether the store failed during the current periodic or poll.
        self._store_failed = False
        #: The host's wake-ups where the store pushes (None: it polls, or
        #: not subscribed yet: :meth:`_wakeups`).
        self._changes: Optional[Wakeup] = None
        self._subscribed = False
        #: Called at every pushed wake-up (:meth:`on_wake`).
        self._wake_callback: Optional[Callable[[], None]] = None
        #: A change was pushed since the last full read of the store.
        self._woken = False
        #: time.monotonic() of the next full read while nothing is pushed
        #: (the safety net; 0: the next pass reads).
        self._next_full_read = 0.0
        #: The disabled record may have changed since it was read.
        self._disabled_stale = True
        #: Seconds before a move left unchanged is ended by this agent.
        self.move_step_timeout = move_step_timeout
        #: The evacuation's fence was lifted by this pass: the trait follows.
        self._fence_lifted = False

    @classmethod
    def from_config(cls, conf: Any, placement: Any, store: HostStateTransport,
                    discover: Callable[[], HostInfo]) -> ComputeAgent:
        """An agent as ``compute-plugins report`` builds it: the enabled
        plugins (contributions checkpointed in ``[compute_plugins]
        state_dir``), the host discovered once, the ledger read from the
        state directory, a report client on ``placement``.

        :param conf: a ConfigOpts with the framework's options registered.
        :param placement: a :class:`~compute_plugins.placement.client.
            PlacementClient`.
        :raises LedgerError: the ledger cannot be read.
        :raises ConfigError: a plugin's options are wrong.
        """
        manager, first, ledger = load_host(conf, discover)
        client = preport.ReportClient(
            placement, conf.compute.resource_provider_association_refresh)
        return cls(manager, client, store, ledger, discover, first=first,
                   claim_poll_interval=conf.compute.claim_poll_interval,
                   lease_duration=conf.compute.agent_lease_duration,
                   placement_audit_interval=conf.compute.placement_audit_interval,
                   move_step_timeout=conf.compute.move_step_timeout)

    # -- identity -----------------------------------------------------------

    @property
    def nodename(self) -> str:
        """The node name (the first discovery's host name, kept)."""
        return str(self._names.get("nodename", ""))

    @property
    def host(self) -> str:
        """The host's name in the store."""
        return self._host or self.nodename

    def _claims_for_host(self) -> Claims:
        if self._claims is None:
            self._claims = Claims(self.host, self.nodename, self.manager,
                                  self.ledger, self.store)
        if self._host_info is not None:
            self._claims.domain_type = domain_type(self._host_info)
        return self._claims

    # -- discovery ----------------------------------------------------------

    def _discover_now(self) -> None:
        if self._first is not None:
            self._first = None
            return
        try:
            host = self._discover()
            self.manager.discover(host)
        except exception.ComputePluginsError as err:
            if self._host_info is None:
                raise
            LOG.error("host discovery failed, keeping the last view: %s", err)
            return
        self._host_info = host
        pinned_nodename(self._names, host.hostname)

    # -- the periodic -------------------------------------------------------

    def run_once(self) -> AgentResult:
        """One periodic: discover, update the tree, sync to Placement,
        commit, publish the host state when it changed, then execute the
        pending decisions and the releases.

        Never raises for Placement or store failures: they are in the
        result (``periodic.error``, ``error``). Raises LedgerError when the
        ledger cannot be written (the host's claims must not be lost).
        """
        with self._lock:
            self._store_failed = False
            self._hold_lease()
            if self._lease_lapsed():
                return AgentResult(error=(
                    "host %s: the agent's lease ended while the host-state store "
                    "could not be reached (another agent may hold the host now): "
                    "nothing sent to Placement nor executed until it is renewed"
                    % self.host))
            self._check_ledger_at_start()
            self._discover_now()
            quiet = self._quiet()
            disabled = (self._disabled if quiet and not self._disabled_stale
                        else self._disabled_now())
            periodic = run_periodic(self.client, self.manager, self.nodename, disabled)
            result = AgentResult(periodic=periodic, calls=dict(periodic.calls))
            if periodic.ok:
                self._providers = self._tree_providers()
            # NOTE: the periodic may have taken a while (Placement slow or
            # retried): renewed when due before the claims, so that a live
            # agent's host is not taken as down (the scheduler would
            # withdraw the decisions it is about to answer).
            self._hold_lease()
            # NOTE: quiet no more when the lease was taken again or a change
            # was pushed meanwhile.
            quiet = quiet and self._quiet()
            self._claims_side(result, reconcile=True, quiet=quiet)
            if self._fence_lifted and periodic.ok:
                # NOTE: the evacuation's fence lifted by this pass: the
                # root's trait follows now, not at the next periodic.
                self._fence_lifted = False
                lifted = run_periodic(self.client, self.manager, self.nodename,
                                      self._disabled_now())
                for call, count in lifted.calls.items():
                    result.calls[call] = result.calls.get(call, 0) + count
            self._store_answered()
            return result

    def poll(self) -> AgentResult:
        """Between periodics: execute new decisions and releases (no
        discovery, no Placement sync; two store reads when there is none,
        none where the store pushes and nothing was pushed:
        :meth:`_quiet`). The lease is renewed when due."""
        with self._lock:
            result = AgentResult()
            if self._host_info is None:
                return result
            self._store_failed = False
            self._hold_lease()
            if self._lease_lapsed():
                return result   # NOTE: said by the periodic, and once per outage
            if self._quiet():
                return result
            self._claims_side(result, reconcile=False)
            self._store_answered()
            return result

    # -- wake-ups -------------------------------------------------------------

    def _wakeups(self) -> Optional[Wakeup]:
        """The host's subscription to pushed changes, taken at the first
        call once the agent holds its lease (None: the store polls)."""
        if not self._subscribed and (self._lease is not None
                                     or not isinstance(self._unfenced, AgentLeases)):
            self._subscribed = True
            if isinstance(self._unfenced, HostWakeups):
                self._changes = self._unfenced.host_changes(self.host)
                if self._changes is not None and self._wake_callback is not None:
                    self._changes.on_wake(self._wake_callback)
                # NOTE: what changed before it is read by the next pass.
                self._next_full_read = 0.0
        return self._changes

    def pushed(self) -> bool:
        """Whether changes for this host are pushed now (the store pushes
        and its listening connection is up): :meth:`wait_for_work` then
        waits on them, and :meth:`poll` reads nothing unless woken."""
        changes = self._changes
        return changes is not None and changes.live

    def wait_for_work(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds, returning True as soon as a
        change for this host is pushed (the next :meth:`poll` reads the
        store). False at once where nothing is pushed (:meth:`pushed`):
        the caller sleeps until its next poll."""
        changes = self._changes
        if changes is None or not changes.live:
            return False
        if changes.wait(timeout):
            self._woken = True
            return True
        return False

    def on_wake(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the store's listening thread: it must not
        block) whenever a change for this host is pushed, from the
        subscription on (taken at the first pass that holds the lease): for
        a caller that runs many agents on a few threads and calls
        :meth:`poll` for the one woken, instead of a thread per agent
        blocked in :meth:`wait_for_work` (the simulation, ``bench.scale``).
        Nothing is called where the store does not push."""
        self._wake_callback = callback
        if self._changes is not None:
            self._changes.on_wake(callback)

    def due_at(self) -> float:
        """``time.monotonic()`` by which :meth:`poll` has work to do when
        nothing is pushed meanwhile: where changes are pushed (:meth:`pushed`)
        and nothing is left over, the lease's renewal or the safety net's
        full read, whichever comes first; else (the store polls, no lease
        yet, a store outage, a publish or a wake-up left over) one
        ``claim_poll_interval`` from now. A poll before then reads and
        writes nothing (:meth:`_quiet`)."""
        now = time.monotonic()
        if (not self.pushed() or self._lease is None or self._woken or self._unpublished
                or self._store_down_since is not None):
            return now + self.claim_poll_interval
        return max(min(self._renew_at, self._next_full_read), now)

    def _quiet(self) -> bool:
        """Whether this pass skips reading the store: the store pushes,
        nothing was pushed since the last full read, the safety net
        (``[host_state] push_safety_poll_interval``) is not due, and
        nothing is left over (a publish that failed, a store outage, a
        lease taken anew). A pass that is not quiet reads everything, and
        the next periodic the disabled record too."""
        changes = self._wakeups()
        if changes is None or not changes.live:
            return False
        if changes.wait(0):
            self._woken = True
        now = time.monotonic()
        if not (self._woken or now >= self._next_full_read or self._unpublished
                or self._store_down_since is not None):
            return True
        self._woken = False
        self._disabled_stale = True
        self._next_full_read = now + changes.safety_poll_interval
        return False

    def _close_wakeups(self) -> None:
        changes, self._changes = self._changes, None
        self._subscribed = False
        if changes is not None:
            changes.close()

    # -- store outages ------------------------------------------------------

    def _store_unavailable(self, err: store_errors.StoreUnavailable, doing: str) -> bool:
        """The store failed while the agent was ``doing`` something: said
        once per outage (a warning), however many polls it lasts; every
        poll tries again on a fresh connection (:class:`~compute_plugins.
        hoststate.database.Database`).

        :returns: True when this failure starts an outage.
        """
        self._store_failed = True
        if self._store_down_since is not None:
            LOG.debug("host %s: host-state store still unavailable (%s): %s",
                      self.host, doing, err)
            return False
        self._store_down_since = time.monotonic()
        LOG.warning("host %s: host-state store unavailable (%s): %s; retrying every "
                    "%g s", self.host, doing, err.reason, self.claim_poll_interval)
        return True

    def _store_answered(self) -> None:
        """A periodic or poll got through without a store failure: an
        outage is over (said once)."""
        if self._store_failed or self._store_down_since is None:
            return
        LOG.info("host %s: host-state store back after %.0f s", self.host,
                 time.monotonic() - self._store_down_since)
        self._store_down_since = None

    def _disabled_now(self) -> Optional[bool]:
        """Whether an operator disabled this host (the store's record);
        None when the store cannot be read (the trait is left as it is).
        A change is logged once."""
        try:
            record = self._unfenced.disabled_hosts([self.host]).get(self.host)
        except store_errors.StoreUnavailable as err:
            self._store_unavailable(err, "reading whether the host is disabled")
            return None
        except store_errors.HostStateError as err:
            LOG.warning("cannot read whether host %s is disabled (%s): its "
                        "%s trait is left as it is", self.host, err, DISABLED_TRAIT)
            return None
        disabled = record is not None
        self._disabled_stale = False
        if disabled != self._disabled:
            if record is not None:
                LOG.warning("%s (by %s at %s): it takes no new instance, its "
                            "root provider gets %s", record.describe(), record.by,
                            record.at.isoformat(timespec="seconds"), DISABLED_TRAIT)
            elif self._disabled is not None:
                LOG.warning("host %s is enabled again", self.host)
            self._disabled = disabled
        return disabled

    def _tree_providers(self) -> dict[str, str]:
        """uuid -> name of the node's providers as Placement has them."""
        tree = self.client.provider_tree()
        if not tree.exists(self.nodename):
            return {}
        return {u: tree.data(u).name
                for u in tree.get_provider_uuids_in_tree(self.nodename)}

    def _claims_side(self, result: AgentResult, reconcile: bool,
                     quiet: bool = False) -> None:
        """Check, reconcile (a periodic's) and execute the claims side;
        ``quiet`` (:meth:`_quiet`): nothing read from the store, a publish
        only when the host changed."""
        before = self.client.placement.calls.snapshot()
        try:
            if isinstance(self._unfenced, AgentLeases) and self._lease is None:
                raise store_errors.HostStateError(
                    "host %s: no lease on the host in the host-state store yet: "
                    "no claim executed" % self.host)
            if not self._ledger_checked:
                self._check_ledger()
            if reconcile and not quiet:
                if not self._placement_checked and self._providers and not len(
                        self.ledger):
                    # NOTE: an empty ledger first (adopting the store and
                    # reconciling change nothing then): Placement's
                    # allocations on the tree must not be the claims it lost.
                    self._check_placement(result)
                    self._placement_checked = True
                self._adopt_store()
                self._reconcile(result)
                if not self._placement_checked and self._providers:
                    self._check_placement(result)
                    self._placement_checked = True
                    self._audited_at = time.monotonic()
                elif self._providers:
                    self._audit_placement(result)
            elif reconcile and self._placement_checked and self._providers:
                self._audit_placement(result)
            # NOTE: a poll builds the states only when the last publish did
            # not get through; claims and releases publish on their own.
            if reconcile or self._unpublished:
                self._publish(result)
            if not quiet:
                # NOTE: a pass woken by a push (not a periodic's, which
                # reconciled) follows the moves' re-keys at once: their
                # wake-up is consumed by it, so no later pass would read
                # them before the safety net.
                self._execute(result, follow=not reconcile and self.pushed())
            if reconcile and not quiet:
                self._finish_moves(result)
        except (LedgerError, store_errors.StoreCorrupt):
            raise
        except store_errors.Fenced as err:
            if not err.lost:
                # NOTE: not logged here: whoever runs the agent says it once
                # (run() logs it, the command line prints it).
                raise
            # NOTE: a new or recreated store: take the lease again at the
            # next run (the claims are republished, :meth:`_adopt_store`).
            self._drop_lease()
            result.error = str(err)
            LOG.error("host %s: claims: %s", self.host, err)
        except store_errors.StoreUnavailable as err:
            # NOTE: a poll during an outage reports nothing (it would be
            # printed and logged twice a second); the periodic still says it
            # failed.
            if self._store_unavailable(err, "claims") or reconcile:
                result.error = str(err)
        except (store_errors.HostStateError, pexc.PlacementError) as err:
            if self._store_down_since is not None and self._lease is None:
                # NOTE: no lease yet because the store is down: said once.
                if reconcile:
                    result.error = str(err)
                return
            result.error = str(err)
            LOG.error("host %s: claims: %s", self.host, err)
        finally:
            for call, count in calls_between(
                    before, self.client.placement.calls.snapshot()).items():
                result.calls[call] = result.calls.get(call, 0) + count

    # -- one agent per host -------------------------------------------------

    @property
    def holder(self) -> str:
        """This agent in words, as its lease names it."""
        return "pid %d on %s" % (os.getpid(), socket.gethostname())

    def _drop_lease(self) -> None:
        self._next_full_read = 0.0
        self._lease = None
        self.store = self._unfenced
        self._claims = None

    def _lease_lapsed(self) -> bool:
        """Whether the lease in hand ended by this agent's own clock
        (monotonic, from before its last renewal was sent) while the store
        could not be reached to renew it: another node may hold the host
        now, and Placement's calls carry no token."""
        return (self._lease is not None and self._lease_outage
                and time.monotonic() >= self._lease_until)

    def _lease_in_hand(self) -> None:
        """Before a Placement call that frees something (it carries no
        token): a lease that ended by this agent's clock (the agent paused
        since its last check, or a long run) is renewed first.

        :raises Fenced: another agent took the host over: this one stops.
        :raises HostStateError: it could not be renewed (store unreachable).
        """
        if self._lease is None or time.monotonic() < self._lease_until:
            return
        self._renew_at = 0.0
        self._hold_lease()
        if self._lease_lapsed():
            raise store_errors.HostStateError(
                "host %s: the agent's lease ended and cannot be renewed: no "
                "allocation deleted" % self.host)

    def end_lease(self) -> None:
        """The agent stops cleanly: let its lease lapse now, so that
        another node may take the host at once (a crashed agent's lapses
        after ``lease_duration``). A store that cannot be reached leaves it
        to lapse."""
        with self._lock:
            lease, self._lease = self._lease, None
            self.store = self._unfenced
            self._claims = None
            if lease is None or not isinstance(self._unfenced, AgentLeases):
                return
            try:
                self._unfenced.end_lease(lease)
            except store_errors.StoreCorrupt:
                return  # NOTE: what stopped the agent, said by whoever runs it
            except store_errors.HostStateError as err:
                LOG.warning("host %s: the agent's lease is left to lapse: %s",
                            self.host, err)

    def _hold_lease(self) -> None:
        """Take the host's lease (first run) or renew it (every third of
        its duration); from then on every write carries its token.

        :raises AgentLeaseHeld: another node holds the host (at start).
        :raises Fenced: another agent took the host over: this one stops.
        """
        leases = self._unfenced
        if not isinstance(leases, AgentLeases):
            return
        if self._lease is not None and time.monotonic() < self._renew_at:
            return
        held = self._lease
        sent = time.monotonic()
        try:
            if held is None:
                lease = leases.acquire_lease(self.host, self.node.uuid, self.holder,
                                             self.lease_duration)
            else:
                try:
                    lease = leases.renew_lease(held, self.lease_duration)
                except store_errors.Fenced as err:
                    if not err.lost:
                        raise
                    LOG.warning("host %s: the host-state store holds no lease for "
                                "it any more (a new or recreated store): taking "
                                "it again", self.host)
                    lease = leases.acquire_lease(self.host, self.node.uuid,
                                                 self.holder, self.lease_duration)
                    # NOTE: the store lost everything (its lease may have the
                    # same epoch as before): the next pass reads it in full,
                    # push or not (:meth:`_adopt_store` republishes).
                    self._next_full_read = 0.0
        except store_errors.AgentLeaseHeld as err:
            if held is None:
                raise
            raise store_errors.Fenced(self.host, held.epoch, err.lease) from None
        except store_errors.StoreUnavailable as err:
            # NOTE: kept: the writes carry the token still in hand, and the
            # store refuses them if another agent took the host meanwhile.
            # Tried again at every poll, said once per outage.
            self._store_unavailable(err, "%s the agent's lease"
                                    % ("taking" if held is None else "renewing"))
            self._lease_outage = True
            return
        self._lease_outage = False
        if held is None or lease.epoch != held.epoch:
            self.store = cast(HostStateTransport, leases.fenced(lease))
            self._claims = None
            self._next_full_read = 0.0
            # NOTE: debug: the first periodic's output is the start's record.
            LOG.debug("host %s: agent lease taken (node %s, epoch %d, %g s)",
                      self.host, self.node.uuid, lease.epoch, self.lease_duration)
        self._lease = lease
        self._renew_at = time.monotonic() + self.lease_duration / 3
        self._lease_until = sent + self.lease_duration

    # -- the ledger and the store reconcile -----------------------------------

    def _check_ledger_at_start(self) -> None:
        """:meth:`_check_ledger` before the first periodic; a store that
        cannot be reached is tried again before any claim is executed."""
        if self._ledger_checked:
            return
        try:
            self._check_ledger()
        except store_errors.StoreUnavailable as err:
            self._store_unavailable(err, "comparing the claims ledger with it")

    def _check_ledger(self) -> None:
        """Refuse to start on a missing or empty ledger while the store
        still shows claims on the host (never taken as "nothing is
        claimed"), unless told to rebuild it from the store. Placement's
        allocations are compared by the first periodic
        (:meth:`_check_placement`).

        :raises LedgerMissing: the ledger lost the claims the store shows.
        :raises LedgerError: ``rebuild_ledger`` with a ledger holding claims.
        """
        held = len(self.ledger)
        if held:
            if self.rebuild_ledger:
                raise LedgerError(self.ledger.path, "--rebuild-ledger: it holds %d "
                                  "claim%s; only a missing or empty ledger is "
                                  "rebuilt from the store"
                                  % (held, "" if held == 1 else "s"))
            self._record_missing_claims()
            self._ledger_checked = True
            return
        in_store = [d for status in (DecisionStatus.CLAIMED, DecisionStatus.RELEASING)
                    for d in self._unfenced.list_decisions(self.host, status)]
        if self.rebuild_ledger:
            self._rebuild_ledger(in_store)
            self._ledger_checked = True
            return
        if in_store:
            raise LedgerMissing(
                self.ledger.path, not self.ledger.existed,
                "the host-state store %s holds %s of host %s (%s)" % (
                    getattr(self._unfenced, "url", "(in memory)"),
                    _count(len(in_store), "claim"), self.host,
                    _listed(d.consumer for d in in_store)))
        # NOTE: Placement's side is checked once the first periodic read the
        # tree (:meth:`_check_placement`, no extra call).
        self._ledger_checked = True

    def _record_missing_claims(self) -> None:
        """Record the claims the store holds as claimed by this host that
        the ledger lacks: a ledger restored from an older copy (a backup, a
        copied state directory). Only this host's agent makes a decision
        claimed and it records the claim in its ledger first, so the store
        is right: its CPUs and devices must not be published as free."""
        claimed = self._unfenced.list_decisions(self.host, DecisionStatus.CLAIMED)
        self._follow_rekeys({d.consumer: d for d in claimed})
        entries = self.ledger.entries()
        missing = [d for d in claimed if d.consumer not in entries]
        if missing:
            self._rebuild_ledger(missing, "claims ledger %s lacked %s the host-state "
                                 "store holds as claimed by this host (an older copy "
                                 "of the ledger?): recorded back" % (
                                     self.ledger.path, _count(len(missing), "claim")))

    def _rebuild_ledger(self, decisions: list[HostDecision],
                        said: Optional[str] = None) -> None:
        from compute_plugins.request.errors import RequestFormatError
        from compute_plugins.request.spec import RequestSpec

        for decision in sorted(decisions, key=lambda d: d.id):
            try:
                spec = RequestSpec.from_json(decision.spec, self.manager.plugins)
            except RequestFormatError as err:
                raise LedgerError(self.ledger.path, "--rebuild-ledger: decision %d "
                                  "(consumer %s) in the store: %s"
                                  % (decision.id, decision.consumer, err)) from None
            self.ledger.record(decision.consumer, decision.id, spec, decision.spec)
        if said is not None:
            LOG.warning("host %s: %s (%s)", self.host, said,
                        _listed(d.consumer for d in decisions))
            return
        LOG.warning("host %s: claims ledger %s rebuilt from the host-state store: "
                    "%s", self.host, self.ledger.path, _count(len(decisions), "claim"))

    def _adopt_store(self) -> None:
        """A store that is not the one the ledger was reconciled with (new,
        recreated, emptied) gets the ledger's claims back (claimed
        decisions, :meth:`~compute_plugins.hoststate.agents.SqlAgentLeases.
        restore_claim`): never taken as "every claim was released"."""
        leases = self._unfenced
        if not isinstance(leases, AgentLeases):
            return
        store_id = leases.store_id()
        if store_id == self.ledger.store_id:
            return
        if self.ledger.store_id is not None:
            entries = sorted(self.ledger.entries().values(), key=lambda e: e.decision_id)
            LOG.warning("host %s: the host-state store (id %s) is not the one the "
                        "claims ledger %s was reconciled with (id %s): a new or "
                        "recreated store; republishing its %s", self.host, store_id,
                        self.ledger.path, self.ledger.store_id,
                        _count(len(entries), "claim"))
            restore = cast(AgentLeases, self.store).restore_claim
            for entry in entries:
                try:
                    decision = restore(entry.consumer, self.host, entry.spec_json)
                except store_errors.DecisionExists as err:
                    LOG.warning("host %s: consumer %s: not republished: %s",
                                self.host, entry.consumer, err)
                    continue
                self.ledger.record(entry.consumer, decision.id, entry.spec,
                                   entry.spec_json)
            self._generation = None
            self._published = None
        self.ledger.set_store(store_id)

    # -- publishing ---------------------------------------------------------

    def states_documents(self) -> dict[str, dict[str, Any]]:
        """Every plugin's host state under the claims in force, as the store
        holds them (:meth:`~compute_plugins.runtime.PluginSet.encode_states`)."""
        states, broken = self._claims_for_host().states()
        # NOTE: a claim or a release changes one plugin's state or two;
        # the others' documents are the ones encoded last (a state equal to
        # the one last encoded, by its plugin's own equality, type and all,
        # where equal states encode alike: a frozen state, every published
        # field compared; a state its plugin may change in place is equal
        # to itself, so encoded every time).
        previous = self._encoded
        kept = {name for name, state in states.items()
                if name in previous and type(previous[name][0]) is type(state)
                and encodes_alike_when_equal(type(state))
                and previous[name][0] == state}
        fresh, unencodable = self.manager.plugins.encode_states(
            {name: state for name, state in states.items() if name not in kept})
        self._encoded = {name: previous[name] if name in kept else (states[name],
                                                                      fresh[name])
                         for name in states if name in kept or name in fresh}
        documents = {name: encoded[1] for name, encoded in self._encoded.items()}
        broken = broken + unencodable
        # NOTE: said when it changes, not every periodic.
        said = frozenset(broken)
        for rejection in sorted(said - self._broken, key=lambda r: r.plugin):
            LOG.error("host %s: plugin %s publishes no host state: %s", self.host,
                      rejection.plugin, rejection.reason)
        self._broken = said
        return documents

    def _publish(self, result: AgentResult) -> None:
        """Publish the host state when it differs from what was published."""
        self._unpublished = True
        documents = self.states_documents()
        wanted = (documents, self.nodename, self._providers)
        if self._published == wanted:
            self._unpublished = False
            return
        for _ in range(3):
            if self._generation is None:
                snapshot = self.store.get_host(self.host)
                self._generation = 0 if snapshot is None else snapshot.generation
            try:
                done = self.store.publish(self.host, documents, self._generation,
                                          nodename=self.nodename,
                                          providers=self._providers)
            except store_errors.GenerationConflict as err:
                LOG.info("host %s: store generation %d, expected %d: read again",
                         self.host, err.actual, err.expected)
                self._generation = None
                continue
            self._generation = done.generation
            self._published = wanted
            self._unpublished = False
            if done.written:
                result.store_writes += 1
            return
        raise store_errors.HostStateError(
            "host %s: its published state keeps changing under this agent "
            "(another agent publishing as this host?)" % self.host)

    # -- decisions ----------------------------------------------------------

    def _execute(self, result: AgentResult, follow: bool = False) -> None:
        """Claim the pending decisions, free the releasing ones.

        :param follow: also follow the moves' re-keys of the ledger's
            claims (:meth:`_follow_rekeys`) from the same read, which then
            takes the claimed decisions too: a pass woken by a push, whose
            wake-up may be a hand-over's or a revert's.
        """
        claims = self._claims_for_host()
        held = self.ledger.entries()
        follow = follow and bool(held)
        # NOTE: one read for all (one statement, one transaction).
        work = self.store.list_decisions(
            self.host, (DecisionStatus.CLAIMED, DecisionStatus.RELEASING,
                        DecisionStatus.PENDING) if follow
            else (DecisionStatus.PENDING, DecisionStatus.RELEASING))
        pending = [d for d in work if d.status == DecisionStatus.PENDING]
        releasing = [d for d in work if d.status == DecisionStatus.RELEASING]
        if follow:
            self._follow_rekeys({d.consumer: d for d in work})
            held = self.ledger.entries()
        elif any(d.consumer not in held or held[d.consumer].decision_id != d.id
                 for d in releasing) or any(
                d.consumer in held and held[d.consumer].decision_id != d.id
                for d in pending):
            # NOTE: a move may have given a claim to another consumer since
            # (its hand-over or revert): followed before a release frees the
            # wrong claim, or a same-host move's claim replaces the source's.
            self._follow_rekeys(protocol.in_force(self.store, self.host))
        for decision in pending:
            # NOTE: the new state is published before the claim is
            # answered, so that the scheduler's next read shows it; and
            # again after (a claim undone because the decision was
            # withdrawn meanwhile; no write when nothing changed).
            outcome = claims.claim(decision, before_answer=lambda: self._publish(result))
            result.claims.append(outcome)
            if outcome.note == "" or outcome.claimed:
                result.store_writes += 1
            if not (outcome.claimed and outcome.note == ""):
                # NOTE: a claim executed now published its state before
                # its answer and changed nothing since: not built and
                # encoded again only to find it equal.
                self._publish(result)
        for decision in releasing:
            self._release(result, decision.consumer, decision)

    def _finish_moves(self, result: AgentResult) -> None:
        """At a periodic: the moves of this host their commands left
        unchanged past ``move_step_timeout``, finished or undone (ledger,
        Placement, the store's status: :class:`~compute_plugins.compute.
        moves.MoveFinisher`); then an evacuation's fence lifted once
        nothing evacuated is left here."""
        if not isinstance(self._unfenced, HostMoves):
            return
        finisher = MoveFinisher(
            self.host, self.store, self.client.placement, self.move_step_timeout,
            follow=lambda: self._follow_rekeys(protocol.in_force(self.store, self.host)),
            release=lambda consumer, decision: self._release(result, consumer, decision))
        if finisher.finish():
            result.store_writes += 1
        if self._disabled and finisher.lift_fence():
            result.store_writes += 1
            self._disabled_stale = True
            self._fence_lifted = True

    def _verify_restored(self, consumer: str) -> None:
        """A claim a revert gave back to its instance (the same decision,
        never freed): the plugins' ``verify`` run on it again against the
        host's state under the other claims, as the issue's "verified
        again on the source"; an ERROR line when it no longer holds (the
        host changed under it: a device gone, a plugin reconfigured)."""
        try:
            reasons = self._claims_for_host().verify_held(consumer)
        except Exception as err:  # noqa: BLE001 - a plugin's bug: said, not fatal
            reasons = [Rejection("the verify failed: %s: %s"
                                          % (type(err).__name__, err))]
        if reasons:
            LOG.error("host %s: consumer %s: its claim given back by a revert no "
                      "longer holds on this host: %s", self.host, consumer,
                      "; ".join(str(r) for r in reasons))

    def _follow_rekeys(self, current: dict[str, HostDecision]) -> None:
        """Re-key the ledger's claims whose decision the store holds in
        force under another consumer (``current``: consumer -> decision, as
        :func:`~compute_plugins.hoststate.protocol.in_force`): a move's
        hand-over gave the instance's source claim to its migration
        consumer, a revert gives it back. Ledger first: nothing is freed."""
        held = self.ledger.entries()
        recorded = {c: e.decision_id for c, e in held.items()}
        for old, new in sorted(protocol.rekeyed_claims(recorded, current).items()):
            if self.ledger.get(new) is not None:
                continue  # NOTE: swapped both ways; the next pass finishes
            if not _same_spec(held[old].spec_json, current[new].spec):
                continue  # NOTE: another claim under a reused id (a restored store)
            self.ledger.rekey(old, new)
            LOG.info("host %s: the claim of consumer %s (decision %d) is consumer "
                     "%s's now (a move)", self.host, old, recorded[old], new)
            move = (self._unfenced.get_move(old)
                    if isinstance(self._unfenced, HostMoves) else None)
            if move is not None and move.consumer == new:
                self._verify_restored(new)

    def _release(self, result: AgentResult, consumer: str,
                 decision: Optional[HostDecision],
                 delete_allocations: bool = True) -> None:
        if delete_allocations:
            self._lease_in_hand()
        freed = self._claims_for_host().release(
            consumer, decision,
            self.client.placement if delete_allocations else None,
            before_answer=lambda: self._publish(result))
        result.releases.append(freed)
        if decision is not None:
            result.store_writes += 1
        # NOTE: published before the answer (before_answer), nothing
        # changed since: not built and encoded again.

    def _reconcile(self, result: AgentResult) -> None:
        """Free the ledger's claims whose decision is no longer in force in
        the store (released or withdrawn by another path). A decision the
        store does not have at all is restored (:meth:`_restore_lost`), one
        claimed on the host under another id is recorded: neither is
        freed."""
        held = self.ledger.entries()
        if not held:
            return
        current = protocol.in_force(self.store, self.host)
        self._follow_rekeys(current)
        held = self.ledger.entries()
        stale = protocol.stale_claims({c: e.decision_id for c, e in held.items()},
                                      current)
        for consumer in stale:
            entry = held[consumer]
            if consumer not in current and self._restore_lost(entry):
                continue
            if consumer in current and current[consumer].status == DecisionStatus.CLAIMED:
                # NOTE: claimed on this host under another id: only this
                # host's agent claims, recording the claim first, so the
                # ledger missed the id (killed between republishing a claim
                # to a new store and recording it): the store's is kept.
                self._rebuild_ledger([current[consumer]], (
                    "consumer %s: its claim is decision %d in the host-state store, "
                    "not %d: recorded" % (consumer, current[consumer].id,
                                          entry.decision_id)))
                continue
            LOG.warning("consumer %s: its decision %d is not in force in the "
                        "store any more: freeing its claim", consumer,
                        entry.decision_id)
            self._release(result, consumer, None,
                          delete_allocations=self._allocation_is_ours(consumer, entry))

    def _restore_lost(self, entry: LedgerEntry) -> bool:
        """A ledger claim whose decision the store does not have (no row
        with its id, or another consumer's: ids are never reused) was lost
        by the store -- restored from a backup, which keeps the store's
        uuid -- not released: its claimed decision is restored (as for a
        recreated store, :meth:`_adopt_store`) instead of freeing it while
        the guest runs. A released decision is a row until it is purged;
        a claim freed only after its purge is then kept (a leak that
        ``release`` ends), never given twice.

        :returns: True when restored; False: the decision exists (freed
            as usual), or the consumer has a decision in force elsewhere.
        """
        if not isinstance(self._unfenced, AgentLeases):
            return False
        try:
            if self.store.get_decision(entry.decision_id).consumer == entry.consumer:
                return False
        except store_errors.DecisionNotFound:
            pass
        try:
            decision = cast(AgentLeases, self.store).restore_claim(
                entry.consumer, self.host, entry.spec_json)
        except store_errors.DecisionExists:
            return False
        LOG.warning("host %s: consumer %s: its decision %d is not in the host-state "
                    "store (restored from a backup?): its claim is republished as "
                    "decision %d, not freed", self.host, entry.consumer,
                    entry.decision_id, decision.id)
        self.ledger.record(entry.consumer, decision.id, entry.spec, entry.spec_json)
        return True

    def _check_placement(self, result: AgentResult) -> None:
        """Compare Placement's allocations on this host's providers with
        the ledger (one ``GET /resource_providers/{uuid}/allocations`` per
        provider, on start) and report every disagreement.

        The rule: reported (a warning and :attr:`AgentResult.mismatches`),
        nothing deleted nor re-written. An allocation without a claim here
        may be a schedule in flight (between its PUT and its decision), a
        schedule that stopped there, or a consumer compute-plugins does not
        manage (nova's); only an operator can tell (``DELETE
        /allocations/{consumer}`` frees an orphan). A claim without an
        allocation still holds the host's CPUs and devices (the guest may
        run): it is kept until released. A decision pending for this host
        is in flight: not a mismatch.

        :raises LedgerMissing: the ledger is empty (nothing rebuilt from the store) while
            Placement holds allocations of consumers without a decision
            pending on the host: the claims of a lost ledger.
        """
        found = self._placement_mismatches()
        held = self.ledger.entries()
        lost = [m.consumer for m in found if m.consumer not in held]
        if not held and lost:
            # NOTE: even when told to rebuild the ledger: the store held
            # none of these claims (it would have been rebuilt), starting
            # would hand their CPUs out again.
            raise LedgerMissing(
                self.ledger.path, not self.ledger.existed,
                "Placement holds allocations of %s on host %s's providers (%s)"
                % (_count(len(lost), "consumer"), self.host, _listed(lost)),
                rebuildable=False)
        for mismatch in found:
            LOG.warning("host %s: consumer %s: %s", self.host, mismatch.consumer,
                        mismatch.reason)
        result.mismatches.extend(found)

    def _audit_placement(self, result: AgentResult) -> None:
        """The start's comparison again (:meth:`_check_placement`), every
        ``[compute] placement_audit_interval`` seconds (0: never): one
        ``GET /resource_providers/{uuid}/allocations`` per provider of the
        tree, nothing written. A mismatch is reported (a warning and
        :attr:`AgentResult.mismatches`) when the previous audit saw it too
        (one in flight, a schedule between its ``PUT`` and its decision, is
        gone by then), and once; nothing in steady state. Repairing is
        ``compute-plugins audit --fix``'s (it sees every host's decisions).
        """
        now = time.monotonic()
        if not (self.placement_audit_interval > 0
                and now - self._audited_at >= self.placement_audit_interval):
            return
        self._audited_at = now
        found = self._placement_mismatches()
        confirmed = [m for m in found if m.consumer in self._suspects]
        self._suspects = {m.consumer for m in found}
        new = [m for m in confirmed if m.consumer not in self._reported]
        self._reported = {m.consumer for m in confirmed}
        for mismatch in new:
            LOG.warning("host %s: consumer %s: %s", self.host, mismatch.consumer,
                        mismatch.reason)
        result.mismatches.extend(new)

    def _placement_mismatches(self) -> list[Mismatch]:
        """Placement's allocations on the tree against the ledger (see
        :meth:`_check_placement`); a decision pending here is in flight."""
        on_host: dict[str, set[str]] = {}
        for rp in sorted(self._providers or {}):
            body = self.client.placement.get("/resource_providers/%s/allocations" % rp)
            for consumer in body.get("allocations") or {}:
                on_host.setdefault(consumer, set()).add(rp)
        held = self.ledger.entries()
        pending = {d.consumer for d in self.store.list_decisions(
            self.host, DecisionStatus.PENDING)}
        found: list[Mismatch] = []
        for consumer, rps in sorted(on_host.items()):
            if consumer in held or consumer in pending:
                continue
            found.append(Mismatch(consumer, (
                "Placement has allocations on this host's providers but there "
                "is no claim on this host (a schedule stopped between its "
                "allocation and its decision, or a consumer compute-plugins "
                "does not manage): left in place; DELETE /allocations/%s "
                "frees it if it is an orphan" % consumer), tuple(sorted(rps))))
        for consumer, entry in sorted(held.items()):
            if consumer in on_host:
                continue
            found.append(Mismatch(consumer, (
                "its claim (decision %d) holds this host's resources but has "
                "no allocation in Placement on this host: kept until it is "
                "released (Placement may place others on what it holds)"
                % entry.decision_id)))
        return found

    def _allocation_is_ours(self, consumer: str, entry: LedgerEntry) -> bool:
        """Whether the consumer's Placement allocation belongs to this
        host's stale claim, so that freeing the claim deletes it.

        NOTE: a decision withdrawn or released while pending had its
        allocation freed by whoever released it, and the consumer may be
        placed elsewhere since (a newer decision in force, or a scheduler
        between its PUT and its decision): that allocation is not this
        claim's. Only an allocation wholly on this host's providers, of a
        consumer with no decision in force anywhere, is.
        """
        if self.store.active_decision(consumer) is not None:
            return False
        try:
            held = self.client.placement.get("/allocations/%s" % consumer)
        except pexc.NotFound:
            return False
        providers = set(held.get("allocations") or {})
        assert entry.spec.decision is not None
        mine = set(self._providers or {}) | set(entry.spec.decision.allocations)
        return bool(providers) and providers <= mine

    # -- the loop -----------------------------------------------------------

    def run(self, stop_event: threading.Event, interval: float,
            on_result: Optional[Callable[[AgentResult], None]] = None) -> None:
        """Periodics every ``interval`` seconds until ``stop_event`` is set,
        executing decisions in between: woken by the store where it pushes
        (:meth:`wait_for_work`), else polling every ``claim_poll_interval``.

        :param on_result: called with every periodic's result and every
            poll's that did something.
        :raises LedgerError: the ledger cannot be written: the agent stops
            (logged as an error, and kept in :attr:`failure` for whoever
            runs the thread: a thread's exception is otherwise only its
            traceback on stderr).
        """
        try:
            self._run(stop_event, interval, on_result)
        except Exception as err:
            self.failure = err
            LOG.error("host %s: the compute agent stopped: %s", self.host, err)
            raise
        finally:
            self._close_wakeups()

    def _run(self, stop_event: threading.Event, interval: float,
             on_result: Optional[Callable[[AgentResult], None]]) -> None:
        while not stop_event.is_set():
            outcome = self.run_once()
            if on_result is not None:
                on_result(outcome)
            deadline = time.monotonic() + interval
            while not stop_event.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                # NOTE: woken at once by a pushed change; else the poll
                # reads nothing until the safety net is due (:meth:`_quiet`).
                if self.pushed():
                    self.wait_for_work(min(_STOP_CHECK, left))
                    if stop_event.is_set():
                        return
                elif stop_event.wait(min(self.claim_poll_interval, left)):
                    return
                polled = self.poll()
                if on_result is not None and polled.active:
                    on_result(polled)

