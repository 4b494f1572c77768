"""A small cloud for scheduler tests: real Placement, a real store, and a
real compute agent per host.

Each host is described in a few words
(:func:`tests.functional.request.hosts.host_info`) and run by a REAL
:class:`~compute_plugins.compute.agent.ComputeAgent` built as
``compute-plugins report`` builds it (:meth:`ComputeAgent.from_config`:
the enabled plugins, a claims ledger in the host's own state directory, a
report client on the embedded Placement). Its first periodic reports the
tree to Placement and publishes every plugin's ``host_state`` to the
cloud's SQLite host-state store; then the agent runs in a thread
(:meth:`ComputeAgent.run`), polling the store for the decisions addressed
to its host every ``[compute] claim_poll_interval`` (its minimum, 0.05 s)
and claiming, rejecting and releasing them as on a compute node.

A cloud made with ``push=True`` (the ``cloud`` fixture's default) wakes
its agents and schedulers through the store's in-process push
(``[host_state] push_transport_url = fake://``, as the embedded demo has
it) instead: an idle agent waits on its wake-up rather than reading the
store every 0.05 s (~24 ms of CPU an agent-second, which grew with the
tests' wall time under load). The poll path stays where a test is about
it: ``Cloud(..., push=False)``, the ``polling`` mark. A command run on the
cloud's store takes its configuration from :meth:`Cloud.host_state_config`
(the same push: its writes wake the agents).
"""

from __future__ import annotations

import os
import threading
import uuid
from typing import Any, Optional

from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins.compute.agent import AgentResult, ComputeAgent
from compute_plugins.hoststate.store import HostStateStore
from compute_plugins.scheduler.selection import Scheduler
from tests.functional.request.hosts import (
    HEADERS,
    Placement,
    agent_conf,
    host_info,
    make_agent_manager,
)

#: The agents' ``[compute] claim_poll_interval`` (the option's minimum).
CLAIM_POLL_INTERVAL = 0.05
#: ``push=True``: the store's wake-ups, in this process only (oslo.messaging's
#: in-process driver's name; every store object of one URL shares one hub).
PUSH_TRANSPORT_URL = "fake://"
#: ``push=True``: the waiters' full read that catches a lost wake-up (a
#: write by a store object of another URL hub: none in these tests), seconds.
SAFETY_POLL_INTERVAL = 1.0
#: The agents' periodic interval: one periodic when started, the rest of a
#: test is claims (a test that wants a periodic calls ``run_once``).
PERIODIC_INTERVAL = 3600.0


def expected_allocation(decision: Any) -> dict[str, dict[str, int]]:
    """What the assignments take, provider by provider, computed from the
    assignments themselves (not from the scheduler's allocation code)."""
    total: dict[str, dict[str, int]] = {}

    def add(rp, rc, n):
        if n:
            total.setdefault(rp, {})
            total[rp][rc] = total[rp].get(rc, 0) + n

    for name, assignment in decision.assignments.items():
        if name == "numa":
            for part in assignment.cells:
                add(part.provider_uuid, "PCPU", len(part.pinning))
                add(part.provider_uuid, "VCPU", part.shared_vcpus)
                add(part.provider_uuid, "MEMORY_MB", part.memory_mb)
        elif name == "vgpu":
            for device in assignment.devices:
                add(device.provider_uuid, "VGPU", len(device.mdev_uuids) or 1)
        elif name == "sriov":
            for vf in assignment.vfs:
                add(vf.provider_uuid, "SRIOV_NET_VF", 1)
                add(vf.provider_uuid, "NET_BW_EGR_KILOBIT_PER_SEC", vf.egress_kbps)
                add(vf.provider_uuid, "NET_BW_IGR_KILOBIT_PER_SEC", vf.ingress_kbps)
        elif name == "disk":
            add(assignment.provider_uuid, "DISK_GB", assignment.disk_gb)
    return total


class FirstPutRaces:
    """The real Placement client, except that another scheduler runs just
    before this one's first ``PUT /allocations``: the race between reading
    which providers have room and writing the allocation, made
    deterministic."""

    def __init__(self, client: Any, before_first_put: Any) -> None:
        self._client = client
        self._before = before_first_put

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def put(self, path: str, body: Any = None, **kw: Any) -> Any:
        before, self._before = self._before, None
        if before is not None:
            before()
        return self._client.put(path, body, **kw)


class Host:
    """One compute host and its running agent."""

    def __init__(self, name: str, agent: ComputeAgent, root: str,
                 providers: dict[str, str], conf: cfg.ConfigOpts,
                 discover: Any) -> None:
        self.name = name
        self.agent = agent
        self.root = root
        self.providers = providers
        self.conf = conf
        self.discover = discover
        self.results: list[AgentResult] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def manager(self) -> Any:
        return self.agent.manager

    @property
    def assignments(self) -> dict[str, list[Any]]:
        """The assignments in force: the agent's claims ledger."""
        return self.agent.ledger.assignments()

    def states(self) -> dict[str, dict[str, Any]]:
        """Every plugin's encoded host state, as the agent publishes it."""
        return self.agent.states_documents()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Run the agent in a thread (as ``compute-plugins report`` does)."""
        assert self._thread is None
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.agent.run, args=(self._stop, PERIODIC_INTERVAL),
            kwargs={"on_result": self.results.append}, daemon=True,
            name="agent-%s" % self.name)
        self._thread.start()

    def stop(self) -> None:
        """Stop the agent's thread (the agent process stops)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(30)
            assert not self._thread.is_alive(), "agent %s did not stop" % self.name
            self._thread = None


class Cloud:
    """Embedded Placement (shared), a host-state store (own) and hosts,
    each with its agent.

    :param directory: the store's SQLite file and the hosts' state
        directories go there.
    :param store: the host-state store (default: an SQLite file in
        ``directory``); closed with the cloud.
    :param push: the default store pushes its wake-ups in this process
        (:data:`PUSH_TRANSPORT_URL`): the agents wait for them instead of
        polling every :data:`CLAIM_POLL_INTERVAL`; False: they poll.
        Unused with ``store``.
    """

    def __init__(self, placement: Placement, directory: str,
                 store: Optional[HostStateStore] = None, push: bool = False) -> None:
        self.placement = placement
        self.directory = directory
        #: Whether the cloud made its store pushing (:data:`PUSH_TRANSPORT_URL`).
        self.push = push and store is None
        if store is None:
            url = "sqlite:///%s" % os.path.join(directory, "host_state.sqlite")
            store = (HostStateStore(url, push_transport_url=PUSH_TRANSPORT_URL,
                                    safety_poll_interval=SAFETY_POLL_INTERVAL)
                     if push else HostStateStore(url))
        self.store = store
        self.hosts: dict[str, Host] = {}
        #: The schedulers made (:meth:`scheduler`), closed by :meth:`close`.
        self.schedulers: list[Scheduler] = []

    def host_state_config(self) -> str:
        """The ``[host_state]`` section of a configuration file for a
        command on this cloud's store: its connection and, where the cloud's
        store pushes, the same in-process push, so that the command's writes
        wake the agents (and its waits are woken) as the cloud's own do,
        not only at the safety net's read."""
        text = "[host_state]\nconnection = %s\n" % self.store.url
        if self.push:
            text += "push_transport_url = %s\npush_safety_poll_interval = %s\n" % (
                PUSH_TRANSPORT_URL, SAFETY_POLL_INTERVAL)
        return text

    def close(self) -> None:
        """Close the schedulers (their renewals end), stop every agent,
        close the store."""
        for sched in self.schedulers:
            sched.close()
        for host in self.hosts.values():
            host.stop()
        self.store.close()

    def agent_conf(self, name: str, gpus: tuple = (), dedicated: Optional[str] = None,
                   disk_aggregate: Optional[str] = None) -> cfg.ConfigOpts:
        """The configuration of host ``name``'s agent."""
        conf = agent_conf(mdev_types=tuple(g[1] for g in gpus), dedicated=dedicated,
                          state_dir=os.path.join(self.directory, "state", name))
        conf.set_override("claim_poll_interval", CLAIM_POLL_INTERVAL, "compute")
        if disk_aggregate:
            conf.set_override("shared_storage_aggregate", disk_aggregate, "disk")
        return conf

    def new_agent(self, host: Host) -> ComputeAgent:
        """A new agent for ``host``, as after a restart of its process: its
        own plugins and report client, its ledger read from disk."""
        return ComputeAgent.from_config(host.conf, self.placement.emb.client(),
                                        self.store, host.discover)

    def add_host(self, label: str, cells: list[dict], dedicated: Optional[str] = None,
                 pfs: tuple = (), gpus: tuple = (), disk_gb: int = 100,
                 disk_aggregate: Optional[str] = None, start: bool = True,
                 lease_duration: Optional[float] = None,
                 store: Optional[HostStateStore] = None) -> Host:
        """A host whose agent reported it and published its state.

        :param start: run its agent (a host without one: False).
        :param store: the agent's own store object (another process's, on
            the cloud's database); default: the cloud's.
        :param lease_duration: the agent's lease in the store, seconds
            (shorter than ``[compute] agent_lease_duration`` allows: a
            stopped agent's host is down within it).
        """
        name = "%s-%s" % (label, uuid.uuid4().hex[:6])
        info = host_info(name, cells, pfs, gpus, disk_gb)
        conf = self.agent_conf(name, gpus, dedicated, disk_aggregate)
        agent = ComputeAgent.from_config(conf, self.placement.emb.client(),
                                         store if store is not None else self.store,
                                         lambda: info)
        if lease_duration is not None:
            agent.lease_duration = lease_duration
        result = agent.run_once()
        assert result.ok, result.to_dict()
        assert result.store_writes == 1  # the state, published
        tree = agent.client.provider_tree()
        providers = {u: tree.data(u).name for u in tree.get_provider_uuids_in_tree(name)}
        host = Host(name, agent, tree.data(name).uuid, providers, conf, lambda: info)
        self.hosts[name] = host
        if start:
            host.start()
        return host

    def restart(self, host: Host) -> AgentResult:
        """Stop ``host``'s agent, start a new one (its ledger read from
        disk); the new agent's first periodic's result."""
        host.stop()
        host.agent = self.new_agent(host)
        result = host.agent.run_once()
        host.start()
        return result

    def set_root_traits(self, host: Host, *traits: str) -> None:
        """An operator's (or nova's) traits on the host's root."""
        session, url = self.placement.session, self.placement.emb_url(
            "/resource_providers/%s/traits" % host.root)
        have = session.request(url, "GET", headers=HEADERS).json()
        session.request(url, "PUT", headers=HEADERS, json={
            "resource_provider_generation": have["resource_provider_generation"],
            "traits": sorted(set(have["traits"]) | set(traits))})

    def scheduler(self, disk_aggregate: Optional[str] = None, draw: bool = False,
                  **overrides: Any) -> Scheduler:
        """A scheduler; ``overrides`` are ``[scheduler]`` options.

        :param draw: draw the first host among equally good ones, as a
            scheduler does (:func:`compute_plugins.scheduler.view.draw`);
            False (``rng`` None): the best by weight, then by name, so that
            a test can name the host it expects among equal ones.
        """
        conf = cfg.ConfigOpts()
        conf_areas.register_all(conf)
        conf([], default_config_files=[], default_config_dirs=[])
        for name, value in overrides.items():
            conf.set_override(name, value, "scheduler")
        plugins = make_agent_manager()
        if disk_aggregate:
            plugins.conf.set_override("shared_storage_aggregate", disk_aggregate, "disk")
        sched = Scheduler(conf, plugins.plugins, self.placement.emb.client(), self.store)
        self.schedulers.append(sched)
        if not draw:
            sched.rng = None
        return sched

    def sharing_provider(self, aggregate: str, disk_gb: int) -> str:
        """Shared storage: a provider outside every host's tree with
        ``DISK_GB``, ``MISC_SHARES_VIA_AGGREGATE``, in ``aggregate``."""
        session, url = self.placement.session, self.placement.emb_url
        rp = str(uuid.uuid4())
        resp = session.request(url("/resource_providers"), "POST", headers=HEADERS,
                               json={"name": "shared-%s" % rp[:8], "uuid": rp})
        assert resp.status_code == 200, resp.text
        session.request(url("/resource_providers/%s/inventories" % rp), "PUT",
                        headers=HEADERS, json={"resource_provider_generation": 0,
                                               "inventories": {"DISK_GB": {"total": disk_gb}}})
        session.request(url("/resource_providers/%s/traits" % rp), "PUT", headers=HEADERS,
                        json={"resource_provider_generation": 1,
                              "traits": ["MISC_SHARES_VIA_AGGREGATE"]})
        resp = session.request(url("/resource_providers/%s/aggregates" % rp), "PUT",
                               headers=HEADERS, json={"resource_provider_generation": 2,
                                                      "aggregates": [aggregate]})
        assert resp.status_code == 200, resp.text
        return rp

    def allocations(self, consumer: str) -> dict[str, dict[str, int]]:
        """Placement's allocation of ``consumer``: provider -> resources."""
        resp = self.placement.get("/allocations/%s" % consumer)
        assert resp.status_code == 200, resp.text
        return {rp: body["resources"] for rp, body in resp.json()["allocations"].items()}

    def usage(self, host: Host) -> dict[str, dict[str, int]]:
        """Placement's usages of every provider of ``host`` (non-zero only)."""
        result = {}
        for rp in host.providers:
            resp = self.placement.session.request(
                self.placement.emb_url("/resource_providers/%s/usages" % rp), "GET",
                headers=HEADERS)
            used = {rc: n for rc, n in resp.json()["usages"].items() if n}
            if used:
                result[rp] = used
        return result

    def ledger_usage(self, host: Host) -> dict[str, dict[str, int]]:
        """What the claims in ``host``'s ledger take, provider by provider,
        summed from their assignments (:func:`expected_allocation`)."""
        total: dict[str, dict[str, int]] = {}
        for entry in host.agent.ledger.entries().values():
            for rp, res in expected_allocation(entry.spec.decision).items():
                for rc, n in res.items():
                    total.setdefault(rp, {})
                    total[rp][rc] = total[rp].get(rc, 0) + n
        return total
