"""The report client against real Placement (in-process and over HTTP).

No Placement call is mocked. The plugins are stood in for by
:class:`FakePlugins`, an ``update_tree`` callable with nova's
``update_provider_tree`` semantics, so that each test chooses its tree shape
and changes without a host to discover.
"""

from __future__ import annotations

import logging
import os
import signal
import uuid

import pytest

from compute_plugins import exception
from compute_plugins.cmd import report as report_cmd
from compute_plugins.placement import report
from compute_plugins.plugin import names

GIB = 1024


class FakePlugins:
    """``update_tree(tree, nodename, allocations)`` for a NUMA-ish host.

    :param cells: number of ``<node>_NUMA<i>`` children.
    :param devices: per cell, number of ``<node>_NUMA<i>_dev<j>`` grandchildren.
    :param vcpu_on_root: VCPU on the root (True) or on the cells (False);
        moving it when allocations exist needs a reshape.
    """

    OWNED_TRAITS = {"HW_NUMA_ROOT", "CUSTOM_PLUGIN_A", "CUSTOM_PLUGIN_B"}

    def __init__(self, cells=2, devices=0, vcpu_on_root=False):
        self.cells = cells
        self.devices = devices
        self.vcpu_on_root = vcpu_on_root
        self.memory = 4 * GIB
        self.cell_traits = {"HW_NUMA_ROOT", "CUSTOM_PLUGIN_A"}
        self.hook = None
        self.calls = 0

    def layout(self, node):
        out = {}
        for i in range(self.cells):
            cell = "%s_NUMA%d" % (node, i)
            out[cell] = node
            for j in range(self.devices):
                out["%s_dev%d" % (cell, j)] = cell
        return out

    def __call__(self, tree, node, allocations):
        self.calls += 1
        if self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        moving = self._vcpu_moves(tree, node)
        if moving and allocations is None:
            raise exception.ReshapeNeeded()
        if not tree.exists(node):
            tree.new_root(node, names.provider_uuid(node))
        wanted = self.layout(node)
        for name in sorted(wanted, key=lambda n: n.count("_")):
            if not tree.exists(name):
                tree.new_child(name, wanted[name],
                               names.provider_uuid(node, name))
        for pd in reversed(tree.snapshot()):
            if pd.name.startswith(node + "_") and pd.name not in wanted:
                tree.remove(pd.uuid)
        root_inv = {"DISK_GB": {"total": 100}}
        if self.vcpu_on_root:
            root_inv["VCPU"] = {"total": 8 * self.cells}
        tree.update_inventory(node, root_inv)
        for name, parent in wanted.items():
            if parent == node:
                inv = {"MEMORY_MB": {"total": self.memory}}
                if not self.vcpu_on_root:
                    inv["VCPU"] = {"total": 8}
                tree.update_inventory(name, inv)
                have = tree.data(name).traits
                tree.update_traits(
                    name, (have - self.OWNED_TRAITS) | self.cell_traits)
            else:
                tree.update_inventory(name, {"CUSTOM_DEV": {"total": 1}})
        if moving:
            self._move_allocations(tree, node, allocations)

    def _vcpu_moves(self, tree, node):
        if not tree.exists(node) or not tree.data(node).inventory:
            return False
        on_root = "VCPU" in tree.data(node).inventory
        return on_root != self.vcpu_on_root

    def _move_allocations(self, tree, node, allocations):
        root = tree.data(node).uuid
        cell0 = tree.data("%s_NUMA0" % node).uuid
        for alloc in allocations.values():
            rps = alloc["allocations"]
            src, dst = (cell0, root) if self.vcpu_on_root else (root, cell0)
            if src in rps and "VCPU" in rps[src]["resources"]:
                amount = rps[src]["resources"].pop("VCPU")
                if not rps[src]["resources"]:
                    del rps[src]
                dst_res = rps.setdefault(dst, {"resources": {}})["resources"]
                dst_res["VCPU"] = dst_res.get("VCPU", 0) + amount


def placement_state(client, root_uuid):
    """{name: {"parent", "inventory", "traits", "aggregates"}} as read now."""
    rps = client.get("/resource_providers?in_tree=%s" % root_uuid)[
        "resource_providers"]
    by_uuid = {rp["uuid"]: rp["name"] for rp in rps}
    out = {}
    for rp in rps:
        u = rp["uuid"]
        base = "/resource_providers/%s" % u
        out[rp["name"]] = {
            "parent": by_uuid.get(rp["parent_provider_uuid"]),
            "inventory": client.get(base + "/inventories")["inventories"],
            "traits": set(client.get(base + "/traits")["traits"]),
            "aggregates": set(client.get(base + "/aggregates")["aggregates"]),
        }
    return out


def tree_usage(client, root_uuid):
    """Usage summed over the providers of a tree."""
    total = {}
    for rp in client.get("/resource_providers?in_tree=%s" % root_uuid)[
            "resource_providers"]:
        usages = client.get("/resource_providers/%s/usages" % rp["uuid"])
        for rc, used in usages["usages"].items():
            if used:
                total[rc] = total.get(rc, 0) + used
    return total


def add_trait(client, rp_uuid, trait):
    """What an operator does with another client: add one trait."""
    client.put("/traits/%s" % trait)
    cur = client.get("/resource_providers/%s/traits" % rp_uuid)
    client.put("/resource_providers/%s/traits" % rp_uuid, {
        "traits": sorted(set(cur["traits"]) | {trait}),
        "resource_provider_generation": cur["resource_provider_generation"],
    })


@pytest.fixture
def rc(placement):
    return report.ReportClient(placement.new_client(), refresh_interval=0,
                               sleep=lambda s: None)


@pytest.fixture
def operator(placement):
    return placement.new_client()


def root(node):
    return names.provider_uuid(node)


def test_first_sync_creates_exactly_the_tree(rc, operator, nodename):
    plugins = FakePlugins(cells=2, devices=1)
    result = rc.periodic(plugins, nodename)
    assert result.ok, result.error
    state = placement_state(operator, root(nodename))
    assert set(state) == {nodename} | set(plugins.layout(nodename))
    assert state[nodename]["parent"] is None
    assert set(state[nodename]["inventory"]) == {"DISK_GB"}
    cell = state[nodename + "_NUMA1"]
    assert cell["parent"] == nodename
    assert cell["inventory"]["VCPU"]["total"] == 8
    assert cell["inventory"]["MEMORY_MB"]["total"] == 4 * GIB
    assert cell["traits"] == {"HW_NUMA_ROOT", "CUSTOM_PLUGIN_A"}
    dev = state[nodename + "_NUMA1_dev0"]
    assert dev["parent"] == nodename + "_NUMA1"
    assert dev["inventory"]["CUSTOM_DEV"]["total"] == 1
    calls = result.calls
    assert calls["GET /resource_providers?in_tree"] == 1
    assert calls["POST /resource_providers"] == 5
    # custom resource class and trait: created once, not per provider
    assert calls["PUT /resource_classes/{name}"] == 1
    assert calls.get("PUT /traits/{name}", 0) <= 1
    assert calls["PUT /resource_providers/{uuid}/inventories"] == 5
    assert calls["PUT /resource_providers/{uuid}/traits"] == 2
    assert "PUT /resource_providers/{uuid}/aggregates" not in calls


def test_steady_state_makes_zero_calls(rc, nodename):
    plugins = FakePlugins(cells=2, devices=2)
    assert rc.periodic(plugins, nodename).ok
    for _ in range(3):
        result = rc.periodic(plugins, nodename)
        assert result.ok and result.calls == {} and result.changed == []


def test_one_change_writes_only_that_provider(rc, nodename):
    plugins = FakePlugins(cells=3)
    assert rc.periodic(plugins, nodename).ok
    plugins.memory = 8 * GIB
    result = rc.periodic(plugins, nodename)
    assert result.calls == {"PUT /resource_providers/{uuid}/inventories": 3}
    plugins.cells = 2
    result = rc.periodic(plugins, nodename)
    assert result.calls == {"DELETE /resource_providers/{uuid}": 1}
    assert result.changed == ["delete %s_NUMA2" % nodename]


def test_providers_are_deleted_bottom_up(rc, operator, nodename):
    plugins = FakePlugins(cells=2, devices=2)
    assert rc.periodic(plugins, nodename).ok
    plugins.cells = 1
    result = rc.periodic(plugins, nodename)
    assert result.ok, result.error
    assert result.calls == {"DELETE /resource_providers/{uuid}": 3}
    assert result.changed[-1] == "delete %s_NUMA1" % nodename
    assert set(placement_state(operator, root(nodename))) == {
        nodename, nodename + "_NUMA0", nodename + "_NUMA0_dev0",
        nodename + "_NUMA0_dev1"}


def test_operator_trait_survives_the_next_sync(rc, operator, nodename):
    plugins = FakePlugins(cells=2)
    assert rc.periodic(plugins, nodename).ok
    cell0 = names.provider_uuid(nodename, nodename + "_NUMA0")
    add_trait(operator, cell0, "CUSTOM_OPERATOR")

    # Nothing changed locally: nothing sent, the trait stays.
    assert rc.periodic(plugins, nodename).calls == {}
    # A plugin changes the same provider's traits with a stale view: the
    # write conflicts, the provider is re-read and the merge keeps both.
    plugins.cell_traits = {"HW_NUMA_ROOT", "CUSTOM_PLUGIN_B"}
    result = rc.periodic(plugins, nodename)
    assert result.ok, result.error
    traits = placement_state(operator, root(nodename))[
        nodename + "_NUMA0"]["traits"]
    assert traits == {"HW_NUMA_ROOT", "CUSTOM_PLUGIN_B", "CUSTOM_OPERATOR"}
    # ... and the next periodic is quiet again.
    assert rc.periodic(plugins, nodename).calls == {}


def test_operator_reserved_is_kept(rc, operator, nodename):
    plugins = FakePlugins(cells=1)
    assert rc.periodic(plugins, nodename).ok
    cell0 = names.provider_uuid(nodename, nodename + "_NUMA0")
    path = "/resource_providers/%s/inventories/MEMORY_MB" % cell0
    cur = operator.get(path)
    cur["reserved"] = 512
    operator.put(path, cur)
    plugins.memory = 8 * GIB
    result = rc.periodic(plugins, nodename)
    assert result.ok, result.error
    inv = operator.get(path)
    assert (inv["total"], inv["reserved"]) == (8 * GIB, 512)


def test_generation_conflict_is_retried_and_converges(rc, operator, nodename):
    plugins = FakePlugins(cells=2)
    assert rc.periodic(plugins, nodename).ok
    cell1 = names.provider_uuid(nodename, nodename + "_NUMA1")
    agg = str(uuid.uuid4())

    def concurrent_writer():
        # Another writer moves cell1's generation while our periodic runs.
        cur = operator.get("/resource_providers/%s/aggregates" % cell1)
        operator.put("/resource_providers/%s/aggregates" % cell1, {
            "aggregates": [agg],
            "resource_provider_generation": cur["resource_provider_generation"],
        })

    plugins.hook = concurrent_writer
    plugins.memory = 6 * GIB
    result = rc.periodic(plugins, nodename)
    assert result.ok, result.error
    # cell0 written once; cell1 conflicted, was re-read (3 GETs), rewritten.
    assert result.calls["PUT /resource_providers/{uuid}/inventories"] == 3
    assert result.calls["GET /resource_providers/{uuid}/inventories"] == 1
    state = placement_state(operator, root(nodename))
    assert state[nodename + "_NUMA1"]["inventory"]["MEMORY_MB"]["total"] == (
        6 * GIB)
    assert state[nodename + "_NUMA1"]["aggregates"] == {agg}
    assert rc.periodic(plugins, nodename).calls == {}


def test_refresh_reads_only_providers_that_moved(placement, operator,
                                                 nodename):
    now = [1000.0]
    rc = report.ReportClient(placement.new_client(), refresh_interval=300,
                             clock=lambda: now[0])
    plugins = FakePlugins(cells=3)
    assert rc.periodic(plugins, nodename).ok
    now[0] += 299
    assert rc.periodic(plugins, nodename).calls == {}
    now[0] += 2
    assert rc.periodic(plugins, nodename).calls == {
        "GET /resource_providers?in_tree": 1}
    add_trait(operator, names.provider_uuid(nodename, nodename + "_NUMA2"),
              "CUSTOM_OPERATOR")
    now[0] += 301
    result = rc.periodic(plugins, nodename)
    assert result.calls == {
        "GET /resource_providers?in_tree": 1,
        "GET /resource_providers/{uuid}/inventories": 1,
        "GET /resource_providers/{uuid}/traits": 1,
        "GET /resource_providers/{uuid}/aggregates": 1,
    }
    assert plugins.calls == 4
    # the operator's trait was in the tree the plugins saw, and stays
    assert "CUSTOM_OPERATOR" in placement_state(operator, root(nodename))[
        nodename + "_NUMA2"]["traits"]


def test_placement_down_during_a_periodic(placement, rc, operator, nodename,
                                          caplog):
    plugins = FakePlugins(cells=2)
    assert rc.periodic(plugins, nodename).ok
    add_trait(operator, names.provider_uuid(nodename, nodename + "_NUMA0"),
              "CUSTOM_OPERATOR")
    plugins.memory = 2 * GIB
    plugins.hook = placement.stop
    caplog.set_level(logging.ERROR)
    try:
        result = rc.periodic(plugins, nodename)
    finally:
        placement.start()
    assert not result.ok
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert "cannot reach Placement" in errors[0].getMessage()
    assert "provider cache cleared" in errors[0].getMessage()
    assert rc.cached_uuids == []

    result = rc.periodic(plugins, nodename)
    assert result.ok, result.error
    assert result.calls["GET /resource_providers?in_tree"] == 1
    state = placement_state(operator, root(nodename))
    assert state[nodename + "_NUMA0"]["inventory"]["MEMORY_MB"]["total"] == (
        2 * GIB)
    assert state[nodename + "_NUMA1"]["inventory"]["MEMORY_MB"]["total"] == (
        2 * GIB)
    assert "CUSTOM_OPERATOR" in state[nodename + "_NUMA0"]["traits"]
    assert rc.periodic(plugins, nodename).calls == {}


def test_sighup_clears_the_cache(rc, nodename):
    plugins = FakePlugins(cells=2)
    results = []

    def step():
        result = rc.periodic(plugins, nodename)
        if len(results) == 1:
            # NOTE: a real signal to this process, between two periodics.
            os.kill(os.getpid(), signal.SIGHUP)
        results.append(result)
        return result

    sigs = (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)
    old = {s: signal.getsignal(s) for s in sigs}
    loop = report_cmd.Loop(rc, step, interval=0, count=4,
                           out=open(os.devnull, "w"))
    try:
        loop.install_signals()
        assert loop.run() == 0
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    totals = [r.total_calls for r in results]
    assert totals[1] == 0 and totals[3] == 0
    # after SIGHUP: the tree is read again (1 + 3 per provider), nothing
    # is written
    assert results[2].calls["GET /resource_providers?in_tree"] == 1
    assert results[2].total_calls == 1 + 3 * 3
    assert results[2].changed == []


def test_reshape_moves_allocations_atomically(rc, operator, nodename):
    plugins = FakePlugins(cells=2, vcpu_on_root=True)
    assert rc.periodic(plugins, nodename).ok
    root_uuid = root(nodename)
    consumer = str(uuid.uuid4())
    operator.put("/allocations/%s" % consumer, {
        "allocations": {root_uuid: {"resources": {"VCPU": 3, "DISK_GB": 10}}},
        "project_id": str(uuid.uuid4()), "user_id": str(uuid.uuid4()),
        "consumer_generation": None, "consumer_type": "INSTANCE",
    })

    before = tree_usage(operator, root_uuid)
    assert before == {"VCPU": 3, "DISK_GB": 10}

    plugins.vcpu_on_root = False
    result = rc.periodic(plugins, nodename)
    assert result.ok, result.error
    assert result.reshaped
    assert result.calls["POST /reshaper"] == 1
    assert "PUT /resource_providers/{uuid}/inventories" not in result.calls
    assert plugins.calls == 3, result  # raising ReshapeNeeded, then with allocs

    cell0 = names.provider_uuid(nodename, nodename + "_NUMA0")
    alloc = operator.get("/allocations/%s" % consumer)["allocations"]
    assert alloc[cell0]["resources"] == {"VCPU": 3}
    assert alloc[root_uuid]["resources"] == {"DISK_GB": 10}
    assert tree_usage(operator, root_uuid) == before
    assert "VCPU" not in operator.get(
        "/resource_providers/%s/inventories" % root_uuid)["inventories"]
    # the cache follows: the next periodic is quiet
    assert rc.periodic(plugins, nodename).calls == {}


def allocate(client, rp_uuid, resources):
    consumer = str(uuid.uuid4())
    client.put("/allocations/%s" % consumer, {
        "allocations": {rp_uuid: {"resources": resources}},
        "project_id": str(uuid.uuid4()), "user_id": str(uuid.uuid4()),
        "consumer_generation": None, "consumer_type": "INSTANCE",
    })
    return consumer


def warnings_of(caplog):
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING
            and r.name.startswith("compute_plugins")]


def test_device_in_use_is_kept_reserved_until_its_consumer_leaves(
        rc, operator, nodename, caplog):
    """A device removed while a guest uses it: Placement refuses to delete
    its provider (placement.resource_provider.inuse). The periodic still
    writes the other changes and keeps that provider with everything
    reserved; it is deleted once its consumer is gone."""
    plugins = FakePlugins(cells=1, devices=2)
    assert rc.periodic(plugins, nodename).ok
    cell0 = nodename + "_NUMA0"
    dev1 = cell0 + "_dev1"
    dev1_uuid = names.provider_uuid(nodename, dev1)
    consumer = allocate(operator, dev1_uuid, {"CUSTOM_DEV": 1})

    plugins.devices = 1
    plugins.memory = 8 * GIB
    caplog.set_level(logging.INFO)
    result = rc.periodic(plugins, nodename)
    assert result.ok, result.error
    assert "inventory %s" % cell0 in result.changed
    assert "delete %s" % dev1 not in result.changed
    warned = warnings_of(caplog)
    assert len(warned) == 1 and dev1 in warned[0], warned
    assert "CUSTOM_DEV" in warned[0] and "consumers leave" in warned[0]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    state = placement_state(operator, root(nodename))
    inv = state[dev1]["inventory"]["CUSTOM_DEV"]
    assert inv["reserved"] == inv["total"] == 1
    assert state[cell0]["inventory"]["MEMORY_MB"]["total"] == 8 * GIB
    assert dev1_uuid in rc.cached_uuids  # the cache was not cleared

    caplog.clear()
    for _ in range(2):
        result = rc.periodic(plugins, nodename)
        assert result.ok and result.calls == {}, result
    assert warnings_of(caplog) == []

    operator.delete("/allocations/%s" % consumer)
    rc.clear_cache()  # a refresh (or SIGHUP) tries the held ones again
    result = rc.periodic(plugins, nodename)
    assert result.ok, result.error
    assert result.changed == ["delete %s" % dev1], result
    assert dev1 not in placement_state(operator, root(nodename))
    assert rc.periodic(plugins, nodename).calls == {}


def test_device_in_use_comes_back_unreserved(rc, operator, nodename):
    plugins = FakePlugins(cells=1, devices=1)
    assert rc.periodic(plugins, nodename).ok
    dev0 = nodename + "_NUMA0_dev0"
    allocate(operator, names.provider_uuid(nodename, dev0), {"CUSTOM_DEV": 1})
    plugins.devices = 0
    assert rc.periodic(plugins, nodename).ok
    plugins.devices = 1
    result = rc.periodic(plugins, nodename)
    assert result.ok, result.error
    inv = placement_state(operator, root(nodename))[dev0]["inventory"]
    assert inv["CUSTOM_DEV"]["reserved"] == 0
    assert rc.periodic(plugins, nodename).calls == {}


class DroppingPlugins(FakePlugins):
    """FakePlugins whose cells stop reporting some classes."""

    drop = ()

    def __call__(self, tree, node, allocations):
        super().__call__(tree, node, allocations)
        for i in range(self.cells):
            name = "%s_NUMA%d" % (node, i)
            inv = dict(tree.data(name).inventory)
            tree.update_inventory(name, {rc: dict(r) for rc, r in inv.items()
                                         if rc not in self.drop})


def test_inventory_in_use_is_kept_reserved(rc, operator, nodename, caplog):
    """A class removed while allocated (placement.inventory.inuse) is kept
    with reserved = total; the rest of the inventory is written."""
    plugins = DroppingPlugins(cells=1)
    assert rc.periodic(plugins, nodename).ok
    cell0 = nodename + "_NUMA0"
    cell0_uuid = names.provider_uuid(nodename, cell0)
    consumer = allocate(operator, cell0_uuid, {"VCPU": 2})

    plugins.drop = ("VCPU",)
    plugins.memory = 8 * GIB
    caplog.set_level(logging.INFO)
    result = rc.periodic(plugins, nodename)
    assert result.ok, result.error
    warned = warnings_of(caplog)
    assert len(warned) == 1 and "VCPU" in warned[0] and cell0 in warned[0]
    inv = placement_state(operator, root(nodename))[cell0]["inventory"]
    assert inv["VCPU"]["reserved"] == inv["VCPU"]["total"] == 8
    assert inv["MEMORY_MB"]["total"] == 8 * GIB
    assert rc.cached_uuids
    assert rc.periodic(plugins, nodename).calls == {}

    operator.delete("/allocations/%s" % consumer)
    rc.clear_cache()
    assert rc.periodic(plugins, nodename).ok
    inv = placement_state(operator, root(nodename))[cell0]["inventory"]
    assert "VCPU" not in inv
    assert rc.periodic(plugins, nodename).calls == {}


def test_reshape_skips_a_consumer_deleted_meanwhile(rc, operator, nodename,
                                                    monkeypatch):
    """A consumer deleted between the providers' allocation listings and
    its own GET /allocations/{c} ({"allocations": {}}, no project)."""
    plugins = FakePlugins(cells=1, vcpu_on_root=True)
    assert rc.periodic(plugins, nodename).ok
    root_uuid = root(nodename)
    gone = allocate(operator, root_uuid, {"VCPU": 1})
    stays = allocate(operator, root_uuid, {"VCPU": 2})
    get = rc.placement.get

    def racing_get(path, **kw):
        if path == "/allocations/%s" % gone:
            operator.delete(path)
        return get(path, **kw)

    monkeypatch.setattr(rc.placement, "get", racing_get)
    plugins.vcpu_on_root = False
    result = rc.periodic(plugins, nodename)
    assert result.ok, result.error
    assert result.reshaped
    cell0 = names.provider_uuid(nodename, nodename + "_NUMA0")
    alloc = operator.get("/allocations/%s" % stays)["allocations"]
    assert alloc[cell0]["resources"] == {"VCPU": 2}
