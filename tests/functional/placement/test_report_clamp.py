"""An operator's reserved kept above a shrunk total: clamped and said once,
per report client (nothing process-wide), against real Placement."""

from __future__ import annotations

import logging

from compute_plugins.placement import report
from compute_plugins.plugin import names
from tests.functional.placement.test_report import GIB, FakePlugins


def clamp_warnings(caplog, node):
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "kept reserved" in
            r.getMessage() and node in r.getMessage()]


def test_each_client_says_its_clamp_once(placement, nodename, caplog):
    operator = placement.new_client()
    caplog.set_level(logging.WARNING)
    for node in (nodename + "-a", nodename + "-b"):
        # one agent (report client) per node, in this one process
        rc = report.ReportClient(placement.new_client(), refresh_interval=0,
                                 sleep=lambda s: None)
        plugins = FakePlugins(cells=1)
        assert rc.periodic(plugins, node).ok
        cell = names.provider_uuid(node, node + "_NUMA0")
        path = "/resource_providers/%s/inventories/MEMORY_MB" % cell
        inv = operator.get(path)
        inv["reserved"] = 3 * GIB  # an operator drains most of the cell
        operator.put(path, inv)
        plugins.memory = 2 * GIB  # then the cell shrinks below that
        for _ in range(3):
            result = rc.periodic(plugins, node)
            assert result.ok, result.error
        now = operator.get(path)
        assert (now["total"], now["reserved"]) == (2 * GIB, 2 * GIB)
        said = clamp_warnings(caplog, node + "_NUMA0")
        assert len(said) == 1, said
        assert "MEMORY_MB" in said[0]
