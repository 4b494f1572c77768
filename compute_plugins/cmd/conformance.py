"""``compute-plugins conformance [PLUGIN...]``: check installed plugins
against the plugin contract (:mod:`compute_plugins.testing`, the kit a
plugin's own test suite calls).

Each plugin named (default: every plugin installed in the
``compute_plugins.resources`` entry-point namespace) runs on the demo's
bundled hosts (``--host-snapshot DIR``: on that host instead) with the
requests it offers; the output is one line per check and plugin (wrapped
at 100 columns: a longer one goes on 4 columns in)::

    PASS numa json-roundtrip: 130 requests, 20 states, 223 assignments, 5 hosts
    SKIP disk guest-xml: 5 domains assembled; not validated against ...
    FAIL fpga fit-verify: host gpu, 1 guest, sample 0 ...: fit's decision fails verify ...

``--format json``: a list of ``{"plugin", "ok", "checks": [{"plugin",
"check", "status", "detail", "problems"}]}``. The ``--config-file`` and
``--config-dir`` files are read after each host's own configuration (the
options of the plugins checked).

Exit codes: 0 no check failed (skips are no failures), 1 a check failed or
a plugin cannot be loaded, 2 bad usage: a plugin that is not installed (or no plugin at
all), an unknown ``--check``, a ``--host-snapshot`` that is no host
snapshot; one error line, as every command's.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
from typing import TYPE_CHECKING

from compute_plugins import exception
from compute_plugins.cmd import arguments, common
from compute_plugins.util import text

if TYPE_CHECKING:
    from oslo_config import cfg

EXIT_OK, EXIT_FAILED = 0, 1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = arguments.command(
        subparsers, "conformance", "check installed plugins against the "
        "plugin contract, on the demo's hosts (one line per check and plugin)",
        uses=("format", "host_snapshot"),
        unused="it runs the plugins on the demo's hosts or --host-snapshot, "
        "without Placement")
    parser.add_argument("plugins", nargs="*", metavar="PLUGIN",
                        help="an installed plugin (default: every one)")
    # NOTE: no argparse ``choices``: an unknown check is one error line
    # (InputError, exit 2), as an unknown plugin is, not the usage text.
    checks = parser.add_argument("--check", action="append", dest="checks",
                                 metavar="CHECK",
                                 help="run only this check (repeatable): %(check_names)s")
    checks.check_names = arguments.Deferred(_check_names)  # type: ignore[attr-defined]
    parser.set_defaults(func=run)


def _check_names() -> str:
    from compute_plugins import testing

    return ", ".join(testing.CHECKS)


def _config_files(args: argparse.Namespace) -> list[str]:
    """``--config-file``s, then the ``*.conf`` of each ``--config-dir``, as
    oslo.config reads them."""
    files = list(args.config_file)
    for directory in args.config_dir:
        files.extend(sorted(glob.glob(os.path.join(directory, "*.conf"))))
    return files


def run(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    from compute_plugins import testing

    installed = testing.installed_plugins()
    names = args.plugins or installed
    unknown = [name for name in names if name not in installed]
    if unknown or not names:
        raise exception.InputError(
            "%s; installed plugins: %s"
            % ("no plugin is installed" if not names else "unknown plugin(s) %s"
               % ", ".join(unknown), ", ".join(installed) or "none"))
    bad_checks = [check for check in args.checks or () if check not in testing.CHECKS]
    if bad_checks:
        raise exception.InputError("unknown check(s) %s; the checks are %s"
                                   % (", ".join(bad_checks), ", ".join(testing.CHECKS)))
    hosts = ([testing.snapshot_host(args.host_snapshot)] if args.host_snapshot
             else None)
    reports = []
    for name in dict.fromkeys(names):
        report = testing.check_installed(name, config_files=_config_files(args),
                                         hosts=hosts, checks=args.checks)
        reports.append(report)
        if args.format != "json":
            for line in report.lines():
                # One record per check, wrapped at 100 columns as every
                # command's text: its rest 4 columns in.
                print("\n".join(text.wrap(line)))
            sys.stdout.flush()
    if args.format == "json":
        common.print_json([report.to_dict() for report in reports])
    return EXIT_OK if all(report.ok for report in reports) else EXIT_FAILED
