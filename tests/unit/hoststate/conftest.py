"""Fixtures of the host-state tests on SQLite: ``url`` and ``empty_url``,
a new database file per test, and the shared cases' stores."""

from __future__ import annotations

import pytest

from tests.unit.hoststate.cases import make_store, store  # noqa: F401 - fixtures


@pytest.fixture
def url(tmp_path):
    return "sqlite:///%s" % (tmp_path / "state" / "host_state.sqlite")


@pytest.fixture
def empty_url(url):
    """A database without tables (``url`` is a new file already)."""
    return url
