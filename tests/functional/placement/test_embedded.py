"""The embedded Placement: built once, serialised, real."""

from __future__ import annotations

import threading
import uuid

import pytest

from compute_plugins.placement import client as pclient
from compute_plugins.placement import embedded
from compute_plugins.placement import exception as pexc


@pytest.fixture(scope="module")
def emb():
    placement = embedded.EmbeddedPlacement("sqlite://").start()
    yield placement
    placement.close()


def test_microversion_is_negotiated(emb):
    client = emb.client()
    assert client.negotiate() == pclient.WANTED
    assert client.calls.snapshot() == {"GET /": 1}


def test_refuses_a_placement_below_the_minimum(emb):
    client = emb.client()
    client.minimum = (1, 99)
    with pytest.raises(pexc.PlacementVersionTooOld, match="at least 1.99"):
        client.negotiate()


def test_concurrent_writers_lose_nothing(emb):
    """PlacementDirect was seen losing writes across threads; the app built
    once and called under one lock must not."""
    root = str(uuid.uuid4())
    setup = emb.client()
    setup.post("/resource_providers", {"name": "threads-" + root,
                                       "uuid": root})
    errors = []

    def writer(i):
        client = emb.client()
        try:
            for j in range(5):
                client.post("/resource_providers", {
                    "name": "threads-%s-%d-%d" % (root, i, j),
                    "parent_provider_uuid": root})
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    listing = setup.get("/resource_providers?in_tree=%s" % root)
    assert len(listing["resource_providers"]) == 1 + 6 * 5


def test_only_one_embedded_placement_binds_the_database(emb):
    with pytest.raises(RuntimeError, match="another embedded Placement"):
        embedded.EmbeddedPlacement("sqlite://").start()


def test_stopped_is_unreachable_then_back(emb):
    client = emb.client()
    client.negotiate()
    emb.stop()
    try:
        with pytest.raises(pexc.PlacementUnreachable,
                           match="embedded Placement is stopped"):
            client.get("/resource_providers")
    finally:
        emb.start()
    assert "resource_providers" in client.get("/resource_providers")


def test_a_placement_that_does_not_answer_times_out():
    """A hung Placement fails the request (and so the periodic), not the agent."""
    import socket
    import time

    from compute_plugins.placement import client as pclient
    from compute_plugins.placement import exception as pexc

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)  # accepts the connection, never answers
        url = "http://127.0.0.1:%d" % server.getsockname()[1]
        client = pclient.PlacementClient.for_url(url, timeout=0.5)
        started = time.monotonic()
        with pytest.raises(pexc.PlacementUnreachable, match=url):
            client.get("/resource_providers")
        assert time.monotonic() - started < 10


def test_each_schema_is_checked_once_and_bad_bodies_are_still_refused(emb, monkeypatch):
    """Placement validates every request body against its JSON schema;
    jsonschema checked the schema itself on every request (a quarter of the
    embedded Placement's CPU at 1,000 hosts). It is checked once now, and a
    body that breaks the schema still gets Placement's 400 and message."""
    import jsonschema
    from placement.schemas import resource_provider

    # NOTE: the validator class Placement's schemas get (the latest draft).
    validator = jsonschema.validators.validator_for(
        resource_provider.POST_RESOURCE_PROVIDER_SCHEMA)
    checked = []
    original = validator.check_schema.__func__

    def counting(cls, schema, *args, **kwargs):
        checked.append(id(schema))
        return original(cls, schema, *args, **kwargs)

    monkeypatch.setattr(validator, "check_schema", classmethod(counting))
    client = emb.client()
    for i in range(5):
        client.post("/resource_providers", {"name": "schema-%d-%s" % (i, uuid.uuid4())})
    assert len(checked) <= 1, checked
    with pytest.raises(pexc.PlacementError, match="JSON does not validate") as err:
        client.post("/resource_providers", {"name": "schema-bad", "colour": "red"})
    assert "Additional properties are not allowed ('colour' was unexpected)" in str(
        err.value)
    assert len(checked) <= 1, checked
