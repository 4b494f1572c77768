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

#: The files that take longest, first: ``make test`` (pytest-xdist,
#: ``--dist loadfile --no-loadscope-reorder``) hands files to its workers in
#: this order, then the rest as collected. xdist's default order (files with
#: the most tests first) left the long files of one or a few tests (the
#: soak, the command line end to end, the benchmark's runs) to the end, one
#: worker busy with them while the other had nothing left. The soak and
#: the command line end to end first (a few tests of minutes each under
#: load, mostly waiting on their subprocesses: little CPU), then the others
#: by their measured CPU, roughly largest first (doc/source/benchmarks.md,
#: "The test suite's CPU, second pass").
LONGEST_FIRST = (
    "tests/functional/test_soak.py",
    "tests/functional/test_cli_end_to_end.py",
    "tests/functional/test_docs.py",
    "tests/functional/test_bench_scale.py",
    "tests/functional/demo/test_demo.py",
    "tests/functional/hoststate/test_store_servers.py",
    "tests/functional/scheduler/test_view.py",
    "tests/functional/placement/test_cli_report.py",
    "tests/functional/compute/test_agent_reliability.py",
    "tests/functional/scheduler/test_moves.py",
    "tests/functional/scheduler/test_move_faults.py",
    "tests/functional/placement/test_postgresql.py",
    "tests/functional/demo/test_example_plugin.py",
    "tests/functional/placement/test_serve.py",
    "tests/functional/scheduler/test_schedule.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """:data:`LONGEST_FIRST`'s files first, in that order; every file's
    tests together and in their own order (a stable sort by file)."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    root = config.rootpath

    def key(item: pytest.Item) -> int:
        try:
            path = item.path.relative_to(root).as_posix()
        except ValueError:
            return len(rank)
        return rank.get(path, len(rank))

    items.sort(key=key)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "polling: the scheduler tests' cloud fixture's agents poll "
        "the store every 0.05 s instead of waiting for its in-process push "
        "(a test about the poll path, or one that needs every periodic to "
        "read the store)")


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
