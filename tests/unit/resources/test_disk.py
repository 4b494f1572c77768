"""The disk plugin: DISK_GB from the host, statvfs, reserved, shared."""

from __future__ import annotations

import os

import pytest

from compute_plugins.exception import ConfigError
from resources.disk import DiskPlugin, InvalidDiskConfig
from tests.unit.resources.helpers import (
    NODE,
    DiskInfo,
    dump,
    host,
    manager,
    record,
    update,
)

AGG = "5b0a2b58-4a07-4f2b-9f3b-6c0f1b1f0a42"


def contribs(conf, info):
    plugin = DiskPlugin(conf)
    return list(plugin.provider_contributions(plugin.discover(info), NODE))


def test_disk_from_host_info_with_reserved_rounded_up(conf):
    conf.set_override("reserved_host_disk_mb", 2049, "disk")
    info = host(disk=DiskInfo(total_gb=893, free_gb=640))
    tree = update(manager(conf, ["disk"]), info)
    assert tree.data(NODE).inventory == {"DISK_GB": record(893, 1.0, 3)}


def test_reserved_is_capped_at_total_and_ratio_applies(conf):
    conf.set_override("reserved_host_disk_mb", 10 * 1024 * 1024, "disk")
    conf.set_override("disk_allocation_ratio", 1.5, "disk")
    (only,) = contribs(conf, host(disk=DiskInfo(total_gb=10, free_gb=1)))
    assert dict(only.inventory["DISK_GB"]) == record(10, 1.5, 10)


def test_live_local_host_measures_instances_path(conf, tmp_path):
    conf.set_override("instances_path", str(tmp_path), "disk")
    stat = os.statvfs(tmp_path)
    expected = stat.f_blocks * stat.f_frsize // 1024 ** 3
    got = contribs(conf, host(source="qemu:///system"))
    if expected == 0:
        # A file system under 1 GiB has no whole GB to offer: no DISK_GB.
        assert got == []
    else:
        assert got[0].inventory["DISK_GB"]["total"] == expected


@pytest.mark.parametrize("source", [
    "test:///default", "qemu+ssh://compute2/system", "qemu://other/system"])
def test_fake_or_remote_host_is_not_measured_here(conf, tmp_path, source,
                                                  monkeypatch):
    """Their disks are not this machine's: no local statvfs."""
    conf.set_override("instances_path", str(tmp_path), "disk")
    monkeypatch.setattr(os, "statvfs", lambda path: pytest.fail("statvfs"))
    assert contribs(conf, host(source=source)) == []


def test_snapshot_without_disk_data_has_no_disk(conf, tmp_path):
    conf.set_override("instances_path", str(tmp_path), "disk")
    assert contribs(conf, host(source=str(tmp_path))) == []


@pytest.mark.parametrize("name,reason", [
    ("nope", "No such file or directory"),
    ("file/x", "Not a directory"),
])
def test_unmeasurable_instances_path_means_no_disk(conf, tmp_path, caplog,
                                                   name, reason):
    (tmp_path / "file").write_text("")
    path = tmp_path / name
    conf.set_override("instances_path", str(path), "disk")
    assert contribs(conf, host(source="qemu:///system")) == []
    assert f"{path}: cannot measure disk: {reason}" in caplog.text
    assert "no DISK_GB" in caplog.text


def test_zero_reserved_is_sent(conf):
    """Lowering reserved_host_disk_mb to 0 clears it in Placement."""
    (only,) = contribs(conf, host(disk=DiskInfo(total_gb=10, free_gb=1)))
    assert only.inventory["DISK_GB"]["reserved"] == 0


def test_shared_storage_joins_aggregate_without_disk(conf):
    conf.set_override("shared_storage_aggregate", AGG.upper(), "disk")
    info = host(disk=DiskInfo(total_gb=893, free_gb=640))
    tree = update(manager(conf, ["disk"]), info)
    root = dump(tree)[NODE]
    assert root["inventory"] == {}
    assert root["aggregates"] == {AGG}


def test_bad_aggregate_uuid(conf):
    conf.set_override("shared_storage_aggregate", "not-a-uuid", "disk")
    with pytest.raises(InvalidDiskConfig) as err:
        DiskPlugin(conf).discover(host())
    assert isinstance(err.value, ConfigError)
    assert "[disk] shared_storage_aggregate" in str(err.value)
    assert "'not-a-uuid'" in str(err.value)


def test_switch_to_shared_storage_removes_disk_gb(conf):
    mgr = manager(conf, ["disk"])
    info = host(disk=DiskInfo(total_gb=100, free_gb=50))
    tree = update(mgr, info)
    assert "DISK_GB" in tree.data(NODE).inventory
    conf.set_override("shared_storage_aggregate", AGG, "disk")
    # NOTE: a service cannot change this option while it runs (restart).
    mgr.forget_views()
    update(mgr, info, tree)
    assert tree.data(NODE).inventory == {}
    assert tree.data(NODE).aggregates == {AGG}
