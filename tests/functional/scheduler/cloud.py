"""A small cloud for scheduler tests: real Placement, a real store, hosts
built by the real plugins.

Each host is discovered by the REAL plugins from a described host
(:func:`tests.functional.request.hosts.host_info`), its tree reported to the
embedded Placement by the report client, and every plugin's ``host_state``
published to an SQLite host-state store, as a compute agent does.

:class:`StandInAgent` answers the decisions addressed to the hosts: it
stands in for the compute agent (``compute_plugins.compute.agent``), which
lands separately. It does what the claim contract says: every plugin's
``verify`` on the host's live state against the recorded assignment
(:func:`compute_plugins.fit.verify_all`), then claimed (and the new state
published) or rejected with every reason.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, Optional

from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins.fit import encode_state, verify_all
from compute_plugins.hoststate.store import HostStateStore
from compute_plugins.request_spec import RequestSpec
from compute_plugins.scheduler.selection import Scheduler
from tests.functional.request.hosts import HEADERS, Placement, host_info, make_agent_manager


class Host:
    """One compute host: its plugins (as its agent configures them), what
    they discovered, the assignments in force."""

    def __init__(self, name: str, manager: Any, root: str,
                 providers: dict[str, str]) -> None:
        self.name = name
        self.manager = manager
        self.root = root
        self.providers = providers
        self.assignments: dict[str, list[Any]] = {}
        self.generation = 0

    def states(self) -> dict[str, dict[str, Any]]:
        """Every plugin's encoded host state under the assignments in force."""
        views = self.manager.views
        return {name: encode_state(plugin, plugin.host_state(
                    views[name], self.name, tuple(self.assignments.get(name, ()))))
                for name, plugin in self.manager.plugins.items() if name in views}


class Cloud:
    """Embedded Placement (shared), a host-state store (own) and hosts."""

    def __init__(self, placement: Placement, store_path: str) -> None:
        self.placement = placement
        self.store = HostStateStore("sqlite:///%s" % store_path)
        self.hosts: dict[str, Host] = {}

    def add_host(self, label: str, cells: list[dict], dedicated: Optional[str] = None,
                 pfs: tuple = (), gpus: tuple = (), disk_gb: int = 100,
                 disk_aggregate: Optional[str] = None) -> Host:
        name = "%s-%s" % (label, uuid.uuid4().hex[:6])
        manager = make_agent_manager(mdev_types=tuple(g[1] for g in gpus),
                                     dedicated=dedicated)
        if disk_aggregate:
            manager.conf.set_override("shared_storage_aggregate", disk_aggregate, "disk")
        manager.discover(host_info(name, cells, pfs, gpus, disk_gb))
        reporter = self.placement.reporter
        result = reporter.periodic(manager.update_provider_tree, name)
        assert result.ok, result.error
        tree = reporter.provider_tree()
        providers = {u: tree.data(u).name for u in tree.get_provider_uuids_in_tree(name)}
        host = Host(name, manager, tree.data(name).uuid, providers)
        self.hosts[name] = host
        self.publish(host)
        return host

    def publish(self, host: Host) -> None:
        """What the agent does after every change: its states, CAS."""
        host.generation = self.store.publish(
            host.name, host.states(), host.generation, nodename=host.name,
            providers=host.providers).generation

    def set_root_traits(self, host: Host, *traits: str) -> None:
        """An operator's (or nova's) traits on the host's root."""
        session, url = self.placement.session, self.placement.emb_url(
            "/resource_providers/%s/traits" % host.root)
        have = session.request(url, "GET", headers=HEADERS).json()
        session.request(url, "PUT", headers=HEADERS, json={
            "resource_provider_generation": have["resource_provider_generation"],
            "traits": sorted(set(have["traits"]) | set(traits))})

    def scheduler(self, disk_aggregate: Optional[str] = None,
                  **overrides: Any) -> Scheduler:
        """A scheduler; ``overrides`` are ``[scheduler]`` options."""
        conf = cfg.ConfigOpts()
        conf_areas.register_all(conf)
        conf([], default_config_files=[], default_config_dirs=[])
        for name, value in overrides.items():
            conf.set_override(name, value, "scheduler")
        plugins = make_agent_manager()
        if disk_aggregate:
            plugins.conf.set_override("shared_storage_aggregate", disk_aggregate, "disk")
        return Scheduler(conf, plugins, self.placement.emb.client(), self.store)

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


class StandInAgent:
    """Answers the decisions addressed to ``cloud``'s hosts (module doc).

    :param publish: publish the new state after a claim (an agent does; a
        test of a stale view turns it off).
    """

    def __init__(self, cloud: Cloud, publish: bool = True) -> None:
        self.cloud = cloud
        self.publish = publish
        self.answered: list[tuple[str, str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> StandInAgent:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            for host in list(self.cloud.hosts.values()):
                for decision in self.cloud.store.list_decisions(host.name):
                    self.answer(host, decision)

    def answer(self, host: Host, decision: Any) -> None:
        spec = RequestSpec.from_json(decision.spec, host.manager)
        views = host.manager.views
        states = {name: plugin.host_state(views[name], host.name,
                                          tuple(host.assignments.get(name, ())))
                  for name, plugin in host.manager.plugins.items() if name in views}
        reasons = verify_all(host.manager.plugins, states, spec)
        if reasons:
            self.cloud.store.mark_rejected(decision.id, reasons)
            self.answered.append((host.name, decision.consumer, "rejected"))
            return
        assert spec.decision is not None  # verify_all refuses a spec without one
        for name, assignment in spec.decision.assignments.items():
            host.assignments.setdefault(name, []).append(assignment)
        if self.publish:
            self.cloud.publish(host)
        self.cloud.store.mark_claimed(decision.id)
        self.answered.append((host.name, decision.consumer, "claimed"))
