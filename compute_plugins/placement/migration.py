"""Placement's side of a move, as nova does it ("migration-based
allocations", since Queens): during a move the **migration consumer** holds
the source's allocation and the **instance consumer** the destination's.

Both writes are one ``POST /allocations`` naming each consumer's generation
(microversion 1.28; ``consumer_type`` 1.38), so they happen together or
not at all, as nova's ``move_allocations``:

- :func:`move_allocations` from the instance to the migration consumer
  (nova's ``replace_allocation_with_migration``, the hand-over), or back
  (``revert_allocation_for_migration``);
- a 409 ``placement.concurrent_update`` (another writer changed a consumer
  since it was read) is read again and retried, up to :data:`ATTEMPTS`,
  then raised (:class:`MoveConflict`): never ignored.

Each move checks before it writes: the allocation found on the target
consumer and none on the source one is a move done already (a re-run).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Optional

from compute_plugins.placement import exception as pexc

#: Attempts of a move whose consumers keep changing under it.
ATTEMPTS = 4
#: ``consumer_type`` (1.38) of each side.
MIGRATION, INSTANCE = "MIGRATION", "INSTANCE"


class MoveConflict(pexc.PlacementError):
    """Placement refused a move of allocations :data:`ATTEMPTS` times
    (409: another writer kept changing a consumer), or found the source
    consumer without allocations and the target without them too."""


@dataclasses.dataclass(frozen=True)
class Held:
    """A consumer's allocation as Placement holds it.

    :param allocations: provider uuid -> resource class -> amount.
    :param generation: the consumer's generation (None: no such consumer).
    :param project_id: its project ("" when none).
    :param user_id: its user ("" when none).
    """

    allocations: Mapping[str, Mapping[str, int]]
    generation: Optional[int]
    project_id: str
    user_id: str


def read(client: Any, consumer: str) -> Held:
    """``GET /allocations/{consumer}`` (a consumer Placement does not know
    has no allocation and no generation)."""
    body = client.get("/allocations/%s" % consumer)
    allocations = {rp: dict(item.get("resources") or {})
                   for rp, item in (body.get("allocations") or {}).items()}
    return Held(allocations, body.get("consumer_generation"),
                str(body.get("project_id") or ""), str(body.get("user_id") or ""))


def _body(allocations: Mapping[str, Mapping[str, int]], generation: Optional[int],
          project: str, user: str, consumer_type: str, typed: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "allocations": {rp: {"resources": dict(res)} for rp, res in allocations.items()},
        "project_id": project, "user_id": user, "consumer_generation": generation}
    if typed:
        body["consumer_type"] = consumer_type
    return body


def move_allocations(client: Any, source: str, target: str, target_type: str,
                     source_type: str) -> Held:
    """Move every allocation of consumer ``source`` to consumer ``target``
    in one ``POST /allocations`` (``source`` left with none, which
    Placement deletes), each at the generation just read.

    :param target_type: ``consumer_type`` of ``target`` (:data:`MIGRATION`
        at a hand-over, :data:`INSTANCE` when given back).
    :param source_type: ``consumer_type`` of ``source``.
    :returns: what ``target`` holds now.
    :raises MoveConflict: ``source`` has no allocation and ``target`` none
        either (nothing to move), ``target`` holds allocations already
        while ``source`` does too, or a 409 every attempt.
    :raises PlacementError: anything else Placement refused.
    """
    typed = client.microversion >= (1, 38)
    last: Optional[pexc.PlacementError] = None
    for _ in range(ATTEMPTS):
        held = read(client, source)
        there = read(client, target)
        if there.allocations and held.allocations:
            # NOTE: read again: another give-back (a revert and its mover's
            # roll-back, or an agent's) may have moved them between the two
            # reads; then they are moved already.
            held = read(client, source)
        if not held.allocations:
            if there.allocations:
                return there    # NOTE: moved already (a re-run)
            raise MoveConflict("consumer %s has no allocation in Placement to move "
                               "to consumer %s" % (source, target))
        if there.allocations:
            raise MoveConflict(
                "consumer %s has allocations in Placement (on %s) while consumer %s "
                "still holds its own: not moved" % (
                    target, ", ".join(sorted(there.allocations)), source))
        body = {
            target: _body(held.allocations, there.generation, held.project_id,
                          held.user_id, target_type, typed),
            source: _body({}, held.generation, held.project_id, held.user_id,
                          source_type, typed)}
        try:
            client.post("/allocations", body)
        except pexc.Conflict as err:
            if err.code != pexc.CONCURRENT_UPDATE:
                raise
            last = err
            continue
        return Held(held.allocations, None, held.project_id, held.user_id)
    raise MoveConflict("Placement refused to move the allocation of consumer %s to "
                       "consumer %s %d times (409: another writer keeps changing "
                       "them): %s" % (source, target, ATTEMPTS, last))


def free_destination(client: Any, instance: str, migration: str) -> bool:
    """Delete the allocations of ``instance`` -- a withdrawn destination
    offer's -- only while ``migration`` still holds the source's: an empty
    ``POST /allocations`` at the instance's generation just read, so a
    give-back landing meanwhile (the mover's roll-back, its offer gone) is
    never deleted. (A give-back moves the source only to an instance that
    holds nothing: once the migration consumer is empty, whatever the
    instance holds is the source's.)

    :returns: whether it deleted them.
    :raises MoveConflict: a 409 every attempt.
    """
    typed = client.microversion >= (1, 38)
    last: Optional[pexc.PlacementError] = None
    for _ in range(ATTEMPTS):
        there = read(client, instance)
        if not there.allocations or not read(client, migration).allocations:
            return False
        try:
            client.post("/allocations", {instance: _body(
                {}, there.generation, there.project_id, there.user_id, INSTANCE,
                typed)})
        except pexc.Conflict as err:
            if err.code != pexc.CONCURRENT_UPDATE:
                raise
            last = err
            continue
        return True
    raise MoveConflict("Placement refused to free the allocation of consumer %s %d "
                       "times (409: another writer keeps changing it): %s"
                       % (instance, ATTEMPTS, last))


__all__ = ["ATTEMPTS", "INSTANCE", "MIGRATION", "Held", "MoveConflict",
           "free_destination", "move_allocations", "read"]
