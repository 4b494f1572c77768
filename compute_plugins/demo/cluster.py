"""The demo's cloud in one process: real Placement, the host-state store, an
agent per bundled host, an operator and a scheduler.

Everything is the embedded default of the project, in one state directory:

- ``placement.sqlite``: the real Placement (``openstack-placement``),
  in-process (:class:`~compute_plugins.placement.embedded.EmbeddedPlacement`);
- ``host_state.sqlite``: the host-state store the agents publish to and the
  scheduler reads (:class:`~compute_plugins.hoststate.store.HostStateStore`);
- ``hosts/<dir>/``: each host's agent state (``[compute_plugins] state_dir``:
  the plugins' checkpoint and the claims ledger);
- ``demo.json``: the instances the last run placed (see :mod:`.run`).

Each host has its own configuration (its snapshot's ``compute-plugins.conf``:
CPU sets, vGPU types, physnets, shared storage), its own Placement client
(so each agent's calls are counted apart) and a
:class:`~compute_plugins.compute.agent.ComputeAgent` that runs as a thread
while the scheduler works (claims and releases are answered as the store's
in-process wake-ups arrive: :data:`PUSH_TRANSPORT_URL`). The operator's
one job here is the shared storage: a sharing provider with ``DISK_GB``
and ``MISC_SHARES_VIA_AGGREGATE`` in the aggregate the ``shared`` host's
``[disk] shared_storage_aggregate`` names, made with plain Placement
calls, as an operator does with the ``openstack resource provider``
commands.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Optional

from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins import demo
from compute_plugins.compute.agent import AgentResult, ComputeAgent
from compute_plugins.compute.ledger import Ledger
from compute_plugins.hoststate.store import HostStateStore
from compute_plugins.placement import client as pclient
from compute_plugins.placement import embedded
from compute_plugins.placement import exception as pexc
from compute_plugins.placement.report import ReportClient
from compute_plugins.runtime.manager import PluginManager

#: The sharing provider the operator creates for the ``shared`` host.
SHARED_STORAGE_NAME = "demo-shared-storage"
SHARED_STORAGE_UUID = str(uuid.uuid5(uuid.NAMESPACE_URL,
                                     "compute-plugins:demo:shared-storage-provider"))
SHARED_STORAGE_GB = 10240
SHARES_TRAIT = "MISC_SHARES_VIA_AGGREGATE"
#: Seconds between an agent thread's polls for decisions (the option's minimum).
CLAIM_POLL_INTERVAL = 0.05

#: How the agents learn of decisions and the scheduler of answers: every
#: one of them is in this process, on one store object, so the writers wake
#: the waiters directly after their commits (``[host_state]
#: push_transport_url = fake://``) instead of each agent reading the store
#: every ``CLAIM_POLL_INTERVAL`` (one read per poll).
PUSH_TRANSPORT_URL = "fake://"

Progress = Callable[[str], None]


def _no_progress(_message: str) -> None:
    return None


def host_conf(state_dir: str, name: str, store_url: str) -> cfg.ConfigOpts:
    """The configuration of the bundled host ``name``: its own file, and
    the demo's state directory for its agent and the store."""
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    conf(["--config-file", os.path.join(demo.host_dir(name), demo.HOST_CONFIG)],
         project="compute-plugins", prog="compute-plugins demo",
         default_config_files=[], default_config_dirs=[])
    conf.set_override("state_dir", os.path.join(state_dir, "hosts", name),
                      "compute_plugins")
    conf.set_override("connection", store_url, "host_state")
    conf.set_override("claim_poll_interval", CLAIM_POLL_INTERVAL, "compute")
    return conf


def scheduler_conf(store_url: str) -> cfg.ConfigOpts:
    """The scheduler's configuration: the defaults, the demo's store."""
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    conf([], project="compute-plugins", prog="compute-plugins demo",
         default_config_files=[], default_config_dirs=[])
    conf.set_override("connection", store_url, "host_state")
    return conf


@dataclasses.dataclass
class DemoHost:
    """One bundled host and its agent."""

    dirname: str
    conf: cfg.ConfigOpts
    manager: PluginManager
    placement: pclient.PlacementClient
    agent: ComputeAgent
    thread: Optional[threading.Thread] = None
    #: What the agent's thread did (claims and releases), in order.
    results: list[AgentResult] = dataclasses.field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.agent.host)


class Cluster:
    """The demo's cloud in ``state_dir`` (see the module doc).

    Use as a context manager: :meth:`open` on entry, :meth:`close` on exit
    (agents stopped, Placement and the store closed).
    """

    def __init__(self, state_dir: str, progress: Progress = _no_progress,
                 push_transport_url: str = PUSH_TRANSPORT_URL) -> None:
        self.state_dir = os.path.abspath(state_dir)
        self.push_transport_url = push_transport_url
        self.progress = progress
        self.hosts: list[DemoHost] = []
        self.service: Optional[embedded.EmbeddedPlacement] = None
        self.store: Optional[HostStateStore] = None
        self.operator: Optional[pclient.PlacementClient] = None
        self._stop = threading.Event()

    # -- set-up -------------------------------------------------------------

    def __enter__(self) -> Cluster:
        # NOTE: __exit__ does not run when this raises: what open() started
        # before it failed (Placement, then a store that cannot be opened)
        # is closed here, or it stays bound in the process.
        try:
            self.open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def store_url(self) -> str:
        return "sqlite:///" + os.path.join(self.state_dir, "host_state.sqlite")

    def open(self) -> None:
        """Start Placement, open the store, build an agent per host."""
        os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        self.progress("starting Placement (in-process, SQLite) and the host-state store")
        self.service = embedded.EmbeddedPlacement(embedded.sqlite_url(
            os.path.join(self.state_dir, embedded.DB_FILE)))
        self.service.start()
        self.store = HostStateStore(self.store_url,
                                    push_transport_url=self.push_transport_url)
        self.operator = self.service.client()
        for name in demo.HOST_DIRS:
            self.hosts.append(self._host(name))

    def _host(self, name: str) -> DemoHost:
        from compute_plugins.host.snapshot import load_snapshot

        assert self.service is not None and self.store is not None
        conf = host_conf(self.state_dir, name, self.store_url)
        agent_dir = conf.compute_plugins.state_dir
        os.makedirs(agent_dir, mode=0o700, exist_ok=True)
        manager = PluginManager(conf, auto_commit=False, checkpoint_dir=agent_dir)
        path = demo.host_dir(name)

        def discover() -> Any:
            return load_snapshot(path)

        first = discover()
        manager.discover(first)
        manager.raise_config_errors()
        ledger = Ledger.load(agent_dir, first.hostname, manager.plugins)
        placement = self.service.client()
        client = ReportClient(placement,
                              conf.compute.resource_provider_association_refresh)
        agent = ComputeAgent(manager, client, self.store, ledger, discover,
                             first=first, claim_poll_interval=CLAIM_POLL_INTERVAL)
        return DemoHost(dirname=name, conf=conf, manager=manager,
                        placement=placement, agent=agent)

    def close(self) -> None:
        self.stop_agents()
        if self.store is not None:
            self.store.close()
            self.store = None
        if self.service is not None:
            self.service.close()
            self.service = None

    # -- the operator -------------------------------------------------------

    def ensure_shared_storage(self) -> dict[str, int]:
        """Create (or leave as it is) the sharing provider of the shared
        storage; returns the Placement calls it took."""
        assert self.operator is not None
        wanted = sorted({h.conf.disk.shared_storage_aggregate for h in self.hosts
                         if h.conf.disk.shared_storage_aggregate})
        client = self.operator
        before = client.calls.snapshot()
        path = "/resource_providers/%s" % SHARED_STORAGE_UUID
        try:
            provider = client.get(path)
        except pexc.NotFound:
            provider = client.post("/resource_providers", {
                "name": SHARED_STORAGE_NAME, "uuid": SHARED_STORAGE_UUID})
        generation = provider["generation"]
        inventory = client.get(path + "/inventories")["inventories"]
        if inventory.get("DISK_GB", {}).get("total") != SHARED_STORAGE_GB:
            generation = client.put(path + "/inventories", {
                "resource_provider_generation": generation,
                "inventories": {"DISK_GB": {"total": SHARED_STORAGE_GB}}},
            )["resource_provider_generation"]
        traits = client.get(path + "/traits")["traits"]
        if SHARES_TRAIT not in traits:
            generation = client.put(path + "/traits", {
                "resource_provider_generation": generation,
                "traits": sorted(set(traits) | {SHARES_TRAIT})},
            )["resource_provider_generation"]
        aggregates = client.get(path + "/aggregates")["aggregates"]
        if not set(wanted) <= set(aggregates):
            client.put(path + "/aggregates", {
                "resource_provider_generation": generation,
                "aggregates": sorted(set(aggregates) | set(wanted))})
        return calls_since(client, before)

    # -- the agents ---------------------------------------------------------

    def report(self, host: DemoHost) -> AgentResult:
        """One periodic of ``host``'s agent, here and now."""
        result = host.agent.run_once()
        if result.periodic is not None and result.periodic.error:
            raise RuntimeError("host %s: its periodic failed: %s"
                               % (host.name, result.periodic.error))
        return result

    def start_agents(self) -> None:
        """Each agent in a thread: answers claims and releases when woken
        (polls every ``CLAIM_POLL_INTERVAL`` while nothing pushes)."""
        self._stop.clear()
        for host in self.hosts:
            host.thread = threading.Thread(
                target=host.agent.run, name="agent-%s" % host.dirname,
                args=(self._stop, 3600.0), kwargs={"on_result": host.results.append},
                daemon=True)
            host.thread.start()

    def stop_agents(self) -> None:
        self._stop.set()
        for host in self.hosts:
            if host.thread is not None:
                host.thread.join(timeout=30)
                host.thread = None

    # -- Placement, read back -------------------------------------------------

    def providers(self, known: Optional[dict[str, dict[str, Any]]] = None
                  ) -> Iterator[dict[str, Any]]:
        """Every provider in Placement with its inventories, usages, traits
        and aggregates (the operator's reads; not counted as the agents').

        :param known: provider uuid -> an earlier read of it: its traits
            and aggregates are taken from there (moves and claims change
            neither), halving the reads of the demo's final state.
        """
        assert self.operator is not None
        client = self.operator
        known = known or {}
        for provider in client.get("/resource_providers")["resource_providers"]:
            path = "/resource_providers/%s" % provider["uuid"]
            earlier = known.get(provider["uuid"])
            yield {
                "uuid": provider["uuid"], "name": provider["name"],
                "parent_provider_uuid": provider.get("parent_provider_uuid"),
                "root_provider_uuid": provider.get("root_provider_uuid"),
                "inventories": {rc: {"total": inv["total"],
                                     "reserved": inv.get("reserved", 0)}
                                for rc, inv in client.get(
                                    path + "/inventories")["inventories"].items()},
                "usages": client.get(path + "/usages")["usages"],
                "traits": (earlier["traits"] if earlier else
                           sorted(client.get(path + "/traits")["traits"])),
                "aggregates": (earlier["aggregates"] if earlier else sorted(
                    client.get(path + "/aggregates")["aggregates"])),
            }

def calls_since(client: pclient.PlacementClient,
                before: dict[str, int]) -> dict[str, int]:
    """The calls ``client`` made since its counters read ``before``."""
    from compute_plugins.placement.report.periodic import calls_between

    return calls_between(before, client.calls.snapshot())


def calls_total(calls: dict[str, int]) -> int:
    return sum(calls.values())


def merge_calls(parts: Sequence[dict[str, int]]) -> dict[str, int]:
    merged: dict[str, int] = {}
    for part in parts:
        for call, count in part.items():
            merged[call] = merged.get(call, 0) + count
    return dict(sorted(merged.items()))
