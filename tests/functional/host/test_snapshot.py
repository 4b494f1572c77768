"""Host snapshots: record, load, and udev replay through real libudev."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from compute_plugins.host import discover_host, libvirt_host, snapshot
from compute_plugins.host.errors import HostDataError
from compute_plugins.host.model import DiskInfo, Mdev, MdevType, PagePool

FIXTURES = pathlib.Path(__file__).parents[2] / "fixtures" / "hosts"
CUSTOM_URI = f"test://{FIXTURES / 'testdriver-devices.xml'}"


def _copy(name: str, tmp_path: pathlib.Path) -> pathlib.Path:
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    for path in target.rglob("*"):
        path.chmod(0o644 if path.is_file() else 0o755)
    return target


# ------------------------------------------------------------ round trips


@pytest.mark.parametrize("uri", ["test:///default", CUSTOM_URI])
def test_record_load_round_trip(uri, tmp_path):
    out = tmp_path / "snap"
    snapshot.record_host(uri, str(out), instances_path=str(tmp_path))
    live = libvirt_host.discover_libvirt(uri)
    loaded = snapshot.load_snapshot(str(out))

    assert loaded.source == str(out)
    assert loaded.disk is not None and loaded.disk.path == str(tmp_path)
    assert loaded.disk.total_gb >= loaded.disk.free_gb >= 0
    assert dataclasses.replace(loaded, source=uri, disk=None) == live

    assert (out / "capabilities.xml").is_file()
    raw = libvirt_host.fetch_libvirt(uri)
    assert sorted(os.listdir(out / "nodedev")) == sorted(
        f"{name}.xml" for name in raw.nodedevs
    )
    meta = json.loads((out / "host.json").read_text())
    assert meta["format_version"] == snapshot.FORMAT_VERSION
    assert meta["hostname"] == live.hostname
    assert meta["memory_kb"] == live.memory_kb
    # test:/// devices are not this machine's: sysfs is never recorded.
    assert not (out / "sysfs.umockdev").exists()


def test_record_without_instances_path(tmp_path):
    out = tmp_path / "snap"
    snapshot.record_host("test:///default", str(out))
    assert json.loads((out / "host.json").read_text())["disk"] is None
    assert snapshot.load_snapshot(str(out)).disk is None


def test_record_unreachable_host_writes_nothing(tmp_path):
    out = tmp_path / "snap"
    with pytest.raises(HostDataError, match="no/such.xml"):
        snapshot.record_host("test:///no/such.xml", str(out))
    assert not out.exists()


def test_record_pci_sysfs_writes(tmp_path):
    # NOTE: bindep installs umockdev and udev (udevadm); the test machines
    # have PCI devices in /sys (a machine without any has nothing to record).
    assert glob.glob("/sys/bus/pci/devices/*"), "this test needs PCI devices in /sys"
    target = tmp_path / "sysfs.umockdev"
    assert snapshot.record_pci_sysfs(str(target)) is True
    assert target.read_text().startswith("P: /devices/")


def test_record_pci_sysfs_warns_without_recorder(tmp_path, monkeypatch,
                                                 caplog):
    monkeypatch.setattr(snapshot.shutil, "which", lambda name: None)
    target = tmp_path / "sysfs.umockdev"
    assert snapshot.record_pci_sysfs(str(target)) is False
    assert not target.exists()
    assert "umockdev-record is not installed" in caplog.text


# ----------------------------------------------------------------- fixtures


def test_numa4_caps_and_nodedev_only():
    host = discover_host(host_snapshot=str(FIXTURES / "numa4"))
    assert host.hostname == "numa4"
    assert host.disk is None
    assert host.memory_kb == 10 * 1048576  # sum of the cells
    assert [len(c.cpus) for c in host.cells] == [4, 4, 4, 4]
    assert host.cells[3].pages[1] == PagePool(2048, 10240)
    assert [d.address for d in host.pci_devices] == [
        "0000:02:00.0",
        "0000:42:00.0",
    ]
    assert host.mdevs == ()


def test_sriov_without_udev():
    host = snapshot.load_snapshot(str(FIXTURES / "sriov"), use_udev=False)
    assert host.hostname == "sriov-compute-01"
    assert host.memory_kb == 63393224
    assert host.disk == DiskInfo(893, 640, "/var/lib/nova/instances")
    assert len(host.cells) == 1 and len(host.cells[0].cpus) == 32
    pf = host.pci_device("0000:02:10.7")
    assert len(pf.virt_functions) == 4
    assert (pf.max_vfs, pf.num_vfs, pf.netdevs) == (None, None, ())


def test_sriov_udev_replayed_through_real_libudev():
    host = discover_host(host_snapshot=str(FIXTURES / "sriov"))
    pf = host.pci_device("0000:02:10.7")
    assert (pf.max_vfs, pf.num_vfs, pf.numa_node) == (7, 4, 0)
    assert pf.netdevs == ("ens1f0",)
    assert pf.virt_functions == (
        "0000:02:00.2",
        "0000:02:00.3",
        "0000:02:00.4",
        "0000:02:00.5",
    )
    nic = host.pci_device("0000:42:00.0")
    # udev says numa_node=-1 (unknown): libvirt's node 0 is kept.
    assert (nic.max_vfs, nic.num_vfs, nic.numa_node) == (16, 0, 0)


def test_udev_dump_runs_under_umockdev():
    done = subprocess.run(
        [
            "umockdev-run",
            "--device",
            str(FIXTURES / "sriov/sysfs.umockdev"),
            "--",
            sys.executable,
            "-m",
            "compute_plugins.host.udev_dump",
            "--require-testbed",
            "0000:02:10.7",
            "0000:99:00.0",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    data = json.loads(done.stdout)
    assert data == {
        "format_version": 1,
        "devices": {
            "0000:02:10.7": {
                "max_vfs": 7,
                "num_vfs": 4,
                "numa_node": 0,
                "netdevs": ["ens1f0"],
            }
        },
    }


def test_udev_dump_refuses_the_real_sysfs():
    env = {k: v for k, v in os.environ.items() if k != "UMOCKDEV_DIR"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "compute_plugins.host.udev_dump",
            "--require-testbed",
            "0000:02:10.7",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2
    assert "not running under umockdev-run" in done.stderr


def test_mdev_snapshot():
    host = discover_host(host_snapshot=str(FIXTURES / "mdev"))
    assert host.hostname == "mdev"
    assert [len(c.cpus) for c in host.cells] == [24, 0]
    assert [c.memory_kb for c in host.cells] == [1048576, 2097152]
    (device,) = host.pci_devices
    assert device.mdev_types == (
        MdevType("foo1", "bar1", 1, "vfio-pci"),
        MdevType("foo2", "bar2", 2, "vfio-pci"),
    )
    assert host.mdevs == (
        Mdev(
            "d069d019-36ea-4111-8f0a-8c9a70e21366",
            "i915-GVTg_V5_8",
            "0000:00:02.0",
        ),
    )


def test_snapshot_wins_over_uri():
    host = discover_host(
        libvirt_uri="test:///default", host_snapshot=str(FIXTURES / "numa4")
    )
    assert host.hostname == "numa4"


# ------------------------------------------------------------------ errors


def test_missing_directory(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(HostDataError) as err:
        snapshot.load_snapshot(str(missing))
    assert str(missing) in str(err.value)


def test_missing_capabilities(tmp_path):
    (tmp_path / "nodedev").mkdir()
    with pytest.raises(HostDataError) as err:
        snapshot.load_snapshot(str(tmp_path))
    assert str(tmp_path / "capabilities.xml") in str(err.value)
    assert "missing" in str(err.value)


@pytest.mark.parametrize(
    "relpath,content,reason",
    [
        ("capabilities.xml", "garbage", "not well-formed XML"),
        ("capabilities.xml", b"\xff\xfe<", "cannot read"),
        ("host.json", "{", "not valid JSON"),
        ("host.json", "[]", "must hold a JSON object"),
        ("host.json", '{"format_version": 99}', "format_version 99 is newer"),
        ("host.json", '{"hostname": 3}', "hostname must be"),
        ("host.json", '{"memory_kb": -1}', "memory_kb must be"),
        ("host.json", '{"online_cpus": [-1]}', "online_cpus must be"),
        ("host.json", '{"online_cpus": "0-3"}', "online_cpus must be"),
        ("host.json", '{"cpu_count": true}', "cpu_count must be"),
        ("host.json", '{"disk": {"total_gb": 1}}', "disk.free_gb must be"),
        (
            "host.json",
            '{"disk": {"total_gb": 1, "free_gb": 2}}',
            "larger than disk.total_gb",
        ),
    ],
)
def test_garbage_files_name_their_path(tmp_path, relpath, content, reason):
    snap = _copy("numa4", tmp_path)
    target = snap / relpath
    if isinstance(content, bytes):
        target.write_bytes(content)
    else:
        target.write_text(content)
    with pytest.raises(HostDataError) as err:
        snapshot.load_snapshot(str(snap))
    assert str(target) in str(err.value)
    assert reason in str(err.value)


@pytest.mark.parametrize(
    "content,reason",
    [
        ("<device><name>x", "not well-formed"),
        ("<capabilities/>", "expected a <device> document"),
    ],
)
def test_garbage_node_device_is_skipped_and_named(
    tmp_path, caplog, content, reason
):
    """As on a live host, one bad node device does not hide the host."""
    snap = _copy("numa4", tmp_path)
    target = snap / "nodedev" / "pci_0000_02_00_0.xml"
    target.write_text(content)
    host = snapshot.load_snapshot(str(snap))
    assert len(host.cells) == 4
    assert str(target) in caplog.text and reason in caplog.text
    assert "skipped" in caplog.text


def test_garbage_umockdev_names_its_path(tmp_path):
    snap = _copy("sriov", tmp_path)
    target = snap / "sysfs.umockdev"
    target.write_text("this is not a umockdev record\n")
    with pytest.raises(HostDataError) as err:
        snapshot.load_snapshot(str(snap))
    assert str(target) in str(err.value)
    assert "umockdev-run exited" in str(err.value)
    # Without udev the same snapshot still loads.
    assert snapshot.load_snapshot(str(snap), use_udev=False).pci_devices


# ------------------------------------------------ recording into a used dir


def _victim(tmp_path: pathlib.Path, name: str) -> pathlib.Path:
    victim = tmp_path / "outside" / name
    victim.parent.mkdir(exist_ok=True)
    victim.write_text("precious\n")
    return victim


def test_record_replaces_planted_symlinks_never_writes_through_them(tmp_path):
    out = tmp_path / "snap"
    (out / "nodedev").mkdir(parents=True)
    caps_victim = _victim(tmp_path, "caps")
    json_victim = _victim(tmp_path, "json")
    dev_victim = _victim(tmp_path, "dev")
    (out / "capabilities.xml").symlink_to(caps_victim)
    (out / "host.json").symlink_to(json_victim)
    (out / "nodedev" / "computer.xml").symlink_to(dev_victim)

    snapshot.record_host("test:///default", str(out))

    for victim in (caps_victim, json_victim, dev_victim):
        assert victim.read_text() == "precious\n"
    for path in (out / "capabilities.xml", out / "host.json",
                 out / "nodedev" / "computer.xml"):
        assert path.is_file() and not path.is_symlink(), path
    assert "<capabilities>" in (out / "capabilities.xml").read_text()
    assert json.loads((out / "host.json").read_text())["hostname"] == "vm"
    assert snapshot.load_snapshot(str(out)).hostname == "vm"
    # No temporary file is left behind.
    assert sorted(p.name for p in out.iterdir()) == [
        "capabilities.xml", "host.json", "nodedev"]


def test_record_replaces_a_planted_nodedev_symlink(tmp_path):
    """``nodedev`` itself a symlink to another directory: the recording
    gets a directory of its own and the other directory is untouched."""
    out = tmp_path / "snap"
    out.mkdir()
    elsewhere = tmp_path / "outside"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("precious\n")
    (out / "nodedev").symlink_to(elsewhere, target_is_directory=True)

    snapshot.record_host("test:///default", str(out))

    assert sorted(p.name for p in elsewhere.iterdir()) == ["keep.txt"]
    assert (elsewhere / "keep.txt").read_text() == "precious\n"
    assert not (out / "nodedev").is_symlink()
    assert sorted(os.listdir(out / "nodedev")) == [
        "computer.xml", "scsi_host1.xml", "scsi_host11.xml", "scsi_host2.xml"]


def test_record_over_an_earlier_recording_leaves_nothing_stale(tmp_path):
    """A second recording into the same directory replays the second host
    only: no node device file and no sysfs.umockdev of the first stays."""
    out = tmp_path / "snap"
    snapshot.record_host(CUSTOM_URI, str(out))
    assert (out / "nodedev" / "pci_0000_3b_00_0.xml").exists()
    (out / "sysfs.umockdev").write_text("P: /devices/of/another/host\n")
    (out / "notes.txt").write_text("mine\n")

    snapshot.record_host("test:///default", str(out))

    assert sorted(os.listdir(out / "nodedev")) == [
        "computer.xml", "scsi_host1.xml", "scsi_host11.xml", "scsi_host2.xml"]
    assert not (out / "sysfs.umockdev").exists()
    assert (out / "notes.txt").read_text() == "mine\n"  # not ours: kept
    assert snapshot.load_snapshot(str(out)).pci_devices == ()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_record_host_command_does_not_write_through_a_symlink(tmp_path):
    out = tmp_path / "snap"
    out.mkdir()
    victim = _victim(tmp_path, "json")
    (out / "host.json").symlink_to(victim)
    done = subprocess.run(
        [sys.executable, "-m", "compute_plugins.cmd.main", "record-host",
         "--libvirt-uri", "test:///default", "--output", str(out)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "precious\n"
    assert not (out / "host.json").is_symlink()


# ------------------------------------------ node-device files that cannot be read


@pytest.mark.parametrize("kind", ["not-utf8", "directory", "fifo"])
def test_unreadable_node_device_is_skipped_with_a_warning(tmp_path, caplog, kind):
    """A FIFO is never opened for reading (it would block discovery for
    good); it, a directory named ``*.xml`` and a file that is not UTF-8 are
    skipped with a warning naming them, like a node device that does not
    parse; the rest of the host loads."""
    snap = _copy("numa4", tmp_path)
    target = snap / "nodedev" / "pci_0000_02_00_0.xml"
    target.unlink()
    if kind == "not-utf8":
        target.write_bytes(b"<device><name>\xff</name></device>")
        reason = "not UTF-8 text (byte 0xff at offset 14)"
    elif kind == "directory":
        target.mkdir()
        reason = "a directory, not a regular file"
    else:
        os.mkfifo(target)
        reason = "a FIFO, not a regular file"
    host = snapshot.load_snapshot(str(snap))
    assert len(host.cells) == 4
    assert [d.address for d in host.pci_devices] == ["0000:42:00.0"]
    assert f"{target}: cannot read: {reason}; node device skipped" in caplog.text


@pytest.mark.parametrize("name", ["capabilities.xml", "host.json"])
def test_a_fifo_instead_of_a_snapshot_file_is_an_error_not_a_hang(tmp_path, name):
    snap = _copy("sriov", tmp_path)
    (snap / name).unlink()
    os.mkfifo(snap / name)
    with pytest.raises(HostDataError) as err:
        snapshot.load_snapshot(str(snap))
    assert str(err.value) == (
        f"{snap / name}: cannot read: a FIFO, not a regular file")


def test_inventory_on_a_snapshot_with_a_fifo_node_device(tmp_path):
    """The command a user runs: exit 0, the warning, the host's tree."""
    snap = _copy("numa4", tmp_path)
    fifo = snap / "nodedev" / "zz_fifo.xml"
    os.mkfifo(fifo)
    done = subprocess.run(
        [sys.executable, "-m", "compute_plugins.cmd.main", "inventory",
         "--host-snapshot", str(snap), "--format", "json"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr
    assert f"{fifo}: cannot read: a FIFO, not a regular file; node device " \
        "skipped" in done.stderr
    names = [p["name"] for p in json.loads(done.stdout)["providers"]]
    assert "numa4_NUMA3" in names


# ------------------------------------------------------- host.json limits


@pytest.mark.parametrize("depth", [500, 1200])
def test_deeply_nested_host_json_is_one_clear_error(tmp_path, depth):
    snap = _copy("sriov", tmp_path)
    (snap / "host.json").write_text("[" * depth + "]" * depth)
    with pytest.raises(HostDataError) as err:
        snapshot.load_snapshot(str(snap))
    assert str(err.value) == (
        f"{snap / 'host.json'}: not valid JSON: arrays and objects nested "
        "more than 32 deep (at character 32)")


def test_a_cpu_count_beyond_the_cpu_id_limit_is_refused(tmp_path):
    """Without cells the NUMA plugin counts CPUs 0..cpu_count-1: 10**20
    would never finish."""
    snap = _copy("sriov", tmp_path)
    doc = json.loads((snap / "host.json").read_text())
    (snap / "host.json").write_text(json.dumps({**doc, "cpu_count": 10**20}))
    with pytest.raises(HostDataError, match="cpu_count must be an integer "
                       "from 0 to 65536, not 100000000000000000000"):
        snapshot.load_snapshot(str(snap))


def test_a_snapshot_directory_name_placement_refuses_names_the_directory(tmp_path):
    """Without host.json the host is named after its directory."""
    snap = tmp_path / ("d" * 201)
    shutil.copytree(FIXTURES / "numa4", snap)
    with pytest.raises(HostDataError) as err:
        snapshot.load_snapshot(str(snap))
    assert str(err.value) == (
        "%s: host name %r cannot be the compute node's Placement provider "
        "name: it is 201 characters long; Placement allows at most 200"
        % (snap, "d" * 201))
