"""PluginManager: loading, fan-out, ownership and isolation."""

from __future__ import annotations

import textwrap

import pytest
from oslo_config import cfg
from oslo_config import fixture as config_fixture
from stevedore import extension

from compute_plugins import exception
from compute_plugins.conf import register_all
from compute_plugins.host.model import DiskInfo, HostInfo
from compute_plugins.runtime.manager import PluginManager, available_plugins
from compute_plugins.tree.provider_tree import ProviderTree
from tests.unit import fake_plugins

HOST = HostInfo(hostname="node1", source="test", memory_kb=64,
                disk=DiskInfo(total_gb=100, free_gb=50))


@pytest.fixture
def conf():
    fixture = config_fixture.Config(cfg.ConfigOpts())
    fixture.setUp()
    yield fixture.conf
    fixture.cleanUp()


def make_manager(conf, *classes):
    extensions = [
        extension.Extension(cls.name, None, cls, cls(conf)) for cls in classes]
    mgr = extension.ExtensionManager.make_test_instance(extensions)
    return PluginManager(conf, extension_manager=mgr)


def run(manager, tree=None, host=HOST):
    tree = tree if tree is not None else ProviderTree()
    manager.discover(host)
    manager.update_provider_tree(tree, host.hostname)
    return tree


def test_contributions_are_merged_under_a_root(conf):
    manager = make_manager(conf, fake_plugins.Widgets, fake_plugins.RootDisk)
    tree = run(manager)
    root = tree.data("node1")
    assert root.parent_uuid is None
    assert root.inventory["DISK_GB"]["total"] == 100
    assert root.traits == {"CUSTOM_LOCAL_DISK"}
    child = tree.data("node1_widgets")
    assert child.parent_uuid == root.uuid
    assert child.inventory["CUSTOM_WIDGET"]["total"] == 64
    assert not manager.degraded


def test_plugin_options_live_in_its_own_group(conf):
    manager = make_manager(conf, fake_plugins.Widgets)
    conf.set_override("reserved", 4, group="widgets")
    tree = run(manager)
    assert tree.data("node1_widgets").inventory["CUSTOM_WIDGET"]["reserved"] == 4


def test_second_run_changes_nothing(conf):
    manager = make_manager(conf, fake_plugins.Widgets, fake_plugins.RootDisk)
    tree = run(manager)
    before = tree.snapshot()
    run(manager, tree)
    assert tree.snapshot() == before


def test_vanished_provider_is_removed_and_foreign_traits_stay(conf):
    manager = make_manager(conf, fake_plugins.Widgets, fake_plugins.RootDisk)
    tree = run(manager)
    tree.add_traits("node1", "CUSTOM_OPERATOR_SET")
    tree.update_inventory("node1", {**tree.data("node1").inventory,
                                    "CUSTOM_FOREIGN": {"total": 3}})
    run(manager, tree, HostInfo(hostname="node1", source="test", memory_kb=0,
                                disk=DiskInfo(total_gb=100, free_gb=1)))
    assert not tree.exists("node1_widgets")
    root = tree.data("node1")
    assert root.traits == {"CUSTOM_LOCAL_DISK", "CUSTOM_OPERATOR_SET"}
    assert set(root.inventory) == {"DISK_GB", "CUSTOM_FOREIGN"}


def test_failing_plugin_is_isolated_and_keeps_last_contribution(conf, caplog):
    manager = make_manager(conf, fake_plugins.Flaky, fake_plugins.Widgets)
    tree = run(manager)
    flaky = manager.plugins["flaky"]
    flaky.fail = True
    tree = run(manager, tree, HostInfo(hostname="node1", source="t", memory_kb=7))
    assert manager.degraded
    assert manager.failures["flaky"].stage == "contribute"
    assert "flaky plugin broke" in manager.failures["flaky"].reason
    assert tree.data("node1_flaky").inventory["CUSTOM_FLAKE"]["total"] == 1
    assert tree.data("node1_widgets").inventory["CUSTOM_WIDGET"]["total"] == 7
    assert "resource plugin flaky (test instance) failed to contribute" in caplog.text
    flaky.fail = False
    run(manager, tree)
    assert not manager.degraded


def test_failing_discovery_keeps_previous_view(conf):
    manager = make_manager(conf, fake_plugins.FailsDiscovery)
    tree = run(manager)
    manager.plugins["failsdiscovery"].fail = True
    run(manager, tree, HostInfo(hostname="node1", source="t"))
    assert manager.failures["failsdiscovery"].stage == "discover"
    assert tree.data("node1_fd").inventory["CUSTOM_FD"]["total"] == len("node1")


def test_failing_first_discovery_contributes_nothing(conf):
    fake_plugins.FailsDiscovery.fail = True
    try:
        manager = make_manager(conf, fake_plugins.FailsDiscovery, fake_plugins.RootDisk)
        tree = run(manager)
    finally:
        fake_plugins.FailsDiscovery.fail = False
    assert manager.degraded
    assert not tree.exists("node1_fd")
    assert tree.data("node1").inventory["DISK_GB"]["total"] == 100


def test_invalid_resource_class_is_refused(conf):
    manager = make_manager(conf, fake_plugins.BadClass, fake_plugins.Widgets)
    tree = run(manager)
    assert "not-a-class" in manager.failures["badclass"].reason
    assert "not-a-class" not in tree.data("node1").inventory
    assert tree.exists("node1_widgets")


def test_same_resource_class_on_the_root_is_refused(conf):
    manager = make_manager(conf, fake_plugins.RootDisk, fake_plugins.AlsoRootDisk)
    run(manager)
    failure = manager.failures["alsorootdisk"]
    assert failure.stage == "conflict"
    assert "DISK_GB" in failure.reason and "'rootdisk'" in failure.reason
    assert "rootdisk" not in manager.failures


def test_same_provider_is_refused(conf):
    manager = make_manager(conf, fake_plugins.Widgets, fake_plugins.AlsoWidgets)
    tree = run(manager)
    assert manager.failures["alsowidgets"].stage == "conflict"
    assert "provider 'node1_widgets'" in manager.failures["alsowidgets"].reason
    assert tree.exists("node1_widgets")


def test_unknown_plugin_name_lists_the_available_ones(conf):
    with pytest.raises(exception.UnknownPluginError) as err:
        PluginManager(conf, names=["numa", "nosuch"])
    message = str(err.value)
    assert "nosuch" in message
    assert "available plugins: disk, memenc, numa, pmem, sriov, vgpu" in message


def install_fakes(tmp_path, monkeypatch) -> None:
    """Install test-only entry points: a real dist-info on sys.path."""
    dist = tmp_path / "fake_compute_plugins-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fake-compute-plugins\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent("""\
        [compute_plugins.resources]
        widgets = tests.unit.fake_plugins:Widgets
        raisesatinit = tests.unit.fake_plugins:RaisesAtInit
        missingmodule = tests.unit.no_such_module:Plugin
        """))
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.fixture
def installed_fakes(tmp_path, monkeypatch):
    """Test-only entry points, installed before the process reads them.

    stevedore reads entry points from package metadata, so the load
    failures below go through its real loading code.
    """
    install_fakes(tmp_path, monkeypatch)
    # stevedore keeps the entry points it read in a class attribute.
    monkeypatch.setattr(extension.ExtensionManager, "ENTRY_POINT_CACHE", {})


def test_the_available_plugins_are_the_ones_the_manager_loads_from(
        conf, tmp_path, monkeypatch):
    """The names offered are stevedore's list, which the plugins are
    loaded from (read once per process): a plugin installed after it was
    read is not offered, and naming it is the unknown-plugin error (not a
    degraded host whose plugin's "entry point" is "not found")."""
    monkeypatch.setattr(extension.ExtensionManager, "ENTRY_POINT_CACHE", {})
    PluginManager(conf, names=["numa"])
    install_fakes(tmp_path, monkeypatch)
    assert "widgets" not in available_plugins()
    with pytest.raises(exception.UnknownPluginError) as err:
        PluginManager(conf, names=["widgets"])
    assert "available plugins: disk, memenc, numa, pmem, sriov, vgpu" in str(err.value)


def test_plugins_failing_to_import_or_construct_are_isolated(
        conf, installed_fakes, caplog):
    manager = PluginManager(conf, names=["missingmodule", "raisesatinit", "widgets"])
    assert list(manager.plugins) == ["widgets"], manager.failures
    assert manager.failures["missingmodule"].stage == "load"
    assert manager.failures["missingmodule"].entry_point == (
        "tests.unit.no_such_module:Plugin")
    assert "no such device" in manager.failures["raisesatinit"].reason
    assert "tests.unit.no_such_module:Plugin" in caplog.text
    tree = run(manager)
    assert tree.exists("node1_widgets")
    assert manager.degraded


def test_a_plugin_failing_to_run_is_logged_with_its_entry_point(
        conf, installed_fakes, caplog, monkeypatch):
    manager = PluginManager(conf, names=["widgets"])
    monkeypatch.setattr(manager.plugins["widgets"], "provider_contributions",
                        lambda view, nodename: 1 / 0)
    run(manager)
    assert manager.failures["widgets"].entry_point == "tests.unit.fake_plugins:Widgets"
    assert ("resource plugin widgets (tests.unit.fake_plugins:Widgets) failed to "
            "contribute: division by zero") in caplog.text


def test_plugins_run_in_configured_order(conf, installed_fakes):
    register_all(conf)
    conf.set_override("enabled_plugins", ["widgets", "numa"], group="compute_plugins")
    assert list(PluginManager(conf).plugins) == ["widgets", "numa"]
    conf.set_override("enabled_plugins", ["numa", "widgets"], group="compute_plugins")
    assert list(PluginManager(conf).plugins) == ["numa", "widgets"]


def test_a_plugin_failing_to_load_keeps_its_last_contribution(
        conf, installed_fakes, tmp_path):
    """After a restart where a plugin cannot load (a device not ready, a
    broken upgrade), what it owned stays, and stays in the checkpoint."""
    working = extension.Extension(
        "missingmodule", None, fake_plugins.Widgets, fake_plugins.Widgets(conf))
    before = PluginManager(
        conf, extension_manager=extension.ExtensionManager.make_test_instance([working]),
        checkpoint_dir=str(tmp_path))
    tree = run(before)
    assert tree.exists("node1_widgets")

    broken = PluginManager(conf, names=["missingmodule"], checkpoint_dir=str(tmp_path))
    assert broken.failures["missingmodule"].stage == "load"
    run(broken, tree)
    assert tree.data("node1_widgets").inventory["CUSTOM_WIDGET"]["total"] == 64
    saved = (tmp_path / "node1.contributions.json").read_text()
    assert "node1_widgets" in saved


def test_views_are_a_read_only_copy_without_failed_plugins(conf):
    manager = make_manager(conf, fake_plugins.Widgets, fake_plugins.FailsDiscovery)
    fake_plugins.FailsDiscovery.fail = True
    try:
        manager.discover(HOST)
    finally:
        fake_plugins.FailsDiscovery.fail = False
    views = manager.views
    assert dict(views) == {"widgets": 64}
    with pytest.raises(TypeError):
        views["widgets"] = 1  # type: ignore[index]
    manager.discover(HOST)
    assert dict(manager.views) == {"widgets": 64, "failsdiscovery": "node1"}
    assert dict(views) == {"widgets": 64}


class CountingWidgets(fake_plugins.Widgets):
    """Widgets that count how often the manager asks for views and parts."""

    name = "countingwidgets"

    def __init__(self, conf):
        super().__init__(conf)
        self.calls = {"discover": 0, "provider_contributions": 0}

    def discover(self, host):
        self.calls["discover"] += 1
        return super().discover(host)

    def provider_contributions(self, view, nodename):
        self.calls["provider_contributions"] += 1
        return super().provider_contributions(view, nodename)


def test_steady_periodic_rebuilds_nothing_for_equal_host_facts(conf):
    manager = make_manager(conf, CountingWidgets, fake_plugins.RootDisk)
    plugin = manager.plugins["countingwidgets"]
    tree = run(manager)
    before = tree.snapshot()
    # NOTE: equal facts in new objects, as discovery returns every periodic.
    again = HostInfo(hostname="node1", source="test", memory_kb=64,
                     disk=DiskInfo(total_gb=100, free_gb=50))
    run(manager, tree, again)
    run(manager, tree, again)
    assert plugin.calls == {"discover": 1, "provider_contributions": 1}
    assert tree.snapshot() == before


def test_a_tree_changed_behind_the_manager_is_updated_again(conf):
    manager = make_manager(conf, CountingWidgets, fake_plugins.RootDisk)
    tree = run(manager)
    # NOTE: e.g. the report client refreshed the provider from Placement,
    # where someone removed the plugin's trait.
    tree.remove_traits("node1_widgets", "CUSTOM_SHINY")
    run(manager, tree)
    assert tree.data("node1_widgets").traits == {"CUSTOM_SHINY"}
    # NOTE: the view did not change, so its contribution was reused.
    assert manager.plugins["countingwidgets"].calls["provider_contributions"] == 1


def test_new_host_facts_rebuild_the_views(conf):
    manager = make_manager(conf, CountingWidgets)
    tree = run(manager)
    run(manager, tree, HostInfo(hostname="node1", source="test", memory_kb=96))
    assert tree.data("node1_widgets").inventory["CUSTOM_WIDGET"]["total"] == 96
    assert manager.plugins["countingwidgets"].calls == {
        "discover": 2, "provider_contributions": 2}


def test_impure_plugins_are_asked_every_periodic(conf):
    manager = make_manager(conf, fake_plugins.Flaky)
    tree = run(manager)
    manager.plugins["flaky"].fail = True
    run(manager, tree)
    assert manager.failures["flaky"].stage == "contribute"


def test_a_plugin_that_never_contributed_says_so_instead_of_a_state(conf):
    """Its contribution failed since the start: it has no providers its
    host state could name; the rejection says why (not a KeyError)."""
    from resources.disk import DiskPlugin

    class BrokenDisk(DiskPlugin):
        def provider_contributions(self, view, nodename):
            raise ValueError("no instances path")

    manager = make_manager(conf, BrokenDisk)
    run(manager)
    states, broken = manager.host_states("node1", {}, host="node1")
    assert states == {}
    assert [(r.plugin, r.reason) for r in broken] == [(
        "disk", "the plugin has no providers on the host: it failed to "
        "contribute: no instances path")]
