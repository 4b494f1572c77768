"""Fixtures of the compat tests."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from oslo_config import cfg

from tests.unit.resources import helpers

#: ``time.sleep`` before nova's modules are imported: os-brick (imported by
#: nova's libvirt driver) replaces it process-wide at import with a wrapper
#: of its own (``os_brick.utils._sleep``, to stub tenacity's sleeps).
_SLEEP = time.sleep


@pytest.fixture(autouse=True, scope="module")
def _restore_time_sleep() -> Iterator[None]:
    """Give the rest of the suite the real ``time.sleep`` back after each
    compat module (os-brick's wrapper calls its own saved copy, so nova's
    code is unaffected)."""
    yield
    time.sleep = _SLEEP


@pytest.fixture
def conf() -> Iterator[cfg.ConfigOpts]:
    """A private ConfigOpts with the framework and built-in plugin options."""
    conf, fixture = helpers.make_conf()
    yield conf
    fixture.cleanUp()
