"""Fixtures of the host-state tests on SQLite: ``url``, a fresh database
file per test, and the shared cases' stores."""

from __future__ import annotations

import pytest

from tests.unit.hoststate.cases import make_store, store  # noqa: F401 - fixtures


@pytest.fixture
def url(tmp_path):
    return "sqlite:///%s" % (tmp_path / "state" / "host_state.sqlite")
