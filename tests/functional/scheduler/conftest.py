"""The fixtures of the scheduler's functional tests: a real Placement per
module (in-process, and served over HTTP for the command line) and a cloud
(host-state store, agents) per test."""

from __future__ import annotations

import threading

import pytest

from compute_plugins.placement import embedded
from tests.functional.request.hosts import Placement
from tests.functional.scheduler.cloud import Cloud


@pytest.fixture(scope="module")
def placement():
    emb = embedded.EmbeddedPlacement("sqlite://").start()
    yield Placement(emb)
    emb.close()


@pytest.fixture(scope="module")
def placement_url(placement):
    server = placement.emb.make_server()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.url


@pytest.fixture
def cloud(placement, tmp_path, request):
    """A cloud whose store pushes in-process (its agents wait for wake-ups),
    or polls for a test marked ``polling``."""
    # NOTE: a store per test: hosts of other tests stay in Placement but are
    # no host of this store, so the scheduler never considers them.
    cloud = Cloud(placement, str(tmp_path),
                  push=request.node.get_closest_marker("polling") is None)
    yield cloud
    cloud.close()
