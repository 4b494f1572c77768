"""The embedded Placement's kept table aliases (:mod:`compute_plugins.
placement.aliases`): the same SQL and the same answers as Placement as
shipped, on SQLite and on PostgreSQL.

Each run sends one script of requests (providers, inventories, traits,
aggregates, the scheduler's listings, allocation candidates, ``PUT``,
``POST``, ``GET`` and ``DELETE`` of allocations, a capacity conflict, a
generation conflict) to a new embedded Placement on an empty database,
with deterministic uuids; every statement sent to the database is
recorded. With the aliases kept and with Placement's own fresh ones, the
statements are the same one by one (their text and their parameters, time
stamps aside) and so are the answers.
"""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from compute_plugins.placement import aliases, embedded

NS = uuid.UUID("6b8e1c61-3a55-4a8f-8d6f-0c5a3b1f7e21")
HEADERS = {"OpenStack-API-Version": "placement 1.39"}


def uid(name: str) -> str:
    return str(uuid.uuid5(NS, name))


def script() -> Iterator[tuple[str, str, Any]]:
    """(method, url, body) of every request, in order."""
    roots = [uid("root%d" % i) for i in range(3)]
    children = [uid("child%d" % i) for i in range(3)]
    agg = uid("agg")
    yield "PUT", "/traits/CUSTOM_FAST", None
    for i, (root, child) in enumerate(zip(roots, children)):
        yield "POST", "/resource_providers", {"name": "root%d" % i, "uuid": root}
        yield "POST", "/resource_providers", {"name": "child%d" % i, "uuid": child,
                                              "parent_provider_uuid": root}
        yield "PUT", "/resource_providers/%s/inventories" % root, {
            "resource_provider_generation": 0,
            "inventories": {"DISK_GB": {"total": 100}}}
        yield "PUT", "/resource_providers/%s/inventories" % child, {
            "resource_provider_generation": 0,
            "inventories": {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 4096}}}
        yield "PUT", "/resource_providers/%s/traits" % child, {
            "resource_provider_generation": 1,
            "traits": ["CUSTOM_FAST"] if i else ["HW_CPU_X86_AVX2"]}
        yield "PUT", "/resource_providers/%s/aggregates" % root, {
            "resource_provider_generation": 1, "aggregates": [agg] if i else []}
    for query in ("resources=VCPU:1,MEMORY_MB:512", "resources=VCPU:1&required=CUSTOM_FAST",
                  "resources=VCPU:1&required=!CUSTOM_FAST", "resources=DISK_GB:10&member_of="
                  + agg, "resources=VCPU:1&in_tree=" + roots[1], "in_tree=" + children[2],
                  "uuid=" + roots[0], "name=child1", ""):
        yield "GET", "/resource_providers?" + query, None
    yield "GET", "/allocation_candidates?resources=VCPU:1,MEMORY_MB:512,DISK_GB:10", None
    yield "GET", "/resource_providers/%s" % children[0], None
    yield "GET", "/resource_providers/%s/inventories" % children[0], None
    project, user = uid("project"), uid("user")
    alloc = {"project_id": project, "user_id": user, "consumer_type": "INSTANCE"}
    first, second, third = uid("consumer1"), uid("consumer2"), uid("consumer3")
    yield "PUT", "/allocations/" + first, {
        "allocations": {children[0]: {"resources": {"VCPU": 2, "MEMORY_MB": 1024}}},
        "consumer_generation": None, **alloc}
    # NOTE: a move: the same consumer, its generation, another host
    yield "PUT", "/allocations/" + first, {
        "allocations": {children[1]: {"resources": {"VCPU": 2, "MEMORY_MB": 1024}}},
        "consumer_generation": 1, **alloc}
    # NOTE: a generation conflict (409 placement.concurrent_update)
    yield "PUT", "/allocations/" + first, {
        "allocations": {children[0]: {"resources": {"VCPU": 1}}},
        "consumer_generation": 1, **alloc}
    # NOTE: a capacity conflict (409)
    yield "PUT", "/allocations/" + second, {
        "allocations": {children[1]: {"resources": {"VCPU": 3}}},
        "consumer_generation": None, **alloc}
    yield "POST", "/allocations", {
        second: {"allocations": {children[2]: {"resources": {"VCPU": 1}},
                                 roots[2]: {"resources": {"DISK_GB": 10}}},
                 "consumer_generation": None, **alloc},
        third: {"allocations": {children[0]: {"resources": {"VCPU": 4}}},
                "consumer_generation": None, **alloc}}
    for url in ("/allocations/" + first, "/allocations/" + second,
                "/resource_providers/%s/allocations" % children[1],
                "/resource_providers/%s/usages" % children[0],
                "/resource_providers?resources=VCPU:1"):
        yield "GET", url, None
    for consumer in (first, second, first, third):
        yield "DELETE", "/allocations/" + consumer, None
    yield "GET", "/resource_providers?resources=VCPU:4,MEMORY_MB:4096", None


#: A time stamp as SQLite's driver is given it (a string).
TIME = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d")


def _plain(value: Any) -> Any:
    """A statement's parameter, a time stamp (now: another each run) aside."""
    if isinstance(value, (datetime.datetime, datetime.date)) or (
            isinstance(value, str) and TIME.fullmatch(value[:19])):
        return "<time>"
    return value


def run(url: str) -> tuple[list[Any], list[Any]]:
    """The answers (status, JSON, error codes) and the statements (SQL,
    parameters) of :func:`script` on a new embedded Placement at ``url``."""
    statements: list[Any] = []

    def statement(conn: Any, cursor: Any, text: str, params: Any, context: Any,
                  many: bool) -> None:
        if isinstance(params, dict):
            params = sorted((k, _plain(v)) for k, v in params.items())
        elif isinstance(params, (list, tuple)):
            params = [_plain(v) for v in params]
        statements.append((text, params))

    answers = []
    with embedded.EmbeddedPlacement(url) as service:
        client = service.client()
        sa.event.listen(service._engine, "before_cursor_execute", statement)
        for method, path, body in script():
            resp = client.adapter.request(path, method, json=body, headers=HEADERS,
                                          raise_exc=False)
            data = resp.json() if resp.content else None
            for error in (data or {}).get("errors", []):
                error.pop("request_id", None)  # NOTE: new on every request
            answers.append((method, path, resp.status_code, data))
    return answers, statements


def compare(urls: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """:func:`run` with the aliases kept (on ``urls[0]``), then as shipped
    (``urls[1]``): the same answers and statements. Returns the answers."""
    assert aliases.keep_aliases()
    kept, kept_sql = run(urls[0])
    kept_aliases = aliases.kept_aliases()
    assert kept_aliases is not None
    monkeypatch.setattr(aliases, "keep_aliases", lambda: False)
    aliases.restore()
    try:
        stock, stock_sql = run(urls[1])
        assert aliases.kept_aliases() is None
    finally:
        monkeypatch.undo()
        aliases.keep_aliases()
    assert kept == stock
    assert len(kept_sql) == len(stock_sql)
    for mine, theirs in zip(kept_sql, stock_sql):
        assert mine == theirs
    # NOTE: every kept function was called, and got its aliases kept
    used = {name for name, _alias in kept_aliases.kept()}
    assert used == {f for functions in aliases.CACHED.values() for f in functions}
    return kept


def check_conflicts(answers: list[Any]) -> None:
    """The script's conflicts answered as Placement does."""
    codes = {(path, status): [e.get("code") for e in (data or {}).get("errors", [])]
             for _method, path, status, data in answers if status >= 400}
    first, second = "/allocations/" + uid("consumer1"), "/allocations/" + uid("consumer2")
    assert codes[(first, 409)] == ["placement.concurrent_update"]
    assert codes[(second, 409)] == ["placement.undefined_code"]
    assert codes[(first, 404)] == ["placement.undefined_code"]
    assert [status for method, path, status, _ in answers if method == "DELETE"] == [
        204, 204, 404, 204]


def test_kept_aliases_send_the_same_sql_and_answers_on_sqlite(monkeypatch):
    check_conflicts(compare(("sqlite://", "sqlite://"), monkeypatch))


def test_kept_aliases_send_the_same_sql_and_answers_on_postgresql(postgresql_server,
                                                                  monkeypatch):
    admin = postgresql_server.admin()
    names = ["aliases_%s_%s" % (which, uuid.uuid4().hex[:8]) for which in ("kept", "stock")]
    try:
        with admin.cursor() as cur:
            for name in names:
                cur.execute("CREATE DATABASE %s" % name)
        urls = (postgresql_server.url(names[0]), postgresql_server.url(names[1]))
        check_conflicts(compare(urls, monkeypatch))
    finally:
        with admin.cursor() as cur:
            for name in names:
                cur.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)
        admin.close()


def test_one_alias_object_per_function_and_name():
    """Each kept function gets the same alias object on every call, and no
    other function gets it: two functions never share one (no
    correlation across statements)."""
    from placement.objects import consumer, project

    assert aliases.keep_aliases()
    kept = aliases.kept_aliases()
    assert kept is not None and consumer.sa is kept and project.sa is kept
    table = project.PROJECT_TBL

    def _get_project_by_external_id() -> Any:  # NOTE: same name, other code
        return kept.alias(table, name="p")

    stock = kept.alias(table, name="p")
    assert stock is not kept.alias(table, name="p")
    assert _get_project_by_external_id() is not kept.alias(table, name="p")
    with embedded.EmbeddedPlacement("sqlite://") as service:
        client = service.client()
        for _ in range(2):
            client.adapter.request("/allocations/" + uid("nobody"), "GET", headers=HEADERS)
    before = set(kept._aliases.values())
    with embedded.EmbeddedPlacement("sqlite://") as service:
        service.client().adapter.request("/allocations/" + uid("nobody"), "GET",
                                         headers=HEADERS)
    assert set(kept._aliases.values()) == before


def test_not_applied_on_a_release_not_compared(monkeypatch, caplog):
    """On an openstack-placement release whose queries were not compared
    the aliases are not kept: a warning names the release, and Placement's
    modules stay as shipped."""
    from placement.objects import allocation

    monkeypatch.setattr(aliases, "_release", lambda: "99.1.0")
    aliases.restore()
    try:
        assert aliases.problems() == [
            "openstack-placement 99.1.0 is not a release whose queries were compared "
            "with the aliases kept (16.0.0)"]
        assert aliases.keep_aliases() is False
        assert allocation.sa is sa
        assert "not a release whose queries were compared" in caplog.text
        with embedded.EmbeddedPlacement("sqlite://") as service:
            assert service.client().adapter.request("/allocations/" + uid("x"), "GET",
                                                    headers=HEADERS).status_code == 200
            assert allocation.sa is sa
    finally:
        monkeypatch.undo()
        aliases.keep_aliases()


def test_a_function_that_changed_is_named(monkeypatch):
    from placement.objects import user

    monkeypatch.setattr(user, "_get_user_by_external_id", lambda ctx, external_id: None)
    assert aliases.problems() == [
        "placement.objects.user has no function _get_user_by_external_id"]


def test_only_the_embedded_placement_keeps_them():
    """A process that talks to a remote Placement (or imports Placement's
    code) runs it as shipped: only starting an embedded one keeps them."""
    code = """
import sqlalchemy
from placement.objects import allocation
from compute_plugins.placement import client, connect, embedded
assert allocation.sa is sqlalchemy, allocation.sa
client.PlacementClient.for_url("http://127.0.0.1:9", token="admin")
assert allocation.sa is sqlalchemy, allocation.sa
with embedded.EmbeddedPlacement("sqlite://"):
    assert allocation.sa is not sqlalchemy
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "ok", out.stderr
