"""nova's own fake libvirt, set up for the compat tests and then undone.

``nova.tests.fixtures`` imports ``nova.tests.functional`` and
``nova.tests.unit``, whose ``__init__`` calls ``nova.monkey_patch.patch()``:
eventlet's monkey patching of the whole process (threading, socket, time),
which cannot be undone and would change every other test of the run. nova
decides that at import time, so :func:`_import_without_monkey_patching`
imports the fixtures with ``patch`` replaced by a no-op for that import
only; nova's code then runs in its native-threading mode, as a nova
service started with ``OS_NOVA_DISABLE_EVENTLET_PATCHING=1`` does.

:class:`NovaLibvirt` is the setup nova's own functional libvirt tests do
(``nova/tests/functional/libvirt/base.py``): nova's ``ConfFixture`` and
``LibvirtFixture`` (fakelibvirt in place of libvirt-python in nova's
modules), ``Host.get_connection`` answering a ``fakelibvirt.Connection``
built from ``HostInfo``/``HostPCIDevicesInfo``/``HostMdevDevicesInfo``,
and ``_get_local_gb_info`` answering a fixed disk (nova's tests mock it
too: it would measure this machine's ``instances_path``). Everything is a
``fixtures`` patch, undone by ``cleanUp``; the module-scoped pytest
fixtures of the tests call it.
"""

from __future__ import annotations

from typing import Any

import fixtures


def _import_without_monkey_patching() -> tuple[Any, Any, Any]:
    from nova import monkey_patch
    saved = monkey_patch.patch
    monkey_patch.patch = lambda *args, **kwargs: None
    try:
        from nova.tests import fixtures as nova_fixtures
        from nova.tests.fixtures import libvirt as fakelibvirt
        from nova.tests.functional import fixtures as functional_fixtures
    finally:
        monkey_patch.patch = saved
    return nova_fixtures, fakelibvirt, functional_fixtures


nova_fixtures, fakelibvirt, functional_fixtures = _import_without_monkey_patching()

#: What ``_get_local_gb_info`` answers (nova's functional tests use the same).
LOCAL_GB = {"total": 128, "used": 44, "free": 84}


class NovaLibvirt(fixtures.Fixture):
    """nova's fake libvirt host; :meth:`connect` picks the host, :meth:`driver`
    builds a nova ``LibvirtDriver`` (or a subclass) on it."""

    def _setUp(self) -> None:
        import nova.conf
        from nova import objects
        objects.register_all()
        self.conf = nova.conf.CONF
        self.useFixture(nova_fixtures.ConfFixture(self.conf))
        #: nova's ``LibvirtFixture``; its ``amd_sev`` answers nova's
        #: ``Host._kernel_supports_amd_sev`` (the ``kvm_amd`` parameters).
        self.libvirt = self.useFixture(nova_fixtures.LibvirtFixture())
        self.connection: Any = None
        self.useFixture(fixtures.MockPatch(
            "nova.virt.libvirt.host.Host.get_connection",
            side_effect=lambda *args: self.connection))
        self.useFixture(fixtures.MockPatch(
            "nova.virt.libvirt.driver.LibvirtDriver._get_local_gb_info",
            return_value=dict(LOCAL_GB)))

    def connect(self, hostname: str, host_info: Any = None, pci_info: Any = None,
                mdev_info: Any = None, vdpa_info: Any = None) -> Any:
        """A fresh ``fakelibvirt.Connection`` as the host's libvirt."""
        self.connection = fakelibvirt.Connection(
            "qemu:///system", host_info=host_info, pci_info=pci_info,
            mdev_info=mdev_info, vdpa_info=vdpa_info, hostname=hostname)
        return self.connection

    def services(self) -> Any:
        """nova's databases (main and API), RPC and SDK fixtures and real
        Placement in-process (nova's ``PlacementFixture``, returned), as
        nova's functional tests set them up; ``state_path`` a fresh
        directory."""
        self.conf.set_override("state_path", self.useFixture(fixtures.TempDir()).path)
        self.useFixture(nova_fixtures.Database(database="main"))
        self.useFixture(nova_fixtures.Database(database="api"))
        self.useFixture(nova_fixtures.RPCFixture("nova.test"))
        self.useFixture(nova_fixtures.OpenStackSDKFixture())
        return self.useFixture(functional_fixtures.PlacementFixture())

    def driver(self, cls: Any = None, hostname: str = "compute1") -> Any:
        """A started nova libvirt driver (``init_host`` done) of class ``cls``."""
        from nova.virt import fake as fake_virt
        from nova.virt.libvirt import driver as libvirt_driver
        cls = cls or libvirt_driver.LibvirtDriver
        drv = cls(fake_virt.FakeVirtAPI(), False)
        drv.init_host(hostname)
        return drv
