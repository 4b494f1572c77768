"""Compute hosts built by the REAL plugins, synced to embedded Placement.

A test describes a host in a few words (:func:`host_info`); the plugins
discover it and build its provider tree exactly as on a compute node, and
the report client syncs that tree to Placement. So the names the queries
ask for (traits, resource classes, ``HW_NUMA_ROOT``...) are checked against
the names the providers really carry: a rename on either side fails here.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Optional

from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins.host.model import (
    CPU,
    DiskInfo,
    HostInfo,
    MdevType,
    NUMACell,
    PagePool,
    PCIDevice,
)
from compute_plugins.placement import report
from compute_plugins.runtime.manager import PluginManager
from compute_plugins.scheduler import query
from compute_plugins.scheduler.query import preview
from tests.unit.request.conftest import ALIASES

HEADERS = {"OpenStack-API-Version": "placement 1.39"}


def cell(cpus: int, memory_mb: int, pages: Optional[dict[int, int]] = None) -> dict:
    """A host NUMA cell: ``cpus`` CPUs, ``memory_mb`` of small pages and
    ``pages`` ({size_kb: count}) of huge pages."""
    return {"cpus": cpus, "memory_mb": memory_mb, "pages": pages or {}}


def host_info(name: str, cells: list[dict], pfs: tuple = (), gpus: tuple = (),
              disk_gb: int = 100) -> HostInfo:
    """pfs: ``(numa node or None, vfs)``; gpus: ``(numa node, mdev type, n)``."""
    numa, next_cpu = [], 0
    for index, spec in enumerate(cells):
        cpus = tuple(CPU(next_cpu + i, socket_id=0) for i in range(spec["cpus"]))
        next_cpu += spec["cpus"]
        huge_kb = sum(size * n for size, n in spec["pages"].items())
        pools = (PagePool(4, spec["memory_mb"] * 256),) + tuple(
            PagePool(size, n) for size, n in spec["pages"].items())
        numa.append(NUMACell(index, cpus, memory_kb=spec["memory_mb"] * 1024 + huge_kb,
                             pages=pools))
    devices = []
    for i, (node, vfs) in enumerate(pfs):
        devices.append(PCIDevice(
            address="0000:5e:00.%d" % i, name="pci_0000_5e_00_%d" % i,
            vendor_id="8086", product_id="1572", class_code="020000",
            numa_node=node, max_vfs=vfs, num_vfs=vfs,
            virt_functions=tuple("0000:5e:%02x.0" % (0x10 + i * 8 + v)
                                 for v in range(vfs))))
    for i, (node, mdev, count) in enumerate(gpus):
        devices.append(PCIDevice(
            address="0000:3b:00.%d" % i, name="pci_0000_3b_00_%d" % i,
            vendor_id="10de", product_id="1eb8", class_code="030200",
            numa_node=node, mdev_types=(MdevType(mdev, available_instances=count),)))
    return HostInfo(hostname=name, source="test", cells=tuple(numa),
                    pci_devices=tuple(devices), disk=DiskInfo(disk_gb, disk_gb))


def agent_conf(physnet: str = "physnet1", mdev_types: tuple = (),
               dedicated: Optional[str] = None,
               state_dir: Optional[str] = None) -> cfg.ConfigOpts:
    """A compute node's configuration (no reserved memory), every plugin's
    options registered; ``state_dir``: its ``[compute_plugins] state_dir``
    (contributions checkpoint, claims ledger)."""
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    conf([], project="compute-plugins-tests", default_config_files=[],
         default_config_dirs=[])
    PluginManager(conf)  # NOTE: registers the plugins' option groups
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    conf.set_override("cpu_allocation_ratio", 1.0, "compute")
    if dedicated:
        conf.set_override("cpu_dedicated_set", dedicated, "compute")
    if state_dir:
        conf.set_override("state_dir", state_dir, "compute_plugins")
    conf.set_override("physical_device_mappings",
                      ["%s:0000:5e:00.%d" % (physnet, i) for i in range(2)], "sriov")
    conf.set_override("bandwidth", ["0000:5e:00.%d:10000:10000" % i
                                    for i in range(2)], "sriov")
    conf.set_override("enabled_mdev_types", list(mdev_types), "vgpu")
    conf.set_override("alias", [json.dumps(a) for a in ALIASES], group="pci")
    return conf


def make_agent_manager(physnet: str = "physnet1", mdev_types: tuple = (),
                       dedicated: Optional[str] = None) -> PluginManager:
    """The plugins as a compute node configures them (:func:`agent_conf`)."""
    return PluginManager(agent_conf(physnet, mdev_types, dedicated))


class Placement:
    """Embedded Placement with hosts reported by the real plugins."""

    def __init__(self, emb: Any) -> None:
        self.emb = emb
        self.session = emb.session()
        self.reporter = report.ReportClient(emb.client(), refresh_interval=0,
                                            sleep=lambda s: None)

    def get(self, path: str) -> Any:
        resp = self.session.request(self.emb_url(path), "GET", headers=HEADERS,
                                    raise_exc=False)
        return resp

    def emb_url(self, path: str) -> str:
        from compute_plugins.placement import embedded
        return embedded.EMBEDDED_URL + path

    def host(self, label: str, cells: list[dict], pfs: tuple = (), gpus: tuple = (),
             disk_gb: int = 100, dedicated: Optional[str] = None,
             mdev_types: tuple = ()) -> str:
        """Report a new host (name ``label-<random>``); its root uuid."""
        name = "%s-%s" % (label, uuid.uuid4().hex[:6])
        manager = make_agent_manager(
            mdev_types=mdev_types or tuple(g[1] for g in gpus), dedicated=dedicated)
        manager.discover(host_info(name, cells, pfs, gpus, disk_gb))
        result = self.reporter.periodic(manager.update_provider_tree, name)
        assert result.ok, result.error
        return self.reporter.provider_tree().data(name).uuid

    def define_resource_classes(self, *names: str) -> None:
        """Create custom resource classes (a cloud whose [pci] alias names
        one has created it; Placement refuses a query naming an unknown one)."""
        for name in names:
            self.session.request(self.emb_url("/resource_classes/%s" % name), "PUT",
                                 headers=HEADERS, raise_exc=False)

    def define(self, *names: str) -> None:
        """Create custom traits and resource classes no host reports, so a
        query naming them gets an empty answer rather than a 400."""
        for name in names:
            kind = "resource_classes" if name.startswith(
                ("CUSTOM_PCI_", "CUSTOM_Z")) else "traits"
            self.session.request(self.emb_url("/%s/%s" % (kind, name)), "PUT",
                                 headers=HEADERS, raise_exc=False)

    def answer(self, alternative: Any) -> Any:
        """Placement's answer to one alternative; a 400 fails the test."""
        resp = self.get("/allocation_candidates?" + alternative.to_querystring())
        assert resp.status_code == 200, (alternative.description, resp.text)
        return resp.json()

    def candidates(self, spec: Any, roots: dict[str, str]) -> set[str]:
        """Labels of ``roots`` with an accepted candidate for any alternative."""
        found = set()
        for alt in preview(spec).alternatives:
            answer = self.answer(alt)
            summaries = answer["provider_summaries"]
            for req in query.accepted(alt, answer):
                for rp in req["allocations"]:
                    root = summaries[rp]["root_provider_uuid"]
                    if root in roots:
                        found.add(roots[root])
        return found
