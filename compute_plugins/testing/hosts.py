"""The hosts the conformance kit checks plugins on.

By default the demo's bundled host snapshots (:mod:`compute_plugins.demo`:
NUMA cells with dedicated CPUs and huge pages, GPUs and FPGA cards, SR-IOV
NICs, shared storage, eight cells), each with its own configuration file,
so that every built-in plugin finds what it manages on some host. A plugin
author may add a snapshot of their own hardware (``compute-plugins
record-host``) with :func:`snapshot_host`.
"""

from __future__ import annotations

import dataclasses
import os

from compute_plugins import demo
from compute_plugins.host.model import HostInfo
from compute_plugins.testing import _framework

__all__ = ["HostCase", "demo_hosts", "snapshot_host"]


@dataclasses.dataclass(frozen=True)
class HostCase:
    """A host the kit runs plugins on.

    :param name: a short name for messages (the snapshot's directory).
    :param host: the host's facts.
    :param config_files: the host's own configuration (the options of the
        plugins on it, e.g. which mdev types a GPU offers).
    """

    name: str
    host: HostInfo
    config_files: tuple[str, ...] = ()


def snapshot_host(path: str) -> HostCase:
    """The host of a snapshot directory (``compute-plugins record-host``),
    with the ``compute-plugins.conf`` it holds, if any.

    :raises compute_plugins.host.errors.HostInputError: not a snapshot.
    """
    config = os.path.join(path, demo.HOST_CONFIG)
    return HostCase(name=os.path.basename(os.path.normpath(path)),
                    host=_framework.load_host(path),
                    config_files=(config,) if os.path.isfile(config) else ())


def demo_hosts() -> tuple[HostCase, ...]:
    """The demo's bundled hosts, in the demo's order."""
    return tuple(snapshot_host(demo.host_dir(name)) for name in demo.HOST_DIRS)
