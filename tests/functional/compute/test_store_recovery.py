"""The host-state store recovers from its outages without a restart, and a
corrupt one is one line (issue 20, item 6).

Real parts as in :mod:`tests.functional.compute.test_agent`: the real
plugins on the numa4 snapshot, an embedded Placement, an SQLite store, the
command line as a subprocess where its exit code and line are the point.

NOTE: the tests run as root, whom ``chmod 0444`` does not stop from
writing. SQLite answers "attempt to write a readonly database" on a
connection that cannot write (opened while the file was read-only, or
``?mode=ro``); ``PRAGMA query_only`` makes a connection answer exactly that,
so the outage is: every connection opened while it lasts cannot write (and
the one in the pool neither), while a fresh one can once it is over.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa

from compute_plugins.hoststate import HostStateStore, StoreCorrupt, StoreUnavailable
from tests.functional.compute.test_agent import PINNED, Host
from tests.functional.compute.test_agent_reliability import (  # noqa: F401 - fixtures
    cli,
    placement,
    placement_url,
)
from tests.functional.placement.conftest import CLI, cli_env


@pytest.fixture
def host(tmp_path, placement):  # noqa: F811 - the module's Placement
    h = Host(tmp_path, placement)
    yield h
    h.store.close()


class ReadOnlyOutage:
    """While :attr:`on`, every connection the store opens cannot write;
    :meth:`start` makes the pooled ones read-only too (as if opened then)."""

    def __init__(self, store: HostStateStore) -> None:
        self.store = store
        self.on = False
        sa.event.listen(store.engine, "connect", self._connect)

    def _connect(self, dbapi_connection, record) -> None:
        if self.on:
            dbapi_connection.execute("PRAGMA query_only=ON")

    def start(self) -> None:
        self.on = True
        # NOTE: the connection the pool holds now (the agent's, idle).
        raw = self.store.engine.raw_connection()
        try:
            driver = raw.driver_connection
            assert driver is not None
            driver.execute("PRAGMA query_only=ON")
            with pytest.raises(Exception, match="readonly"):
                driver.execute(
                    "UPDATE hoststate_version SET version = version")
        finally:
            raw.close()

    def end(self) -> None:
        self.on = False


def store_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name == "compute_plugins.compute.agent" and r.levelno >= logging.INFO]


def test_a_read_only_store_recovers_with_one_line_per_outage(host, caplog):
    """The store read-only for a moment: the agent logged "attempt to write
    a readonly database" twice a second forever (a fresh connection could
    write); only a restart recovered."""
    assert host.agent.run_once().ok
    consumer = host.decide()
    outage = ReadOnlyOutage(host.store)
    caplog.set_level(logging.DEBUG)
    caplog.clear()
    outage.start()
    polls = [host.agent.poll() for _ in range(6)]
    # nothing claimed while it cannot write; said once, not once per poll
    assert [p.claimed for p in polls] == [[]] * 6
    assert "readonly" in (polls[0].error or "")
    assert [p.active for p in polls[1:]] == [False] * 5
    lines = store_records(caplog)
    assert [(r.levelname, r.getMessage()) for r in lines] == [(
        "WARNING", "host %s: host-state store unavailable (claims): attempt to write a "
        "readonly database; retrying every 1 s" % host.name)]
    # the outage ends: a fresh connection can write; the agent recovers
    # without a restart, and says so once
    outage.end()
    caplog.clear()
    recovered = host.agent.poll()
    assert [c.consumer for c in recovered.claimed] == [consumer], recovered.error
    assert recovered.error is None
    assert host.store.active_decision(consumer).status.value == "claimed"
    later = [host.agent.poll() for _ in range(3)]
    assert not any(p.active for p in later)
    lines = store_records(caplog)
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].levelname == "INFO"
    assert lines[0].getMessage().startswith(
        "host %s: host-state store back after " % host.name)
    # the published state shows the claim: the store's writes go through
    assert host.agent.run_once().ok


def test_the_periodic_during_an_outage_says_it_failed_without_logging_again(host, caplog):
    """A periodic during the outage carries the failure in its result (its
    report line), but the log says it once."""
    assert host.agent.run_once().ok
    host.decide()
    outage = ReadOnlyOutage(host.store)
    caplog.set_level(logging.DEBUG)
    outage.start()
    caplog.clear()
    host.agent.poll()
    periodic = host.agent.run_once()
    assert "readonly" in (periodic.error or "")
    assert len([r for r in store_records(caplog) if r.levelno >= logging.WARNING]) == 1
    outage.end()
    assert host.agent.poll().claimed


def corrupt(host: Host) -> Path:
    host.store.close()
    path = Path(host.store_url[len("sqlite:///"):])
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    path.write_bytes(os.urandom(8192))
    return path


def test_a_corrupt_store_is_refused_naming_the_file(host):
    path = corrupt(host)
    with pytest.raises(StoreCorrupt) as caught:
        HostStateStore(host.store_url)
    assert caught.value.path == str(path)
    assert "move it aside" in str(caught.value)


@pytest.mark.parametrize("command", ["report", "schedule", "release"])
def test_a_corrupt_store_is_one_line_and_exit_2(host, tmp_path, placement_url, command):  # noqa: F811
    """A corrupt store was "unexpected error (a bug)" and the agent exited."""
    assert host.agent.run_once().ok
    consumer = host.decide()
    assert host.agent.poll().claimed
    path = corrupt(host)
    flavor = tmp_path / "flavor.json"
    flavor.write_text(json.dumps(PINNED))
    args = {"report": ["report", "--periodic", "1"],
            "schedule": ["--placement-url", placement_url, "schedule", "--flavor",
                         str(flavor), "--timeout", "5"],
            "release": ["--placement-url", placement_url, "release", "--consumer",
                        consumer, "--no-wait"]}[command]
    if command == "report":
        proc = cli(args, tmp_path, host, timeout=120)
    else:
        conf_file = tmp_path / "client.conf"
        conf_file.write_text("[host_state]\nconnection = %s\n" % host.store_url)
        proc = subprocess.run(CLI + ["--config-file", str(conf_file)] + args,
                              capture_output=True, text=True, timeout=120, env=cli_env())
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("compute-plugins:")]
    assert lines == [lines[0]] and lines[0].startswith(
        "compute-plugins: error: host-state database file %s is corrupt (" % path), \
        proc.stderr
    assert "move it aside" in lines[0]
    # the file is left as it was, for the operator
    assert path.stat().st_size == 8192


def test_every_pooled_connection_is_dropped_with_the_failed_one(host):
    """Connections pooled by other threads (a scheduler's waiters) are
    dropped with the one that failed: one failure, not one per connection."""
    assert host.agent.run_once().ok
    held = [host.store.engine.raw_connection() for _ in range(3)]
    for raw in held:
        raw.driver_connection.execute("PRAGMA query_only=ON")
    for raw in held:
        raw.close()
    with pytest.raises(StoreUnavailable, match="readonly"):
        host.decide()
    consumer = host.decide()
    assert [c.consumer for c in host.agent.poll().claimed] == [consumer]


def test_a_running_agent_stops_on_a_corrupt_store(host, caplog):
    """Corrupt under a running agent: it stops (the command line's one line,
    exit 2), instead of failing every poll."""
    assert host.agent.run_once().ok
    path = corrupt(host)
    with pytest.raises(StoreCorrupt) as caught:
        host.agent.poll()
    assert caught.value.path == str(path)
