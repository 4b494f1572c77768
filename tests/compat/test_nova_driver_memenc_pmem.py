"""The driver mixin gives the memenc and pmem plugins their host facts.

nova's libvirt driver finds AMD SEV in the domain capabilities
(``Host.get_domain_capabilities``) and the kernel's ``kvm_amd`` parameters
(``Host._kernel_supports_amd_sev``), and the persistent memory namespaces
with ``ndctl list -X`` run through privsep (``_discover_vpmems``). The
mixin must read the same: on nova's fake libvirt with SEV in its domain
capabilities (nova's own ``_domain_capability_features_with_SEV``) and the
kernel's ``sev`` enabled (nova's ``AmdSevFixture``), memenc reports
``MEM_ENCRYPTION_CONTEXT``; with an ``ndctl`` on the PATH that prints a
real ``ndctl list -X`` capture (run by nova's privsep entry point, in
process under nova's ``PrivsepFixture``) and ``[libvirt] pmem_namespaces``
configured, pmem reports ``CUSTOM_PMEM_NAMESPACE_*``.

Skipped without nova unless ``COMPUTE_PLUGINS_COMPAT`` is set.
"""

from __future__ import annotations

import os
import pathlib

import pytest

if os.environ.get("COMPUTE_PLUGINS_COMPAT"):
    import nova.compute.provider_tree as nova_pt
else:
    nova_pt = pytest.importorskip("nova.compute.provider_tree")

from nova.virt.libvirt import driver as libvirt_driver  # noqa: E402

from compute_plugins.nova.driver import PluginProviderTreeMixin  # noqa: E402
from tests.compat.nova_libvirt import NovaLibvirt, fakelibvirt, nova_fixtures  # noqa: E402
from tests.unit.resources import helpers  # noqa: E402

NODE = "compute1"
ROOT = "c0000000-0000-0000-0000-000000000001"
NDCTL_JSON = pathlib.Path(__file__).parents[1] / "fixtures" / "hosts" / "pmem" / "ndctl.json"


class PluginLibvirtDriver(PluginProviderTreeMixin, libvirt_driver.LibvirtDriver):
    """nova's libvirt driver with the mixin."""


@pytest.fixture
def nova_libvirt():
    fixture = NovaLibvirt()
    fixture.setUp()
    yield fixture
    fixture.cleanUp()


@pytest.fixture
def ndctl_on_path(tmp_path, monkeypatch, nova_libvirt):
    """An ``ndctl`` that prints a real ``ndctl list -X`` capture, run by
    nova's privsep entry point in process."""
    script = tmp_path / "bin" / "ndctl"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n[ \"$1 $2\" = 'list -X' ] || exit 1\ncat '%s'\n"
                      % NDCTL_JSON)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (script.parent, os.environ["PATH"]))
    nova_libvirt.useFixture(nova_fixtures.PrivsepFixture())


def update(driver, conf, plugins):
    driver.plugin_manager = helpers.manager(conf, plugins)
    tree = nova_pt.ProviderTree()
    tree.new_root(NODE, ROOT)
    driver.update_provider_tree(tree, NODE, allocations={})
    return {tree.data(u).name: dict(tree.data(u).inventory)
            for u in tree.get_provider_uuids()}


def sev_host(nova_libvirt, sev: bool):
    nova_libvirt.connect(NODE, host_info=fakelibvirt.HostInfo(
        cpu_nodes=1, cpu_sockets=1, cpu_cores=2, cpu_threads=1))
    if sev:
        nova_libvirt.connection._domain_capability_features = (
            fakelibvirt.Connection._domain_capability_features_with_SEV)
    nova_libvirt.libvirt.amd_sev.sev = sev
    return nova_libvirt.driver(PluginLibvirtDriver)


def test_a_sev_host_reports_memory_encryption_contexts(nova_libvirt, conf):
    driver = sev_host(nova_libvirt, sev=True)
    assert driver._host.supports_amd_sev  # nova's own driver sees SEV
    inventories = update(driver, conf, ("numa", "memenc"))
    context = inventories[NODE + "_amd_sev"]["MEM_ENCRYPTION_CONTEXT"]
    # nova's fake domain capabilities: maxGuests 100
    assert context["total"] == driver._host._max_sev_guests == 100


def test_without_sev_in_the_kernel_no_contexts(nova_libvirt, conf):
    driver = sev_host(nova_libvirt, sev=False)
    assert not driver._host.supports_amd_sev
    inventories = update(driver, conf, ("numa", "memenc"))
    assert not any("MEM_ENCRYPTION_CONTEXT" in inv for inv in inventories.values())
    assert driver.plugin_host_info(NODE).kvm_amd_sev == frozenset()


def test_configured_pmem_namespaces_are_reported(nova_libvirt, conf, ndctl_on_path):
    driver = sev_host(nova_libvirt, sev=False)
    conf.set_override("pmem_namespaces", ["SMALL:ns_0|ns_1"], "libvirt")
    inventories = update(driver, conf, ("numa", "pmem"))
    assert inventories[NODE]["CUSTOM_PMEM_NAMESPACE_SMALL"]["total"] == 2
    # nova's own driver reads the same namespaces through the same privsep call
    assert sorted(driver._get_vpmems_on_host()) == sorted(
        n.name for n in driver.plugin_host_info(NODE).pmem_namespaces)


def test_without_ndctl_no_namespaces(nova_libvirt, conf, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    driver = sev_host(nova_libvirt, sev=False)
    assert driver.plugin_host_info(NODE).pmem_namespaces == ()


def test_configured_namespaces_are_asked_of_privsep_as_nova_does(
        nova_libvirt, conf, monkeypatch, tmp_path):
    # nova's _discover_vpmems calls privsep whenever [libvirt]
    # pmem_namespaces is set, ndctl on the PATH or not (nova's own tests
    # replace that privsep call): so does the mixin
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("nova.privsep.libvirt.get_pmem_namespaces",
                        lambda: NDCTL_JSON.read_text())
    driver = sev_host(nova_libvirt, sev=False)
    conf.set_override("pmem_namespaces", ["SMALL:ns_0|ns_1"], "libvirt")
    inventories = update(driver, conf, ("numa", "pmem"))
    assert inventories[NODE]["CUSTOM_PMEM_NAMESPACE_SMALL"]["total"] == 2
