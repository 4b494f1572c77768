"""The command line end to end, as an operator runs it, over HTTP.

``compute-plugins placement serve`` in a subprocess; two compute agents
(``compute-plugins report``, subprocesses) on two host snapshots
(``tests/fixtures/hosts/numa4``: 4 cells of 4 CPUs; ``sriov``: one cell of
32 CPUs), each with its own state directory (its checkpoint and claims
ledger), both publishing to one host-state store (``[host_state]
connection``, an SQLite file); then ``compute-plugins schedule`` and
``compute-plugins release`` against them.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from compute_plugins.compute.ledger import path_for
from compute_plugins.hoststate.store import HostStateStore
from tests.functional.placement.conftest import (
    CLI,
    ServedPlacement,
    cli_env,
    free_port,
)
from tests.functional.placement.test_cli_report import read_json_line

HOSTS = Path(__file__).parents[1] / "fixtures" / "hosts"

AGENT_CONF = """[compute_plugins]
enabled_plugins = numa
state_dir = {state_dir}
[compute]
cpu_dedicated_set = {dedicated}
reserved_host_memory_mb = 0
claim_poll_interval = 0.05
[host_state]
connection = {store}
"""

SCHEDULER_CONF = """[compute_plugins]
enabled_plugins = numa
[host_state]
connection = {store}
"""

#: Two guest nodes of 2 dedicated CPUs, in 2 MiB pages: only numa4 has
#: two cells.
TWO_NODES = {"name": "two-nodes", "vcpus": 4, "memory_mb": 1024,
             "extra_specs": {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2",
                             "hw:mem_page_size": "2048"}}
#: Eight guest nodes: no host has eight cells.
EIGHT_NODES = {"name": "eight-nodes", "vcpus": 8, "memory_mb": 1024,
               "extra_specs": {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "8",
                               "hw:mem_page_size": "2048"}}


class Agent:
    """``compute-plugins report`` on a copy of a host snapshot."""

    def __init__(self, tmp: Path, source: str, dedicated: str, store: str,
                 placement_url: str) -> None:
        self.snapshot = tmp / ("%s-%s" % (source, uuid.uuid4().hex[:6]))
        shutil.copytree(HOSTS / source, self.snapshot)
        self.state_dir = tmp / ("state-%s" % self.snapshot.name)
        self.conf = tmp / ("%s.conf" % self.snapshot.name)
        self.conf.write_text(AGENT_CONF.format(state_dir=self.state_dir,
                                               dedicated=dedicated, store=store))
        self.log = tmp / ("%s.log" % self.snapshot.name)
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                CLI + ["--config-file", str(self.conf), "--host-snapshot",
                       str(self.snapshot), "--placement-url", placement_url,
                       "--format", "json", "report", "--interval", "60"],
                stdout=subprocess.PIPE, stderr=log, text=True, env=cli_env())
        self.first = read_json_line(self.proc.stdout)  # the first periodic
        assert self.first["claims"]["store_writes"] == 1, self.first
        self.results: list[dict] = []

    def stop(self) -> int:
        """SIGTERM; the exit status. Its printed results are kept."""
        if self.proc.stdout is None or self.proc.stdout.closed:
            return self.proc.returncode  # stopped already
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=60)
        self.results = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
        return self.proc.returncode

    def ledger(self, host: str) -> dict:
        path = Path(path_for(str(self.state_dir), host))
        return json.loads(path.read_text())["claims"] if path.exists() else {}


@pytest.fixture(scope="module")
def cloud(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli-e2e")
    served = ServedPlacement(str(tmp / "placement.sqlite"), free_port())
    served.start()
    store = "sqlite:///%s" % (tmp / "host_state.sqlite")
    agents = []
    try:
        agents.append(Agent(tmp, "numa4", "0-15", store, served.url))
        agents.append(Agent(tmp, "sriov", "0-31", store, served.url))
        config = tmp / "scheduler.conf"
        config.write_text(SCHEDULER_CONF.format(store=store))
        (tmp / "two.json").write_text(json.dumps(TWO_NODES))
        (tmp / "eight.json").write_text(json.dumps(EIGHT_NODES))
        yield {"tmp": tmp, "served": served, "store": store, "agents": agents,
               "cli": CLI + ["--config-file", str(config), "--placement-url",
                             served.url]}
    finally:
        for agent in agents:
            agent.stop()
        served.stop()


def run(cloud, *args):
    return subprocess.run(cloud["cli"] + list(args), capture_output=True, text=True,
                          timeout=120, env=cli_env())


def usages(client, rp: str) -> dict:
    return {rc: n for rc, n in client.get(
        "/resource_providers/%s/usages" % rp)["usages"].items() if n}


def test_schedule_claim_and_release_from_the_command_line(cloud):
    numa4, sriov = cloud["agents"]
    with HostStateStore(cloud["store"]) as store:
        hosts = sorted(store.generations())
    assert hosts == sorted([numa4.snapshot.name, "sriov-compute-01"])
    client = cloud["served"].client()
    consumer = str(uuid.uuid4())
    two = str(cloud["tmp"] / "two.json")

    # placed on the only host with two cells; its agent claimed it
    proc = run(cloud, "--format", "json", "schedule", "--flavor", two,
               "--consumer", consumer, "--timeout", "30")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    [instance] = out["instances"]
    assert out["reasons"] == []
    assert (instance["consumer"], instance["host"]) == (consumer, numa4.snapshot.name)
    cells = instance["assignments"]["numa"]["cells"]
    assert len(cells) == 2 and len({c["host_cell"] for c in cells}) == 2
    allocations = client.get("/allocations/%s" % consumer)["allocations"]
    assert {rp: a["resources"] for rp, a in allocations.items()} == instance["allocations"]
    for rp, resources in instance["allocations"].items():
        assert usages(client, rp) == resources  # nobody else uses these cells
    assert list(numa4.ledger(numa4.snapshot.name)) == [consumer]

    # the text form: one line (wrapped to 100 columns, its continuation
    # lines indented), the host and the pinned CPUs
    proc = run(cloud, "schedule", "--flavor", two, "--timeout", "30")
    assert proc.returncode == 0, proc.stderr
    first, *more = proc.stdout.splitlines()
    assert len(first) <= 100
    assert all(len(x) <= 100 and x.startswith("    ") for x in more), proc.stdout
    line = " ".join([first] + [x[4:] for x in more])
    assert "host %s" % numa4.snapshot.name in line and "numa:" in line
    other = line.split(":")[0]
    assert len(numa4.ledger(numa4.snapshot.name)) == 2

    # cannot fit anywhere: the reasons, per host and plugin; exit 1
    proc = run(cloud, "schedule", "--flavor", str(cloud["tmp"] / "eight.json"),
               "--timeout", "30")
    assert proc.returncode == 1, proc.stderr
    assert "not placed" in proc.stdout
    for host in (numa4.snapshot.name, "sriov-compute-01"):
        assert "  host %s:\n    numa: " % host in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stderr

    # release: the agent frees its ledger entry and the allocation
    proc = run(cloud, "release", "--consumer", consumer, "--timeout", "30")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("consumer %s: released by host %s"
                                  % (consumer, numa4.snapshot.name))
    assert client.get("/allocations/%s" % consumer)["allocations"] == {}
    assert list(numa4.ledger(numa4.snapshot.name)) == [other]
    proc = run(cloud, "release", "--consumer", other, "--timeout", "30")
    assert proc.returncode == 0, proc.stderr
    assert numa4.ledger(numa4.snapshot.name) == {}
    for rp in instance["allocations"]:
        assert usages(client, rp) == {}

    # what the agents said they did, in their own output
    assert numa4.stop() == 0 and sriov.stop() == 0
    claimed = [c for r in numa4.results for c in r["claims"]["claimed"]]
    released = [c for r in numa4.results for c in r["claims"]["released"]]
    assert sorted(claimed) == sorted(released) == sorted([consumer, other])
    assert not any(r["claims"]["claimed"] for r in sriov.results)
