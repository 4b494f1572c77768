"""Print udev's facts about PCI devices as JSON.

Usage::

    python -m compute_plugins.host.udev_dump [--require-testbed] ADDRESS...

Snapshots run this under ``umockdev-run --device sysfs.umockdev`` so that
the real libudev reads the recorded sysfs; see :mod:`.udev`. With
``--require-testbed`` it refuses to run outside umockdev (``UMOCKDEV_DIR``
unset), so a broken preload can never leak the real host's devices into a
snapshot.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

from compute_plugins.host import udev


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compute_plugins.host.udev_dump",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument(
        "--require-testbed",
        action="store_true",
        help="fail unless running under umockdev-run",
    )
    parser.add_argument(
        "addresses",
        nargs="*",
        metavar="ADDRESS",
        help="PCI address, e.g. 0000:3b:00.0",
    )
    args = parser.parse_args(argv)
    if args.require_testbed and not os.environ.get("UMOCKDEV_DIR"):
        print(
            "udev_dump: not running under umockdev-run (UMOCKDEV_DIR "
            "is unset)",
            file=sys.stderr,
        )
        return 2
    facts = udev.collect_udev_facts(args.addresses)
    print(udev.dump_facts_json(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
