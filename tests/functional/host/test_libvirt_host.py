"""Live discovery on libvirt's real test driver."""

from __future__ import annotations

import pathlib

import libvirt
import pytest

from compute_plugins.host import discover_host, libvirt_host
from compute_plugins.host.errors import HostConnectionError, HostDataError
from compute_plugins.host.model import CPU, Mdev, MdevType, PagePool

FIXTURES = pathlib.Path(__file__).parents[2] / "fixtures" / "hosts"
CUSTOM = FIXTURES / "testdriver-devices.xml"
CUSTOM_URI = f"test://{CUSTOM}"


def test_default_test_driver():
    host = libvirt_host.discover_libvirt("test:///default")
    conn = libvirt.openReadOnly("test:///default")
    try:
        assert host.hostname == conn.getHostname()
    finally:
        conn.close()
    assert host.hostname
    assert host.source == "test:///default"
    assert host.memory_kb == 3072 * 1024  # getInfo(), in MiB
    assert [c.id for c in host.cells] == [0, 1]
    assert host.cells[0].cpu_ids == frozenset(range(8))
    assert host.cells[1].cpu_ids == frozenset(range(8, 16))
    assert host.cells[0].memory_kb == 2097152
    assert host.cells[1].memory_kb == 4194304
    assert host.cells[0].pages[0] == PagePool(4, 524288)
    assert host.cells[1].cpus[0] == CPU(8, 1, 0, frozenset({8}))
    # test:///default has node devices, but none is PCI or mdev.
    assert host.pci_devices == ()
    assert host.mdevs == ()


def test_default_test_driver_raw_devices():
    raw = libvirt_host.fetch_libvirt("test:///default")
    assert set(raw.nodedevs) == {
        "computer",
        "scsi_host1",
        "scsi_host2",
        "scsi_host11",
    }
    assert "<capabilities>" in raw.capabilities_xml


def test_custom_test_driver_host():
    host = discover_host(libvirt_uri=CUSTOM_URI)
    # The test driver cannot describe NUMA cells for a custom host.
    assert host.cells == ()
    assert host.memory_kb == 8388608
    assert [d.address for d in host.pci_devices] == [
        "0000:3b:00.0",
        "0000:5e:00.0",
        "0000:5e:02.0",
        "0000:5e:02.1",
    ]
    gpu = host.pci_device("0000:3b:00.0")
    assert gpu.class_code == "030200"
    assert gpu.numa_node == 1
    assert gpu.iommu_group == 40
    assert gpu.mdev_types == (
        MdevType("nvidia-222", "GRID T4-1B", 15, "vfio-pci"),
        MdevType("nvidia-223", "GRID T4-2B", 8, "vfio-pci"),
    )
    pf = host.pci_device("0000:5e:00.0")
    assert pf.is_pf
    assert pf.max_vfs == 64
    assert pf.virt_functions == ("0000:5e:02.0", "0000:5e:02.1")
    for address in pf.virt_functions:
        vf = host.pci_device(address)
        assert vf.is_vf and vf.phys_function == pf.address
    assert host.mdevs == (
        Mdev(
            "4b20d080-1b54-4048-85b3-a6a62d165c01",
            "nvidia-222",
            "0000:3b:00.0",
        ),
    )
    # test:/// devices are not this machine's: no udev enrichment; the
    # netdev comes from libvirt's own <capability type='net'> device.
    assert pf.num_vfs is None and pf.netdevs == ("ens1f0",)
    # getInfo() counts 16 CPUs; the driver's canned 8-CPU map cannot be
    # this host's, so the online CPUs are unknown.
    assert host.cpu_count == 16
    assert host.online_cpus is None


class _Conn:
    """A test-driver connection whose getCPUMap says what a test wants."""

    def __init__(self, conn, cpu_map):
        self._conn = conn
        self._cpu_map = cpu_map

    def getCPUMap(self, flags=0):
        if isinstance(self._cpu_map, Exception):
            raise self._cpu_map
        return self._cpu_map

    def __getattr__(self, name):
        return getattr(self._conn, name)


def _with_cpu_map(monkeypatch, cpu_map):
    real = libvirt.openReadOnly
    monkeypatch.setattr(libvirt, "openReadOnly",
                        lambda uri: _Conn(real(uri), cpu_map))


def test_online_cpus_from_the_cpu_map(monkeypatch, tmp_path):
    online = [True] * 6 + [False, True] + [False] * 8
    _with_cpu_map(monkeypatch, (16, online, 7))
    raw = libvirt_host.fetch_libvirt("test:///default")
    assert raw.online_cpus == frozenset({0, 1, 2, 3, 4, 5, 7})
    assert raw.cpu_count == 16
    host = libvirt_host.host_info_from_raw(raw)
    assert host.online_cpus == raw.online_cpus and host.cpu_count == 16
    # record-host keeps them in host.json (format 1, optional fields).
    from compute_plugins.host import snapshot
    snapshot.record_host("test:///default", str(tmp_path / "s"),
                         record_sysfs=False)
    again = snapshot.load_snapshot(str(tmp_path / "s"))
    assert again.online_cpus == raw.online_cpus
    assert again.cpu_count == 16


def test_no_cpu_map_means_unknown_online_cpus(monkeypatch):
    error = libvirt.libvirtError("no support")
    error.err = (libvirt.VIR_ERR_NO_SUPPORT, 0, "no support", 0, None, None,
                 None, 0, 0)
    _with_cpu_map(monkeypatch, error)
    assert libvirt_host.fetch_libvirt("test:///default").online_cpus is None


def test_cannot_connect():
    uri = "test:///no/such/host.xml"
    with pytest.raises(HostConnectionError) as err:
        discover_host(libvirt_uri=uri)
    assert isinstance(err.value, HostDataError)
    assert err.value.uri == uri
    assert str(err.value).startswith(uri + ": libvirt error: ")
    assert "/no/such/host.xml" in err.value.libvirt_message
    # where a host's facts come from without a daemon
    assert str(err.value).endswith("try --libvirt-uri test:///default (libvirt's "
                                   "test driver) or --host-snapshot DIR (a recorded "
                                   "host, e.g. compute_plugins/demo/hosts/numa)")


def test_test_driver_rejects_unsupported_device_xml(tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text(
        "<node><memory>1024</memory><device><name>pci_x</name>"
        "<capability type='pci'><vendor id='0x1'/></capability></device>"
        "</node>"
    )
    with pytest.raises(HostConnectionError, match="no PCI domain ID"):
        discover_host(libvirt_uri=f"test://{bad}")
