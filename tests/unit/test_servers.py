"""The test session's own database servers (:mod:`tests.servers`): where
their binaries are missing, the tests that need them fail, naming the
Debian package to install, and never skip."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests import servers


@pytest.fixture
def nothing_installed(tmp_path, monkeypatch):
    """A machine without the server packages: empty PATH and system dirs."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(servers, "SYSTEM_DIRS", (str(tmp_path),))
    monkeypatch.setattr(servers, "PG_CTL_GLOB", str(tmp_path / "postgresql/*/bin/pg_ctl"))


@pytest.mark.parametrize(("server", "message"), [
    (servers.postgresql,
     "the PostgreSQL server is not installed (no pg_ctl on PATH or in %s): install "
     "the Debian package postgresql, listed in bindep.txt (tools/install-bindep.sh, "
     "run by `make test`, installs it)"),
    (servers.mariadb,
     "the MariaDB server is not installed (no mariadbd or mysqld on PATH or in %s): "
     "install the Debian package mariadb-server, listed in bindep.txt "
     "(tools/install-bindep.sh, run by `make test`, installs it)"),
])
def test_a_missing_server_fails_naming_its_package(nothing_installed, tmp_path, server,
                                                  message):
    where = tmp_path / "postgresql/*/bin" if server is servers.postgresql else tmp_path
    with pytest.raises(pytest.fail.Exception) as info:
        with server():
            pass
    assert str(info.value) == message % where


#: A test session's worker that started a server and is killed outright
#: (SIGKILL: a Ctrl-C whose teardown xdist cut short, an OOM kill): neither
#: its fixture's teardown nor mirakuru's atexit clean-up runs.
_KILLED_WORKER = """
import sys, time
from tests import servers
with getattr(servers, sys.argv[1])() as server:
    print(server.port, flush=True)
    time.sleep(600)
"""


def _processes_naming(text):
    """The pids of the processes whose command line contains ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    if text.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


@pytest.fixture
def shared_tmpdir(monkeypatch):
    """A $TMPDIR the servers' users can reach (pytest's tmp_path is 0700)."""
    base = tempfile.mkdtemp(prefix="rv-servers-")
    os.chmod(base, 0o755)
    monkeypatch.setenv("TMPDIR", base)
    monkeypatch.setattr(tempfile, "tempdir", base)
    yield Path(base)
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize(("server", "prefix"), [
    ("postgresql", "compute-plugins-pg-"), ("mariadb", "compute-plugins-mariadb-")])
def test_the_next_run_cleans_up_after_a_killed_one(shared_tmpdir, server, prefix):
    child = subprocess.Popen([sys.executable, "-c", _KILLED_WORKER, server],
                             stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).parents[2])
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
    finally:
        child.kill()
        child.wait()
    left = [p for p in shared_tmpdir.iterdir() if p.name.startswith(prefix)]
    assert len(left) == 1 and _processes_naming(str(left[0])), \
        "the killed run left its server and directory (port %d)" % port

    with getattr(servers, server)():
        # The next run's own server is up: the killed run's server stopped
        # and its directory removed.
        assert not left[0].exists()
        deadline = time.monotonic() + 10
        while _processes_naming(str(left[0])) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _processes_naming(str(left[0]))
    assert [p.name for p in shared_tmpdir.iterdir()] == []


def test_a_running_servers_directory_is_left_alone(shared_tmpdir):
    with servers.postgresql() as first:
        mine = [p for p in shared_tmpdir.iterdir()]
        with servers.postgresql() as second:
            assert all(p.exists() for p in mine)
            with first.admin() as conn, conn.cursor() as cur:
                cur.execute("SELECT 1")
                assert cur.fetchone() == (1,)
            assert second.port != first.port
