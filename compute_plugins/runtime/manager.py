"""Load the enabled resource plugins and fan the periodic out to them.

Loading follows ``oslo_config/generator.py``: a stevedore
``NamedExtensionManager`` over ``compute_plugins.resources`` with the names
from ``[compute_plugins] enabled_plugins``, so a plugin that is not enabled is
never imported. Each plugin is isolated: one that fails to import, to
construct, to discover or to contribute is logged with its entry point, the
host is marked *degraded*, the plugin's last good contribution is kept, and
the other plugins go on.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from typing import Any, Optional

from oslo_config import cfg
from oslo_log import log as logging
from stevedore import extension, named

from compute_plugins import conf as conf_areas
from compute_plugins import exception
from compute_plugins.host.model import HostInfo
from compute_plugins.plugin import names
from compute_plugins.plugin.contract import Rejection
from compute_plugins.request.groups import PluginAssignment
from compute_plugins.runtime import AnyPlugin, LoadedPlugin, PluginSet
from compute_plugins.tree import checkpoint, contribution
from compute_plugins.tree.contribution import Providers
from compute_plugins.tree.provider_tree import ProviderTree, same_token
from compute_plugins.util.text import printable

LOG = logging.getLogger(__name__)

NAMESPACE = "compute_plugins.resources"

#: Pseudo-plugin owning what the tree held at start when no checkpoint said
#: who contributed it (:func:`compute_plugins.tree.contribution.adopt`). Its
#: providers and root inventory are removed once every plugin contributed
#: without failure and none of them contributes them.
ADOPTED = "(adopted)"

Contributions = dict[str, tuple[contribution.ProviderContribution, ...]]


def _unclaimed(
    nodename: str,
    adopted: tuple[contribution.ProviderContribution, ...],
    current: Contributions,
) -> tuple[contribution.ProviderContribution, ...]:
    """The adopted items no plugin contributes now (kept while degraded).

    A root inventory class is claimed as soon as any plugin contributes that
    class anywhere (VCPU on NUMA cells claims nova's VCPU on the root: it
    then moves, by a reshape, and is never counted twice).
    """
    providers = {item.name for items in current.values() for item in items}
    classes = {rc for items in current.values() for item in items for rc in item.inventory}
    kept = []
    for item in adopted:
        if item.name == nodename:
            inventory = {rc: r for rc, r in item.inventory.items() if rc not in classes}
            kept.append(dataclasses.replace(item, inventory=inventory))
        elif item.name not in providers:
            kept.append(item)
    return tuple(kept)


@dataclasses.dataclass(frozen=True)
class PluginFailure:
    """Why a plugin is not (fully) working: the host is degraded."""

    plugin: str
    stage: str  # "load", "discover", "contribute" or "conflict"
    reason: str
    entry_point: str = ""
    #: The plugin's configuration is wrong (an operator error, not the host's).
    config_error: bool = False


def available_plugins() -> list[str]:
    """Names of every plugin installed in the entry-point namespace.

    Read from package metadata without importing any plugin: from the list
    stevedore loads the plugins from (:meth:`stevedore.extension.
    ExtensionManager.list_entry_points`, read once per process), so that a
    name is available exactly when :class:`PluginManager` can load it, and
    so that building a manager does not scan every installed distribution
    again (``importlib.metadata.entry_points()``: 17 ms a call with this
    project's dependencies, paid by every agent and scheduler built).
    """
    listing: extension.ExtensionManager[AnyPlugin] = (
        extension.ExtensionManager.make_test_instance([], namespace=NAMESPACE))
    return sorted(set(listing.entry_points_names()))


def installed_owned_keys() -> dict[str, tuple[str, ...]]:
    """Every installed plugin's :attr:`~compute_plugins.plugin.contract.
    ResourcePlugin.owned_keys`, by name (the classes are imported, not
    instantiated, once per process; one that fails to import owns none)."""
    return dict(_owned_keys())


@functools.lru_cache(maxsize=1)
def _owned_keys() -> tuple[tuple[str, tuple[str, ...]], ...]:
    found = []
    for ep in metadata.entry_points(group=NAMESPACE):
        try:
            keys = getattr(ep.load(), "owned_keys", ())
        except Exception as exc:  # noqa: BLE001 - a broken plugin owns none
            LOG.debug("resource plugin %s (%s) does not import: %s",
                      ep.name, ep.value, exc)
            continue
        if isinstance(keys, tuple) and all(isinstance(k, str) for k in keys):
            found.append((ep.name, keys))
    return tuple(found)


class PluginManager:
    """The enabled plugins, in the order of ``enabled_plugins``.

    :param conf: configuration; the framework groups are registered on it.
    :param names: plugin names to load; defaults to
        ``conf.compute_plugins.enabled_plugins``.
    :param extension_manager: a ready stevedore manager (tests build one with
        ``NamedExtensionManager.make_test_instance``); skips entry points.
    :param auto_commit: take each update's contributions as the previous
        ones at once. The report loop passes ``False`` and calls
        :meth:`commit` only once the tree reached Placement (or
        :meth:`discard` when it did not), so a device removed during a failed
        periodic is still deleted later.
    :param checkpoint_dir: where :meth:`commit` keeps the contributions
        across restarts (:mod:`compute_plugins.tree.checkpoint`).
    :raises UnknownPluginError: a name is not an installed plugin.
    """

    def __init__(
        self,
        conf: cfg.ConfigOpts,
        names: Optional[Sequence[str]] = None,
        extension_manager: Optional[extension.ExtensionManager[AnyPlugin]] = None,
        auto_commit: bool = True,
        checkpoint_dir: Optional[str] = None,
    ) -> None:
        conf_areas.register_all(conf)
        self.conf = conf
        self.failures: dict[str, PluginFailure] = {}
        self._views: dict[str, object] = {}
        self.auto_commit = auto_commit
        self.checkpoint_dir = checkpoint_dir
        #: Contributions that reached the tree last (``None``: not known yet).
        self._applied: Optional[Contributions] = None
        self._staged: Optional[Contributions] = None
        self._nodename: Optional[str] = None
        self._root_uuid = ""
        #: The checkpoint text last written (not rewritten when unchanged).
        self._saved: Optional[str] = None
        #: The host facts the views were built from (see :meth:`discover`).
        self._host: Optional[HostInfo] = None
        #: Node -> its providers' uuids by name, as the last update left the
        #: tree (what the plugins' host states name).
        self._tree_uuids: dict[str, dict[str, str]] = {}
        #: Plugin name -> (view, nodename, contribution made from them).
        self._made: dict[str, tuple[object, str,
                                    tuple[contribution.ProviderContribution, ...]]] = {}
        #: After the last update: (the tree's change token, the previous
        #: contributions it was diffed against, what it staged).
        self._last_update: Optional[tuple[tuple[Any, ...], Contributions,
                                          Contributions]] = None
        if extension_manager is None:
            wanted = list(names if names is not None
                          else conf.compute_plugins.enabled_plugins)
            extension_manager = self._load(wanted)
        else:
            wanted = [ext.name for ext in extension_manager]
        #: Every enabled plugin in order, loaded or not (a plugin that failed
        #: to load keeps its last contribution, like one that fails to run).
        self.enabled: list[str] = wanted
        self._extensions = list(extension_manager)
        self._entry_points = {ext.name: getattr(ext.entry_point, "value", "") or ""
                              for ext in self._extensions}
        #: The loaded plugins, in order: every call into them goes through
        #: this set (:class:`~compute_plugins.runtime.PluginSet`).
        self.plugins = PluginSet(
            LoadedPlugin(ext.name, ext.obj, self._entry_points[ext.name])
            for ext in self._extensions if ext.obj is not None)
        LOG.debug("resource plugins loaded: %s", ", ".join(self.plugins) or "none")

    def _load(self, wanted: list[str]) -> extension.ExtensionManager[AnyPlugin]:
        unknown = set(wanted) - set(available_plugins())
        if unknown:
            raise exception.UnknownPluginError(list(unknown), available_plugins())

        def on_failure(_mgr: Any, ep: Any, err: BaseException) -> None:
            LOG.error("resource plugin %s (%s) failed to load: %s",
                      ep.name, ep.value, err)
            self.failures[ep.name] = PluginFailure(
                ep.name, "load", "%s: %s" % (type(err).__name__, err), ep.value)

        def on_missing(missing: Iterable[str]) -> None:
            # NOTE: stevedore also names here the plugins that failed to load.
            for name in set(missing) - set(self.failures):
                LOG.error("resource plugin %s: entry point not found", name)
                self.failures[name] = PluginFailure(name, "load", "entry point not found")

        return named.NamedExtensionManager(
            NAMESPACE,
            names=wanted,
            name_order=True,
            invoke_on_load=True,
            invoke_args=(self.conf,),
            on_load_failure_callback=on_failure,
            on_missing_entrypoints_callback=on_missing,
        )

    def entry_point(self, name: str) -> str:
        """The entry point (``module:Class``) plugin ``name`` was loaded
        from; ``""`` when not known (a test instance)."""
        return self._entry_points.get(name, "")

    @property
    def degraded(self) -> bool:
        """True while any enabled plugin failed (see :attr:`failures`)."""
        return bool(self.failures)

    def _fail(self, name: str, stage: str, err: BaseException) -> None:
        entry_point = self._entry_points.get(name, "")
        before = self.failures.get(name)
        if before is not None and (before.stage, before.reason) == (stage, str(err)):
            # NOTE: the same failure every periodic: said once at ERROR.
            LOG.debug("resource plugin %s still fails to %s: %s", name, stage, err)
            return
        # NOTE: an option value oslo.config refuses (a group a plugin
        # registers late) is the operator's error, like a ConfigError.
        config_error = isinstance(err, (exception.ConfigError, cfg.Error))
        LOG.error("resource plugin %s (%s) failed to %s: %s", name,
                  entry_point or "test instance", stage, printable(err),
                  exc_info=not (config_error or isinstance(
                      err, exception.ComputePluginsError)))
        self.failures[name] = PluginFailure(
            name, stage, str(err), entry_point, config_error=config_error)

    def raise_config_errors(self) -> None:
        """Raise one ConfigError naming every plugin whose options are wrong.

        Commands call this after the first discovery: a bad option value is
        a usage error (exit 2), not a degraded host.
        """
        problems = ["plugin %s: %s" % (f.plugin, f.reason)
                    for f in self.failures.values() if f.config_error]
        if problems:
            raise exception.ConfigError("; ".join(problems))

    def _clear_failure(self, name: str, stages: Iterable[str]) -> None:
        failure = self.failures.get(name)
        if failure is not None and failure.stage in stages:
            del self.failures[name]

    def discover(self, host: HostInfo) -> None:
        """Let every plugin build its view of ``host`` (failures isolated).

        Views are pure functions of the host facts and the plugins'
        options, which cannot change while the service runs (none is
        mutable): facts equal to the last ones keep the views (the steady
        periodic of a host that did not change).
        """
        LOG.debug("host %s from %s: %d cells, %d PCI devices",
                  host.hostname, host.source, len(host.cells), len(host.pci_devices))
        same_facts = self._host is not None and host == self._host
        self._host = host
        for name, plugin in self.plugins.items():
            if (same_facts and plugin.pure and name in self._views
                    and name not in self.failures):
                continue
            try:
                self._views[name] = self.plugins.discover(name, host)
            except Exception as err:  # noqa: BLE001 - isolation is the point
                self._fail(name, "discover", err)
            else:
                self._clear_failure(name, ("discover",))

    def forget_views(self) -> None:
        """Rebuild every view and contribution at the next periodic.

        For a caller that changed plugin options in place (tests; a service
        cannot: no plugin option is mutable).
        """
        self._host = None
        self._made.clear()

    @property
    def views(self) -> Mapping[str, object]:
        """Plugin name -> its view from the last :meth:`discover` (a copy;
        a plugin that never discovered the host is absent)."""
        return types.MappingProxyType(dict(self._views))

    def providers(self, name: str, nodename: str) -> Providers:
        """Plugin ``name``'s providers on ``nodename``, for its
        ``host_state``: the providers it contributes to the tree (its last
        contribution applied, else one made now from its view), with the
        uuids the tree has (as the last update left it: the uuids the agent
        publishes with the host's state and Placement holds), the root
        included (:meth:`Providers.of
        <compute_plugins.tree.contribution.Providers.of>`).
        """
        return Providers.of(nodename, self._provider_items(name, nodename) or (),
                            self._tree_uuids.get(nodename))

    def _provider_items(self, name: str, nodename: str
                        ) -> Optional[Sequence[contribution.ProviderContribution]]:
        """Plugin ``name``'s contribution for :meth:`providers` (None: it
        has none, applied or made now)."""
        current = self._staged if self._staged is not None else self._applied
        items = (current or {}).get(name) if self._nodename == nodename else None
        plugin = self.plugins.get(name)
        if items is None and plugin is not None and name in self._views:
            made = self._made.get(name)
            items = (made[2] if made is not None and made[1] == nodename
                     and made[0] is self._views[name]
                     else self._contributions(name, plugin, nodename, {}))
        return items

    def host_states(self, nodename: str,
                    usage: Mapping[str, Sequence[PluginAssignment]], *,
                    strict: bool = False, host: str = ""
                    ) -> tuple[dict[str, object], list[Rejection]]:
        """Every plugin's host state of the last discovery under ``usage``
        (:meth:`PluginSet.host_states
        <compute_plugins.runtime.PluginSet.host_states>`, each handed its
        :meth:`providers`; a plugin without a view is a rejection saying why
        it failed to discover the host).

        :param usage: plugin -> the assignments in force.
        :param strict: raise :class:`~compute_plugins.plugin.state.AssignmentConflict`
            when they do not hold on the host.
        :param host: the host, for messages.
        """
        views = self.views
        items = {name: self._provider_items(name, nodename) for name in views}
        providers = {name: Providers.of(nodename, items[name] or (),
                                        self._tree_uuids.get(nodename))
                     for name in views}
        # NOTE: a plugin that never contributed (its contribution failed)
        # has no providers its state could name: say why, not a KeyError.
        no_providers = {
            name: "it failed to %s: %s" % (failure.stage, failure.reason)
            for name, failure in self.failures.items()
            if name in views and failure.stage in ("contribute", "conflict")
            and not items[name]}
        return self.plugins.host_states(
            views, providers, usage, strict=strict, host=host,
            unavailable={name: failure.reason
                         for name, failure in self.failures.items()},
            no_providers=no_providers)

    def update_provider_tree(
        self,
        provider_tree: ProviderTree,
        nodename: str,
        allocations: Optional[dict[str, Any]] = None,
    ) -> None:
        """Update ``provider_tree`` with every plugin's part (nova semantics).

        The compute root ``nodename`` is created when missing. A plugin that
        raises, or claims a provider or resource class another plugin owns,
        is refused and its last good contribution kept.
        """
        with provider_tree.lock:
            self._update_with_lock(provider_tree, nodename, allocations)

    def _update_with_lock(
        self, provider_tree: ProviderTree, nodename: str,
        allocations: Optional[dict[str, Any]],
    ) -> None:
        if not provider_tree.exists(nodename):
            provider_tree.new_root(nodename, names.provider_uuid(nodename))
        previous = self._previous(provider_tree, nodename)
        if allocations is None and self._unchanged(provider_tree, nodename, previous):
            self._staged = previous
            if self.auto_commit:
                self.commit()
            return
        current: Contributions = {}
        claimed: dict[tuple[str, str], str] = {}
        fresh: set[str] = set()
        for name in self.enabled:
            plugin = self.plugins.get(name)
            items = (self._contributions(name, plugin, nodename, previous)
                     if plugin is not None else previous.get(name))
            if items is None:
                continue
            if name not in self.failures:
                fresh.add(name)
            conflict = contribution.find_conflict(name, nodename, items, claimed)
            if conflict is not None:
                self._fail(name, "conflict", conflict)
                continue
            current[name] = items
            for key in contribution.claims(nodename, items):
                claimed[key] = name
        if ADOPTED in previous and (fresh != set(self.enabled) or self.failures):
            current[ADOPTED] = _unclaimed(nodename, previous[ADOPTED], current)
        current = self._reparent_orphans(nodename, current)
        snapshot = provider_tree.snapshot()
        try:
            contribution.apply(provider_tree, nodename, previous, current, allocations,
                               snapshot)
        except Exception:
            provider_tree.restore(snapshot)
            raise
        self._staged = current
        self._tree_uuids[nodename] = provider_tree.uuids_by_name(nodename)
        self._last_update = (provider_tree.change_token(), previous, current)
        if self.auto_commit:
            self.commit()

    def _unchanged(self, tree: ProviderTree, nodename: str,
                   previous: Contributions) -> bool:
        """Whether an update would change nothing: the tree is as the last
        update left it, that update's contributions are the ones in force,
        and every plugin's view (so its contribution) is the one it had.
        """
        if self._last_update is None or self.failures:
            return False
        token, _, staged = self._last_update
        if staged is not previous or not same_token(token, tree.change_token()):
            return False
        for name in self.enabled:
            made = self._made.get(name)
            plugin = self.plugins.get(name)
            if (plugin is None or not plugin.pure or made is None or made[1] != nodename
                    or made[0] is not self._views.get(name)):
                return False
        return True

    def _previous(self, tree: ProviderTree, nodename: str) -> Contributions:
        """The last committed contributions; at start the checkpoint or the tree."""
        root_uuid = tree.data(nodename).uuid
        if self._applied is None or self._nodename != nodename:
            self._nodename, self._root_uuid = nodename, root_uuid
            loaded = (checkpoint.load(self.checkpoint_dir, nodename, root_uuid)
                      if self.checkpoint_dir else None)
            if loaded is None:
                adopted = contribution.adopt(tree, nodename)
                loaded = {ADOPTED: adopted} if adopted else {}
            self._applied = loaded
        return self._applied

    def commit(self) -> None:
        """The last update reached Placement: it is what plugins own now."""
        if self._staged is None:
            return
        if self._staged is self._applied:
            self._staged = None
            return
        self._applied, self._staged = self._staged, None
        if self.checkpoint_dir and self._nodename:
            text = checkpoint.dumps(self._nodename, self._root_uuid, self._applied)
            if text != self._saved and checkpoint.save(
                    self.checkpoint_dir, self._nodename, text):
                self._saved = text

    def discard(self) -> None:
        """The last update may have reached Placement in part.

        The next periodic diffs against everything either update contributed,
        so a provider or trait written half-way and not contributed any more
        is removed rather than left behind.
        """
        if self._staged is not None and self._applied is not None:
            self._applied = contribution.union(self._applied, self._staged)
        self._staged = None

    def _reparent_orphans(
        self, nodename: str, current: dict[str, tuple[contribution.ProviderContribution, ...]]
    ) -> dict[str, tuple[contribution.ProviderContribution, ...]]:
        """Put providers whose parent no plugin provides under the root.

        A device plugin names its NUMA cell's provider as parent; when the
        numa plugin failed before it ever contributed, that parent does not
        exist. The device is then reported under the root, as on a host
        without the numa plugin, instead of failing every plugin's update.
        """
        provided = {nodename} | {item.name for items in current.values() for item in items}
        result = {}
        for name, items in current.items():
            fixed = []
            for item in items:
                if item.name != nodename and item.parent not in (None, *provided):
                    LOG.warning("plugin %s: parent %r of provider %r is not provided "
                                "(did its plugin fail?); using the compute root",
                                name, item.parent, item.name)
                    item = dataclasses.replace(item, parent=None)
                fixed.append(item)
            result[name] = tuple(fixed)
        return result

    def _contributions(
        self, name: str, plugin: AnyPlugin, nodename: str, previous: Contributions
    ) -> Optional[tuple[contribution.ProviderContribution, ...]]:
        """The plugin's contribution now, or its last good one on failure."""
        if name not in self._views:
            return previous.get(name)
        view = self._views[name]
        made = self._made.get(name)
        if (plugin.pure and made is not None and made[0] is view
                and made[1] == nodename):
            return made[2]
        try:
            items = self.plugins.contributions(name, view, nodename)
            contribution.validate(name, nodename, items)
        except Exception as err:  # noqa: BLE001 - isolation is the point
            self._fail(name, "contribute", err)
            self._made.pop(name, None)
            return previous.get(name)
        self._clear_failure(name, ("contribute", "conflict"))
        self._made[name] = (view, nodename, items)
        return items
