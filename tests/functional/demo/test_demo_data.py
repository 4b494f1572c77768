"""The demo's shipped data: host snapshots and requests (``compute_plugins/demo``).

The snapshots are what ``tools/demo_hosts.py`` makes from libvirt's real
captures (``--check``), each host's tree (with its own
``compute-plugins.conf``) is the one the demo and doc/source/demo.md describe, every
request is valid, and ``compute-plugins fit`` (offline, every plugin) puts
each request on the hosts it is meant for and nowhere else.

The command runs in-process (``compute_plugins.cmd.main.main``): 35 what-ifs
as subprocesses would take a minute.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compute_plugins import demo
from compute_plugins.cmd.main import main

ROOT = Path(__file__).resolve().parents[3]
REQUESTS = json.loads(Path(demo.requests_file()).read_text())
BY_NAME = {r["name"]: r for r in REQUESTS}

#: Where each request fits (host directory names); the demo's own checks.
FITS_ON = {
    "pinned-2node": {"numa"},
    "vgpu-affine": {"gpu"},
    "sriov-physnet2": {"sriov"},
    "large-disk": {"shared"},
    "small": set(demo.HOST_DIRS),
    "wide-8node": {"numa8"},
    "impossible": set(),
}


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def host_args(name):
    path = demo.host_dir(name)
    return ["--config-file", str(Path(path) / demo.HOST_CONFIG), "--host-snapshot", path]


def test_snapshots_are_generated_by_the_script():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "demo_hosts.py"),
                             "--check"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_every_host_has_a_snapshot_and_a_config():
    for name in demo.HOST_DIRS:
        path = Path(demo.host_dir(name))
        assert (path / "capabilities.xml").is_file()
        assert (path / "host.json").is_file()
        assert (path / demo.HOST_CONFIG).is_file()


def tree(capsys, name):
    code, out, err = run(capsys, *host_args(name), "--format", "json", "inventory")
    assert code == 0, err
    return {p["name"]: p for p in json.loads(out)["providers"]}


def test_numa_host_tree(capsys):
    providers = tree(capsys, "numa")
    assert set(providers) == {"demo-numa-01", "demo-numa-01_NUMA0", "demo-numa-01_NUMA1"}
    for cell in ("demo-numa-01_NUMA0", "demo-numa-01_NUMA1"):
        inv = providers[cell]["inventories"]
        assert inv["PCPU"]["total"] == 24 and inv["VCPU"]["total"] == 8
        assert inv["CUSTOM_MEMORY_PAGE_2048KB"]["total"] == 4096
        assert inv["CUSTOM_MEMORY_PAGE_1048576KB"]["total"] == 16
    assert providers["demo-numa-01"]["inventories"]["DISK_GB"]["total"] == 893


def test_gpu_host_tree(capsys):
    providers = tree(capsys, "gpu")
    gpu0 = providers["demo-gpu-01_pci_0000_3b_00_0"]
    gpu1 = providers["demo-gpu-01_pci_0000_af_00_0"]
    assert gpu0["parent_provider_uuid"] == providers["demo-gpu-01_NUMA0"]["uuid"]
    assert gpu1["parent_provider_uuid"] == providers["demo-gpu-01_NUMA1"]["uuid"]
    assert gpu0["traits"] == ["CUSTOM_MDEV_TYPE_NVIDIA_222"]
    assert gpu1["traits"] == ["CUSTOM_MDEV_TYPE_NVIDIA_223"]
    assert gpu0["inventories"]["VGPU"]["total"] == 16
    assert gpu1["inventories"]["VGPU"]["total"] == 8


def test_sriov_host_tree(capsys):
    providers = tree(capsys, "sriov")
    pf1 = providers["demo-sriov-01_pf_0000_5e_00_0"]
    pf2 = providers["demo-sriov-01_pf_0000_d8_00_0"]
    assert pf1["parent_provider_uuid"] == providers["demo-sriov-01_NUMA0"]["uuid"]
    assert pf2["parent_provider_uuid"] == providers["demo-sriov-01_NUMA1"]["uuid"]
    assert "CUSTOM_PHYSNET_PHYSNET1" in pf1["traits"]
    assert "CUSTOM_PHYSNET_PHYSNET2" in pf2["traits"]
    assert pf1["inventories"]["SRIOV_NET_VF"]["total"] == 8
    assert pf2["inventories"]["NET_BW_EGR_KILOBIT_PER_SEC"]["total"] == 25000000


def test_shared_host_tree(capsys):
    conf = (Path(demo.host_dir("shared")) / demo.HOST_CONFIG).read_text()
    root = tree(capsys, "shared")["demo-shared-01"]
    assert "DISK_GB" not in root["inventories"]
    assert len(root["aggregates"]) == 1
    assert "shared_storage_aggregate = %s" % root["aggregates"][0] in conf


def test_numa8_host_tree(capsys):
    providers = tree(capsys, "numa8")
    cells = [n for n in providers if "_NUMA" in n]
    assert len(cells) == 8


def test_every_request_is_valid(capsys, tmp_path):
    for request in REQUESTS:
        code, out, err = run(capsys, "validate", *request_args(request, tmp_path))
        assert code == 0, (request["name"], out, err)


def request_args(request, directory: Path):
    directory = directory / request["name"]
    directory.mkdir(exist_ok=True)
    (directory / "flavor.json").write_text(json.dumps(request["flavor"]))
    (directory / "image.json").write_text(json.dumps(request["image"]))
    args = ["--flavor", str(directory / "flavor.json"),
            "--image", str(directory / "image.json")]
    for index, port in enumerate(request["ports"]):
        path = directory / ("port%d.json" % index)
        path.write_text(json.dumps(port))
        args += ["--port", str(path)]
    return args


def test_fits_on_lists_every_request():
    assert set(FITS_ON) == set(BY_NAME)


def test_each_requests_expectation_names_the_host_it_fits_on():
    """``expect`` (what ``compute-plugins demo`` checks) agrees with the
    hosts each request fits on here."""
    names = {d: json.loads((Path(demo.host_dir(d)) / "host.json").read_text())["hostname"]
             for d in demo.HOST_DIRS}
    for name, dirs in FITS_ON.items():
        expected = {None: set(), "any": set(demo.HOST_DIRS)}.get(
            BY_NAME[name]["expect"], None)
        if expected is None:
            expected = {d for d in demo.HOST_DIRS if names[d] == BY_NAME[name]["expect"]}
        assert expected == dirs, name


@pytest.mark.parametrize("host", demo.HOST_DIRS)
@pytest.mark.parametrize("name", sorted(FITS_ON))
def test_request_fits_where_it_should(capsys, tmp_path, name, host):
    code, out, err = run(capsys, *host_args(host), "--format", "json", "fit",
                         *request_args(BY_NAME[name], tmp_path))
    result = json.loads(out)
    expected = host in FITS_ON[name]
    assert result["fits"] is expected, result["reasons"]
    assert code == (0 if expected else 1), err
    if not expected:
        assert result["reasons"]


def test_impossible_request_has_a_reason_from_every_plugin_it_asks(capsys, tmp_path):
    for host in demo.HOST_DIRS:
        code, out, _err = run(capsys, *host_args(host), "--format", "json", "fit",
                              *request_args(BY_NAME["impossible"], tmp_path))
        plugins = {r["plugin"] for r in json.loads(out)["reasons"]}
        # NOTE: the shared host has no local disk to refuse: the disk comes
        # from the sharing provider, which only Placement knows.
        expected = {"numa", "vgpu", "sriov", "disk"} - ({"disk"} if host == "shared"
                                                        else set())
        assert plugins == expected, (host, out)


def test_the_demo_data_ships_in_the_package(tmp_path):
    """``setup.py build_py`` (what a wheel is built from; pbr takes the
    files git tracks) copies every snapshot file and the request list."""
    result = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "-d",
                             str(tmp_path)], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    source = Path(demo.data_dir())
    shipped = {p.relative_to(source) for p in source.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    built = tmp_path / "compute_plugins" / "demo"
    missing = [str(p) for p in shipped if not (built / p).is_file()]
    assert not missing
    assert Path("requests.json") in shipped
    assert len([p for p in shipped if p.name == "capabilities.xml"]) == len(demo.HOST_DIRS)
