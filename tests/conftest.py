"""Fixtures for the whole suite.

Nothing a test runs may write to the real ``$HOME``: the state directory
(checkpoints of the plugins, the embedded Placement's database) defaults to
``$XDG_STATE_HOME/compute-plugins`` (``compute_plugins.conf.plugins.
default_state_dir``), so ``XDG_STATE_HOME`` points into a temporary
directory, for the session (module-scoped fixtures that start subprocesses)
and for each test. Subprocesses inherit ``os.environ``.

The database and broker tests get the session's own PostgreSQL, MariaDB and
RabbitMQ servers
(:mod:`tests.servers`), started when a test first needs one.

The suite starts hundreds of Python subprocesses (the command line, the
demo, ``placement serve``, the docs' commands). They keep their bytecode
in a directory of the run (``PYTHONPYCACHEPREFIX``): never in the
checkout, and compiled once per run even where bytecode is otherwise not
written (``PYTHONDONTWRITEBYTECODE``: each process compiled this
project's modules from source again, 0.2-0.4 s).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests import servers


@pytest.fixture(scope="session", autouse=True)
def _session_state_home(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_STATE_HOME",
                  str(tmp_path_factory.mktemp("xdg-state")))
        yield


@pytest.fixture(scope="session", autouse=True)
def _subprocess_bytecode(tmp_path_factory):
    # NOTE: one directory for the run's xdist workers (their base
    # temporaries' parent): a module is compiled once; Python writes each
    # file atomically.
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
        mp.setenv("PYTHONPYCACHEPREFIX", str(root / "pycache"))
        yield


@pytest.fixture(autouse=True)
def _state_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


@pytest.fixture(scope="session")
def postgresql_server() -> Iterator[servers.DatabaseServer]:
    """This session's (this xdist worker's) private PostgreSQL."""
    with servers.postgresql() as server:
        yield server


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[servers.DatabaseServer]:
    """This session's (this xdist worker's) private MariaDB."""
    with servers.mariadb() as server:
        yield server


@pytest.fixture(scope="session")
def rabbitmq_server() -> Iterator[servers.RabbitServer]:
    """This session's (this xdist worker's) private RabbitMQ."""
    with servers.rabbitmq() as server:
        yield server
