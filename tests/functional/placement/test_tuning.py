"""The embedded Placement's kept table aliases (:mod:`compute_plugins.
placement.aliases`), remembered rows (:mod:`compute_plugins.placement.
lookups`), trimmed consumer writes (:mod:`compute_plugins.placement.
consumers`) and oslo.policy's checks inspected once (:mod:`compute_plugins.
placement.policy`): the same SQL (less the statements spared) and the same
answers as Placement as shipped, on SQLite, PostgreSQL and MariaDB.

Each run sends one script of requests (providers, inventories, traits,
aggregates, the scheduler's listings, allocation candidates, ``PUT``,
``POST``, ``GET`` and ``DELETE`` of allocations, capacity and generation
conflicts, an existing consumer said to be new, consumers moving between
projects, users and consumer types, a ``POST`` moving one consumer's
allocations to a new one, older microversions) to a new embedded
Placement on an empty database, with deterministic uuids; every statement
sent to the database is recorded. With the tuning and with Placement as
shipped the answers are the same, and so are the statements (their text
and their parameters, time stamps aside) but for those of the kinds the
tuning spares (:data:`SPARED`) and the one failed insert it adds
(:data:`ADDED`).
"""

from __future__ import annotations

import datetime
import difflib
import inspect
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from compute_plugins.placement import aliases, consumers, embedded, lookups, policy

NS = uuid.UUID("6b8e1c61-3a55-4a8f-8d6f-0c5a3b1f7e21")
HEADERS = {"OpenStack-API-Version": "placement 1.39"}


def uid(name: str) -> str:
    return str(uuid.uuid5(NS, name))


def script() -> Iterator[tuple[Any, ...]]:
    """(method, url, body[, microversion]) of every request, in order (the
    microversion 1.39 where none is given)."""
    roots = [uid("root%d" % i) for i in range(3)]
    children = [uid("child%d" % i) for i in range(3)]
    agg = uid("agg")
    yield "PUT", "/traits/CUSTOM_FAST", None
    for i, (root, child) in enumerate(zip(roots, children, strict=True)):
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
    # NOTE: a provider that does not exist (400; the new consumer stays)
    yield "PUT", "/allocations/" + uid("consumer7"), {
        "allocations": {uid("nowhere"): {"resources": {"VCPU": 1}}},
        "consumer_generation": None, **alloc}
    yield "POST", "/allocations", {
        second: {"allocations": {children[2]: {"resources": {"VCPU": 1}},
                                 roots[2]: {"resources": {"DISK_GB": 10}}},
                 "consumer_generation": None, **alloc},
        third: {"allocations": {children[0]: {"resources": {"VCPU": 4}}},
                "consumer_generation": None, **alloc}}
    # NOTE: the consumer moves to another project and user (both new), then
    # to another consumer type, then back to the first project
    other = {"project_id": uid("project2"), "user_id": uid("user2")}
    yield "PUT", "/allocations/" + first, {
        "allocations": {children[1]: {"resources": {"VCPU": 1, "MEMORY_MB": 512}}},
        "consumer_generation": 2, **alloc, **other}
    yield "PUT", "/allocations/" + first, {
        "allocations": {children[1]: {"resources": {"VCPU": 1, "MEMORY_MB": 512}}},
        "consumer_generation": 3, **alloc, **other, "consumer_type": "MIGRATION"}
    yield "PUT", "/allocations/" + first, {
        "allocations": {children[1]: {"resources": {"VCPU": 2, "MEMORY_MB": 1024}}},
        "consumer_generation": 4, **alloc}
    # NOTE: new consumers: of a new project and user, at microversions
    # without consumer types (1.28) and without consumer generations (1.12)
    fourth, fifth, sixth = uid("consumer4"), uid("consumer5"), uid("consumer6")
    yield "PUT", "/allocations/" + fourth, {
        "allocations": {children[2]: {"resources": {"MEMORY_MB": 256}}},
        "consumer_generation": None, "project_id": uid("project3"),
        "user_id": uid("user3"), "consumer_type": "INSTANCE"}
    yield "PUT", "/allocations/" + fifth, {
        "allocations": {children[2]: {"resources": {"MEMORY_MB": 256}}},
        "consumer_generation": None, "project_id": project, "user_id": user}, "1.28"
    yield "PUT", "/allocations/" + sixth, {
        "allocations": {children[2]: {"resources": {"MEMORY_MB": 256}}},
        "project_id": project, "user_id": user}, "1.12"
    yield "PUT", "/allocations/" + sixth, {
        "allocations": {children[2]: {"resources": {"MEMORY_MB": 128}}},
        "project_id": project, "user_id": user}, "1.12"
    # NOTE: a consumer's allocations emptied (the consumer goes)
    yield "PUT", "/allocations/" + fourth, {
        "allocations": {}, "consumer_generation": 1, "project_id": uid("project3"),
        "user_id": uid("user3"), "consumer_type": "INSTANCE"}
    for consumer in (fourth, fifth, sixth):
        yield "GET", "/allocations/" + consumer, None
    # NOTE: at 1.9 (at 1.38 on, PostgreSQL refuses Placement's query: a
    # GroupingError, a 500 either way)
    yield "GET", "/usages?project_id=" + uid("project2"), None, "1.9"
    yield "GET", "/usages?project_id=%s&user_id=%s" % (project, user), None, "1.9"
    for consumer in (fifth, sixth):
        yield "DELETE", "/allocations/" + consumer, None
    for url in ("/allocations/" + first, "/allocations/" + second,
                "/resource_providers/%s/allocations" % children[1],
                "/resource_providers/%s/usages" % children[0],
                "/resource_providers?resources=VCPU:1"):
        yield "GET", url, None
    # NOTE: a POST moving a consumer's allocations to a new one (as nova's
    # migrations do): the one emptied goes (Placement deletes it), the new
    # one is created by the POST
    eighth = uid("consumer8")
    yield "POST", "/allocations", {
        third: {"allocations": {}, "consumer_generation": 1, **alloc},
        eighth: {"allocations": {children[0]: {"resources": {"VCPU": 4}}},
                 "consumer_generation": None, **alloc, "consumer_type": "MIGRATION"}}
    for consumer in (third, eighth):
        yield "GET", "/allocations/" + consumer, None
    for consumer in (first, second, first, third):
        yield "DELETE", "/allocations/" + consumer, None
    yield "GET", "/resource_providers?resources=VCPU:4,MEMORY_MB:4096", None
    # NOTE: a custom class (not remembered: it may go) used, then deleted,
    # then asked for again; a new consumer type
    gold = uid("gold")
    yield "PUT", "/resource_classes/CUSTOM_GOLD", None
    yield "POST", "/resource_providers/%s/inventories" % roots[0], {
        "resource_provider_generation": 2, "resource_class": "CUSTOM_GOLD", "total": 2}
    yield "PUT", "/allocations/" + gold, {
        "allocations": {roots[0]: {"resources": {"CUSTOM_GOLD": 1}}},
        "consumer_generation": None, **alloc, "consumer_type": "MIGRATION"}
    yield "GET", "/allocations/" + gold, None
    yield "GET", "/resource_providers/%s/usages" % roots[0], None
    yield "DELETE", "/allocations/" + gold, None
    yield "DELETE", "/resource_providers/%s/inventories/CUSTOM_GOLD" % roots[0], None
    yield "DELETE", "/resource_classes/CUSTOM_GOLD", None
    yield "PUT", "/allocations/" + gold, {
        "allocations": {roots[0]: {"resources": {"CUSTOM_GOLD": 1}}},
        "consumer_generation": None, **alloc, "consumer_type": "MIGRATION"}
    yield "GET", "/resource_classes/CUSTOM_GOLD", None
    yield "GET", "/resource_classes/VCPU", None
    # NOTE: an existing consumer said to be new (409 placement.concurrent_update):
    # last, because on PostgreSQL the tuning's failed insert takes a number
    # of the consumers' id sequence (an internal id, in no answer), which
    # would number the consumers created after it otherwise
    # (the one the 400 above left)
    yield "PUT", "/allocations/" + uid("consumer7"), {
        "allocations": {roots[0]: {"resources": {"DISK_GB": 1}}},
        "consumer_generation": None, **alloc}


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
        for method, path, body, *version in script():
            headers = {"OpenStack-API-Version": "placement " + version[0]} if version else HEADERS
            resp = client.adapter.request(path, method, json=body, headers=headers,
                                          raise_exc=False)
            data = resp.json() if resp.content else None
            for error in (data or {}).get("errors", []):
                error.pop("request_id", None)  # NOTE: new on every request
            answers.append((method, path, resp.status_code, data))
    return answers, statements


#: Placement's read of every resource class or consumer type (its
#: per-request caches, ``placement.attribute_cache``).
READ_ALL = re.compile(r"SELECT (resource_classes|consumer_types)\.id, \1\.name, "
                      r"\1\.updated_at, \1\.created_at\s+FROM \1")

#: The statements the tuning may spare, by what they are: Placement's reads
#: of rows remembered (every resource class or consumer type, a project, a
#: user), of a consumer said to be new, and its deletion of consumers left
#: without allocations when there are none to check.
SPARED = {
    "every class or type": READ_ALL,
    "project": re.compile(r"SELECT p\.id, p\.external_id, p\.updated_at, p\.created_at\s+"
                          r"FROM projects AS p\s+WHERE p\.external_id = .*", re.S),
    "user": re.compile(r"SELECT u\.id, u\.external_id, u\.updated_at, u\.created_at\s+"
                       r"FROM users AS u\s+WHERE u\.external_id = .*", re.S),
    "consumer": re.compile(r"SELECT c\.id, c\.uuid, c\.consumer_type_id, .*"
                           r"WHERE c\.uuid = .*", re.S),
    # NOTE: an empty IN as PostgreSQL's and SQLite's dialects render it
    "no consumers to delete": re.compile(
        r"(SELECT consumers\.uuid\s+|DELETE )FROM consumers\s.*IN "
        r"(\(NULL\) AND \(1 != 1\)|\(SELECT 1 FROM \(SELECT 1\) WHERE 1!=1\))", re.S),
}
#: The statement the tuning may add: the insert of a consumer said to be
#: new that exists (it fails; Placement's own path follows).
ADDED = re.compile(r"INSERT INTO consumers \(uuid, project_id, user_id, .*", re.S)


def _kind(text: str, patterns: dict[str, re.Pattern[str]]) -> str | None:
    return next((kind for kind, pattern in patterns.items()
                 if pattern.fullmatch(text.strip())), None)


def differences(mine: list[Any], theirs: list[Any]) -> tuple[dict[str, int], int]:
    """How ``mine`` (the statements with the tuning) differ from ``theirs``
    (as shipped): the statements of :data:`SPARED` they lack, by kind, and
    how many of :data:`ADDED` they have more; any other difference fails
    (the first one shown, with the statements around it)."""
    # NOTE: a read in a transaction of its own goes with its BEGIN (SQLite:
    # oslo.db sends it; PostgreSQL's is implicit)
    mine = [s for s in mine if s[0] != "BEGIN"]
    theirs = [s for s in theirs if s[0] != "BEGIN"]
    # NOTE: aligned as a shortest edit (fewest added), each step a statement
    # of both, one of theirs spared or one of mine added: a greedy walk
    # cannot tell a consumer's insert added from one whose read was spared
    inf = len(mine) + len(theirs) + 1
    kinds = [_kind(text, SPARED) for text, _params in theirs]
    adds = [ADDED.fullmatch(text.strip()) is not None for text, _params in mine]
    cost = [[inf] * (len(theirs) + 1) for _ in range(len(mine) + 1)]
    cost[len(mine)][len(theirs)] = 0
    for i in range(len(mine), -1, -1):
        for j in range(len(theirs), -1, -1):
            best = cost[i][j]
            if i < len(mine) and j < len(theirs) and mine[i] == theirs[j]:
                best = min(best, cost[i + 1][j + 1])
            if j < len(theirs) and kinds[j] is not None:
                best = min(best, cost[i][j + 1])
            if i < len(mine) and adds[i]:
                best = min(best, cost[i + 1][j] + 1)
            cost[i][j] = best
    if cost[0][0] >= inf:
        shown = difflib.unified_diff([repr(s) for s in theirs], [repr(s) for s in mine],
                                     "as shipped", "with the tuning", n=2, lineterm="")
        sparable = {repr(s) for s, kind in zip(theirs, kinds, strict=True) if kind}
        raise AssertionError("the statements differ otherwise:\n" + "\n".join(
            line for line in shown if not (line[:1] == "-" and line[1:] in sparable)))
    spared: dict[str, int] = {}
    i = j = 0
    while i < len(mine) or j < len(theirs):
        if (i < len(mine) and j < len(theirs) and mine[i] == theirs[j]
                and cost[i + 1][j + 1] == cost[i][j]):
            i, j = i + 1, j + 1
        elif j < len(theirs) and kinds[j] is not None and cost[i][j + 1] == cost[i][j]:
            kind = str(kinds[j])
            spared[kind] = spared.get(kind, 0) + 1
            j += 1
        else:
            i += 1
    return spared, cost[0][0]


TUNINGS = (aliases.keep_aliases, lookups.remember_fixed_rows,
           consumers.trim_consumer_writes, policy.argspecs_once)


def _apply() -> None:
    for tune in TUNINGS:
        assert getattr(sys.modules[tune.__module__], tune.__name__)()


def compare(urls: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """:func:`run` with the tuning (on ``urls[0]``), then as shipped
    (``urls[1]``): the same answers, and the same statements less those the
    tuning spares (:func:`differences`). Returns the answers."""
    _apply()
    kept, kept_sql = run(urls[0])
    kept_aliases = aliases.kept_aliases()
    assert kept_aliases is not None
    for tune in TUNINGS:
        monkeypatch.setattr(sys.modules[tune.__module__], tune.__name__, lambda: False)
    for module in (aliases, lookups, consumers, policy):
        module.restore()  # type: ignore[attr-defined]
    try:
        stock, stock_sql = run(urls[1])
        assert aliases.kept_aliases() is None and not consumers.trimmed()
    finally:
        monkeypatch.undo()
        _apply()
    assert kept == stock
    spared, added = differences(kept_sql, stock_sql)
    # NOTE: each of them spared (once a row is known), the one insert added
    # (the existing consumer said to be new)
    reads = sum(1 for text, _params in stock_sql if READ_ALL.fullmatch(text.strip()))
    assert spared.pop("every class or type") > reads // 2, (spared, reads)
    assert set(spared) == {"project", "user", "consumer", "no consumers to delete"}, spared
    assert added == 1
    # NOTE: every kept function was called, and got its aliases kept
    used = {name for name, _alias in kept_aliases.kept()}
    assert used == {f for functions in aliases.CACHED.values() for f in functions}
    return kept


def check_conflicts(answers: list[Any]) -> None:
    """The script's conflicts and consumers answered as Placement does."""
    codes = {(path, status): [e.get("code") for e in (data or {}).get("errors", [])]
             for _method, path, status, data in answers if status >= 400}
    first, second = "/allocations/" + uid("consumer1"), "/allocations/" + uid("consumer2")
    assert codes[(first, 409)] == ["placement.concurrent_update"]
    assert codes[(second, 409)] == ["placement.undefined_code"]
    assert codes[(first, 404)] == ["placement.undefined_code"]
    assert [status for method, path, status, _ in answers if method == "PUT" and path == first
            ] == [204, 204, 409, 204, 204, 204]
    assert [status for method, path, status, _ in answers if path == second] == [
        409, 200, 204]
    seventh = "/allocations/" + uid("consumer7")
    assert [status for method, path, status, _ in answers if path == seventh] == [400, 409]
    assert codes[(seventh, 409)] == ["placement.concurrent_update"]
    assert [status for method, path, status, _ in answers if path == "/allocations"] == [
        204, 204]
    # NOTE: the third consumer went with its allocations (the POST)
    assert [status for method, path, status, _ in answers if method == "DELETE"] == [
        204, 204, 204, 204, 404, 404, 204, 204, 204]
    gold = "/allocations/" + uid("gold")
    assert [status for method, path, status, _ in answers if path == gold] == [
        204, 200, 204, 400]
    got = {path: data for method, path, status, data in answers if method == "GET"}
    assert got["/allocations/" + uid("consumer4")] == {"allocations": {}}
    assert got["/allocations/" + uid("consumer3")] == {"allocations": {}}
    assert got["/allocations/" + uid("consumer8")]["allocations"] == {
        uid("child0"): {"generation": 5, "resources": {"VCPU": 4}}}
    assert got["/allocations/" + uid("consumer1")]["project_id"] == uid("project")
    assert got["/usages?project_id=" + uid("project2")] == {"usages": {}}


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


def test_kept_aliases_send_the_same_sql_and_answers_on_mariadb(mariadb_server, monkeypatch):
    """On MariaDB (InnoDB) too: the failed insert of an existing consumer
    said to be new (a duplicate key, its auto-increment number taken) is
    rolled back with its own transaction and Placement's path answers the
    same 409."""
    admin = mariadb_server.admin()
    names = ["aliases_%s_%s" % (which, uuid.uuid4().hex[:8]) for which in ("kept", "stock")]
    try:
        with admin.cursor() as cur:
            for name in names:
                cur.execute("CREATE DATABASE %s" % name)
        urls = (mariadb_server.url(names[0]), mariadb_server.url(names[1]))
        check_conflicts(compare(urls, monkeypatch))
    finally:
        with admin.cursor() as cur:
            for name in names:
                cur.execute("DROP DATABASE IF EXISTS %s" % name)
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
    the aliases are not kept nor the fixed rows remembered: a warning names
    the release, and Placement's code stays as shipped."""
    from oslo_policy import _checks
    from placement import attribute_cache
    from placement.handlers import util as data_util
    from placement.objects import allocation

    monkeypatch.setattr(aliases, "_release", lambda: "99.1.0")
    monkeypatch.setattr(policy, "_release", lambda: "0.1")
    for module in (aliases, lookups, consumers, policy):
        module.restore()  # type: ignore[attr-defined]
    try:
        assert aliases.problems() == [
            "openstack-placement 99.1.0 is not a release whose queries were compared "
            "with the aliases kept (16.0.0)"]
        assert lookups.problems() == [
            "openstack-placement 99.1.0 is not a release whose attribute caches were "
            "read (16.0.0)"]
        assert consumers.problems() == [
            "openstack-placement 99.1.0 is not a release whose consumer writes were "
            "read (16.0.0)"]
        assert policy.problems() == [
            "oslo.policy 0.1 is not a release whose checks were read (6.0.1)"]
        assert aliases.keep_aliases() is False
        assert lookups.remember_fixed_rows() is False
        assert consumers.trim_consumer_writes() is False
        assert policy.argspecs_once() is False
        assert allocation.sa is sa
        assert "not a release whose queries were compared" in caplog.text
        assert "not a release whose attribute caches were read" in caplog.text
        with embedded.EmbeddedPlacement("sqlite://") as service:
            assert service.client().adapter.request("/allocations/" + uid("x"), "GET",
                                                    headers=HEADERS).status_code == 200
            assert allocation.sa is sa
            assert lookups.fixed(attribute_cache.ResourceClassCache) is None
            assert "id_from_string" not in attribute_cache.ResourceClassCache.__dict__
            assert lookups.row_lookups()["placement.objects.project"] is None
            assert not consumers.trimmed() and not hasattr(data_util.ensure_consumer,
                                                           "__wrapped__")
            assert _checks.inspect is inspect
    finally:
        monkeypatch.undo()
        _apply()


def test_only_rows_that_never_change_are_remembered():
    """A boot's ``PUT /allocations`` read every resource class and every
    consumer type (2 of its 16 statements); once a request has read them,
    the standard classes and the consumer types are not read again. A
    custom class is: one deleted behind the process's back (by another
    Placement process on the same database) is refused as Placement
    refuses it, and a new database is read anew."""
    from placement import attribute_cache

    assert lookups.remember_fixed_rows()
    with embedded.EmbeddedPlacement("sqlite://") as service:
        client = service.client()
        rp = uid("fixed-rp")
        client.post("/resource_providers", {"name": "fixed", "uuid": rp})
        client.put("/resource_classes/CUSTOM_SILVER", None)
        client.put("/resource_providers/%s/inventories" % rp, {
            "resource_provider_generation": 0,
            "inventories": {"VCPU": {"total": 8}, "CUSTOM_SILVER": {"total": 2}}})
        reads: list[str] = []

        def statement(conn: Any, cursor: Any, text: str, *args: Any) -> None:
            if READ_ALL.fullmatch(text.strip()):
                reads.append(text.split()[-1])

        sa.event.listen(service._engine, "before_cursor_execute", statement)
        body = {"project_id": "p", "user_id": "u", "consumer_type": "INSTANCE",
                "consumer_generation": None}

        def put(consumer: str, resources: dict[str, int]) -> Any:
            return client.adapter.request("/allocations/" + uid(consumer), "PUT", json={
                "allocations": {rp: {"resources": resources}}, **body},
                headers=HEADERS, raise_exc=False)

        # NOTE: the first creates the consumer type, the next reads it
        assert put("first", {"VCPU": 1}).status_code == 204
        assert put("next", {"VCPU": 1}).status_code == 204
        reads.clear()
        assert put("second", {"VCPU": 1}).status_code == 204
        assert client.adapter.request("/allocations/" + uid("second"), "DELETE",
                                      headers=HEADERS).status_code == 204
        assert reads == []
        rc = lookups.fixed(attribute_cache.ResourceClassCache)
        ct = lookups.fixed(attribute_cache.ConsumerTypeCache)
        assert rc is not None and ct is not None
        assert "VCPU" in rc.ids and "INSTANCE" in ct.ids
        assert put("silver", {"CUSTOM_SILVER": 1}).status_code == 204
        assert "CUSTOM_SILVER" not in rc.ids and reads == ["resource_classes"]
        client.adapter.request("/allocations/" + uid("silver"), "DELETE", headers=HEADERS)
        client.adapter.request("/resource_providers/%s/inventories/CUSTOM_SILVER" % rp,
                               "DELETE", headers=HEADERS)
        with service._engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM resource_classes WHERE name = 'CUSTOM_SILVER'"))
        refused = put("silver2", {"CUSTOM_SILVER": 1})
        assert refused.status_code == 400
        assert "No such resource class CUSTOM_SILVER" in refused.text
    with embedded.EmbeddedPlacement("sqlite://"):
        assert rc.ids == {} and ct.ids == {}


def test_a_function_that_changed_is_named(monkeypatch):
    from placement.objects import user

    aliases.restore()
    try:
        monkeypatch.setattr(user, "_get_user_by_external_id", lambda ctx, external_id: None)
        assert aliases.problems() == [
            "placement.objects.user has no function _get_user_by_external_id"]
    finally:
        monkeypatch.undo()
        assert aliases.keep_aliases()


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


def _in_a_child(work: Any) -> int:
    """``work()`` in a process forked now: its exit code (0: it returned),
    or -1 when it did not end within 20 s (it hangs: killed)."""
    import os
    import signal
    import time

    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            work()
            code = 0
        except BaseException:  # noqa: BLE001 - told by its code
            code = 3
        os._exit(code)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return -1


def test_a_child_forked_while_a_thread_holds_their_locks_can_use_them():
    """``placement serve --workers`` (and a benchmark's workers) fork a
    process whose other threads may be serving requests: a child forked
    while one of them was learning a row or keeping an alias inherits that
    lock held by a thread it does not have. The child must not hang on its
    first request's look-up."""
    from placement import attribute_cache
    from placement.objects import project

    assert aliases.keep_aliases() and lookups.remember_fixed_rows()
    kept = aliases.kept_aliases()
    fixed = lookups.fixed(attribute_cache.ConsumerTypeCache)
    assert kept is not None and fixed is not None

    class Cache:
        _id_cache = {"INSTANCE": 1}

    class Database:
        def __init__(self) -> None:
            pass

    def _get_project_by_external_id() -> Any:
        return kept.alias(project.PROJECT_TBL, name="p-fork-%d" % id(kept))

    rows = lookups.row_lookups()["placement.objects.project"]
    assert rows is not None and policy.argspecs_once()
    from oslo_policy import _checks

    specs = _checks.inspect
    assert isinstance(specs, policy.ArgspecOnce)
    codes = kept._codes
    kept._codes = codes | {_get_project_by_external_id.__code__}
    try:
        _fork_while_held(((fixed._lock, lambda: fixed.learn(Cache(), Database())),
                          (rows._lock, lambda: rows.learn(Database(), "p", {"id": 1})),
                          (specs._lock, lambda: specs.getfullargspec(Database().__init__)),
                          (kept._lock, _get_project_by_external_id)))
    finally:
        kept._codes = codes


def _fork_while_held(cases: Any) -> None:
    """For each (lock, work): ``work()`` ends in a child forked while
    another thread holds ``lock``."""
    import threading

    for lock, work in cases:
        held, release = threading.Event(), threading.Event()

        def hold(lock: Any = lock, held: Any = held, release: Any = release) -> None:
            with lock:
                held.set()
                release.wait(30)

        thread = threading.Thread(target=hold, daemon=True)
        thread.start()
        assert held.wait(10)
        try:
            assert _in_a_child(work) == 0
        finally:
            release.set()
            thread.join(10)


def test_a_placement_on_another_database_does_not_get_the_rows_remembered():
    """The caches are Placement's own classes: a Placement built in this
    process otherwise than by an embedded one (Placement's and nova's
    ``PlacementFixture``, ``placement.direct``: a database patched into
    Placement's context, the app built) on another database must not be
    answered from the consumer types, projects and users an embedded
    Placement learned of its own database (numbered otherwise there), nor
    insert its new consumers with them."""
    from oslo_config import cfg
    from oslo_db.sqlalchemy import engines
    from placement import conf as p_conf
    from placement import db_api, direct
    from placement.db.sqlalchemy import migration
    from placement.objects import resource_class, trait

    assert lookups.remember_fixed_rows() and consumers.trim_consumer_writes()

    def allocate(client: Any, rp: str, types: list[str], owners: list[str]) -> None:
        client.post("/resource_providers", json={"name": "h", "uuid": rp})
        client.put("/resource_providers/%s/inventories" % rp, json={
            "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}})
        for i, (kind, owner) in enumerate(zip(types, owners, strict=True)):
            assert client.put("/allocations/" + uid("other-%s-%d" % (rp, i)), json={
                "allocations": {rp: {"resources": {"VCPU": 1}}}, "project_id": owner,
                "user_id": owner, "consumer_generation": None, "consumer_type": kind},
                headers=HEADERS).status_code == 204

    # NOTE: here MIGRATION is consumer type 1 and INSTANCE 2, project and
    # user p are 2 ...
    with embedded.EmbeddedPlacement("sqlite://") as service:
        allocate(service.client().adapter, uid("other-rp1"),
                 ["MIGRATION", "INSTANCE", "INSTANCE", "INSTANCE"], ["q", "p", "p", "p"])
    # ... there INSTANCE is 1, p is 1, and there is no MIGRATION nor q
    conf = cfg.ConfigOpts()
    p_conf.register_opts(conf)
    conf.set_override("auth_strategy", "noauth2", group="api")
    conf([], project="placement", default_config_files=[], default_config_dirs=[])
    engine = engines.create_engine("sqlite://")
    unbind = db_api.placement_context_manager.patch_engine(engine)
    try:
        migration.create_schema(engine)
        trait._TRAITS_SYNCED = False
        resource_class._RESOURCE_CLASSES_SYNCED = False
        with direct.PlacementDirect(conf) as client:
            allocate(client, uid("other-rp2"), ["INSTANCE", "INSTANCE"], ["p", "p"])
            usages = client.get("/usages?project_id=p&user_id=p",
                                headers=HEADERS).json()["usages"]
        with engine.connect() as conn:
            rows = conn.execute(sa.text(
                "SELECT ct.name, p.external_id, u.external_id FROM consumers c "
                "LEFT JOIN consumer_types ct ON c.consumer_type_id = ct.id "
                "LEFT JOIN projects p ON c.project_id = p.id "
                "LEFT JOIN users u ON c.user_id = u.id")).fetchall()
    finally:
        unbind()
        trait._TRAITS_SYNCED = False
        resource_class._RESOURCE_CLASSES_SYNCED = False
    assert [tuple(row) for row in rows] == [("INSTANCE", "p", "p")] * 2
    assert usages == {"INSTANCE": {"VCPU": 2, "consumer_count": 2}}


def test_a_check_inspected_once_still_refuses_who_may_not():
    """oslo.policy's checks inspected once (:mod:`~compute_plugins.placement.
    policy`) still decide per request: after the admin's requests, a
    member's is refused (403), an admin's allowed again."""
    assert policy.argspecs_once()
    with embedded.EmbeddedPlacement("sqlite://") as service:
        adapter = service.client().adapter

        def status(method: str, path: str, token: str, body: Any = None) -> int:
            return adapter.request(path, method, json=body, raise_exc=False,
                                   authenticated=False,
                                   headers={**HEADERS, "X-Auth-Token": token}).status_code

        rp = uid("policy-root")
        assert status("POST", "/resource_providers", "admin",
                      {"name": "policy-root", "uuid": rp}) == 200
        assert status("GET", "/resource_providers", "admin") == 200
        member = "%s:%s" % (uid("user"), uid("project"))
        assert status("GET", "/resource_providers", member) == 403
        assert status("PUT", "/allocations/" + uid("policy-consumer"), member, {
            "allocations": {}, "consumer_generation": None, "project_id": uid("project"),
            "user_id": uid("user"), "consumer_type": "INSTANCE"}) == 403
        assert status("GET", "/resource_providers/" + rp, "admin") == 200


def test_a_delete_writes_in_one_transaction(monkeypatch):
    """``DELETE /allocations/{consumer}`` (every instance deleted): its
    allocations and its consumer go in one write transaction (2 in all,
    with the read of its allocations), where Placement as shipped takes 3;
    the answer is the same 204, and the consumer is gone with them."""

    def transactions(tuned: bool) -> tuple[int, int, list[Any]]:
        if not tuned:
            monkeypatch.setattr(consumers, "trim_consumer_writes", lambda: False)
            consumers.restore()
        try:
            with embedded.EmbeddedPlacement("sqlite://") as service:
                client = service.client()
                rp, consumer = uid("delete-rp"), uid("delete-consumer")
                client.post("/resource_providers", {"name": "delete-rp", "uuid": rp})
                client.put("/resource_providers/%s/inventories" % rp, {
                    "resource_provider_generation": 0,
                    "inventories": {"VCPU": {"total": 8}}})
                client.put("/allocations/" + consumer, {
                    "allocations": {rp: {"resources": {"VCPU": 1}}}, "project_id": "p",
                    "user_id": "u", "consumer_generation": None,
                    "consumer_type": "INSTANCE"})
                begun: list[int] = []
                sa.event.listen(service._engine, "begin", lambda conn: begun.append(1))
                status = client.adapter.request("/allocations/" + consumer, "DELETE",
                                                headers=HEADERS).status_code
                count = len(begun)
                with service._engine.connect() as conn:
                    left = conn.execute(sa.text("SELECT uuid FROM consumers")).fetchall()
                return status, count, left
        finally:
            monkeypatch.undo()
            _apply()

    assert transactions(tuned=False) == (204, 3, [])
    assert transactions(tuned=True) == (204, 2, [])


def test_a_new_consumer_is_inserted_without_the_orm():
    """A boot's ``PUT /allocations`` inserts its new consumer with one Core
    statement: no ORM object is flushed (the unit of work was 0.2 ms of
    the request's CPU; the statement is the same, :func:`compare`), and the
    consumer has its id and generation (the next ``PUT`` gives 1)."""
    from sqlalchemy import orm

    assert consumers.trim_consumer_writes()
    with embedded.EmbeddedPlacement("sqlite://") as service:
        client = service.client()
        rp, consumer = uid("orm-rp"), uid("orm-consumer")
        client.post("/resource_providers", {"name": "orm-rp", "uuid": rp})
        client.put("/resource_providers/%s/inventories" % rp, {
            "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}})
        body = {"project_id": "p", "user_id": "u", "consumer_type": "INSTANCE"}
        # NOTE: the first creates the consumer type, the next reads it (then
        # it is known: a new consumer is inserted first)
        for name in ("orm-first", "orm-next"):
            client.put("/allocations/" + uid(name), {
                "allocations": {rp: {"resources": {"VCPU": 1}}},
                "consumer_generation": None, **body})
        flushed: list[Any] = []

        def before_flush(session: Any, context: Any, instances: Any) -> None:
            flushed.extend(type(obj).__name__ for obj in session.new)

        sa.event.listen(orm.Session, "before_flush", before_flush)
        try:
            assert client.adapter.request("/allocations/" + consumer, "PUT", json={
                "allocations": {rp: {"resources": {"VCPU": 1}}},
                "consumer_generation": None, **body}, headers=HEADERS).status_code == 204
        finally:
            sa.event.remove(orm.Session, "before_flush", before_flush)
        assert flushed == []
        got = client.adapter.request("/allocations/" + consumer, "GET", headers=HEADERS).json()
        assert got["consumer_generation"] == 1
