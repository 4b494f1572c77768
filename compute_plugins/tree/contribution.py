"""What one plugin contributes to the provider tree, and how it is applied.

A plugin does not edit the tree by hand: it returns the providers it wants,
each with the inventory, traits and aggregates it owns there
(:class:`ProviderContribution`). The framework checks that no two plugins
claim the same provider or resource class, then merges every plugin's
contribution into the tree with nova's rule: a plugin adds and removes only
what it contributed; traits, aggregates and inventory that someone else put
on a provider stay.

Keeping contributions declarative gives three things for free: a failed
plugin's last contribution can be re-applied as it was, ownership conflicts
are found before the tree is touched, and removed devices disappear from the
tree because they are no longer contributed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Optional

from compute_plugins import exception
from compute_plugins.plugin import names
from compute_plugins.tree import reshape
from compute_plugins.tree.provider_tree import ProviderTree
from compute_plugins.util.text import printable

Inventory = Mapping[str, Mapping[str, Any]]


@dataclasses.dataclass(frozen=True)
class ProviderContribution:
    """One provider as one plugin wants it.

    :param name: provider name; the nodename itself for the compute root.
    :param uuid: uuid of the provider when the plugin creates it (use
        :func:`compute_plugins.plugin.names.provider_uuid` so it is stable).
    :param parent: name of the parent provider; ``None`` means the root.
    :param inventory: resource class -> inventory record this plugin owns.
    :param traits: traits this plugin owns on the provider.
    :param aggregates: aggregate uuids this plugin puts the provider in.
    """

    name: str
    uuid: Optional[str] = None
    parent: Optional[str] = None
    inventory: Inventory = dataclasses.field(default_factory=dict)
    traits: frozenset[str] = frozenset()
    aggregates: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        frozen = {rc: MappingProxyType(dict(rec)) for rc, rec in self.inventory.items()}
        object.__setattr__(self, "inventory", MappingProxyType(frozen))
        object.__setattr__(self, "traits", frozenset(self.traits))
        object.__setattr__(self, "aggregates", frozenset(self.aggregates))


Contributions = Mapping[str, tuple[ProviderContribution, ...]]


class Providers(Mapping[str, str]):
    """The providers one plugin contributes on one node: name -> uuid.

    What a plugin's ``host_state`` gets, so that its state names its
    providers by the uuids the tree has (those the agent publishes with
    the state, the scheduler's mappings and allocations name, and Placement
    holds: the compute root may be nova's compute node uuid), instead of
    deriving them again by convention. Built by :meth:`of`, the one rule
    for every caller. Read-only.

    :param nodename: the compute node (the root provider's name).
    :param uuids: provider name -> uuid; the root is always there.
    """

    __slots__ = ("nodename", "_uuids")

    def __init__(self, nodename: str, uuids: Mapping[str, str]) -> None:
        self.nodename = nodename
        self._uuids = dict(uuids)
        if nodename not in self._uuids:
            raise ValueError("providers of node %r without its root" % nodename)

    @classmethod
    def of(cls, nodename: str, contributions: Iterable[ProviderContribution],
           tree: Optional[Mapping[str, str]] = None) -> Providers:
        """The providers of ``contributions`` on ``nodename``, and the root.

        Each provider's uuid is the one the tree has for its name (``tree``:
        name -> uuid, as the manager last applied it), else the one its
        contribution gives, else, for the root, the uuid the manager gives a
        new root (:func:`compute_plugins.plugin.names.provider_uuid` of the node).
        """
        known = tree or {}
        uuids = {nodename: known.get(nodename) or names.provider_uuid(nodename)}
        for item in contributions:
            uuid = known.get(item.name) or item.uuid
            if uuid:
                uuids[item.name] = uuid
        return cls(nodename, uuids)

    @property
    def root(self) -> str:
        """The compute root's uuid."""
        return self._uuids[self.nodename]

    def __getitem__(self, name: str) -> str:
        try:
            return self._uuids[name]
        except KeyError:
            raise KeyError("provider %r is not one of this plugin's providers "
                           "on node %s (%s)" % (name, self.nodename,
                                                ", ".join(sorted(self._uuids))
                                                )) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._uuids)

    def __len__(self) -> int:
        return len(self._uuids)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Providers):
            return (self.nodename, self._uuids) == (other.nodename, other._uuids)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.nodename, frozenset(self._uuids.items())))

    def __repr__(self) -> str:
        return "Providers(%r, %r)" % (self.nodename, self._uuids)


class InvalidContribution(exception.ComputePluginsError):
    """A plugin contributed something Placement would refuse."""


def owns_name(nodename: str, name: str) -> bool:
    """Whether a plugin may contribute the provider ``name`` on ``nodename``:
    the compute root itself or a ``<nodename>_*`` child (the names plugins
    and nova's driver give). Other providers in the tree (neutron's
    ``<host>:<agent>``, cyborg's) belong to other services."""
    return name == nodename or name.startswith(nodename + "_")


def validate(plugin: str, nodename: str, items: Iterable[ProviderContribution]) -> None:
    """Refuse names Placement would refuse, or that the plugin cannot own,
    before anything is applied (a plugin's output and a checkpoint alike)."""
    seen: set[str] = set()
    for item in items:
        problem = names.provider_name_problem(item.name)
        if problem is not None:
            raise InvalidContribution(
                "plugin %r: provider name %r %s" % (plugin, item.name, problem))
        # NOTE: %r escapes what is not printable (a newline, an escape).
        where = "provider %r" % item.name
        if not owns_name(nodename, item.name):
            raise InvalidContribution(
                "plugin %r: %s is not the compute node %r nor named %s_*: "
                "it may belong to another service" % (
                    plugin, where, nodename, printable(nodename)))
        if item.name in seen:
            raise InvalidContribution(
                "plugin %r contributed %s twice" % (plugin, where))
        seen.add(item.name)
        if item.name != nodename and not item.uuid:
            raise InvalidContribution(
                "plugin %r: %s needs a uuid" % (plugin, where))
        for rc, record in item.inventory.items():
            if not names.is_valid_resource_class(rc):
                raise InvalidContribution(
                    "plugin %r: %s: resource class %r is neither standard "
                    "(os-resource-classes) nor CUSTOM_[A-Z0-9_]+" % (plugin, where, rc))
            if not isinstance(record.get("total"), int) or record["total"] < 0:
                raise InvalidContribution(
                    "plugin %r: %s: inventory %s needs an integer total >= 0, "
                    "got %r" % (plugin, where, rc, record.get("total")))
        for trait in item.traits:
            if not names.is_valid_trait(trait):
                raise InvalidContribution(
                    "plugin %r: %s: trait %r is neither standard (os-traits) "
                    "nor CUSTOM_[A-Z0-9_]+" % (plugin, where, trait))


def find_conflict(
    plugin: str,
    nodename: str,
    items: Iterable[ProviderContribution],
    claimed: Mapping[tuple[str, str], str],
) -> Optional[exception.PluginConflict]:
    """Return the first claim of ``plugin`` another plugin already holds.

    ``claimed`` maps ``(provider name, "")`` for a provider and
    ``(provider name, resource class)`` for an inventory to the owning plugin.
    The compute root is shared: only its resource classes are claimed.
    """
    for item in items:
        keys = [(item.name, rc) for rc in item.inventory]
        if item.name != nodename:
            keys.insert(0, (item.name, ""))
        for key in keys:
            owner = claimed.get(key)
            if owner is not None and owner != plugin:
                what = ("provider %r" % key[0] if not key[1]
                        else "resource class %s on provider %r" % (key[1], key[0]))
                return exception.PluginConflict(plugin, owner, what)
    return None


def claims(nodename: str, items: Iterable[ProviderContribution]) -> list[tuple[str, str]]:
    """The keys :func:`find_conflict` checks, for the items of one plugin."""
    keys: list[tuple[str, str]] = []
    for item in items:
        if item.name != nodename:
            keys.append((item.name, ""))
        keys.extend((item.name, rc) for rc in item.inventory)
    return keys


@dataclasses.dataclass
class _Merged:
    uuid: Optional[str] = None
    parent: Optional[str] = None
    inventory: dict[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    traits: set[str] = dataclasses.field(default_factory=set)
    aggregates: set[str] = dataclasses.field(default_factory=set)


def _merge(nodename: str, contributions: Contributions) -> dict[str, _Merged]:
    merged: dict[str, _Merged] = {}
    for items in contributions.values():
        for item in items:
            entry = merged.setdefault(item.name, _Merged())
            if item.name != nodename:
                entry.uuid = item.uuid
                entry.parent = item.parent or nodename
            entry.inventory.update(item.inventory)
            entry.traits |= item.traits
            entry.aggregates |= item.aggregates
    return merged


def _depth(name: str, nodename: str, merged: Mapping[str, _Merged]) -> int:
    depth, seen = 0, {name}
    while name != nodename:
        entry = merged.get(name)
        if entry is None or entry.parent is None:
            break
        name = entry.parent
        if name in seen:
            raise InvalidContribution("providers %s form a parent cycle" % sorted(seen))
        seen.add(name)
        depth += 1
    return depth


def adopt(tree: ProviderTree, nodename: str) -> tuple[ProviderContribution, ...]:
    """What the tree under ``nodename`` holds that this project may have made.

    Used when the previous contributions are unknown (first start, no usable
    checkpoint): the providers below the root named ``<nodename>_*`` (the
    names plugins and nova's own driver give) and every inventory class on
    the root (nova's compute node owns them, as here) are taken as
    contributed before, so what no plugin contributes any more is removed.
    Other services' providers in the tree (neutron's ``<host>:<agent>``
    bandwidth providers, cyborg's) are not touched. Traits and aggregates are
    not adopted: they may be an operator's.
    """
    if not tree.exists(nodename):
        return ()
    in_tree = set(tree.get_provider_uuids(nodename))
    snapshot = tree.snapshot()
    names_by_uuid = {data.uuid: data.name for data in snapshot}
    items = []
    for data in snapshot:
        if data.name == nodename:
            items.append(ProviderContribution(name=nodename, inventory=data.inventory))
        elif (data.uuid in in_tree and data.parent_uuid is not None
              and data.name.startswith(nodename + "_")):
            parent = names_by_uuid[data.parent_uuid]
            items.append(ProviderContribution(
                name=data.name, uuid=data.uuid,
                parent=None if parent == nodename else parent,
                inventory=data.inventory))
    return tuple(items)


def union(
    first: Contributions, second: Contributions
) -> dict[str, tuple[ProviderContribution, ...]]:
    """Per plugin, everything either contributed (``second`` wins on values).

    After a sync that failed half-way, Placement may hold any part of the
    staged contributions; diffing the next periodic against the union
    removes whatever was written and is not contributed any more.
    """
    result: dict[str, tuple[ProviderContribution, ...]] = {}
    for plugin in dict.fromkeys([*first, *second]):
        by_name: dict[str, ProviderContribution] = {}
        for item in (*first.get(plugin, ()), *second.get(plugin, ())):
            was = by_name.get(item.name)
            if was is not None:
                item = dataclasses.replace(
                    item, uuid=item.uuid or was.uuid,
                    inventory={**was.inventory, **item.inventory},
                    traits=was.traits | item.traits,
                    aggregates=was.aggregates | item.aggregates)
            by_name[item.name] = item
        result[plugin] = tuple(by_name.values())
    return result


def check(nodename: str, contributions: Contributions) -> None:
    """Validate every plugin's items and the parent links (no cycles)."""
    for plugin, items in contributions.items():
        validate(plugin, nodename, items)
    merged = _merge(nodename, contributions)
    for name in merged:
        _depth(name, nodename, merged)


def _moves(
    in_tree: Mapping[str, Any], nodename: str, old: Mapping[str, _Merged],
    new: Mapping[str, _Merged],
) -> list[reshape.Move]:
    """Inventory classes leaving the compute root for providers that gain them.

    The one reshape plugins need: nova's flat layout (VCPU, MEMORY_MB, VGPU
    on the root) becoming nested providers. Moves between other providers
    are not guessed (a guest's vGPU lives on one GPU): Placement refuses to
    delete inventory in use and the report client keeps it.
    """
    root = in_tree.get(nodename)
    was = old.get(nodename)
    if root is None or was is None:
        return []
    kept = new[nodename].inventory if nodename in new else {}
    moves = []
    for rc in sorted(set(was.inventory) - set(kept)):
        if rc not in root.inventory:
            continue
        targets = tuple(sorted(
            other for other, want in new.items()
            if rc in want.inventory and other != nodename
            and rc not in old.get(other, _Merged()).inventory))
        if targets:
            moves.append(reshape.Move(rc, nodename, root.uuid, targets))
    return moves


def apply(
    tree: ProviderTree,
    nodename: str,
    previous: Contributions,
    current: Contributions,
    allocations: Optional[dict[str, Any]] = None,
    snapshot: Optional[Iterable[Any]] = None,
) -> None:
    """Bring ``tree`` from the ``previous`` contributions to the ``current`` ones.

    Providers contributed before but not now are removed (deepest first);
    new ones are created parents first; on every contributed provider only the
    inventory classes, traits and aggregates that some plugin contributed
    before or now are touched. The root must exist.

    :raises ReshapeNeeded: inventory moves between providers and
        ``allocations`` is ``None``; with the allocations they are moved in
        place (:mod:`compute_plugins.tree.reshape`).
    :param snapshot: ``tree.snapshot()`` when the caller has just taken it.
    """
    old = _merge(nodename, previous)
    new = _merge(nodename, current)
    # NOTE: one read-only snapshot instead of a copy per provider (data()).
    in_tree = {data.name: data for data in (snapshot or tree.snapshot())}
    moves = _moves(in_tree, nodename, old, new)
    if moves and allocations is None:
        raise exception.ReshapeNeeded(
            "inventory moves between providers: %s" % "; ".join(map(str, moves)))
    if nodename in old:
        # NOTE: the root always stays; visiting it strips what plugins put
        # there before and no longer do.
        new.setdefault(nodename, _Merged())

    gone = [n for n in old if n not in new and n != nodename]
    gone += [n for n in new if n in old and n != nodename and old[n].parent != new[n].parent]
    # NOTE: a provider that moves to another parent keeps its uuid and what
    # others put on it (Placement re-parents it in place, with allocations).
    moved = {}
    for name in sorted(gone, key=lambda n: -_depth(n, nodename, old)):
        if tree.exists(name):
            moved[name] = in_tree[name]
            tree.remove(name)

    for name in sorted(new, key=lambda n: _depth(n, nodename, new)):
        want = new[name]
        created = name != nodename and not tree.exists(name)
        if created:
            parent = want.parent or nodename
            if not tree.exists(parent):
                raise InvalidContribution(
                    "provider %r names parent %r, which no plugin provides" % (name, parent))
            before = moved.get(name)
            tree.new_child(name, parent, uuid=before.uuid if before else want.uuid)
        was = old.get(name, _Merged())
        data = moved.get(name) or (tree.data(name) if created else in_tree[name])

        inventory = {rc: rec for rc, rec in data.inventory.items() if rc not in was.inventory}
        inventory.update({rc: dict(rec) for rc, rec in want.inventory.items()})
        if tree.has_inventory_changed(name, inventory):
            tree.update_inventory(name, inventory)

        traits = (set(data.traits) - was.traits) | want.traits
        if tree.have_traits_changed(name, traits):
            tree.update_traits(name, traits)

        aggregates = (set(data.aggregates) - was.aggregates) | want.aggregates
        if tree.have_aggregates_changed(name, aggregates):
            tree.update_aggregates(name, aggregates)

    if moves and allocations is not None:
        reshape.move_allocations(tree, moves, allocations)

