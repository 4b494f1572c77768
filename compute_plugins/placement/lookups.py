"""The embedded Placement's names of standard resource classes and of
consumer types, looked up once per database instead of once per request.

Placement keeps a cache of resource classes and one of consumer types per
request (``placement.attribute_cache``), read whole from the database the
first time a request needs one: a ``PUT /allocations`` reads both (2 of
its 16 statements and of its 7 transactions), a ``DELETE`` or ``GET
/allocations`` the resource classes (1 of 5, 1 of 3), every listing too.

Some of those rows never change once written: a *standard* resource class
(id below ``ResourceClass.MIN_CUSTOM_RESOURCE_CLASS_ID``) can be neither
deleted nor renamed (Placement refuses both), and a consumer type is only
ever created (there is no API to delete or rename one). The embedded
Placement remembers those rows the first time a request reads them
(:class:`Fixed`) and answers a later request's lookup of one from memory;
any other name or id (a custom resource class, which may be deleted, one
not seen yet, the "unknown" consumer type) is looked up as before, with
the per-request read. Traits are left alone (a custom trait may be
deleted). Projects and users are remembered the same way (:data:`ROW_LOOKUPS`:
Placement creates one on a request's first use of its external id and
never deletes nor changes it): a ``PUT /allocations`` read both, each in a
transaction of its own. A row is remembered only once a read found it
(none of Placement 16.0.0's callers reads one inside a transaction that
could still roll back its creation).

What is remembered is of one database (another may number its consumer
types otherwise): the one bound to Placement's database context when it
was read (its transaction factory, new with every database bound, by an
embedded Placement or by Placement's and nova's own ``PlacementFixture``,
which use these same classes in this process); a request on another
database reads its own and replaces it. It is also forgotten whenever an
embedded Placement is built. Applied only
on the openstack-placement releases whose caches were read
(:data:`compute_plugins.placement.aliases.AUDITED_RELEASES`); elsewhere a
warning says so and Placement runs as shipped.
``tests/functional/placement/test_tuning.py`` runs the same requests with
and without it: the same answers, and the same statements less those
reads.
"""

from __future__ import annotations

import importlib
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Optional

from oslo_log import log as logging

from compute_plugins.placement import aliases
from compute_plugins.util import forks

LOG = logging.getLogger(__name__)

#: The attribute of a patched cache class holding its :class:`Fixed`.
_FIXED = "_compute_plugins_fixed"


#: Rows remembered at most per map and database (projects and users: one
#: per tenant and person; the map starts again when full).
MAX_ROWS = 100_000


class PerDatabase:
    """Maps remembered of one database at a time: a request on another
    database gets empty maps (and reads its own), and learning of another
    database forgets the first.

    :param maps: how many maps (of different keys) are remembered.
    """

    def __init__(self, maps: int) -> None:
        self._maps = maps
        #: (the database learned of, held weakly; the maps), replaced whole
        #: when another database is learned of.
        self._state: tuple[Any, tuple[dict[Any, Any], ...]] = self._empty()
        self._lock = threading.Lock()
        forks.renew_in_child(self)

    def _empty(self) -> tuple[Any, tuple[dict[Any, Any], ...]]:
        return None, tuple({} for _ in range(self._maps))

    def _forked(self) -> None:
        """In a forked child: a lock of its own (a thread of the parent's
        may have held this one at the fork, and is not in the child)."""
        self._lock = threading.Lock()

    def of(self, database: Any) -> tuple[dict[Any, Any], ...]:
        """The maps remembered of ``database`` (what identifies the
        database Placement's requests use: :func:`_context`); empty ones
        when what is remembered is of another database."""
        source, maps = self._state
        if source is not None and source() is database:
            return maps
        return self._empty()[1]

    def _learn(self, database: Any, *items: Iterable[tuple[Any, Any]]) -> None:
        """Add each of ``items`` (pairs) to its map, of ``database``
        (forgetting what was remembered of another one)."""
        with self._lock:
            source, maps = self._state
            if source is None or source() is not database:
                maps = self._empty()[1]
                self._state = (weakref.ref(database), maps)
            for found, pairs in zip(maps, items, strict=True):
                pairs = list(pairs)
                if len(found) + len(pairs) > MAX_ROWS:
                    found.clear()
                found.update(pairs)

    def forget(self) -> None:
        """Forget everything (another database)."""
        with self._lock:
            self._state = self._empty()


class Fixed(PerDatabase):
    """Names and ids (of one kind: resource classes or consumer types) that
    never change once in the database, learned from Placement's per-request
    caches.

    :param keep: whether an id is one of those (a standard resource class).
    """

    def __init__(self, keep: Callable[[int], bool]) -> None:
        super().__init__(2)
        self._keep = keep
        #: The methods the cache class defined itself before (restore).
        self.shipped: dict[str, Any] = {}

    @property
    def ids(self) -> dict[str, int]:
        """Ids by name, of the database last learned of."""
        return self._state[1][0]

    @property
    def names(self) -> dict[int, str]:
        """Names by id, of the database last learned of."""
        return self._state[1][1]

    def learn(self, cache: Any, database: Any) -> None:
        """Remember the fixed rows ``cache`` (a per-request cache) read of
        ``database``, forgetting those of another database."""
        rows = [(name, ident) for name, ident in dict(cache._id_cache).items()
                if ident is not None and self._keep(ident)]
        self._learn(database, rows, [(ident, name) for name, ident in rows])


class Rows(PerDatabase):
    """Rows by key (a project's or a user's by external id) read of one
    database, that never change once there."""

    def __init__(self) -> None:
        super().__init__(1)

    @property
    def rows(self) -> dict[Any, dict[str, Any]]:
        """The rows by key, of the database last learned of."""
        return self._state[1][0]

    def learn(self, database: Any, key: Any, row: dict[str, Any]) -> None:
        """Remember ``row`` (read of ``database``) by ``key``."""
        self._learn(database, [(key, dict(row))])


def _context() -> Any:
    """Placement's database context. Its transaction factory (``_factory``)
    identifies the database Placement's requests use now: a new one each
    time a database is bound to it (an embedded Placement's start, and
    Placement's and nova's own ``PlacementFixture``, which build Placement
    in this process on databases of their own, with these same cache
    classes)."""
    from placement import db_api

    return db_api.placement_context_manager


def _remembering(lookup: Callable[[Any, Any], Any], fixed: Fixed,
                 known: str) -> Callable[[Any, Any], Any]:
    """``lookup`` (a cache's method) answered from ``fixed``'s ``known``
    map (``ids`` by name, ``names`` by id) when it holds the key; else
    ``lookup`` itself, after which ``fixed`` learns what it read."""
    which = ("ids", "names").index(known)
    context = _context()

    def remembering(self: Any, key: Any) -> Any:
        # NOTE: what identifies the database this request reads (_context)
        database = context._factory
        found = fixed.of(database)[which].get(key)
        if found is not None:
            return found
        result = lookup(self, key)
        fixed.learn(self, database)
        return result

    return remembering


def _patch(cls: Any, fixed: Fixed) -> None:
    """``cls.id_from_string`` and ``string_from_id`` answered from
    ``fixed`` when it knows the name or id, else as before (and ``fixed``
    learns from what the request's cache read)."""
    fixed.shipped = {name: cls.__dict__[name] for name in ("id_from_string", "string_from_id")
                     if name in cls.__dict__}
    cls.id_from_string = _remembering(cls.id_from_string, fixed, "ids")
    cls.string_from_id = _remembering(cls.string_from_id, fixed, "names")
    setattr(cls, _FIXED, fixed)


#: The lookups of rows that never change once in the database, by module:
#: a project's and a user's by external id (Placement creates them on a
#: request's first use, and neither deletes, renames nor updates one: there
#: is no API for it). Every ``PUT /allocations`` read both, 2 of its 14
#: statements and 6 transactions.
ROW_LOOKUPS = {"placement.objects.project": "_get_project_by_external_id",
               "placement.objects.user": "_get_user_by_external_id"}


def _remembering_rows(lookup: Callable[[Any, Any], dict[str, Any]],
                      rows: Rows) -> Callable[[Any, Any], dict[str, Any]]:
    """``lookup(ctx, key)`` (a row's lookup, raising when there is none)
    answered from ``rows`` when it holds the key, else ``lookup`` itself,
    whose row ``rows`` learns. A row not found is not remembered (it may
    be created by the next request)."""
    context = _context()

    def remembering(ctx: Any, key: Any) -> dict[str, Any]:
        # NOTE: what identifies the database this request reads (_context)
        database = context._factory
        found = rows.of(database)[0].get(key)
        if found is not None:
            return dict(found)
        row = lookup(ctx, key)
        rows.learn(database, key, row)
        return row

    remembering.__wrapped__ = lookup  # type: ignore[attr-defined]
    setattr(remembering, _FIXED, rows)
    return remembering


def row_lookups() -> dict[str, Optional[Rows]]:
    """What each lookup of :data:`ROW_LOOKUPS` (by module) remembers; None:
    not applied."""
    import importlib

    found = {}
    for module_name, function in ROW_LOOKUPS.items():
        rows = getattr(getattr(importlib.import_module(module_name), function, None),
                       _FIXED, None)
        found[module_name] = rows if isinstance(rows, Rows) else None
    return found


def _classes() -> list[tuple[Any, Callable[[int], bool]]]:
    """Placement's per-request cache classes of the rows that never change,
    with which of their ids are such rows."""
    from placement import attribute_cache
    from placement.objects import resource_class

    first_custom = resource_class.ResourceClass.MIN_CUSTOM_RESOURCE_CLASS_ID
    return [(attribute_cache.ResourceClassCache, lambda ident: ident < first_custom),
            (attribute_cache.ConsumerTypeCache, lambda ident: True)]


def problems(release: Optional[str] = None) -> list[str]:
    """Why the fixed rows cannot be remembered on this Placement (none:
    they can)."""
    release = aliases._release() if release is None else release
    if release not in aliases.AUDITED_RELEASES:
        return ["openstack-placement %s is not a release whose attribute caches were "
                "read (%s)" % (release, ", ".join(sorted(aliases.AUDITED_RELEASES)))]
    from placement import attribute_cache

    found = []
    for name in ("id_from_string", "string_from_id", "_refresh_from_db"):
        if not callable(getattr(attribute_cache._AttributeCache, name, None)):
            found.append("placement.attribute_cache._AttributeCache has no %s" % name)
    for module_name, function in ROW_LOOKUPS.items():
        if aliases._code(importlib.import_module(module_name), function) is None:
            found.append("%s has no function %s" % (module_name, function))
    if not isinstance(getattr(type(_context()), "_factory", None), property):
        found.append("placement.db_api.placement_context_manager has no _factory "
                     "(oslo.db) to tell its databases apart")
    return found


def fixed(cls: Any) -> Optional[Fixed]:
    """What ``cls`` (a per-request cache class) remembers; None: not applied."""
    found = cls.__dict__.get(_FIXED)
    return found if isinstance(found, Fixed) else None


def remember_fixed_rows() -> bool:
    """Make Placement's resource class and consumer type caches remember
    the rows that never change (:class:`Fixed`), forgetting what they
    remembered of another database; idempotent. On a Placement where that
    was not checked (:func:`problems`) it logs a warning, changes nothing
    and returns False."""
    classes = _classes()
    if all(fixed(cls) is not None for cls, _keep in classes):
        for cls, _keep in classes:
            fixed(cls).forget()  # type: ignore[union-attr]
        for rows in row_lookups().values():
            if rows is not None:
                rows.forget()
        return True
    found = problems()
    if found:
        LOG.warning("the embedded Placement reads its resource classes and consumer "
                    "types on every request (not remembered): %s", "; ".join(found))
        return False
    for cls, keep in classes:
        _patch(cls, Fixed(keep))
    for module_name, function in ROW_LOOKUPS.items():
        module = importlib.import_module(module_name)
        setattr(module, function, _remembering_rows(getattr(module, function), Rows()))
    return True


def restore() -> None:
    """Placement's caches as shipped again (read on every request)."""
    for cls, _keep in _classes():
        kept = fixed(cls)
        if kept is not None:
            for name in ("id_from_string", "string_from_id"):
                if name in kept.shipped:
                    setattr(cls, name, kept.shipped[name])
                else:
                    delattr(cls, name)
            delattr(cls, _FIXED)
    for module_name, function in ROW_LOOKUPS.items():
        module = importlib.import_module(module_name)
        patched = getattr(module, function, None)
        if isinstance(getattr(patched, _FIXED, None), Rows):
            setattr(module, function, patched.__wrapped__)  # type: ignore[union-attr]


__all__ = ["MAX_ROWS", "ROW_LOOKUPS", "Fixed", "PerDatabase", "Rows", "fixed", "problems",
           "remember_fixed_rows", "restore", "row_lookups"]
