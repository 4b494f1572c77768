"""A state directory copied to another machine (issue 20): the node's
identity (``compute_node.json``) records the machine it was made on, and
an agent started on another machine refuses to start (one line, exit 2)
instead of running a second agent under the same node uuid (the two would
take the host's lease from each other in turn, each fenced by the other).

The machine is faked through ``[compute] machine_id_file`` (the option
that points a container's agent at its host's ``/etc/machine-id``): a test
cannot change the machine's own id nor run on two machines, and a file
holding another id is what the agent sees on another machine. Real parts
otherwise, as in :mod:`tests.functional.compute.test_agent`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from compute_plugins import exception
from compute_plugins.compute import identity
from compute_plugins.compute.agent import ComputeAgent
from compute_plugins.host import discover_host
from compute_plugins.hoststate import AgentLeaseHeld
from compute_plugins.placement import embedded
from tests.functional.compute.test_agent import (
    AGENT_CONF,
    Host,
    make_conf,
    pinned_cpus,
    said,
)
from tests.functional.placement.conftest import CLI, cli_env

MACHINE_A = "4f1c2a9d8e7b6c5d4e3f2a1b0c9d8e7f\n"
MACHINE_B = "0123456789abcdef0123456789abcdef\n"


@pytest.fixture(scope="module")
def placement():
    emb = embedded.EmbeddedPlacement("sqlite://").start()
    yield emb
    emb.close()


def machine(tmp_path: Path, name: str, content: str) -> Path:
    path = tmp_path / name
    path.write_text(content)
    return path


def on_machine(path: Path) -> tuple:
    return (("machine_id_file", str(path), "compute"),)


@pytest.fixture
def host(tmp_path, placement):
    """A host whose agent runs on machine A, with a claim."""
    h = Host(tmp_path, placement, overrides=on_machine(
        machine(tmp_path, "machine-a", MACHINE_A)))
    h.agent.run_once()
    h.consumer = h.decide()
    assert h.agent.poll().claimed
    yield h
    h.store.close()


def agent_on(host: Host, state_dir: Path, machine_file: Path) -> ComputeAgent:
    """The host's agent on ``state_dir``, on the machine of ``machine_file``."""
    return ComputeAgent.from_config(
        make_conf(state_dir, on_machine(machine_file)), host.placement.client(),
        host.store, lambda: discover_host(host_snapshot=str(host.snapshot)))


def report(host: Host, tmp_path: Path, state_dir: Path, machine_file: Path):
    """``compute-plugins report --periodic 1`` on ``state_dir``, on the
    machine of ``machine_file``."""
    conf = tmp_path / "machine.conf"
    conf.write_text(AGENT_CONF + "machine_id_file = %s\n[host_state]\nconnection = %s\n"
                    "[compute_plugins]\nstate_dir = %s\n"
                    % (machine_file, host.store_url, state_dir))
    return subprocess.run(CLI + ["--config-file", str(conf), "--host-snapshot",
                                 str(host.snapshot), "report", "--periodic", "1"],
                          capture_output=True, text=True, timeout=180, env=cli_env())


def test_the_identity_records_the_machine_hashed(host):
    recorded = json.loads((host.state_dir / identity.IDENTITY_FILE).read_text())
    assert recorded["machine"] == host.agent.node.machine
    assert len(recorded["machine"]) == 32
    # the id itself is never written (machine-id(5): not to be exposed)
    assert MACHINE_A.strip() not in json.dumps(recorded)


def test_a_state_dir_copied_to_another_machine_refuses_to_start(host, tmp_path):
    """The state directory copied (a cloned disk, a backup restored on
    new hardware): the copy kept the node's uuid; its agent started and
    took the host's lease from the original's, each fenced in turn."""
    copy = tmp_path / "copied-state"
    shutil.copytree(host.state_dir, copy)
    machine_b = machine(tmp_path, "machine-b", MACHINE_B)
    lease = host.store.get_lease(host.name)
    with pytest.raises(identity.MachineChanged) as info:
        agent_on(host, copy, machine_b)
    assert isinstance(info.value, exception.InputError)
    message = str(info.value)
    assert "on another machine" in message and str(copy) in message
    assert host.agent.node.uuid in message and str(machine_b) in message
    proc = report(host, tmp_path, copy, machine_b)
    assert proc.returncode == 2, proc.stderr
    (line,) = said(proc.stderr).splitlines()
    assert line.startswith("compute-plugins: error: the state directory %s belongs to "
                           "compute node %s (uuid %s) on another machine"
                           % (copy, host.name, host.agent.node.uuid)), line
    # what to do: an empty state directory (a new host), or the identity
    # file removed (the same host, its machine id changed)
    assert "empty state directory" in line and "remove %s" % (
        copy / identity.IDENTITY_FILE) in line
    assert "Traceback" not in proc.stderr
    # nothing taken from the original: its lease, its claim, its state
    assert host.store.get_lease(host.name) == lease
    poll = host.agent.poll()
    assert poll.error is None
    assert host.consumer in host.agent.ledger
    assert len(pinned_cpus(host.published())) == 4
    # the original on its own machine starts as before
    assert agent_on(host, host.state_dir, Path(tmp_path / "machine-a")).node == (
        host.agent.node)


def test_the_same_host_reinstalled_starts_once_its_identity_is_removed(host, tmp_path):
    """The remedy the refusal names for a machine id that changed on the
    same host (an OS reinstall): the identity file removed, the agent
    records this machine and keeps the node's claims."""
    host.store.end_lease(host.store.get_lease(host.name))  # the old agent stopped
    reinstalled = machine(tmp_path, "machine-a", MACHINE_B)
    with pytest.raises(identity.MachineChanged):
        agent_on(host, host.state_dir, reinstalled)
    (host.state_dir / identity.IDENTITY_FILE).unlink()
    agent = agent_on(host, host.state_dir, reinstalled)
    assert agent.node.uuid != host.agent.node.uuid
    assert agent.node.machine == identity.machine_id(str(reinstalled)).id
    result = agent.run_once()
    assert result.ok and result.releases == [], (result.error, result.releases)
    assert host.consumer in agent.ledger
    assert len(pinned_cpus(host.published())) == 4
    # the agent of the copy still running elsewhere would be refused
    # (another node holds the lease): the remedy is not for a copy
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(host.state_dir, elsewhere)
    (elsewhere / identity.IDENTITY_FILE).unlink()
    with pytest.raises(AgentLeaseHeld):
        agent_on(host, elsewhere, machine(tmp_path, "machine-c", "c" * 32)).run_once()


def test_an_identity_from_before_gets_the_machine_and_a_rename_keeps_it(
        host, tmp_path):
    node = host.agent.node
    identity.write(str(host.state_dir), node.host, node.uuid, machine=None)
    assert identity.read(str(host.state_dir)).machine is None
    # any machine is taken: recorded at the next start ...
    other = machine(tmp_path, "machine-b", MACHINE_B)
    started = agent_on(host, host.state_dir, other)
    assert started.node.uuid == node.uuid
    assert started.node.machine == identity.machine_id(str(other)).id
    # ... and checked from then on
    with pytest.raises(identity.MachineChanged):
        agent_on(host, host.state_dir, tmp_path / "machine-a")
    # host rename rewrites the identity: the machine stays
    identity.write(str(host.state_dir), "renamed", node.uuid, renaming=None)
    assert identity.read(str(host.state_dir)).machine == started.node.machine


def test_the_machine_id_and_where_it_comes_from(tmp_path, monkeypatch):
    a = machine(tmp_path, "a", MACHINE_A)
    found = identity.machine_id(str(a))
    assert found == identity.Machine(found.id, str(a))
    # the case and the newline do not matter; the id does
    assert identity.machine_id(str(machine(tmp_path, "A", MACHINE_A.upper().strip()))
                               ).id == found.id
    assert identity.machine_id(str(machine(tmp_path, "b", MACHINE_B))).id != found.id
    assert identity.machine_id("") is None   # the check turned off
    # the option names a file that does not hold one: exit 2, one line
    for bad, reason in ((tmp_path / "missing", "No such file"),
                        (machine(tmp_path, "empty", "\n"), "no machine id"),
                        (machine(tmp_path, "early", "uninitialized\n"), "no machine id")):
        with pytest.raises(identity.IdentityError, match=reason) as info:
            identity.machine_id(str(bad))
        assert isinstance(info.value, exception.InputError)
    # unset: the first file of MACHINE_ID_FILES that holds one
    monkeypatch.setattr(identity, "MACHINE_ID_FILES", (
        str(tmp_path / "missing"), str(tmp_path / "empty"), str(a)))
    assert identity.machine_id() == found
    monkeypatch.setattr(identity, "MACHINE_ID_FILES", (str(tmp_path / "missing"),))
    assert identity.machine_id() is None   # none: not checked


def test_a_machine_id_file_that_cannot_be_read_is_one_line(host, tmp_path):
    proc = report(host, tmp_path, host.state_dir, tmp_path / "no-such-file")
    assert proc.returncode == 2, proc.stderr
    (line,) = said(proc.stderr).splitlines()
    assert line == ("compute-plugins: error: compute node identity %s: cannot read "
                    "the machine id: No such file or directory" % (tmp_path / "no-such-file"))
