"""Concurrent writers on Placement scaled out over PostgreSQL.

Two ``compute-plugins placement serve`` processes share one PostgreSQL
database, as Placement API workers do in a large cloud. Four compute agents
(real plugins on a host snapshot, one report client each, half on each API
process) run periodics that rewrite an inventory every time, while an
operator adds traits to every provider through the other API process. The
writers race on provider generations for real (row locks in PostgreSQL,
two processes); every agent must converge and no operator trait may be lost.

The outcome does not depend on timing: an operator who lost
``OPERATOR_RACES`` read-modify-writes in a row to the agents waits for the
periodics in flight to end and writes while no new one starts (a turn, see
:class:`Turns`), as a person would retry when the agents are quiet. So the
operator finishes however slow the machine is, and every agent's last
periodic comes after the operator's last write: each agent meets at least
one generation conflict.

Uses the session's private PostgreSQL server (:mod:`tests.servers`); it
fails, not skips, when that server cannot start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins import host as host_discovery
from compute_plugins.cmd import report as report_cmd
from compute_plugins.placement import client as pclient
from compute_plugins.placement import exception as pexc
from compute_plugins.placement import report
from compute_plugins.plugin import names
from compute_plugins.runtime.manager import PluginManager
from tests.functional.placement.test_report import placement_state

SNAPSHOT = Path(__file__).parents[2] / "fixtures" / "hosts" / "sriov"
NODES = ["pg-node%d" % i for i in range(4)]
PERIODICS = 12
#: Read-modify-writes an operator loses to the agents before taking a turn.
OPERATOR_RACES = 5


@pytest.fixture(scope="module")
def database(postgresql_server):
    admin = postgresql_server.admin()
    name = "compute_plugins_%s" % uuid.uuid4().hex[:12]
    with admin.cursor() as cur:
        cur.execute("CREATE DATABASE %s" % name)
    yield postgresql_server.url(name)
    with admin.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)
    admin.close()


@pytest.fixture(scope="module")
def api_urls(database, tmp_path_factory):
    """Two Placement API processes on the one database."""
    workdir = tmp_path_factory.mktemp("pg")
    config = workdir / "placement.conf"
    config.write_text("[placement]\nembedded_connection = %s\n" % database)
    procs, urls = [], []
    try:
        for i in range(2):
            # NOTE: one after the other: the first creates the schema. Logs go
            # to a file: a pipe nobody reads would fill up and block the API.
            log = workdir / ("api%d.log" % i)
            with open(log, "w") as log_file:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "compute_plugins.cmd.main", "--config-file",
                     str(config), "placement", "serve", "--port", "0", "--no-token"],
                    stdout=subprocess.PIPE, stderr=log_file, text=True)
            procs.append(proc)
            line = proc.stdout.readline()
            assert line.startswith("Placement listening on "), line + log.read_text()
            urls.append(line.split()[3])
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


class Turns:
    """Agents' periodics run side by side; an operator takes a turn alone.

    ``periodic()`` wraps one agent periodic; ``alone()`` waits until no
    periodic is in flight and holds new ones back until it is left.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running = 0
        self._waiting = False
        self.taken = 0

    @contextlib.contextmanager
    def periodic(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._waiting)
            self._running += 1
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        with self._cond:
            self._waiting = True
            self._cond.wait_for(lambda: self._running == 0)
            self.taken += 1
        try:
            yield
        finally:
            with self._cond:
                self._waiting = False
                self._cond.notify_all()


class Agent:
    """One compute agent: real plugins on the snapshot, renamed to ``node``."""

    def __init__(self, node: str, url: str) -> None:
        self.node = node
        self.conf = cfg.ConfigOpts()
        conf_areas.register_all(self.conf)
        self.conf([], project="compute-plugins-tests", default_config_files=[],
                  default_config_dirs=[])
        self.manager = PluginManager(self.conf, auto_commit=False)
        self.client = report.ReportClient(pclient.PlacementClient.for_url(url),
                                          refresh_interval=0)
        self.host = dataclasses.replace(
            host_discovery.discover_host(host_snapshot=str(SNAPSHOT)), hostname=node)
        self.results: list[report.PeriodicResult] = []

    def periodic(self, reserved_mb: int) -> report.PeriodicResult:
        # NOTE: a new reserved memory every periodic: an inventory write
        # that races with the operator's trait writes on the same provider.
        self.conf.set_override("reserved_host_memory_mb", reserved_mb, "compute")
        # NOTE: a service cannot change this option while it runs, so the
        # manager keeps views built under the old value: forget them.
        self.manager.forget_views()
        self.manager.discover(self.host)
        result = report_cmd.run_periodic(self.client, self.manager, self.node)
        self.results.append(result)
        return result

    def run(self, start: threading.Barrier, turns: Turns,
            operator_done: threading.Event) -> None:
        """Periodics until the operator is done (at least PERIODICS)."""
        start.wait()
        i = 0
        while i < PERIODICS or not operator_done.is_set():
            with turns.periodic():
                self.periodic(512 + i % 64)
            i += 1
            # NOTE: real periodics are a minute apart; a short pause leaves
            # the operator's read-modify-write a chance to win a race.
            time.sleep(0.02)


def add_trait(client: pclient.PlacementClient, turns: Turns, rp_uuid: str,
              trait: str) -> None:
    """What an operator's client does: read, add, write; on a conflict read
    again, and after OPERATOR_RACES lost races write while the agents wait."""
    client.put("/traits/%s" % trait)

    def read_modify_write() -> None:
        current = client.get("/resource_providers/%s/traits" % rp_uuid)
        client.put("/resource_providers/%s/traits" % rp_uuid, {
            "traits": sorted(set(current["traits"]) | {trait}),
            "resource_provider_generation": current["resource_provider_generation"]})

    for attempt in range(OPERATOR_RACES):
        try:
            return read_modify_write()
        except pexc.GenerationConflict:
            # NOTE: also Placement's own 500 "Another thread concurrently
            # updated the resource provider data", which two API processes
            # racing on one provider's generation get from some handlers.
            time.sleep(0.01 * 2**attempt)
    with turns.alone():
        # NOTE: no agent writes now: a conflict here would be a real bug.
        read_modify_write()


def test_agents_and_an_operator_race_on_two_api_processes(api_urls, caplog):
    caplog.set_level("INFO", logger="compute_plugins.placement.report")
    agents = [Agent(node, api_urls[i % 2]) for i, node in enumerate(NODES)]
    for agent in agents:
        assert agent.periodic(500).ok
    operator = pclient.PlacementClient.for_url(api_urls[1])
    targets = {
        agent.node: [rp["uuid"] for rp in operator.get(
            "/resource_providers?in_tree=%s" % names.provider_uuid(agent.node))[
                "resource_providers"]]
        for agent in agents}
    turns = Turns()

    def operate(start: threading.Barrier) -> None:
        start.wait()
        try:
            for round_ in range(3):
                for uuids in targets.values():
                    for rp_uuid in uuids:
                        add_trait(operator, turns, rp_uuid, "CUSTOM_OPERATOR_%d" % round_)
        finally:
            operator_done.set()

    start = threading.Barrier(len(agents) + 1)
    operator_done = threading.Event()
    threads = [threading.Thread(target=a.run, args=(start, turns, operator_done))
               for a in agents]
    threads.append(threading.Thread(target=operate, args=(start,)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads)
    # NOTE: the operator writes each provider 3 times, so no write of an
    # agent meets more conflicts than its retries (4): none failed.
    assert [[r.error for r in agent.results if not r.ok] for agent in agents] == [[]] * 4

    for agent in agents:
        # One more periodic after the race: it converges and then is quiet.
        assert agent.periodic(600).ok
        assert agent.periodic(600).calls == {}
        state = placement_state(operator, names.provider_uuid(agent.node))
        assert sorted(state) == sorted([
            agent.node, agent.node + "_NUMA0", agent.node + "_pf_0000_02_10_7"])
        assert state[agent.node + "_NUMA0"]["inventory"]["MEMORY_MB"]["reserved"] == 600
        operator_traits = {"CUSTOM_OPERATOR_0", "CUSTOM_OPERATOR_1", "CUSTOM_OPERATOR_2"}
        for name, provider in state.items():
            assert operator_traits <= provider["traits"], name
        assert "CUSTOM_VNIC_TYPE_DIRECT" in state[agent.node + "_pf_0000_02_10_7"]["traits"]
    # The race was real: every agent wrote on a generation the operator had
    # moved (its periodic after the operator's last write at the latest).
    conflicted = caplog.text
    for agent in agents:
        assert "generation conflict on %s_NUMA0" % agent.node in conflicted, agent.node


def test_one_embedded_placement_answers_while_a_request_waits_on_the_database(database):
    """On PostgreSQL the embedded Placement takes requests side by side, as
    Placement's own API workers do (on SQLite one at a time): a request
    that waits on a row lock holds up no other request."""
    import sqlalchemy as sa

    from compute_plugins.placement import embedded

    rp = str(uuid.uuid4())
    with embedded.EmbeddedPlacement(database) as service:
        assert not service.serialised
        placement = service.client()
        placement.post("/resource_providers", {"uuid": rp, "name": "locked-" + rp[:8]})
        engine = sa.create_engine(database)
        done = threading.Event()
        outcome: list[object] = []

        def write() -> None:
            try:
                outcome.append(placement.put(
                    "/resource_providers/%s/inventories" % rp,
                    {"resource_provider_generation": 0,
                     "inventories": {"VCPU": {"total": 8}}}))
            except Exception as err:  # noqa: BLE001 - reported below
                outcome.append(err)
            done.set()

        writer = threading.Thread(target=write)
        try:
            with engine.connect() as conn, conn.begin():
                # NOTE: the provider's row locked: the inventory write (it
                # bumps the provider's generation) waits for this
                # transaction.
                conn.execute(sa.text("SELECT id FROM resource_providers WHERE uuid = :u "
                                     "FOR UPDATE"), {"u": rp})
                writer.start()
                assert not done.wait(1.0)
                # NOTE: in a thread: with one lock per process it would
                # wait for the writer, which waits for this transaction.
                read: list[object] = []
                reader = threading.Thread(target=lambda: read.append(placement.get(
                    "/resource_providers/%s" % rp)), daemon=True)
                reader.start()
                reader.join(20)
                assert read and read[0]["generation"] == 0, "the read waited"
                assert not done.is_set()
        finally:
            writer.join(60)
            engine.dispose()
        assert not writer.is_alive()
        assert isinstance(outcome[0], dict), outcome
        assert outcome[0]["inventories"]["VCPU"]["total"] == 8


def test_the_embedded_placement_serialises_only_sqlite():
    from compute_plugins.placement import embedded

    assert embedded.serialised("sqlite://")
    assert embedded.serialised("sqlite:////var/lib/placement.sqlite")
    assert not embedded.serialised("postgresql+psycopg2://u@h/placement")
    assert not embedded.serialised("mysql+pymysql://u@h/placement")


@contextlib.contextmanager
def only_running(pid: int, pids: list[int]) -> Iterator[None]:
    """Every process of ``pids`` but ``pid`` stopped (SIGSTOP): a new
    connection can only be accepted and answered by ``pid``."""
    import os
    import signal

    others = [p for p in pids if p != pid]
    for other in others:
        os.kill(other, signal.SIGSTOP)
    try:
        yield
    finally:
        for other in others:
            os.kill(other, signal.SIGCONT)


def test_placement_workers_each_serve_the_port_and_still_arbitrate(database, tmp_path):
    """``placement serve --workers 3`` (one thread each): three processes
    answer on the one port, each on its own (the others stopped); a request
    waiting on a row lock in one holds up no request in another; and a
    write with a stale generation in one after another's write still gets
    Placement's 409 and its error code. SIGTERM ends all three."""
    import os
    import signal

    import requests
    import sqlalchemy as sa

    config = tmp_path / "placement.conf"
    config.write_text("[placement]\nembedded_connection = %s\n" % database)
    log = tmp_path / "api.log"
    with open(log, "w") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "compute_plugins.cmd.main", "--config-file", str(config),
             "placement", "serve", "--port", "0", "--no-token", "--workers", "3",
             "--threads", "1"], stdout=subprocess.PIPE, stderr=log_file, text=True)
    engine = sa.create_engine(database)
    try:
        line = proc.stdout.readline()
        assert line.startswith("Placement listening on "), line + log.read_text()
        url = line.split()[3]
        children = Path("/proc/%d/task/%d/children" % (proc.pid, proc.pid))
        workers = [proc.pid] + [int(p) for p in children.read_text().split()]
        assert len(workers) == 3, workers
        headers = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.39",
                   "Connection": "close"}

        def call(method: str, path: str, body: Any = None) -> requests.Response:
            # NOTE: a new connection each time (Connection: close): it goes
            # to a process that accepts now.
            return requests.request(method, url + path, json=body, headers=headers,
                                    timeout=30)

        for pid in workers:
            with only_running(pid, workers):
                assert call("GET", "/").status_code == 200
        rp = str(uuid.uuid4())
        with only_running(workers[1], workers):
            assert call("POST", "/resource_providers",
                        {"uuid": rp, "name": "workers-" + rp[:8]}).status_code == 200
            written = call("PUT", "/resource_providers/%s/inventories" % rp, {
                "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}})
            assert written.status_code == 200, written.text
        with only_running(workers[2], workers):
            stale = call("PUT", "/resource_providers/%s/inventories" % rp, {
                "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4}}})
        assert stale.status_code == 409, stale.text
        assert stale.json()["errors"][0]["code"] == "placement.concurrent_update"
        # a write waiting on a row lock in one worker; another answers
        outcome: list[requests.Response] = []
        with engine.connect() as conn, conn.begin():
            conn.execute(sa.text("SELECT id FROM resource_providers WHERE uuid = :u "
                                 "FOR UPDATE"), {"u": rp})
            with only_running(workers[0], workers):
                writer = threading.Thread(target=lambda: outcome.append(call(
                    "PUT", "/resource_providers/%s/inventories" % rp,
                    {"resource_provider_generation": 1,
                     "inventories": {"VCPU": {"total": 16}}})))
                writer.start()
                deadline = time.monotonic() + 20
                waiting = 0
                while not waiting and time.monotonic() < deadline:
                    with engine.connect() as look:
                        waiting = look.execute(sa.text(
                            "SELECT count(*) FROM pg_stat_activity WHERE "
                            "wait_event_type = 'Lock'")).scalar()
                    time.sleep(0.05)
                assert waiting, "the write never reached the row lock"
            with only_running(workers[1], workers):
                read = call("GET", "/resource_providers/%s" % rp)
            assert read.status_code == 200 and read.json()["generation"] == 1
            assert not outcome
        writer.join(30)
        assert outcome and outcome[0].status_code == 200, outcome
        assert outcome[0].json()["inventories"]["VCPU"]["total"] == 16
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()
        # its workers ended and reaped with it
        assert [pid for pid in workers[1:] if os.path.exists("/proc/%d" % pid)] == []
    finally:
        engine.dispose()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _served_with_workers(database: str, tmp_path: Path, count: int
                         ) -> tuple[subprocess.Popen[str], list[int]]:
    """``placement serve --workers count`` on ``database``, listening, and
    its forked workers' pids (``count - 1``: the parent serves too)."""
    config = tmp_path / "placement.conf"
    config.write_text("[placement]\nembedded_connection = %s\n" % database)
    proc = subprocess.Popen(
        [sys.executable, "-m", "compute_plugins.cmd.main", "--config-file", str(config),
         "placement", "serve", "--port", "0", "--no-token", "--workers", str(count)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline()
    if not line.startswith("Placement listening on "):
        proc.kill()
        raise AssertionError(line + proc.communicate()[1])
    children = Path("/proc/%d/task/%d/children" % (proc.pid, proc.pid))
    workers = [int(p) for p in children.read_text().split()]
    if len(workers) != count - 1:
        proc.kill()
        proc.wait()
        raise AssertionError(workers)
    return proc, workers


def test_a_placement_worker_that_dies_stops_the_service(database, tmp_path):
    """A ``--workers`` process killed (the OOM killer, a crash) left the
    port served by the others and a zombie, and nobody was told: the
    service answered on with fewer workers than asked for. Its parent
    notices now: one line naming the worker and how it ended, the others
    stopped, exit 1 (a supervisor starts it again whole)."""
    import os
    import signal

    proc, workers = _served_with_workers(database, tmp_path, 3)
    try:
        os.kill(workers[0], signal.SIGKILL)
        assert proc.wait(timeout=20) == 1
        err = proc.stderr.read()
        assert ("Placement worker %d ended (killed by SIGKILL)" % workers[0]) in err, err
        assert [pid for pid in workers if os.path.exists("/proc/%d" % pid)] == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_placement_worker_that_crashes_says_where_before_it_ends(database, tmp_path):
    """A ``--workers`` process that crashes in C (a fatal signal: a
    driver's bug, a bad pointer) ended with nothing on stderr but its
    parent's line: now its Python stack comes first (``faulthandler``),
    then the parent's line with the signal."""
    import os
    import signal

    proc, workers = _served_with_workers(database, tmp_path, 2)
    try:
        os.kill(workers[0], signal.SIGSEGV)
        assert proc.wait(timeout=20) == 1
        err = proc.stderr.read()
        assert "Fatal Python error: Segmentation fault" in err, err
        assert ("Placement worker %d ended (killed by SIGSEGV)" % workers[0]) in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_embedded_placement_pings_only_connections_idle_a_while(database, monkeypatch):
    """issue 19: the embedded Placement's pool pinged (``SELECT 1``) every
    connection it handed out, and Placement takes one per transaction: a
    ``PUT /allocations`` was 16 statements and 7 pings. A connection given
    back less than ``IDLE_PING_SECONDS`` ago is handed out without a ping;
    one idle longer is pinged, and one the server closed meanwhile is
    replaced (the request answers as before, no 500). The answers and
    error codes are Placement's: 204, then 409 for a stale consumer
    generation, 400 for a body that does not validate."""
    import sqlalchemy as sa

    from compute_plugins.placement import embedded
    from tests import servers

    parsed = sa.engine.make_url(database)
    proxy = servers.QueryCounter(parsed.host, parsed.port)
    monkeypatch.setattr(embedded, "IDLE_PING_SECONDS", 0.5)
    rp, consumer = str(uuid.uuid4()), str(uuid.uuid4())
    try:
        url = proxy.url(database) + "?application_name=idle-ping"
        with embedded.EmbeddedPlacement(url) as service:
            placement = service.client()
            placement.post("/resource_providers", {"uuid": rp, "name": "ping-" + rp[:8]})
            placement.put("/resource_providers/%s/inventories" % rp,
                          {"resource_provider_generation": 0,
                           "inventories": {"VCPU": {"total": 8}}})
            body = {"allocations": {rp: {"resources": {"VCPU": 1}}}, "project_id": "p",
                    "user_id": "u", "consumer_generation": None,
                    "consumer_type": "INSTANCE"}
            proxy.queries.clear()
            assert placement.put("/allocations/%s" % consumer, body) is None
            statements = list(proxy.queries)
            assert statements and "SELECT 1" not in statements, statements
            with pytest.raises(pexc.Conflict) as stale:
                placement.put("/allocations/%s" % consumer, body)
            assert stale.value.status == 409
            with pytest.raises(pexc.PlacementHTTPError) as bad:
                placement.put("/allocations/%s" % consumer, {"allocations": {}})
            assert bad.value.status == 400
            # idle past the threshold: pinged before it is used
            time.sleep(0.6)
            proxy.queries.clear()
            assert placement.get("/allocations/%s" % consumer)["allocations"]
            assert proxy.queries[0] == "SELECT 1", proxy.queries
            # the server closed every pooled connection while they idled:
            # the ping finds it, a new connection answers
            terminate_backends(database, "idle-ping")
            time.sleep(0.6)
            assert placement.get("/allocations/%s" % consumer)["allocations"] == {
                rp: {"generation": 2, "resources": {"VCPU": 1}}}
    finally:
        proxy.close()


def test_a_connection_the_server_closed_just_now_is_replaced_not_a_500(database,
                                                                       monkeypatch):
    """Review of issue 19: a connection given back less than
    ``IDLE_PING_SECONDS`` ago is handed out without a ping; the server
    closing it in that time (a restart, a failover, an administrator's
    ``pg_terminate_backend``) made the next request on it fail with a 500,
    where the ping on every checkout replaced it. A connection the server
    closed is found without a round trip (its socket reads as closed) and
    replaced: the requests right after answer as before."""
    from compute_plugins.placement import embedded

    monkeypatch.setattr(embedded, "IDLE_PING_SECONDS", 3600.0)
    rp = str(uuid.uuid4())
    url = database + "?application_name=just-closed"
    with embedded.EmbeddedPlacement(url) as service:
        placement = service.client()
        placement.post("/resource_providers", {"uuid": rp, "name": "closed-" + rp[:8]})
        for round_ in range(2):
            assert placement.get("/resource_providers/%s" % rp)["uuid"] == rp
            terminate_backends(database, "just-closed")
            assert placement.get("/resource_providers/%s" % rp)["uuid"] == rp
            placement.put("/resource_providers/%s/inventories" % rp, {
                "resource_provider_generation": round_,
                "inventories": {"VCPU": {"total": 8 + round_}}})


def terminate_backends(database: str, application_name: str) -> None:
    """Close, server side, every connection to ``database`` named
    ``application_name``, as a restart or a failover does; back once
    every one is gone."""
    import sqlalchemy as sa

    admin = sa.create_engine(database)
    try:
        with admin.connect() as conn:
            killed = conn.execute(sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND application_name = :name"), {"name": application_name}).scalars().all()
            conn.commit()
            assert killed and all(killed), application_name
            deadline = time.monotonic() + 10
            while conn.execute(sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name"),
                    {"name": application_name}).scalar():
                assert time.monotonic() < deadline, application_name
                # NOTE: a transaction reads one snapshot of pg_stat_activity:
                # a backend still exiting at the first read was counted for
                # ever (the test failed after 10 s at load 5-10).
                conn.rollback()
                time.sleep(0.01)
    finally:
        admin.dispose()
