"""The embedded Placement: built once, serialised, real."""

from __future__ import annotations

import threading
import uuid
from typing import Any

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


def test_a_listing_in_one_tree_looks_for_room_in_that_tree_only(emb):
    """``GET /resource_providers?resources=...&in_tree=X``: Placement found
    the providers of the whole cloud with room for each class, passed
    every id back in an ``IN`` list and kept X's tree (at 10,000 hosts one
    call for one host took 418 ms of its CPU). It looks in X's tree only
    now: the statements carry that tree's providers, not every tree's,
    and the answers are the same: X's providers with room, none for an
    unknown provider, every tree's without ``in_tree``."""
    import sqlalchemy as sa

    client = emb.client()
    tag = uuid.uuid4().hex[:8]
    trees = []
    for i in range(12):
        root = str(uuid.uuid4())
        child = str(uuid.uuid4())
        client.post("/resource_providers", {"name": "room-%s-%d" % (tag, i), "uuid": root})
        client.post("/resource_providers", {"name": "room-%s-%d-c" % (tag, i),
                                            "uuid": child, "parent_provider_uuid": root})
        for rp in (root, child):
            client.put("/resource_providers/%s/inventories" % rp, {
                "resource_provider_generation": 0,
                "inventories": {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 4096}}})
        trees.append((root, child))
    # the first tree's child full: the tree's root only has room
    consumer = str(uuid.uuid4())
    client.put("/allocations/%s" % consumer, {
        "allocations": {trees[0][1]: {"resources": {"VCPU": 4}}}, "project_id": "p",
        "user_id": "u", "consumer_generation": None, "consumer_type": "INSTANCE"})
    query = "/resource_providers?resources=VCPU:2,MEMORY_MB:512"
    everywhere = {rp["uuid"] for rp in client.get(query)["resource_providers"]}
    ours = {rp for tree in trees for rp in tree}
    assert everywhere & ours == ours - {trees[0][1]}
    parameters: list[int] = []

    def statement(conn, cursor, text, params, context, many):
        parameters.append(len(params) if params else 0)

    sa.event.listen(emb._engine, "before_cursor_execute", statement)
    try:
        for root, child in trees[:3]:
            parameters.clear()
            found = client.get(query + "&in_tree=" + child)["resource_providers"]
            assert {rp["uuid"] for rp in found} == everywhere & {root, child}
            # NOTE: the cloud has 23+ providers with room: their ids were
            # the listing's IN list
            assert max(parameters) < 10, parameters
        assert client.get(query + "&in_tree=" + str(uuid.uuid4()))["resource_providers"] == []
    finally:
        sa.event.remove(emb._engine, "before_cursor_execute", statement)
    assert {rp["uuid"] for rp in client.get(query)["resource_providers"]} == everywhere


def test_a_tree_listing_answers_as_stock_placement_for_every_query_shape(emb,
                                                                        monkeypatch):
    """Review of issue 19: the listing scoped to one tree answers what
    stock Placement answers, for the query shapes the scheduler and nova
    send with ``in_tree``: resources of several classes on a child (not
    the root), required, any-of and forbidden traits, ``member_of`` and
    forbidden aggregates, and a sharing provider (outside every host's
    tree: stock lists it for no tree either), asked about by the root, a
    child and the sharing provider itself."""
    from placement.objects import resource_provider as rp_obj

    client = emb.client()
    tag = uuid.uuid4().hex[:8]
    agg = str(uuid.uuid4())
    inv = {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 8192},
           "DISK_GB": {"total": 100}}

    def provider(name: str, parent: str = "", traits: tuple[str, ...] = (),
                 aggs: tuple[str, ...] = (), inventory: Any = None) -> str:
        rp = str(uuid.uuid4())
        body: dict[str, Any] = {"name": "%s-%s" % (name, tag), "uuid": rp}
        if parent:
            body["parent_provider_uuid"] = parent
        client.post("/resource_providers", body)
        client.put("/resource_providers/%s/inventories" % rp, {
            "resource_provider_generation": 0, "inventories": inventory or inv})
        if traits:
            client.put("/resource_providers/%s/traits" % rp, {
                "resource_provider_generation": 1, "traits": list(traits)})
        if aggs:
            client.put("/resource_providers/%s/aggregates" % rp, {
                "resource_provider_generation": 1 + bool(traits),
                "aggregates": list(aggs)})
        return rp

    client.put("/traits/CUSTOM_SLOW", None)
    trees = []
    for i in range(4):
        root = provider("shape%d" % i, inventory={"DISK_GB": {"total": 10}},
                        aggs=(agg,) if i % 2 else ())
        children = [provider("shape%d-c%d" % (i, j), parent=root,
                             traits=("HW_CPU_X86_AVX2",) if j == i % 2 else ("CUSTOM_SLOW",))
                    for j in range(2)]
        trees.append([root, *children])
    shared = provider("shape-shared", traits=("MISC_SHARES_VIA_AGGREGATE",),
                      aggs=(agg,), inventory={"DISK_GB": {"total": 1000}})
    queries = [
        "resources=VCPU:2,MEMORY_MB:1024",
        "resources=VCPU:2,MEMORY_MB:1024,DISK_GB:5",
        "resources=DISK_GB:50",
        "resources=DISK_GB:5&required=HW_CPU_X86_AVX2",
        "resources=VCPU:1&required=in:HW_CPU_X86_AVX2,CUSTOM_SLOW",
        "resources=VCPU:1&required=!CUSTOM_SLOW",
        "resources=VCPU:1&required=HW_CPU_X86_AVX2,!CUSTOM_SLOW",
        "resources=DISK_GB:5&member_of=" + agg,
        "resources=VCPU:1&member_of=!" + agg,
        "resources=VCPU:9",
        "required=HW_CPU_X86_AVX2",
        "",
    ]
    asked = [rp for tree in trees for rp in tree[:2]] + [shared]

    def answers() -> list[list[str]]:
        return [sorted(rp["uuid"] for rp in client.get(
            "/resource_providers?" + q + ("&" if q else "") + "in_tree=" + rp)[
                "resource_providers"]) for q in queries for rp in asked]

    scoped = answers()
    assert any(scoped) and not all(scoped)
    monkeypatch.setattr(rp_obj, "res_ctx", rp_obj.res_ctx._module)
    monkeypatch.setattr(rp_obj, "_get_all_by_filters_from_db",
                        rp_obj._get_all_by_filters_from_db.__wrapped__)
    stock = answers()
    assert scoped == stock


def test_a_placement_whose_listing_differs_is_refused_at_start(monkeypatch):
    """Review of issue 19: the tree scoping leans on Placement's internals
    (``get_providers_with_resource``'s ``tree_root_id``, the listing's use
    of ``res_ctx``); a Placement where they differ would answer every
    tree's listing with a 500, or look in the whole cloud again without a
    word. It is refused when the embedded Placement starts, naming what
    differs (``scope_tree_listings``, which ``start`` calls)."""
    from placement.objects import research_context
    from placement.objects import resource_provider as rp_obj

    from compute_plugins import exception

    def without_tree(ctx: Any, rc_id: int, amount: int) -> Any:
        raise AssertionError("not called")

    scoped = rp_obj.res_ctx
    monkeypatch.setattr(rp_obj, "res_ctx", getattr(scoped, "_module", scoped))
    monkeypatch.setattr(rp_obj, "_get_all_by_filters_from_db", getattr(
        rp_obj._get_all_by_filters_from_db, "__wrapped__", rp_obj._get_all_by_filters_from_db))
    monkeypatch.setattr(research_context, "get_providers_with_resource", without_tree)
    with pytest.raises(exception.ComputePluginsError) as err:
        embedded.scope_tree_listings()
    assert "takes no tree_root_id (it takes ctx, rc_id, amount)" in str(err.value)
    assert "openstack-placement " in str(err.value)
    monkeypatch.undo()
    monkeypatch.setattr(rp_obj, "res_ctx", getattr(scoped, "_module", scoped))
    monkeypatch.setattr(rp_obj, "_get_all_by_filters_from_db", lambda context, filters: [])
    with pytest.raises(exception.ComputePluginsError) as err:
        embedded.scope_tree_listings()
    assert ("_get_all_by_filters_from_db does not use get_providers_with_resource, "
            "provider_ids_from_uuid, res_ctx" in str(err.value))


def test_the_embedded_client_reads_no_environment_per_request(emb, monkeypatch):
    """requests looked up the proxy settings and ``~/.netrc`` in the
    environment on every request (a third of the in-process client's CPU
    per request at 1,000 hosts, ``bench.scale.placement``), for a call
    that never leaves the process. The embedded client reads neither, and
    a proxy set in the environment still changes nothing."""
    import requests.sessions

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the environment was read for an in-process call")

    monkeypatch.setattr(requests.sessions, "get_environ_proxies", refuse)
    monkeypatch.setattr(requests.sessions, "get_netrc_auth", refuse)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "")
    client = emb.client()
    name = "env-%s" % uuid.uuid4().hex[:8]
    client.post("/resource_providers", {"name": name})
    assert [rp["name"] for rp in client.get("/resource_providers?name=" + name)[
        "resource_providers"]] == [name]
