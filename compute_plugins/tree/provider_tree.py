#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""A local, thread-safe model of a tree of Placement resource providers.

:class:`ProviderTree` has the public API and the semantics of nova's
``nova.compute.provider_tree.ProviderTree`` (nova 34): the same methods and
signatures, the same generation rules (a generation passed to an
``update_*`` method is always stored, even when nothing else changed), the
same change detection (fields absent from a new inventory record are not
compared), and ``ValueError`` for an unknown or duplicate provider, so code
written against nova's tree runs unchanged. ``tests/compat`` runs the same
scenarios against both and compares the results.

Differences from nova:

* Lookups by name and by UUID are O(1): every provider, not only the roots,
  is indexed in two dicts that are kept up to date on add and remove. Nova
  searches the children recursively.
* The lock belongs to the tree instance (a ``threading.RLock``). Nova takes
  one process-wide named lock for every tree. The naming rule is nova's:
  public methods take the lock, private ``_*_with_lock`` helpers assume it
  is held.
* Provider field values are replaced on update, never changed in place, so
  ``subtree()``, ``copy.deepcopy()`` and ``snapshot()`` can share inventory
  dicts and trait/aggregate sets with the live tree instead of deep-copying
  them. ``data()`` still returns private mutable copies, as nova does.
* Names are unique in a tree, as Placement requires. Nova only checks names
  in ``new_child()`` without a UUID; here ``new_root()``, ``new_child()`` and
  ``populate_from_iterable()`` raise :class:`ProviderExists` for a name that
  another provider holds (nova would keep both and resolve the name
  ambiguously).
* The errors are subclasses of ``ValueError`` (:class:`ProviderNotFound`,
  :class:`ProviderExists`, :class:`MissingParents`) that carry the offending
  name or UUIDs; ``except ValueError`` still catches them.
* ``roots`` returns point-in-time :class:`ProviderData` records, not the
  internal nodes. ``ProviderData.data()`` returns the record itself, so
  nova's ``[root.data() for root in tree.roots]`` still works.
* ``subtree()`` sets ``scope_rp_uuid`` to the root's UUID even when called
  with its name (nova stores the argument as given).
* Additions used by the plugin manager: :meth:`ProviderTree.snapshot` and
  :meth:`ProviderTree.restore` capture and roll back the whole tree.
"""

from __future__ import annotations

import copy
import heapq
import logging
import threading
import types
import uuid as uuid_lib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import os_traits

LOG = logging.getLogger(__name__)

Inventory = Mapping[str, Mapping[str, Any]]


class ProviderNotFound(ValueError):
    """No provider in the tree has this name or UUID."""

    def __init__(self, name_or_uuid: str | None) -> None:
        super().__init__(f"No such provider {name_or_uuid}")
        self.name_or_uuid = name_or_uuid


class ProviderExists(ValueError):
    """A provider with this name or UUID is already in the tree."""

    def __init__(self, name_or_uuid: str) -> None:
        super().__init__(f"Provider {name_or_uuid} already exists.")
        self.name_or_uuid = name_or_uuid


class MissingParents(ValueError):
    """populate_from_iterable() got providers whose parent is unknown."""

    def __init__(self, parent_uuids: Iterable[str]) -> None:
        self.parent_uuids = frozenset(parent_uuids)
        listed = ", ".join(sorted(map(str, self.parent_uuids)))
        super().__init__(f"The following parents were not found: {listed}")


class ProviderData(NamedTuple):
    """Point-in-time copy of one provider (nova's ``ProviderData`` fields).

    From :meth:`ProviderTree.data` the containers are private mutable copies
    (``dict``/``set``, as nova returns): changing them never changes the
    tree. From :meth:`ProviderTree.snapshot` they are read-only
    (``MappingProxyType``/``frozenset``).
    """

    uuid: str
    name: str
    generation: int | None
    parent_uuid: str | None
    inventory: Mapping[str, Mapping[str, Any]]
    traits: set[str] | frozenset[str]
    aggregates: set[str] | frozenset[str]
    resources: Mapping[str, Any]

    def data(self) -> ProviderData:
        """Return this record (lets ``tree.roots`` items act like nova's)."""
        return self


def _copy_inventory(inventory: Inventory) -> dict[str, dict[str, Any]]:
    """Two-level copy: records hold scalars, so this is a full copy."""
    return {rc: dict(rec) for rc, rec in inventory.items()}


def _frozen_inventory(inventory: Inventory) -> Mapping[str, Mapping[str, Any]]:
    """Read-only view; safe to share because nodes never mutate in place."""
    return types.MappingProxyType(
        {rc: types.MappingProxyType(rec) for rc, rec in inventory.items()})


class _Provider:
    """One node of the tree; only :class:`ProviderTree` touches it.

    Field values (inventory, traits, aggregates, resources) are replaced on
    update and never changed in place, so they may be shared between trees
    and snapshots.
    """

    __slots__ = ("uuid", "name", "generation", "parent_uuid", "children",
                 "inventory", "traits", "aggregates", "resources")

    def __init__(self, name: str, uuid: str, generation: int | None = None,
                 parent_uuid: str | None = None) -> None:
        self.uuid = uuid
        self.name = name
        self.generation = generation
        self.parent_uuid = parent_uuid
        # Children keyed by UUID, in insertion order (nova's traversal order).
        self.children: dict[str, _Provider] = {}
        self.inventory: dict[str, dict[str, Any]] = {}
        self.traits: frozenset[str] = frozenset()
        self.aggregates: frozenset[str] = frozenset()
        # Nova stores any container per resource class here (sets of
        # objects.Resource); it is deep-copied in and out like nova does.
        self.resources: dict[str, Any] = {}

    def walk(self) -> Iterator[_Provider]:
        """Yield this provider and its descendants, parents first."""
        yield self
        for child in self.children.values():
            yield from child.walk()

    def data(self) -> ProviderData:
        return ProviderData(
            self.uuid, self.name, self.generation, self.parent_uuid,
            _copy_inventory(self.inventory), set(self.traits),
            set(self.aggregates), copy.deepcopy(self.resources))

    def frozen_data(self) -> ProviderData:
        return ProviderData(
            self.uuid, self.name, self.generation, self.parent_uuid,
            _frozen_inventory(self.inventory), self.traits, self.aggregates,
            types.MappingProxyType(copy.deepcopy(self.resources)))

    def clone(self, parent_uuid: str | None) -> _Provider:
        """Copy this node and its subtree, sharing the immutable values."""
        new = _Provider(self.name, self.uuid, self.generation, parent_uuid)
        new.inventory = self.inventory
        new.traits = self.traits
        new.aggregates = self.aggregates
        new.resources = copy.deepcopy(self.resources)
        for child in self.children.values():
            new.children[child.uuid] = child.clone(self.uuid)
        return new

    def has_inventory_changed(self, new: Inventory) -> bool:
        """Nova's rule: keys missing from a new record are not compared."""
        cur = self.inventory
        if set(cur) != set(new):
            return True
        for rc, cur_rec in cur.items():
            new_rec = new[rc]
            if set(new_rec) - set(cur_rec):
                return True
            for key, cur_val in cur_rec.items():
                if key in new_rec and new_rec[key] != cur_val:
                    return True
        return False

    def set_generation(self, generation: int | None, operation: str) -> None:
        if generation is not None and generation != self.generation:
            LOG.debug("Updating resource provider %s generation from %s to "
                      "%s during operation: %s", self.uuid, self.generation,
                      generation, operation)
            self.generation = generation


class ProviderTree:
    """A tree of resource providers, API-compatible with nova's.

    Every public method takes this tree's lock; one tree may be used from
    several threads. Providers are identified by name or UUID, both unique
    in the tree.
    """

    def __init__(self) -> None:
        """Create an empty provider tree."""
        self._lock = threading.RLock()
        # Nova's public attributes: the roots, keyed by UUID and by name.
        self.roots_by_uuid: dict[str, _Provider] = {}
        self.roots_by_name: dict[str, _Provider] = {}
        # Every provider, keyed by UUID and by name.
        self._by_uuid: dict[str, _Provider] = {}
        self._by_name: dict[str, _Provider] = {}

    @property
    def lock(self) -> threading.RLock:
        """This tree's lock (nova exposes ``lock`` too)."""
        return self._lock

    # --- private helpers; the caller holds self._lock -------------------

    def _find_with_lock(self, name_or_uuid: str | None) -> _Provider:
        found: _Provider | None = None
        if name_or_uuid is not None:
            found = self._by_uuid.get(name_or_uuid)
            if found is None:
                found = self._by_name.get(name_or_uuid)
        if found is None:
            raise ProviderNotFound(name_or_uuid)
        return found

    def _root_of_with_lock(self, provider: _Provider) -> _Provider:
        while provider.parent_uuid is not None:
            provider = self._by_uuid[provider.parent_uuid]
        return provider

    def _check_new_with_lock(self, *names_or_uuids: str | None) -> None:
        for key in names_or_uuids:
            if key is not None and (key in self._by_uuid
                                    or key in self._by_name):
                raise ProviderExists(key)

    def _add_with_lock(self, provider: _Provider) -> None:
        """Attach a node (and any subtree it has) and index it."""
        if provider.parent_uuid is None:
            self.roots_by_uuid[provider.uuid] = provider
            self.roots_by_name[provider.name] = provider
        else:
            parent = self._by_uuid[provider.parent_uuid]
            parent.children[provider.uuid] = provider
        for node in provider.walk():
            self._by_uuid[node.uuid] = node
            self._by_name[node.name] = node

    def _remove_with_lock(self, name_or_uuid: str) -> None:
        found = self._find_with_lock(name_or_uuid)
        if found.parent_uuid is None:
            del self.roots_by_uuid[found.uuid]
            if self.roots_by_name.get(found.name) is found:
                del self.roots_by_name[found.name]
        else:
            del self._by_uuid[found.parent_uuid].children[found.uuid]
        for node in found.walk():
            del self._by_uuid[node.uuid]
            # NOTE: populate_from_iterable() may already have given the name
            # to the provider that replaces this one.
            if self._by_name.get(node.name) is node:
                del self._by_name[node.name]

    def _clear_with_lock(self) -> None:
        self.roots_by_uuid = {}
        self.roots_by_name = {}
        self._by_uuid = {}
        self._by_name = {}

    def _uuids_with_lock(self) -> list[str]:
        return [node.uuid for root in self.roots_by_uuid.values()
                for node in root.walk()]

    # --- building and querying the tree ---------------------------------

    @property
    def roots(self) -> tuple[ProviderData, ...]:
        """Point-in-time data of the root providers, in insertion order."""
        with self._lock:
            return tuple(r.data() for r in self.roots_by_uuid.values())

    def new_root(self, name: str, uuid: str | None,
                 generation: int | None = None) -> str:
        """Add a root provider and return its UUID.

        :param uuid: UUID of the new provider; generated when None.
        :raises ProviderExists: the UUID or the name is already used.
        """
        with self._lock:
            self._check_new_with_lock(uuid, name)
            node = _Provider(name, uuid or str(uuid_lib.uuid4()), generation)
            self._add_with_lock(node)
            return node.uuid

    def new_child(self, name: str, parent: str, uuid: str | None = None,
                  generation: int | None = None) -> str:
        """Add a provider under ``parent`` (name or UUID); return its UUID.

        :raises ProviderExists: the UUID or the name is already used.
        :raises ProviderNotFound: the parent is not in the tree.
        """
        with self._lock:
            self._check_new_with_lock(uuid, name)
            parent_node = self._find_with_lock(parent)
            node = _Provider(name, uuid or str(uuid_lib.uuid4()), generation,
                             parent_node.uuid)
            self._add_with_lock(node)
            return node.uuid

    def remove(self, name_or_uuid: str) -> None:
        """Remove a provider and all its descendants.

        :raises ProviderNotFound: no such provider.
        """
        with self._lock:
            self._remove_with_lock(name_or_uuid)

    def exists(self, name_or_uuid: str) -> bool:
        """Whether a provider with this name or UUID is in the tree."""
        with self._lock:
            return (name_or_uuid in self._by_uuid
                    or name_or_uuid in self._by_name)

    def data(self, name_or_uuid: str) -> ProviderData:
        """Return a copy of one provider's data that the caller may change.

        :raises ProviderNotFound: no such provider.
        """
        with self._lock:
            return self._find_with_lock(name_or_uuid).data()

    def get_provider_uuids(self, name_or_uuid: str | None = None
                           ) -> list[str]:
        """UUIDs, parents first, of a subtree or (default) the whole tree.

        :raises ProviderNotFound: ``name_or_uuid`` is not in the tree.
        """
        with self._lock:
            if name_or_uuid is None:
                return self._uuids_with_lock()
            return [n.uuid for n in self._find_with_lock(name_or_uuid).walk()]

    def get_provider_uuids_in_tree(self, name_or_uuid: str) -> list[str]:
        """UUIDs, parents first, of the whole tree ``name_or_uuid`` is in.

        :raises ProviderNotFound: no such provider.
        """
        with self._lock:
            root = self._root_of_with_lock(self._find_with_lock(name_or_uuid))
            return [n.uuid for n in root.walk()]

    def uuids_by_name(self, name_or_uuid: str) -> dict[str, str]:
        """Name -> UUID of every provider of the tree ``name_or_uuid`` is in.

        :raises ProviderNotFound: no such provider.
        """
        with self._lock:
            root = self._root_of_with_lock(self._find_with_lock(name_or_uuid))
            return {n.name: n.uuid for n in root.walk()}

    def populate_from_iterable(
            self, provider_dicts: Iterable[Mapping[str, Any]]) -> None:
        """Add or replace providers from Placement-style dicts.

        Each dict has ``uuid``, ``name`` and optionally ``generation`` and
        ``parent_provider_uuid``. A provider already in the tree is replaced
        together with its subtree (its inventory, traits and aggregates are
        dropped, as in nova); descendants must therefore be listed too.
        Providers not listed are kept. Nothing changes if an error is raised.

        :raises MissingParents: a parent is neither in the tree nor listed.
        :raises ProviderExists: a name is held by another provider that stays.
        """
        if not provider_dicts:
            return
        to_add = {pd["uuid"]: pd for pd in provider_dicts}
        order = {u: i for i, u in enumerate(to_add)}
        with self._lock:
            # Providers that go away: the replaced ones and their subtrees.
            replaced = {n.uuid for u in to_add if u in self._by_uuid
                        for n in self._by_uuid[u].walk()}
            # NOTE: a parent that is only in a replaced subtree would vanish
            # before its child is added; nova fails half-way there.
            kept = set(self._by_uuid) - replaced
            parents = {pd.get("parent_provider_uuid") for pd in to_add.values()}
            missing = {p for p in parents if p is not None} - set(to_add) - kept
            if missing:
                raise MissingParents(missing)
            self._check_populate_names_with_lock(to_add, replaced)

            # Insert parents before children; among the providers ready to
            # go, the earliest listed first. That is the order nova's loop
            # produces, so children and roots end up ordered the same way.
            waiting: dict[str | None, list[str]] = {}
            ready: list[tuple[int, str]] = []
            for u, pd in to_add.items():
                parent_uuid = pd.get("parent_provider_uuid")
                if parent_uuid in to_add:
                    waiting.setdefault(parent_uuid, []).append(u)
                else:
                    ready.append((order[u], u))
            heapq.heapify(ready)
            while ready:
                _, u = heapq.heappop(ready)
                pd = to_add[u]
                if u in self._by_uuid:
                    self._remove_with_lock(u)
                self._add_with_lock(_Provider(
                    pd["name"], u, pd.get("generation"),
                    pd.get("parent_provider_uuid")))
                for child in waiting.pop(u, ()):
                    heapq.heappush(ready, (order[child], child))

    def _check_populate_names_with_lock(
            self, to_add: Mapping[str, Mapping[str, Any]],
            replaced: set[str]) -> None:
        seen: dict[str, str] = {}
        for u, pd in to_add.items():
            name = pd["name"]
            holder = self._by_name.get(name)
            if (seen.setdefault(name, u) != u
                    or (holder is not None and holder.uuid not in replaced
                        and holder.uuid != u)):
                raise ProviderExists(name)

    def subtree(self, name_or_uuid: str) -> ProviderSubTree:
        """Return a new tree holding a copy of the tree rooted here.

        Cheaper than ``copy.deepcopy`` of the whole tree when only one root
        (e.g. one Ironic node) is needed.

        :raises ProviderNotFound: no such provider.
        :raises ValueError: the provider is not a root.
        """
        with self._lock:
            found = self._find_with_lock(name_or_uuid)
            if found.parent_uuid is not None:
                raise ValueError(
                    f"Provider {name_or_uuid} is not a root provider")
            new_root = found.clone(None)
        sub = ProviderSubTree(new_root.uuid)
        sub._add_with_lock(new_root)
        return sub

    # --- inventory ------------------------------------------------------

    def has_inventory(self, name_or_uuid: str) -> bool:
        """Whether the provider has any inventory record."""
        with self._lock:
            return bool(self._find_with_lock(name_or_uuid).inventory)

    def has_inventory_changed(self, name_or_uuid: str,
                              inventory: Inventory) -> bool:
        """Whether ``inventory`` differs from the provider's.

        Fields missing from a new record are ignored (a caller that sends
        only ``total`` does not undo ``allocation_ratio``); a new field or a
        new or removed resource class is a change.
        """
        with self._lock:
            return self._find_with_lock(name_or_uuid).has_inventory_changed(
                inventory)

    def update_inventory(self, name_or_uuid: str, inventory: Inventory,
                         generation: int | None = None) -> bool:
        """Store ``inventory`` if it changed; return whether it did.

        ``generation``, when given, is stored even if nothing changed.
        """
        with self._lock:
            provider = self._find_with_lock(name_or_uuid)
            provider.set_generation(generation, "update_inventory")
            if not provider.has_inventory_changed(inventory):
                return False
            provider.inventory = _copy_inventory(inventory)
            return True

    def has_sharing_provider(self, resource_class: str) -> bool:
        """Whether a provider with ``MISC_SHARES_VIA_AGGREGATE`` has
        inventory of ``resource_class``."""
        with self._lock:
            return any(
                resource_class in p.inventory
                and os_traits.MISC_SHARES_VIA_AGGREGATE in p.traits
                for p in self._by_uuid.values())

    # --- traits ---------------------------------------------------------

    def has_traits(self, name_or_uuid: str, traits: Iterable[str]) -> bool:
        """Whether the provider has all ``traits`` (True if none given)."""
        with self._lock:
            return set(traits) <= self._find_with_lock(name_or_uuid).traits

    def have_traits_changed(self, name_or_uuid: str,
                            traits: Iterable[str]) -> bool:
        """Whether ``traits`` differs from the provider's traits."""
        with self._lock:
            return set(traits) != self._find_with_lock(name_or_uuid).traits

    def update_traits(self, name_or_uuid: str, traits: Iterable[str],
                      generation: int | None = None) -> bool:
        """Replace the provider's traits; return whether they changed.

        ``generation``, when given, is stored even if nothing changed.
        """
        with self._lock:
            provider = self._find_with_lock(name_or_uuid)
            return self._set_traits_with_lock(provider, traits, generation)

    def add_traits(self, name_or_uuid: str, *traits: str) -> None:
        """Add traits, keeping the others."""
        if not traits:
            return
        with self._lock:
            provider = self._find_with_lock(name_or_uuid)
            self._set_traits_with_lock(provider, provider.traits | set(traits))

    def remove_traits(self, name_or_uuid: str, *traits: str) -> None:
        """Remove traits, keeping the others."""
        if not traits:
            return
        with self._lock:
            provider = self._find_with_lock(name_or_uuid)
            self._set_traits_with_lock(provider, provider.traits - set(traits))

    def _set_traits_with_lock(self, provider: _Provider,
                              traits: Iterable[str],
                              generation: int | None = None) -> bool:
        provider.set_generation(generation, "update_traits")
        new = frozenset(traits)
        if new == provider.traits:
            return False
        provider.traits = new
        return True

    # --- aggregates -----------------------------------------------------

    def in_aggregates(self, name_or_uuid: str,
                      aggregates: Iterable[str]) -> bool:
        """Whether the provider is in all ``aggregates`` (True if none)."""
        with self._lock:
            return (set(aggregates)
                    <= self._find_with_lock(name_or_uuid).aggregates)

    def have_aggregates_changed(self, name_or_uuid: str,
                                aggregates: Iterable[str]) -> bool:
        """Whether ``aggregates`` differs from the provider's aggregates."""
        with self._lock:
            return (set(aggregates)
                    != self._find_with_lock(name_or_uuid).aggregates)

    def update_aggregates(self, name_or_uuid: str, aggregates: Iterable[str],
                          generation: int | None = None) -> bool:
        """Replace the provider's aggregates; return whether they changed.

        ``generation``, when given, is stored even if nothing changed.
        """
        with self._lock:
            provider = self._find_with_lock(name_or_uuid)
            return self._set_aggregates_with_lock(provider, aggregates,
                                                  generation)

    def add_aggregates(self, name_or_uuid: str, *aggregates: str) -> None:
        """Add aggregates, keeping the others."""
        with self._lock:
            provider = self._find_with_lock(name_or_uuid)
            self._set_aggregates_with_lock(
                provider, provider.aggregates | set(aggregates))

    def remove_aggregates(self, name_or_uuid: str, *aggregates: str) -> None:
        """Remove aggregates, keeping the others."""
        with self._lock:
            provider = self._find_with_lock(name_or_uuid)
            self._set_aggregates_with_lock(
                provider, provider.aggregates - set(aggregates))

    def _set_aggregates_with_lock(self, provider: _Provider,
                                  aggregates: Iterable[str],
                                  generation: int | None = None) -> bool:
        provider.set_generation(generation, "update_aggregates")
        new = frozenset(aggregates)
        if new == provider.aggregates:
            return False
        provider.aggregates = new
        return True

    # --- resources ------------------------------------------------------

    def update_resources(self, name_or_uuid: str,
                         resources: Mapping[str, Any]) -> bool:
        """Replace the provider's resources (per resource class, the
        assignable devices); return whether they changed."""
        with self._lock:
            provider = self._find_with_lock(name_or_uuid)
            if provider.resources == resources:
                return False
            provider.resources = copy.deepcopy(dict(resources))
            return True

    # --- change detection (not in nova) ---------------------------------

    def change_token(self) -> tuple[Any, ...]:
        """A token that stays equal (:func:`same_token`) while the tree does.

        Every provider's name, uuid, parent and generation and the very
        objects holding its inventory, traits, aggregates and resources:
        the tree replaces those objects instead of changing them, so an
        identity check tells an untouched tree in microseconds. The token
        holds the objects, so their identities cannot be reused while it
        lives.
        """
        with self._lock:
            return tuple((n.uuid, n.name, n.parent_uuid, n.generation,
                          n.inventory, n.traits, n.aggregates, n.resources)
                         for root in self.roots_by_uuid.values()
                         for n in root.walk())

    # --- snapshot and rollback (not in nova) ----------------------------

    def snapshot(self) -> tuple[ProviderData, ...]:
        """Return every provider, parents before children, read-only.

        Inventory records are ``MappingProxyType`` views and traits and
        aggregates ``frozenset``; they share storage with the tree but stay
        constant, because the tree replaces values instead of changing them.
        Resources are deep copies behind a ``MappingProxyType``. Pass the
        result to :meth:`restore` to roll the tree back.
        """
        with self._lock:
            return tuple(n.frozen_data()
                         for root in self.roots_by_uuid.values()
                         for n in root.walk())

    def restore(self, snapshot: Iterable[ProviderData]) -> None:
        """Replace the whole tree with an earlier :meth:`snapshot`.

        Names, UUIDs, parentage, generations, inventory, traits, aggregates
        and resources come back exactly, and the order of roots and children
        too. The snapshot is copied, so it can be restored again later.

        :raises ValueError: the snapshot lists a child before its parent or
            repeats a name or UUID; the tree is then left unchanged.
        """
        nodes = []
        for pd in snapshot:
            node = _Provider(pd.name, pd.uuid, pd.generation, pd.parent_uuid)
            node.inventory = _copy_inventory(pd.inventory)
            node.traits = frozenset(pd.traits)
            node.aggregates = frozenset(pd.aggregates)
            node.resources = copy.deepcopy(dict(pd.resources))
            nodes.append(node)
        new = ProviderTree()
        for node in nodes:  # validate on a scratch tree first
            new._check_new_with_lock(node.uuid, node.name)
            if node.parent_uuid is not None:
                new._find_with_lock(node.parent_uuid)
            new._add_with_lock(node)
        with self._lock:
            self.roots_by_uuid = new.roots_by_uuid
            self.roots_by_name = new.roots_by_name
            self._by_uuid = new._by_uuid
            self._by_name = new._by_name

    # --- copying --------------------------------------------------------

    def __deepcopy__(self, memo: dict[int, Any]) -> ProviderTree:
        """Copy the tree cheaply (shared immutable values), new lock."""
        new = self.__class__.__new__(self.__class__)
        new.__dict__.update({k: copy.deepcopy(v, memo)
                             for k, v in self.__dict__.items()
                             if k not in _TREE_STATE})
        new._lock = threading.RLock()
        new._clear_with_lock()
        with self._lock:
            for root in self.roots_by_uuid.values():
                new._add_with_lock(root.clone(None))
        return new

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the lock (a lock cannot be pickled)."""
        with self._lock:
            state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle with a fresh lock of its own."""
        self.__dict__.update(state)
        self._lock = threading.RLock()


_TREE_STATE = frozenset(
    ("_lock", "roots_by_uuid", "roots_by_name", "_by_uuid", "_by_name"))


class ProviderSubTree(ProviderTree):
    """A copy of one root's tree, as returned by :meth:`ProviderTree.subtree`.

    ``scope_rp_uuid`` is the UUID of that root.
    """

    def __init__(self, scope_rp_uuid: str) -> None:
        super().__init__()
        self._scope_rp_uuid = scope_rp_uuid

    @property
    def scope_rp_uuid(self) -> str:
        """UUID of the root this subtree was copied from."""
        return self._scope_rp_uuid


def same_token(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Whether two :meth:`ProviderTree.change_token` results describe the
    same, untouched tree (values equal, containers identical)."""
    return len(a) == len(b) and all(
        x[:4] == y[:4] and all(u is v for u, v in zip(x[4:], y[4:], strict=True))
        for x, y in zip(a, b, strict=True))
