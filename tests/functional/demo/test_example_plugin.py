"""The third-party plugin example (``examples/fpga``), installed with pip and
loaded through stevedore next to the built-in plugins.

The package is installed with ``pip install --no-deps --target DIR`` (a
real wheel build and install of its ``pyproject.toml``, entry point
included), without network when the test environment can build wheels
itself (``wheel`` is in the ``test`` extra; setuptools >= 70.1 has it
built in), else with pip's isolated build, which fetches setuptools from the
package index. Commands then run as subprocesses with ``DIR`` on
``PYTHONPATH``, so stevedore finds the entry point as on a real host.

Host: the demo's ``gpu`` snapshot, which has two Intel PAC Arria 10 cards
(``8086:09c4``), 0000:5e:00.0 on cell 0 and 0000:d8:00.0 on cell 1.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compute_plugins import demo, testing
from tests.output import records

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "fpga"
HOST = Path(demo.host_dir("gpu"))
CARDS = {"0000:5e:00.0": 0, "0000:d8:00.0": 1}
CONF = """\
[compute_plugins]
enabled_plugins = numa,vgpu,sriov,disk,fpga
"""


def can_build_wheels_offline() -> bool:
    """This environment's setuptools can build the example's wheel: it is
    installed (a venv of Python 3.12 or later has none of its own), new
    enough for ``pyproject.toml`` metadata (61), and has ``bdist_wheel``
    (the ``wheel`` package, or built in since 70.1)."""
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    major, minor = (int(p) for p in version.split(".")[:2])
    if (major, minor) < (61, 0):
        return False
    return importlib.util.find_spec("wheel") is not None or (major, minor) >= (70, 1)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    target = tmp_path_factory.mktemp("fpga-site")
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps",
               "--target", str(target), str(EXAMPLE)]
    if can_build_wheels_offline():
        command.insert(4, "--no-build-isolation")
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return target


@pytest.fixture(scope="module")
def conf_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("fpga-conf") / "fpga.conf"
    path.write_text(CONF)
    return str(path)


def run(target, *args, code=0):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(target)]),
           "PYTHONWARNINGS": "ignore"}
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                            timeout=120, env=env, cwd=str(target))
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stdout


def cli(target, conf_file, *args, code=0):
    return run(target, "-m", "compute_plugins.cmd.main",
               "--config-file", str(HOST / demo.HOST_CONFIG), "--config-file", conf_file,
               "--host-snapshot", str(HOST), "--format", "json", *args, code=code)


def test_pip_installed_the_entry_point(target):
    assert (target / "compute_plugins_fpga" / "__init__.py").is_file()
    entry_points = next(target.glob("compute_plugins_fpga-*.dist-info")) / "entry_points.txt"
    assert "fpga = compute_plugins_fpga:FPGAPlugin" in entry_points.read_text()


def test_stevedore_loads_it_with_the_builtin_plugins(target):
    out = run(target, "-c", "from oslo_config import cfg\n"
              "from compute_plugins.runtime.manager import PluginManager\n"
              "names = ['numa', 'vgpu', 'sriov', 'disk', 'fpga']\n"
              "manager = PluginManager(cfg.ConfigOpts(), names=names)\n"
              "print(manager.degraded, [manager.entry_point(n) for n in names])\n")
    assert out.strip() == str(False) + " " + str([
        "resources.numa:NUMAPlugin", "resources.vgpu:VGPUPlugin",
        "resources.sriov:SRIOVPlugin", "resources.disk:DiskPlugin",
        "compute_plugins_fpga:FPGAPlugin"])


def test_inventory_has_a_provider_per_card_under_its_cell(target, conf_file):
    providers = {p["name"]: p for p in json.loads(
        cli(target, conf_file, "inventory"))["providers"]}
    for address, cell in CARDS.items():
        card = providers["demo-gpu-01_fpga_%s" % address.replace(":", "_").replace(".", "_")]
        assert card["inventories"]["CUSTOM_FPGA_INTEL_PAC_A10"]["total"] == 1
        assert card["parent_provider_uuid"] == providers["demo-gpu-01_NUMA%d" % cell]["uuid"]


def test_it_passes_the_conformance_command(target):
    """``compute-plugins conformance fpga``: every check of the kit, on the
    installed plugin (with the numa plugin it runs after)."""
    lines = records(run(target, "-m", "compute_plugins.cmd.main", "conformance",
                        "fpga"))
    assert [line.split(":")[0].split(" ", 1)[1] for line in lines] == [
        "fpga " + check for check in testing.CHECKS]
    for line in lines:
        assert line.startswith("PASS fpga ") or line.startswith("SKIP fpga guest-xml: "), line
    assert "PASS fpga double-booking: " in "\n".join(lines)


def test_its_own_test_suite_runs_the_conformance_kit(target):
    """The plugin's own pytest suite (``examples/fpga/tests``) calls the kit,
    as a third party's suite does."""
    out = run(target, "-m", "pytest", "-q", "-p", "no:cacheprovider",
              str(EXAMPLE / "tests"))
    assert "1 passed" in out


def flavor(tmp_path, **extra_specs):
    path = tmp_path / "flavor.json"
    path.write_text(json.dumps({"name": "fpga", "vcpus": 4, "memory_mb": 4096,
                                "root_gb": 10, "extra_specs": extra_specs}))
    return str(path)


def test_fit_places_a_card_on_each_guest_node(target, conf_file, tmp_path):
    result = json.loads(cli(target, conf_file, "fit", "--flavor", flavor(
        tmp_path, **{"accel:fpga": "2", "hw:numa_nodes": "2",
                     "hw:pci_numa_affinity_policy": "required"})))
    assert result["fits"], result["reasons"]
    numa_cells = {c["host_cell"] for c in result["assignments"]["numa"]["cells"]}
    cards = result["assignments"]["fpga"]["cards"]
    assert numa_cells == {0, 1}
    assert {CARDS[c["address"]] for c in cards} == numa_cells
    for card in cards:
        bus = card["address"].split(":")[1]
        assert 'bus="0x%s"' % bus in result["guest_xml"]


def test_fit_keeps_a_one_node_guest_with_its_card(target, conf_file, tmp_path):
    result = json.loads(cli(target, conf_file, "fit", "--flavor", flavor(
        tmp_path, **{"accel:fpga": "1", "hw:numa_nodes": "1",
                     "hw:pci_numa_affinity_policy": "required"})))
    assert result["fits"], result["reasons"]
    (cell,) = result["assignments"]["numa"]["cells"]
    (card,) = result["assignments"]["fpga"]["cards"]
    assert CARDS[card["address"]] == cell["host_cell"]


def test_used_cards_are_refused_with_the_plugins_reason(target, conf_file, tmp_path):
    specs = {"accel:fpga": "2", "hw:numa_nodes": "2"}
    first = json.loads(cli(target, conf_file, "fit", "--flavor", flavor(tmp_path, **specs)))
    usage = tmp_path / "usage.json"
    usage.write_text(json.dumps([first["assignments"]]))
    second = json.loads(cli(target, conf_file, "fit", "--flavor", flavor(tmp_path, **specs),
                            "--usage", str(usage), code=1))
    reasons = [r for r in second["reasons"] if r["plugin"] == "fpga"]
    assert reasons and "is used by another guest" in reasons[0]["reason"]


def test_a_bad_key_is_one_line_naming_it(target, conf_file, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(target)])}
    result = subprocess.run(
        [sys.executable, "-m", "compute_plugins.cmd.main", "--config-file", conf_file,
         "validate", "--flavor", flavor(tmp_path, **{"accel:fpga": "2",
                                                     "accel:fpga_model": "xilinx_u250"})],
        capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 1
    assert "accel:fpga_model" in result.stdout + result.stderr
    assert "xilinx_u250" in result.stdout + result.stderr


def test_a_guest_moves_to_the_cell_of_the_free_card(target, conf_file, tmp_path):
    """With the card of cell 0 taken, a one-node guest that requires NUMA
    affinity is put on cell 1, next to the free card (the framework tries
    the numa plugin's other cells when a device plugin refuses)."""
    specs = {"accel:fpga": "1", "hw:numa_nodes": "1",
             "hw:pci_numa_affinity_policy": "required"}
    first = json.loads(cli(target, conf_file, "fit", "--flavor", flavor(tmp_path, **specs)))
    (taken,) = first["assignments"]["fpga"]["cards"]
    usage = tmp_path / "usage.json"
    usage.write_text(json.dumps([first["assignments"]]))
    second = json.loads(cli(target, conf_file, "fit", "--flavor", flavor(tmp_path, **specs),
                            "--usage", str(usage)))
    assert second["fits"], second["reasons"]
    (card,) = second["assignments"]["fpga"]["cards"]
    (cell,) = second["assignments"]["numa"]["cells"]
    assert card["address"] != taken["address"]
    assert CARDS[card["address"]] == cell["host_cell"]


#: Scheduled for real, in a subprocess that sees the installed package: the
#: demo's cloud (real Placement in-process, the store on SQLite, the
#: ``gpu`` host's agent in a thread) with fpga enabled on the host and in
#: the scheduler.
SCHEDULE = """\
import json, os, sys, uuid
from oslo_config import cfg
from compute_plugins import conf as conf_areas, demo
from compute_plugins.compute import guest
from compute_plugins.demo import cluster as demo_cluster
from compute_plugins.runtime.manager import PluginManager
from compute_plugins.request.inputs import RequestInput
from compute_plugins.request.spec import RequestSpec
from compute_plugins.scheduler.selection import Scheduler

state_dir, fpga_conf, flavor = sys.argv[1:4]
host_conf = demo_cluster.host_conf

def with_fpga(state_dir, name, store_url):
    conf = host_conf(state_dir, name, store_url)
    conf(["--config-file", os.path.join(demo.host_dir(name), demo.HOST_CONFIG),
          "--config-file", fpga_conf], project="compute-plugins",
         default_config_files=[], default_config_dirs=[])
    return conf

demo_cluster.host_conf = with_fpga
demo.HOST_DIRS = ("gpu",)
with demo_cluster.Cluster(state_dir) as cloud:
    (host,) = cloud.hosts
    cloud.report(host)
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    conf(["--config-file", fpga_conf], project="compute-plugins",
         default_config_files=[], default_config_dirs=[])
    conf.set_override("connection", cloud.store_url, "host_state")
    manager = PluginManager(conf)
    scheduler = Scheduler(conf, manager.plugins, cloud.service.client(), cloud.store)
    cloud.start_agents()
    spec = RequestSpec.build(manager.plugins,
                             RequestInput.from_dicts(json.load(open(flavor))))
    consumer = str(uuid.uuid4())
    result = scheduler.schedule(spec, consumer, "p", "u")
    cloud.stop_agents()
    out = {"placed": result.placed, "host": result.host,
           "reasons": [str(r) for r in result.reasons], "claimed": [], "usage": {}}
    if result.placed:
        decision = result.spec.decision
        out["assignments"] = result.spec.to_dict()["decision"]["assignments"]
        out["guest_xml"] = guest.domain_xml(result.spec, decision.assignments,
                                            manager.plugins, name="fpga")
        out["claimed"] = [c for r in host.results for c in r.claimed]
        out["usage"] = {p["name"]: p["usages"] for p in cloud.providers()}
    print(json.dumps(out, default=str))
"""


def test_the_scheduler_places_a_guest_on_the_cards_through_placement(
        target, conf_file, tmp_path):
    """Not only ``fit``: the host's agent reports the cards to Placement,
    the scheduler asks Placement, runs every plugin's fit (fpga with the
    built-in ones), the agent verifies and claims; Placement then counts
    one card used on each cell's FPGA provider."""
    path = tmp_path / "flavor.json"
    path.write_text(json.dumps({
        "name": "fpga.2node", "vcpus": 4, "memory_mb": 4096, "root_gb": 10,
        "extra_specs": {"accel:fpga": "2", "hw:numa_nodes": "2",
                        "hw:pci_numa_affinity_policy": "required"}}))
    out = json.loads(run(target, "-c", SCHEDULE, str(tmp_path / "state"),
                         conf_file, str(path)).splitlines()[-1])
    assert out["placed"], out["reasons"]
    assert out["host"] == "demo-gpu-01" and len(out["claimed"]) == 1
    cards = out["assignments"]["fpga"]["cards"]
    assert {CARDS[c["address"]] for c in cards} == {0, 1}
    for address in CARDS:
        name = "demo-gpu-01_fpga_%s" % address.replace(":", "_").replace(".", "_")
        assert out["usage"][name] == {"CUSTOM_FPGA_INTEL_PAC_A10": 1}
        assert 'bus="0x%s"' % address.split(":")[1] in out["guest_xml"]
