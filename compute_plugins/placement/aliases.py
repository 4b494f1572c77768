"""The embedded Placement's table aliases, built once instead of per call.

Placement's lookups name their tables on every call
(``sa.alias(table, name="rp")``) and then read the alias's columns
(``.c``), which makes SQLAlchemy build a proxy of every column of the
table, foreign keys and their event listeners included: at 1,000 hosts
that was 16-20% of the embedded Placement's CPU (``python -m
bench.scale.placement --profile``; a ``PUT /allocations`` builds 8
aliases, a ``DELETE`` 5). An alias is an immutable description of the
table under a name; the statement built around it, its SQL and its
statement-cache key are the same whichever alias object of that name it
is given.

Where one alias *object* could change the SQL: SQLAlchemy correlates a
subquery nested in a WHERE or column clause with an enclosing query that
has the same object in its FROM list (two fresh aliases of one name are
two objects, and are not correlated). So the cache is kept narrow:

* only the functions named in :data:`CACHED` get a kept alias (any other
  caller of ``sa.alias`` in those modules gets a fresh one, as before),
  each function its own (keyed by the function's code: two functions
  never share an alias object);
* each of them builds one statement from its own aliases (distinct names)
  and executes it itself: no statement of theirs is nested in another, and
  none nests another's (their ``IN`` lists are values, their one subquery
  a FROM of plain tables, which SQLAlchemy does not correlate);
* only on the openstack-placement releases whose functions were read and
  whose statements were compared (:data:`AUDITED_RELEASES`): elsewhere the
  tuning is not applied (a warning says why) and Placement runs as
  shipped. ``tests/functional/placement/test_tuning.py`` runs the same
  requests with and without it and finds the same SQL, statement by
  statement, and the same answers.

Applied by the embedded Placement only (:meth:`~compute_plugins.placement.
embedded.EmbeddedPlacement.start`): a remote Placement is another process.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import threading
from importlib import metadata
from typing import Any, Optional

from oslo_log import log as logging

from compute_plugins.util import forks

LOG = logging.getLogger(__name__)

#: openstack-placement releases whose :data:`CACHED` functions were read
#: (each builds and executes one statement of its own aliases) and whose
#: SQL was compared with and without the cache.
AUDITED_RELEASES = frozenset({"16.0.0"})

#: The functions (by module) whose aliases are built once: the lookups of
#: ``PUT``, ``GET`` and ``DELETE /allocations`` and of the scheduler's
#: ``GET /resource_providers`` listings.
CACHED: dict[str, tuple[str, ...]] = {
    "placement.objects.allocation": ("_get_allocations_by_provider_id",
                                     "_get_allocations_by_consumer_uuid"),
    "placement.objects.consumer": ("_get_consumer_by_uuid",),
    "placement.objects.inventory": ("_get_inventory_by_provider_id",),
    "placement.objects.project": ("_get_project_by_external_id",),
    "placement.objects.user": ("_get_user_by_external_id",),
    "placement.objects.resource_provider": ("_get_provider_by_uuid",
                                            "_get_all_by_filters_from_db"),
    "placement.objects.research_context": ("provider_ids_from_uuid",
                                           "get_providers_with_resource"),
    "placement.objects.trait": ("get_traits_by_provider_tree",),
}


class ModuleStandIn:
    """A module as a patched module's code sees it: every attribute the
    module's own, save those a subclass answers itself, under a lock of
    its own that a forked child renews (a thread of the parent's may have
    held it at the fork, and is not in the child)."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self._lock = threading.Lock()
        forks.renew_in_child(self)

    def _forked(self) -> None:
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


class KeptAliases(ModuleStandIn):
    """``sqlalchemy`` as the modules of :data:`CACHED` see it, but with
    ``alias(table, name=...)`` answered from a cache when called by one
    of the functions whose code is in ``codes``.

    Every other attribute is SQLAlchemy's own, and every other caller of
    ``alias`` gets a new alias, as before.
    """

    def __init__(self, module: Any, codes: frozenset[Any]) -> None:
        super().__init__(module)
        self._codes = codes
        #: (caller's code, table's id, name, flat) -> (table, alias).
        self._aliases: dict[tuple[Any, int, Optional[str], bool], tuple[Any, Any]] = {}

    def alias(self, selectable: Any, name: Optional[str] = None, flat: bool = False) -> Any:
        """SQLAlchemy's ``alias``; the same object on every call from one
        of the kept functions (its column collection built once)."""
        code = sys._getframe(1).f_code
        if code not in self._codes:
            return self._module.alias(selectable, name=name, flat=flat)
        key = (code, id(selectable), name, flat)
        kept = self._aliases.get(key)
        if kept is None or kept[0] is not selectable:
            with self._lock:
                kept = self._aliases.get(key)
                if kept is None or kept[0] is not selectable:
                    made = self._module.alias(selectable, name=name, flat=flat)
                    _ = made.c  # NOTE: built here, under the lock, once
                    kept = (selectable, made)
                    self._aliases[key] = kept
        return kept[1]

    def kept(self) -> set[tuple[str, Optional[str]]]:
        """(function name, alias name) of every alias kept so far."""
        return {(key[0].co_name, key[2]) for key in self._aliases}


def _release() -> str:
    try:
        return metadata.version("openstack-placement")
    except metadata.PackageNotFoundError:
        return "unknown"


def problems(release: Optional[str] = None) -> list[str]:
    """Why the aliases cannot be kept on this Placement (none: they can):
    a release not in :data:`AUDITED_RELEASES`, or a function of
    :data:`CACHED` missing or not calling ``sa.alias``."""
    release = _release() if release is None else release
    if release not in AUDITED_RELEASES:
        return ["openstack-placement %s is not a release whose queries were compared "
                "with the aliases kept (%s)" % (release, ", ".join(sorted(AUDITED_RELEASES)))]
    import sqlalchemy

    found = []
    for module_name, functions in CACHED.items():
        module = importlib.import_module(module_name)
        if getattr(module, "sa", None) is not sqlalchemy:
            found.append("%s.sa is not sqlalchemy" % module_name)
        for function in functions:
            code = _code(module, function)
            if code is None:
                found.append("%s has no function %s" % (module_name, function))
            elif not {"sa", "alias"} <= set(code.co_names):
                found.append("%s.%s does not call sa.alias" % (module_name, function))
    return found


def _code(module: Any, function: str) -> Any:
    """The code of ``module.function`` under its decorators (oslo.db's
    transaction, :func:`~compute_plugins.placement.embedded.
    scope_tree_listings`' wrapper); None when there is no such function."""
    found = getattr(module, function, None)
    code = getattr(inspect.unwrap(found) if callable(found) else None, "__code__", None)
    return code if code is not None and code.co_name == function else None


def kept_aliases() -> Optional[KeptAliases]:
    """The cache the modules of :data:`CACHED` use now (None: not applied)."""
    module = sys.modules.get(next(iter(CACHED)))
    sa = getattr(module, "sa", None)
    return sa if isinstance(sa, KeptAliases) else None


def keep_aliases() -> bool:
    """Make the functions of :data:`CACHED` build their aliases once per
    process (:class:`KeptAliases`); idempotent. On a Placement where that
    was not checked (:func:`problems`) it logs a warning, changes nothing
    and returns False."""
    if kept_aliases() is not None:
        return True
    found = problems()
    if found:
        LOG.warning("the embedded Placement builds its table aliases per call "
                    "(the kept aliases are not applied): %s", "; ".join(found))
        return False
    import sqlalchemy

    codes = frozenset(_code(importlib.import_module(module_name), function)
                      for module_name, functions in CACHED.items() for function in functions)
    kept = KeptAliases(sqlalchemy, codes)
    for module_name in CACHED:
        module: Any = importlib.import_module(module_name)
        module.sa = kept
    return True


def restore() -> None:
    """Placement's modules as shipped again (fresh aliases on every call)."""
    import sqlalchemy

    for module_name in CACHED:
        module: Any = sys.modules.get(module_name)
        if module is not None and isinstance(getattr(module, "sa", None), KeptAliases):
            module.sa = sqlalchemy


__all__ = ["AUDITED_RELEASES", "CACHED", "KeptAliases", "keep_aliases", "kept_aliases",
           "problems", "restore"]
