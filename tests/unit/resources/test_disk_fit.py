"""The disk plugin's decision: which provider serves DISK_GB."""

from __future__ import annotations

import pytest

from compute_plugins.plugin import names
from compute_plugins.plugin.contract import Rejection
from compute_plugins.plugin.state import AssignmentConflict
from resources.disk import DiskPlugin
from resources.disk.request import DiskAssignment
from tests.unit.resources.helpers import (
    NODE,
    DiskInfo,
    decoded,
    encoded,
    host,
    manager,
    parse,
    state_of,
    update,
)

AGG = "5b0a2b58-4a07-4f2b-9f3b-6c0f1b1f0a42"
ROOT = names.provider_uuid(NODE)
SHARING = "0f7b2c36-4c2c-4f0e-9a5b-2f9c1e1d7a10"


def state(plugin, info, *assignments):
    return state_of(plugin, plugin.discover(info), assignments)


def disk(plugin, root_gb=10, **flavor):
    return parse(plugin, root_gb=root_gb, **flavor)


def local(gb):
    return DiskAssignment(provider_uuid=ROOT, disk_gb=gb)


def test_state_is_the_roots_disk_and_what_guests_take(conf):
    conf.set_override("reserved_host_disk_mb", 2049, "disk")
    conf.set_override("disk_allocation_ratio", 1.5, "disk")
    plugin = DiskPlugin(conf)
    info = host(disk=DiskInfo(total_gb=100, free_gb=50))
    got = state(plugin, info, local(20), local(5),
                DiskAssignment(provider_uuid=SHARING, shared=True, disk_gb=7))
    assert got.provider_uuid == update(manager(conf, ["disk"]), info).data(NODE).uuid
    assert (got.total_gb, got.reserved_gb, got.allocation_ratio, got.used_gb) == (
        100, 3, 1.5, 25)
    assert (got.capacity_gb, got.free_gb) == (145, 120)
    assert decoded(plugin, encoded(plugin, got)) == got


def test_consumed_is_the_state_built_with_the_assignment_in_force(conf):
    plugin = DiskPlugin(conf)
    info = host(disk=DiskInfo(total_gb=100, free_gb=50))
    shared = DiskAssignment(provider_uuid=SHARING, shared=True, disk_gb=7)
    idle = state(plugin, info)
    assert idle.consumed(local(20)).consumed(shared) == state(
        plugin, info, local(20), shared)


@pytest.mark.parametrize("info, assignment, reason", [
    (host(disk=DiskInfo(100, 100)), DiskAssignment(provider_uuid="other", disk_gb=5),
     "a guest's 5 GB of local disk is on provider other, this host's root is %s"
     % ROOT),
    (host(), local(5),
     "a guest takes 5 GB of local disk and this host reports no DISK_GB"),
])
def test_state_conflicts(conf, info, assignment, reason):
    with pytest.raises(AssignmentConflict) as err:
        state(DiskPlugin(conf), info, assignment)
    assert (err.value.plugin, err.value.reason) == ("disk", reason)


def test_offline_local_disk_checks_capacity(conf):
    conf.set_override("reserved_host_disk_mb", 10 * 1024, "disk")
    plugin = DiskPlugin(conf)
    info = host(disk=DiskInfo(total_gb=100, free_gb=50))
    request = disk(plugin, root_gb=20, ephemeral_gb=5, swap=1)
    assert request.disk_gb == 26
    got = plugin.fit(state(plugin, info), request, None, {})
    assert got == DiskAssignment(provider_uuid=ROOT, shared=False, disk_gb=26)
    full = state(plugin, info, local(60), got)
    assert plugin.fit(full, request, None, {}) == Rejection(
        "host root %s has 4 GB of DISK_GB free (total 100, reserved 10, ratio 1, "
        "used 86), the guest needs 26 GB" % ROOT, ROOT)


def test_one_guest_is_at_most_the_total_even_overcommitted(conf):
    conf.set_override("disk_allocation_ratio", 4.0, "disk")
    plugin = DiskPlugin(conf)
    now = state(plugin, host(disk=DiskInfo(total_gb=10, free_gb=10)))
    assert isinstance(plugin.fit(now, disk(plugin, 10), None, {}), DiskAssignment)
    assert plugin.fit(now, disk(plugin, 11), None, {}) == Rejection(
        "host root %s has 10 GB of DISK_GB in all, the guest needs 11 GB" % ROOT,
        ROOT)


def test_no_disk_asked_nothing_to_decide(conf):
    plugin = DiskPlugin(conf)
    now = state(plugin, host())
    assert plugin.fit(now, disk(plugin, 0), None, {}) is None
    assert plugin.fit(now, disk(plugin, 5), None, {}) == Rejection(
        "this host reports no local DISK_GB; the guest needs 5 GB", ROOT)


def test_the_allocation_must_take_disk_from_the_root(conf):
    plugin = DiskPlugin(conf)
    now = state(plugin, host(disk=DiskInfo(total_gb=100, free_gb=100)))
    got = plugin.fit(now, disk(plugin), {"": [ROOT, "numa-0"]}, {})
    assert got == local(10)
    assert plugin.fit(now, disk(plugin), {"": [SHARING]}, {}) == Rejection(
        "DISK_GB is allocated from provider(s) %s, not from this host's root %s"
        % (SHARING, ROOT), ROOT)


def test_shared_storage(conf):
    """A host on shared storage: the request is the same as for local disk
    (DISK_GB in the unsuffixed group, nova's query); the host's state says
    a sharing provider serves it."""
    local_request = disk(DiskPlugin(conf), 30)
    conf.set_override("shared_storage_aggregate", AGG, "disk")
    plugin = DiskPlugin(conf)
    now = state(plugin, host())
    request = disk(plugin, 30)
    assert request == local_request and request.shared_aggregate is None
    shared = DiskAssignment(provider_uuid="", shared=True, disk_gb=30)
    assert plugin.fit(now, request, None, {}) == shared
    assert plugin.fit(now, request, {"": [ROOT, SHARING]}, {}) == shared
    assert plugin.verify(now, request, shared) is None
    # a shared guest uses nothing of the root
    assert state(plugin, host(), shared).used_gb == 0
    assert plugin.fit(now, request, {"": [ROOT]}, {}) == Rejection(
        "this host's disk is on shared storage aggregate %s; the allocation "
        "takes DISK_GB from no sharing provider" % AGG, ROOT)


def test_shared_and_local_assignments_hold_only_on_their_kind_of_host(conf):
    local_plugin = DiskPlugin(conf)
    local_state = state(local_plugin, host(disk=DiskInfo(100, 100)))
    request = disk(local_plugin, 30)
    shared = DiskAssignment(provider_uuid="", shared=True, disk_gb=30)
    assert local_plugin.verify(local_state, request, shared) == Rejection(
        "the assignment puts the disk on shared storage; this host's disk is "
        "local", ROOT)
    conf.set_override("shared_storage_aggregate", AGG, "disk")
    shared_plugin = DiskPlugin(conf)
    shared_state = state(shared_plugin, host())
    assert shared_plugin.verify(shared_state, request, local(30)) == Rejection(
        "this host reports no local DISK_GB (its disk is on shared storage "
        "aggregate %s); the guest needs 30 GB" % AGG, ROOT)


def test_a_request_recorded_by_version_1_0_for_an_aggregate(conf):
    """Version 1.0 asked DISK_GB in group _DISK of the scheduler's
    aggregate; such a recorded request is still verified that way."""
    import dataclasses
    conf.set_override("shared_storage_aggregate", AGG, "disk")
    plugin = DiskPlugin(conf)
    old = dataclasses.replace(disk(plugin, 30), shared_aggregate=AGG)
    mapped = plugin.fit(state(plugin, host()), old, {"_DISK": [SHARING], "": [ROOT]}, {})
    assert mapped == DiskAssignment(provider_uuid=SHARING, shared=True, disk_gb=30)
    conf.clear_override("shared_storage_aggregate", "disk")
    local_plugin = DiskPlugin(conf)
    assert local_plugin.fit(state(local_plugin, host(disk=DiskInfo(100, 100))), old,
                            None, {}) == Rejection(
        "this host's disk is local, the request asks shared storage aggregate %s"
        % AGG)


def test_verify_local_disk(conf):
    plugin = DiskPlugin(conf)
    info = host(disk=DiskInfo(total_gb=50, free_gb=50))
    request = disk(plugin, 30)
    now = state(plugin, info)
    decided = plugin.fit(now, request, None, {})
    assert plugin.verify(now, request, decided) is None
    assert plugin.verify(state(plugin, info, local(30)), request, decided) == Rejection(
        "host root %s has 20 GB of DISK_GB free (total 50, reserved 0, ratio 1, "
        "used 30), the guest needs 30 GB" % ROOT, ROOT)
    assert plugin.verify(now, request, local(20)) == Rejection(
        "the assignment takes 20 GB of disk, the guest needs 30 GB")
    assert plugin.verify(now, request, DiskAssignment("x", disk_gb=30)) == Rejection(
        "the disk is assigned to provider x, this host's root is %s" % ROOT, ROOT)
