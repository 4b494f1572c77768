"""Nothing given twice, whatever the operator does (issue 20, items 1-3):
the host's identity in its state directory, one agent per host (a lock on
the state directory, a lease with a fencing token in the store), and the
ledger and the store reconciled (neither is ever silently empty).

Real parts as in :mod:`tests.functional.compute.test_agent`: the real
plugins on the numa4 snapshot, an embedded Placement, an SQLite store, the
command line as a subprocess where its exit code and line are the point.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from compute_plugins import exception
from compute_plugins.compute import identity
from compute_plugins.compute.agent import ComputeAgent
from compute_plugins.compute.ledger import LedgerMissing
from compute_plugins.host import discover_host
from compute_plugins.hoststate import (
    AgentLeaseHeld,
    DecisionStatus,
    Fenced,
    HostStateStore,
    schema,
)
from compute_plugins.placement import embedded
from tests.functional.compute.test_agent import (
    AGENT_CONF,
    Host,
    make_conf,
    pinned_cpus,
    said,
)
from tests.functional.placement.conftest import CLI, cli_env


@pytest.fixture(scope="module")
def placement():
    emb = embedded.EmbeddedPlacement("sqlite://").start()
    yield emb
    emb.close()


@pytest.fixture
def host(tmp_path, placement):
    h = Host(tmp_path, placement)
    yield h
    h.store.close()


@pytest.fixture(scope="module")
def placement_url(placement):
    """The module's Placement served over HTTP, for the command line."""
    server = placement.make_server()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.url


def agent_in(host: Host, state_dir: Path) -> ComputeAgent:
    """An agent for ``host`` with another state directory (another node)."""
    return ComputeAgent.from_config(
        make_conf(state_dir, host.overrides), host.placement.client(), host.store,
        lambda: discover_host(host_snapshot=str(host.snapshot)))


def claimed(host: Host) -> str:
    host.agent.run_once()
    consumer = host.decide()
    assert host.agent.poll().claimed
    return consumer


def cli(args, tmp_path, host: Host, timeout=180, **popen):
    """``compute-plugins --host-snapshot <host> ARGS`` on the host's state
    directory and store (its own embedded Placement); ``host ...`` without
    the snapshot (it discovers no host)."""
    conf_file = tmp_path / "agent.conf"
    conf_file.write_text(AGENT_CONF + "[host_state]\nconnection = %s\n"
                         "[compute_plugins]\nstate_dir = %s\n"
                         % (host.store_url, host.state_dir))
    command = CLI + ["--config-file", str(conf_file)] + (
        [] if "host" in args else ["--host-snapshot", str(host.snapshot)]) + list(args)
    if popen:
        return subprocess.Popen(command, env=cli_env(), text=True, **popen)
    return subprocess.run(command, capture_output=True, text=True,
                          timeout=timeout, env=cli_env())


# -- 3. the ledger and the store reconcile ----------------------------------


def test_a_recreated_store_gets_the_claims_back_instead_of_releasing_them(host):
    """Recreating the store (the way back from a corrupt one) made every
    agent free all its claims and delete their allocations at its first
    periodic, while the guests still ran."""
    consumer = claimed(host)
    allocations = host.allocations(consumer)
    host.store.close()
    for suffix in ("", "-wal", "-shm"):
        path = Path(host.store_url[len("sqlite:///"):] + suffix)
        if path.exists():
            path.unlink()
    host.store = HostStateStore(host.store_url)
    restarted = host.start_agent()
    result = restarted.run_once()
    assert result.ok, (result.periodic.error, result.error)
    assert result.releases == []
    assert consumer in restarted.ledger
    assert host.allocations(consumer) == allocations
    decision = host.store.active_decision(consumer)
    assert decision is not None and decision.status == DecisionStatus.CLAIMED
    assert decision.host == host.name
    assert restarted.ledger.get(consumer).decision_id == decision.id
    assert len(pinned_cpus(host.published())) == 4
    # and it stays so: the next periodic frees nothing
    again = restarted.run_once()
    assert again.releases == [] and consumer in restarted.ledger


def test_a_deleted_ledger_refuses_to_start_naming_both(host, tmp_path):
    consumer = claimed(host)
    ledger = Path(host.agent.ledger.path)
    ledger.unlink()
    with pytest.raises(LedgerMissing) as info:
        host.start_agent().run_once()
    message = str(info.value)
    assert str(ledger) in message and "missing" in message
    assert "host-state" in message and consumer in message
    assert "--rebuild-ledger" in message
    assert not ledger.exists()
    # nothing was published as free meanwhile
    assert len(pinned_cpus(host.published())) == 4
    proc = cli(["report", "--periodic", "1"], tmp_path, host)
    assert proc.returncode == 2, proc.stderr
    (line,) = said(proc.stderr).splitlines()
    assert line.startswith("compute-plugins: error: claims ledger %s is missing" % ledger)
    assert "Traceback" not in proc.stderr
    # the operator rebuilds it from the store
    restarted = host.start_agent()
    restarted.rebuild_ledger = True
    result = restarted.run_once()
    assert result.ok and result.releases == []
    assert restarted.ledger.get(consumer).decision_id == host.store.active_decision(
        consumer).id
    assert json.loads(ledger.read_text())["claims"][consumer]["decision_id"]
    assert len(pinned_cpus(host.published())) == 4
    # an emptied ledger is refused the same way
    ledger.write_text(json.dumps({"format": "compute-plugins-ledger", "version": 1,
                                  "host": host.name, "claims": {}}))
    with pytest.raises(LedgerMissing, match="is empty"):
        host.start_agent().run_once()


def test_the_rebuild_command_line(host, tmp_path, placement_url):
    consumer = claimed(host)
    ledger = Path(host.agent.ledger.path)
    ledger.unlink()
    proc = cli(["--placement-url", placement_url, "report", "--periodic", "1",
                "--rebuild-ledger"], tmp_path, host)
    assert proc.returncode == 0, proc.stderr
    assert "mismatch" not in proc.stdout and "0 released" in proc.stdout, proc.stdout
    assert json.loads(ledger.read_text())["claims"][consumer]["decision_id"] == (
        host.store.active_decision(consumer).id)
    assert host.allocations(consumer)
    # refused on a ledger that holds claims: exit 2, one line
    again = cli(["--placement-url", placement_url, "report", "--periodic", "1",
                 "--rebuild-ledger"], tmp_path, host)
    assert again.returncode == 2, again.stderr
    (line,) = said(again.stderr).splitlines()
    assert "only a missing or empty ledger is rebuilt" in line


# -- 2. one agent per host ---------------------------------------------------


def test_a_second_report_on_one_state_dir_exits_2_naming_the_first(host, tmp_path):
    first = cli(["report", "--interval", "3600"], tmp_path, host,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        lock = host.state_dir / identity.LOCK_FILE
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if lock.exists() and lock.read_text().strip() == str(first.pid):
                break
            assert first.poll() is None, first.communicate()
            time.sleep(0.2)
        second = cli(["report", "--periodic", "1"], tmp_path, host)
    finally:
        first.terminate()
        first.communicate(timeout=60)
    assert second.returncode == 2, second.stderr
    (line,) = said(second.stderr).splitlines()
    assert "pid %d" % first.pid in line and str(host.state_dir) in line, line


def test_the_state_dir_lock_is_held_for_the_agents_life(tmp_path):
    held = identity.StateDirLock(str(tmp_path))
    with held:
        child = subprocess.run(
            [sys.executable, "-c",
             "import sys\nfrom compute_plugins.compute import identity\n"
             "try:\n identity.StateDirLock(sys.argv[1]).__enter__()\n"
             "except identity.AgentRunning as e:\n print(e)\n",
             str(tmp_path)], capture_output=True, text=True, timeout=60,
            env={**os.environ, "PYTHONPATH": os.getcwd()})
        assert "pid %d" % os.getpid() in child.stdout, child
    with identity.StateDirLock(str(tmp_path)):
        pass   # free again once released


def test_a_second_agent_for_the_host_cannot_take_it_and_a_fenced_one_stops(
        host, tmp_path):
    claimed(host)
    # another state directory, the same host name: another node
    other = agent_in(host, tmp_path / "other-state")
    with pytest.raises(AgentLeaseHeld) as info:
        other.run_once()
    assert host.agent.node.uuid in str(info.value)
    assert isinstance(info.value, exception.InputError)
    # the first one hangs: its lease lapses, the other takes over ...
    host.agent.lease_duration = other.lease_duration = 1.0
    host.agent._renew_at = 0.0
    host.agent.poll()
    time.sleep(1.2)
    # (its own ledger is empty while the store holds the host's claim)
    other.rebuild_ledger = True
    assert other.run_once().ok
    # ... and the first one's next write is refused: it stops
    host.decide()
    with pytest.raises(Fenced) as fenced:
        host.agent.poll()
    assert other.node.uuid in str(fenced.value)


# -- 1. host identity ---------------------------------------------------------


def test_a_renamed_host_refuses_to_start(host, tmp_path):
    consumer = claimed(host)
    new = host.name + "-renamed"
    (host.snapshot / "host.json").write_text(json.dumps({"hostname": new}))
    with pytest.raises(identity.HostRenamed) as info:
        host.start_agent()
    message = str(info.value)
    assert host.name in message and new in message
    assert "compute-plugins host rename %s %s" % (host.name, new) in message
    proc = cli(["report", "--periodic", "1"], tmp_path, host)
    assert proc.returncode == 2, proc.stderr
    (line,) = said(proc.stderr).splitlines()
    assert "host rename" in line
    # nothing registered under the new name
    assert host.store.get_host(new) is None
    assert consumer in host.agent.ledger


def test_host_rename_moves_providers_ledger_and_store_records(host, tmp_path,
                                                             placement_url):
    consumer = claimed(host)
    old = host.name
    allocations = host.allocations(consumer)
    root = host.placement.client().get(
        "/resource_providers?name=%s" % old)["resource_providers"][0]["uuid"]
    new = old + "-renamed"
    rename = ["--placement-url", placement_url, "host", "rename", old, new]
    # refused while an agent runs on the state directory: exit 2, nothing moved
    with identity.StateDirLock(str(host.state_dir)):
        busy = cli(rename, tmp_path, host)
    assert busy.returncode == 2, busy.stderr
    (line,) = said(busy.stderr).splitlines()
    assert "pid %d" % os.getpid() in line
    assert host.store.get_host(old) is not None
    proc = cli(rename, tmp_path, host)
    assert proc.returncode == 0, proc.stderr
    assert old in proc.stdout and new in proc.stdout
    (host.snapshot / "host.json").write_text(json.dumps({"hostname": new}))
    host.name = new
    agent = host.start_agent()
    result = agent.run_once()
    assert result.ok, (result.periodic.error, result.error)
    assert result.releases == [] and consumer in agent.ledger
    client = host.placement.client()
    assert client.get("/resource_providers?name=%s" % new)["resource_providers"][0][
        "uuid"] == root
    assert client.get("/resource_providers?name=%s" % old)["resource_providers"] == []
    assert host.allocations(consumer) == allocations
    assert host.store.get_host(old) is None
    assert host.store.active_decision(consumer).host == new
    assert len(pinned_cpus(host.published())) == 4


def test_a_hung_report_taken_over_stops_with_one_line(host, tmp_path):
    """The agent hangs (SIGSTOP) past its lease, another node takes the
    host over; resumed, the agent's next renewal is refused and it stops:
    one line, exit 1, nothing written after."""
    conf_extra = tmp_path / "lease.conf"
    conf_extra.write_text("[compute]\nagent_lease_duration = 3\n"
                          "claim_poll_interval = 0.2\n")
    first = cli(["--config-file", str(conf_extra), "report", "--interval", "3600"],
                tmp_path, host, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while host.store.get_lease(host.name) is None or host.store.get_host(
                host.name) is None:
            assert time.monotonic() < deadline and first.poll() is None, \
                first.communicate()
            time.sleep(0.2)
        os.kill(first.pid, signal.SIGSTOP)
        time.sleep(3.5)
        taken = host.store.acquire_lease(host.name, "0" * 8 + "-0000-4000-8000-"
                                         + "0" * 12, "the test", 60)
        generation = host.store.get_host(host.name).generation
        os.kill(first.pid, signal.SIGCONT)
        out, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGCONT)
            first.kill()
            first.communicate()
    assert first.returncode == 1, err
    (line,) = said(err).splitlines()
    assert "lease (epoch" in line and taken.node in line and "the agent stops" in line
    assert "Traceback" not in err
    assert host.store.get_host(host.name).generation == generation


def test_a_lost_ledger_and_a_recreated_store_refuse_on_placements_allocations(host):
    """Both the ledger and the store lost the claim: Placement still has
    its allocation on the host's providers, and the agent refuses."""
    consumer = claimed(host)
    Path(host.agent.ledger.path).unlink()
    host.store.close()
    for suffix in ("", "-wal", "-shm"):
        path = Path(host.store_url[len("sqlite:///"):] + suffix)
        if path.exists():
            path.unlink()
    host.store = HostStateStore(host.store_url)
    restarted = host.start_agent()
    with pytest.raises(LedgerMissing) as info:
        restarted.run_once()
    message = str(info.value)
    assert "Placement holds allocations of 1 consumer" in message
    assert consumer in message and restarted.ledger.path in message
    # nothing published as free, nothing released
    assert host.store.get_host(host.name) is None
    assert host.allocations(consumer)


# -- review: host rename refused or interrupted half-way ------------------------


def _rename(host: Host, new: str):
    from compute_plugins.compute.rename import rename_node
    return rename_node(str(host.state_dir), host.name, new, host.placement.client(),
                       host.store)


def test_a_rename_refused_by_placement_changes_nothing(host, tmp_path, placement_url):
    """review: the new name taken in Placement was found after the store's
    records had been moved: the agent restarted under the old name then
    freed the claim (its decision now named another host) and deleted its
    allocation, while the guest ran."""
    from compute_plugins.compute.rename import RenameError

    consumer = claimed(host)
    allocations = host.allocations(consumer)
    new = host.name + "-taken"
    host.placement.client().post("/resource_providers", {"name": new})
    with pytest.raises(RenameError, match="already has a provider named"):
        _rename(host, new)
    proc = cli(["--placement-url", placement_url, "host", "rename", host.name, new],
               tmp_path, host)
    assert proc.returncode == 2, proc.stderr
    (line,) = said(proc.stderr).splitlines()
    assert "already has a provider named %s" % new in line
    assert host.store.active_decision(consumer).host == host.name
    assert host.store.get_host(host.name) is not None
    restarted = host.start_agent()
    result = restarted.run_once()
    assert result.ok and result.releases == [], (result.error, result.releases)
    assert consumer in restarted.ledger and host.allocations(consumer) == allocations


def test_a_rename_interrupted_after_the_store_is_finished_by_running_it_again(host):
    """review: "run it again if it stopped half-way" was refused once the
    store's step was done (the new name then has decisions in force)."""
    consumer = claimed(host)
    old, new = host.name, host.name + "-renamed"
    # the first run stopped after the store's step
    host.store.rename_host(old, new, host.agent.node.uuid)
    done = _rename(host, new)
    assert done.claims == 1 and done.providers
    assert host.store.active_decision(consumer).host == new
    assert identity.read(str(host.state_dir)).host == new


def test_a_rename_interrupted_between_the_ledgers_is_finished_by_running_it_again(host):
    consumer = claimed(host)
    old, new = host.name, host.name + "-renamed"
    source = Path(host.agent.ledger.path)
    kept = source.read_text()
    _rename(host, new)
    # it stopped after writing the new ledger, before removing the old one
    source.write_text(kept)
    (host.state_dir / "compute_node.json").unlink()
    identity.write(str(host.state_dir), old, host.agent.node.uuid)
    done = _rename(host, new)
    assert not source.exists()
    assert consumer in json.loads((host.state_dir / ("%s.ledger.json" % new))
                                  .read_text())["claims"]
    assert identity.read(str(host.state_dir)).host == new and done.new == new


def test_a_rename_onto_a_name_whose_agent_runs_is_refused(host, tmp_path):
    """review: another node's agent holding the new name's lease (started,
    not published yet) or the old name's (an agent of another state
    directory) was not looked at: its lease was dropped under it."""
    consumer = claimed(host)
    new = host.name + "-renamed"
    other = "11111111-1111-4111-8111-111111111111"
    host.store.acquire_lease(new, other, "pid 9 on elsewhere", 60)
    with pytest.raises(AgentLeaseHeld, match="pid 9 on elsewhere"):
        _rename(host, new)
    assert host.store.active_decision(consumer).host == host.name
    # refused: the node keeps its name, its agent starts
    assert identity.ensure(str(host.state_dir), host.name).renaming is None
    host.store.end_lease(host.store.get_lease(new))
    # the old name's lease held by another node (another state directory)
    with host.store.engine.begin() as conn:
        conn.execute(sa.update(schema.leases).where(schema.leases.c.host == host.name)
                     .values(node=other, holder="pid 8 on elsewhere"))
    with pytest.raises(AgentLeaseHeld, match="pid 8 on elsewhere"):
        _rename(host, new)
    assert host.store.active_decision(consumer).host == host.name
    assert host.store.get_lease(host.name).node == other
    # its own node's lease (the agent was killed: the state-dir lock is
    # free) does not stop it, nor an ended lease on the new name
    with host.store.engine.begin() as conn:
        conn.execute(sa.update(schema.leases).where(schema.leases.c.host == host.name)
                     .values(node=host.agent.node.uuid))
    assert _rename(host, new).decisions == 1


class _DyingPlacement:
    """A Placement client whose ``after``-th PUT fails (the rename killed
    there)."""

    def __init__(self, client, after):
        self.client, self.after = client, after

    def get(self, *args, **kwargs):
        return self.client.get(*args, **kwargs)

    def put(self, *args, **kwargs):
        self.after -= 1
        if self.after < 0:
            raise KeyboardInterrupt("killed")
        return self.client.put(*args, **kwargs)


def test_no_agent_starts_while_a_rename_is_unfinished(host):
    """review: a rename stopped after the store's step (records under the
    new name) let the agent start under the old name: its claims'
    decisions named another host, it freed them. And run again after some
    children were renamed, a new name OLD_x renamed them OLD_x_x."""
    from compute_plugins.compute.rename import rename_node

    consumer = claimed(host)
    old, new = host.name, host.name + "_2"
    with pytest.raises(KeyboardInterrupt):
        rename_node(str(host.state_dir), old, new,
                    _DyingPlacement(host.placement.client(), 1), host.store)
    with pytest.raises(identity.RenameUnfinished) as info:
        host.start_agent()
    assert "host rename %s %s" % (old, new) in str(info.value)
    assert isinstance(info.value, exception.InputError)
    assert consumer in json.loads(Path(host.agent.ledger.path).read_text())["claims"]
    done = _rename(host, new)
    assert done.claims == 1
    names = [rp["name"] for rp in host.placement.client().get(
        "/resource_providers")["resource_providers"] if rp["name"].startswith(old)]
    assert new in names and not [n for n in names if n.startswith(new + "_2")], names
    assert identity.read(str(host.state_dir)).renaming is None


def _store_file(host: Host) -> Path:
    return Path(host.store_url[len("sqlite:///"):])


def test_a_store_restored_from_a_backup_gets_the_lost_claims_back(host, tmp_path):
    """review: a store restored from a backup (the other way back from a
    corrupt one) keeps its uuid, so it was not taken as a new store: the
    claims made after the backup, their decisions lost, were freed at the
    agent's first periodic and their allocations deleted, the guests
    running -- item 3's double allocation again."""
    import sqlite3

    first = claimed(host)
    backup = tmp_path / "backup.sqlite"
    with sqlite3.connect(_store_file(host)) as src, sqlite3.connect(backup) as dst:
        src.backup(dst)
    second = host.decide()
    assert host.agent.poll().claimed
    allocations = host.allocations(second)
    # the store is lost, restored from the backup; a scheduler decides
    # again before the agent restarts (the decision ids go on from the
    # backup's: the lost claim's id is another consumer's now)
    host.store.close()
    for suffix in ("", "-wal", "-shm"):
        path = Path(str(_store_file(host)) + suffix)
        if path.exists():
            path.unlink()
    with sqlite3.connect(backup) as src, sqlite3.connect(_store_file(host)) as dst:
        src.backup(dst)
    host.store = HostStateStore(host.store_url)
    assert host.store.active_decision(second) is None
    third = host.decide()
    assert host.store.active_decision(third).id == host.agent.ledger.get(
        second).decision_id
    restarted = host.start_agent()
    result = restarted.run_once()
    assert result.releases == [], result.releases
    assert first in restarted.ledger and second in restarted.ledger
    assert host.allocations(second) == allocations
    decision = host.store.active_decision(second)
    assert decision is not None and decision.status == DecisionStatus.CLAIMED
    assert restarted.ledger.get(second).decision_id == decision.id
    assert len(pinned_cpus(host.published())) == len(restarted.ledger) * 4
    again = restarted.run_once()
    assert again.releases == [] and second in restarted.ledger


def test_rebuild_ledger_with_only_placements_allocations_left_is_refused(host):
    """review: the ledger and the store both lost the claim; the refusal
    said "rebuild the ledger from the store with --rebuild-ledger", which
    rebuilt nothing from the empty store and started the agent with an
    empty ledger over Placement's allocation: its CPUs given again."""
    consumer = claimed(host)
    Path(host.agent.ledger.path).unlink()
    host.store.close()
    for suffix in ("", "-wal", "-shm"):
        path = Path(str(_store_file(host)) + suffix)
        if path.exists():
            path.unlink()
    host.store = HostStateStore(host.store_url)
    with pytest.raises(LedgerMissing) as info:
        host.start_agent().run_once()
    assert "--rebuild-ledger" not in str(info.value)
    restarted = host.start_agent()
    restarted.rebuild_ledger = True
    with pytest.raises(LedgerMissing) as info:
        restarted.run_once()
    message = str(info.value)
    assert consumer in message and "DELETE /allocations/" in message, message
    assert host.store.get_host(host.name) is None
    assert host.allocations(consumer)


def test_a_ledger_restored_from_an_older_copy_gets_the_stores_claims_back(host):
    """review: only a missing or empty ledger was checked against the
    store: a ledger restored from an older copy (a backup, a copied state
    directory) lacked the later claims, the agent published their CPUs as
    free while the store still held them claimed by this host."""
    first = claimed(host)
    ledger = Path(host.agent.ledger.path)
    older = ledger.read_text()
    second = host.decide()
    assert host.agent.poll().claimed
    ledger.write_text(older)
    restarted = host.start_agent()
    assert second not in restarted.ledger
    result = restarted.run_once()
    assert result.ok and result.releases == [], (result.error, result.releases)
    assert first in restarted.ledger and second in restarted.ledger
    assert restarted.ledger.get(second).decision_id == host.store.active_decision(
        second).id
    assert len(pinned_cpus(host.published())) == 8


def test_a_report_that_ends_lets_another_node_take_the_host_at_once(host, tmp_path,
                                                                    placement_url):
    """review: end_lease existed but nothing called it: after `report
    --periodic 1` (or a Ctrl-C) the host stayed held for
    agent_lease_duration, another node refused meanwhile."""
    proc = cli(["--placement-url", placement_url, "report", "--periodic", "1"],
               tmp_path, host)
    assert proc.returncode == 0, proc.stderr
    taken = host.store.acquire_lease(host.name, "2" * 8 + "-2222-4222-8222-" + "2" * 12,
                                     "the test", 60)
    assert taken.node.startswith("2222")


def test_rebuild_ledger_with_a_release_and_a_schedule_in_flight(host):
    """review: --rebuild-ledger while the store holds a releasing decision
    (released once rebuilt: its allocation deleted) and a pending one
    (claimed as usual, not rebuilt as a claim)."""
    from compute_plugins.hoststate import protocol

    releasing = claimed(host)
    protocol.request_release(host.store, releasing)
    pending = host.decide()
    Path(host.agent.ledger.path).unlink()
    restarted = host.start_agent()
    restarted.rebuild_ledger = True
    result = restarted.run_once()
    assert result.ok, (result.periodic.error, result.error)
    assert [r.consumer for r in result.releases] == [releasing]
    assert [c.consumer for c in result.claims if c.claimed] == [pending]
    assert host.store.latest_decision(releasing).status == DecisionStatus.RELEASED
    assert not host.allocations(releasing)
    assert list(restarted.ledger.entries()) == [pending]
    assert len(pinned_cpus(host.published())) == 4


def test_an_agent_cut_off_from_the_store_past_its_lease_stops_acting(host):
    """review: a store outage while renewing kept the lease in hand for as
    long as it lasted: past the lease's end (another node may hold the host
    by then) the agent still synced the host's tree to Placement at every
    periodic, whose calls carry no token."""
    import sqlite3

    store = HostStateStore(host.store_url, lock_timeout=0.2)
    try:
        agent = ComputeAgent.from_config(
            make_conf(host.state_dir, host.overrides), host.placement.client(), store,
            lambda: discover_host(host_snapshot=str(host.snapshot)))
        agent.lease_duration = 3.0
        assert agent.run_once().ok
        taken = time.monotonic()
        blocker = sqlite3.connect(_store_file(host), isolation_level=None)
        try:
            blocker.execute("BEGIN EXCLUSIVE")   # the store refuses this agent's writes
            agent._renew_at = 0.0                # (its renewal is due)
            within = agent.run_once()            # the renewal fails, the lease holds
            assert time.monotonic() - taken < 2.5, "too slow to test"
            assert within.periodic is not None and within.periodic.ok
            time.sleep(max(0.0, 3.1 - (time.monotonic() - taken)))
            lapsed = agent.run_once()
            assert lapsed.periodic is None and not lapsed.calls, lapsed
            assert "lease" in lapsed.error and "Placement" in lapsed.error
            assert not agent.poll().active
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        back = agent.run_once()                  # renewed: nobody took the host
        assert back.ok and back.periodic is not None, (back.error, back.periodic)
    finally:
        store.close()


def test_an_agent_killed_while_republishing_to_a_recreated_store_keeps_the_claim(host):
    """review: kill -9 between a claim republished to a recreated store and
    its new decision id recorded in the ledger: restarted, the republish
    was refused (the decision exists), and the ledger's old id made the
    claim stale: freed while the store held it claimed."""
    consumer = claimed(host)
    entry = host.agent.ledger.get(consumer)
    host.store.close()
    for suffix in ("", "-wal", "-shm"):
        path = Path(str(_store_file(host)) + suffix)
        if path.exists():
            path.unlink()
    host.store = HostStateStore(host.store_url)
    # (another host's decision first: the new store's ids are not the old's)
    host.store.submit_decision("9" * 8 + "-9999-4999-8999-" + "9" * 12, "other-host",
                               entry.spec_json)
    # what the killed agent got through: the decision, not the ledger
    host.store.fenced(host.store.acquire_lease(
        host.name, host.agent.node.uuid, "the killed agent", 60)).restore_claim(
            consumer, host.name, entry.spec_json)
    restarted = host.start_agent()
    result = restarted.run_once()
    assert result.ok and result.releases == [], (result.error, result.releases)
    assert restarted.ledger.get(consumer).decision_id == host.store.active_decision(
        consumer).id
    assert len(pinned_cpus(host.published())) == 4
    assert restarted.run_once().releases == []


def test_an_agent_paused_past_its_lease_deletes_no_allocation(host, tmp_path):
    """review: Placement's calls carry no token: an agent paused (SIGSTOP,
    a VM freeze) between its lease check and a release went on, once
    resumed, to delete the consumer's allocations before its fenced store
    write was refused, the host another node's by then."""
    from compute_plugins.hoststate import protocol

    consumer = claimed(host)
    allocations = host.allocations(consumer)
    host.agent.lease_duration = 1.0
    host.agent._renew_at = 0.0
    host.agent.poll()                       # renewed for 1 s
    protocol.request_release(host.store, consumer)
    host.agent._renew_at = time.monotonic() + 3600   # paused right after its check
    time.sleep(1.2)
    other = "3" * 8 + "-3333-4333-8333-" + "3" * 12
    host.store.acquire_lease(host.name, other, "pid 3 on elsewhere", 60)
    with pytest.raises(Fenced):
        host.agent.poll()
    assert host.allocations(consumer) == allocations
    assert host.store.active_decision(consumer).status == DecisionStatus.RELEASING
