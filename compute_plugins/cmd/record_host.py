"""``compute-plugins record-host --output DIR``: save a host snapshot.

The snapshot (``capabilities.xml``, ``nodedev/*.xml``, ``host.json`` and,
when ``umockdev-record`` exists, ``sysfs.umockdev``) replays the host later
with ``--host-snapshot DIR``, without its hardware.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from compute_plugins.cmd import arguments

if TYPE_CHECKING:
    from oslo_config import cfg


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = arguments.command(
        subparsers, "record-host", "save a snapshot of a libvirt host (its "
        "capabilities, devices and disk) for --host-snapshot",
        uses=("libvirt_uri",))
    parser.add_argument("--output", required=True, metavar="DIR",
                        help="directory to write the snapshot to")
    parser.add_argument("--instances-path", metavar="PATH",
                        help="file system whose size is recorded as the "
                        "host's disk (default: [disk] instances_path when "
                        "the disk plugin is installed)")
    parser.set_defaults(func=run)


def run(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    from compute_plugins.host import snapshot

    uri = args.libvirt_uri or conf.libvirt.connection_uri
    snapshot.record_host(uri, args.output, instances_path=args.instances_path)
    print("recorded %s into %s" % (uri, args.output))
    return 0
