"""Fixtures of the compat tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from oslo_config import cfg

from tests.unit.resources import helpers


@pytest.fixture
def conf() -> Iterator[cfg.ConfigOpts]:
    """A private ConfigOpts with the framework and built-in plugin options."""
    conf, fixture = helpers.make_conf()
    yield conf
    fixture.cleanUp()
