"""The embedded Placement's consumer writes, without the statements that
cannot change their outcome.

A ``PUT /allocations/{consumer}`` for a new consumer (a boot: what every
scheduler decision sends) was 14 statements in 6 transactions on
openstack-placement 16.0.0; :mod:`compute_plugins.placement.lookups`
spares the reads of its project and user, and this module two more kinds:

* **A new consumer is inserted without being looked for first.** With
  ``consumer_generation: null`` (microversion 1.28 on) the request says the
  consumer does not exist: Placement reads it (a transaction), finds none
  and inserts it (another). Here it is inserted at once; only when the
  insert finds it exists (a unique key) does Placement's own path run, which
  reads it and answers the same 409 (``placement.concurrent_update``,
  ``expected N but got None``). A consumer created by another request
  between the two is a race Placement answers by timing either way (its
  read found it: the 409; its insert did: it carries on); this answers as
  if the read came after. Only when the request's project and user are
  Placement's (not the "incomplete consumer" defaults) and its consumer
  type (1.38 on) is already known to exist (remembered by
  :mod:`~compute_plugins.placement.lookups`: creating one is a write
  Placement makes only once it found no consumer). 1 statement and 1
  transaction a boot. On PostgreSQL the failed insert of one that exists
  takes a number of the consumers' id sequence (an internal id, in no
  answer), as Placement's own insert does when two requests race.
* **No consumers to delete, no statements.** After writing the
  allocations Placement deletes the request's consumers left without any
  (``delete_consumers_if_no_allocations``): a ``SELECT`` and a ``DELETE``
  even when there is none to check (``IN (NULL) AND (1 != 1)``), which
  is every ``PUT`` that allocates something. 2 statements a ``PUT``.
* **A ``DELETE /allocations/{consumer}`` writes in one transaction.**
  Placement deletes the consumer's allocations in one write transaction
  (``_delete_allocations_by_ids``) and then, in another, the consumer left
  without any (``delete_consumers_if_no_allocations``): here both run in
  one (the same statements, in the same order), which spares a
  transaction's ``BEGIN``, ``COMMIT``, session and pooled connection a
  delete. The answers are the same; what differs is only what a failure
  between the two leaves: Placement kept the allocations deleted and the
  consumer (answering 500), this rolls both back (answering 500).

Only on the openstack-placement releases whose code was read
(:data:`compute_plugins.placement.aliases.AUDITED_RELEASES`); elsewhere a
warning says so and Placement runs as shipped. Applied by the embedded
Placement only. ``tests/functional/placement/test_tuning.py`` sends the
same requests (new consumers, existing ones with and without their
generation, moves between projects and users, other consumer types,
capacity and generation conflicts) with and without it: the same answers,
and the same statements less those spared.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Optional

from oslo_log import log as logging

from compute_plugins.placement import aliases, lookups

LOG = logging.getLogger(__name__)

#: The attribute of a wrapper holding the function it replaced.
_SHIPPED = "_compute_plugins_shipped"

#: (module, function) replaced, with the names the wrappers rely on.
REPLACED = {
    ("placement.handlers.util", "ensure_consumer"): frozenset({
        "_get_or_create_project", "_get_or_create_user", "_create_consumer",
        "get_or_create_consumer_type_id", "RequestAttr"}),
    ("placement.objects.consumer", "delete_consumers_if_no_allocations"): frozenset({
        "CONSUMER_TBL", "_ALLOC_TBL"}),
    ("placement.objects.allocation", "delete_all"): frozenset({
        "_delete_allocations_by_ids", "consumer_obj", "db_api"}),
}


def _known_consumer_type(name: Optional[str]) -> Optional[int]:
    """The id of consumer type ``name`` in the database requests use now,
    when it is remembered (None: not known to exist yet)."""
    from placement import attribute_cache

    fixed = lookups.fixed(attribute_cache.ConsumerTypeCache)
    if fixed is None or name is None:
        return None
    ident: Optional[int] = fixed.of(lookups._context()._factory)[0].get(name)
    return ident


def _insert(ctx: Any, consumer: Any) -> None:
    """``consumer.create()`` (``placement.objects.consumer.Consumer``) as
    one Core ``INSERT`` instead of an ORM object flushed: the same statement
    (its columns, defaults and ``RETURNING``), its own write transaction, the
    same :class:`ConsumerExists` when the consumer's uuid is taken; the
    consumer gets its id and generation 0 (the column's default), as
    Placement's does. The ORM's unit of work was 0.2 ms of a ``PUT``'s
    CPU more (on PostgreSQL, alternating, doc/source/benchmarks.md)."""
    from oslo_db import exception as db_exc
    from placement import db_api, exception
    from placement.objects import consumer as consumer_obj

    def insert(ctx: Any) -> Any:
        try:
            # NOTE: updated_at and return_defaults as the ORM's flush sends
            # them (the same columns, and RETURNING where the database has it)
            return ctx.session.execute(consumer_obj.CONSUMER_TBL.insert().values(
                uuid=consumer.uuid, project_id=consumer.project.id,
                user_id=consumer.user.id, consumer_type_id=consumer.consumer_type_id,
                updated_at=None).return_defaults())
        except db_exc.DBDuplicateEntry:
            raise exception.ConsumerExists(uuid=consumer.uuid) from None

    in_transaction: Callable[[Any], Any] = db_api.placement_context_manager.writer(insert)
    result = in_transaction(ctx)
    consumer.id = result.inserted_primary_key[0]
    consumer.generation = 0


def _inserting_first(shipped: Callable[..., Any]) -> Callable[..., Any]:
    """``placement.handlers.util.ensure_consumer`` that inserts a consumer
    said to be new before looking for it (module doc)."""
    from placement import exception
    from placement.handlers import util as data_util
    from placement.objects import consumer as consumer_obj

    def ensure_consumer(ctx: Any, consumer_uuid: str, project_id: Optional[str],
                        user_id: Optional[str], consumer_generation: Optional[int],
                        consumer_type: Optional[str], want_version: Any) -> Any:
        if (consumer_generation is not None or project_id is None
                or not want_version.matches((1, 28))):
            return shipped(ctx, consumer_uuid, project_id, user_id,
                           consumer_generation, consumer_type, want_version)
        type_id = None
        if want_version.matches((1, 38)):
            type_id = _known_consumer_type(consumer_type)
            if type_id is None:
                return shipped(ctx, consumer_uuid, project_id, user_id,
                               consumer_generation, consumer_type, want_version)
        project = data_util._get_or_create_project(ctx, project_id)
        user = data_util._get_or_create_user(ctx, user_id)
        consumer = consumer_obj.Consumer(ctx, uuid=consumer_uuid, project=project,
                                         user=user, consumer_type_id=type_id)
        try:
            _insert(ctx, consumer)
        except exception.ConsumerExists:
            # NOTE: it exists: Placement's own path (its read, its 409)
            return shipped(ctx, consumer_uuid, project_id, user_id,
                           consumer_generation, consumer_type, want_version)
        return consumer, True, data_util.RequestAttr(project, user, type_id)

    return ensure_consumer


def _only_when_some(shipped: Callable[..., Any]) -> Callable[..., Any]:
    """``delete_consumers_if_no_allocations`` that sends nothing when it is
    given no consumers to check."""

    def delete_consumers_if_no_allocations(ctx: Any, consumer_uuids: Any) -> Any:
        if not consumer_uuids:
            return None
        return shipped(ctx, consumer_uuids)

    return delete_consumers_if_no_allocations


def _in_one_transaction(shipped: Callable[..., Any]) -> Callable[..., Any]:
    """``placement.objects.allocation.delete_all`` with its two writes in
    one transaction (module doc): its writers join the one around them."""
    from placement import db_api

    def delete_all(ctx: Any, alloc_list: Any) -> Any:
        return shipped(ctx, alloc_list)

    in_transaction: Callable[..., Any] = db_api.placement_context_manager.writer(delete_all)
    return in_transaction


_WRAPPERS: dict[tuple[str, str], Callable[[Callable[..., Any]], Callable[..., Any]]] = {
    ("placement.handlers.util", "ensure_consumer"): _inserting_first,
    ("placement.objects.consumer", "delete_consumers_if_no_allocations"): _only_when_some,
    ("placement.objects.allocation", "delete_all"): _in_one_transaction,
}


def problems(release: Optional[str] = None) -> list[str]:
    """Why the consumer writes cannot be trimmed on this Placement (none:
    they can): a release not read, or a function or name missing."""
    release = aliases._release() if release is None else release
    if release not in aliases.AUDITED_RELEASES:
        return ["openstack-placement %s is not a release whose consumer writes were "
                "read (%s)" % (release, ", ".join(sorted(aliases.AUDITED_RELEASES)))]
    found = lookups.problems(release)
    for (module_name, function), names in REPLACED.items():
        module = importlib.import_module(module_name)
        if aliases._code(module, function) is None:
            found.append("%s has no function %s" % (module_name, function))
        missing = sorted(name for name in names if not hasattr(module, name))
        if missing:
            found.append("%s has no %s" % (module_name, ", ".join(missing)))
    return found


def trimmed() -> bool:
    """Whether Placement's consumer writes are trimmed now."""
    return all(hasattr(getattr(importlib.import_module(module_name), function), _SHIPPED)
               for module_name, function in REPLACED)


def trim_consumer_writes() -> bool:
    """Trim Placement's consumer writes (module doc); idempotent. On a
    Placement where that was not checked (:func:`problems`) it logs a
    warning, changes nothing and returns False."""
    if trimmed():
        return True
    found = problems()
    if found:
        LOG.warning("the embedded Placement writes its consumers as shipped "
                    "(not trimmed): %s", "; ".join(found))
        return False
    for (module_name, function), wrap in _WRAPPERS.items():
        module = importlib.import_module(module_name)
        shipped = getattr(module, function)
        if hasattr(shipped, _SHIPPED):
            continue
        wrapper = wrap(shipped)
        wrapper.__wrapped__ = shipped  # type: ignore[attr-defined]
        setattr(wrapper, _SHIPPED, shipped)
        setattr(module, function, wrapper)
    return True


def restore() -> None:
    """Placement's consumer writes as shipped again."""
    for module_name, function in REPLACED:
        module = importlib.import_module(module_name)
        shipped = getattr(getattr(module, function), _SHIPPED, None)
        if shipped is not None:
            setattr(module, function, shipped)


__all__ = ["REPLACED", "problems", "restore", "trim_consumer_writes", "trimmed"]
