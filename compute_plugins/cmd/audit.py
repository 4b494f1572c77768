"""``compute-plugins audit [--fix] [--older-than S]``: Placement against the
host-state store's decisions (:mod:`compute_plugins.scheduler.audit`; as
``nova-manage placement audit``).

Lists, one line per finding, the allocations in Placement on the hosts'
trees that no decision in force holds (``orphan-allocation``), the claimed
decisions whose allocation Placement lacks (``missing-allocation``) or
holds otherwise (``mismatched-allocation``), and the decisions still
pending past the grace period (``expired-decision``: their scheduler
stopped, their host does not answer). With ``--fix``, every finding older
than ``--older-than`` seconds is repaired: orphans freed, missing
allocations written again, expired decisions withdrawn (the protocol's
``expire``) and their allocations freed; younger ones are in-flight work,
listed and left.

Exit codes: 0 nothing found past the grace period (or, with ``--fix``,
every such finding repaired), 1 something found without ``--fix``, or a
repair failed or is not automatic (``mismatched-allocation``), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from typing import TYPE_CHECKING, Any

from compute_plugins.cmd import arguments

if TYPE_CHECKING:
    from oslo_config import cfg

LOG = logging.getLogger(__name__)

EXIT_OK, EXIT_FOUND = 0, 1
#: The default grace period: in-flight work is younger (a scheduler's
#: answer timeout is 60 s by default).
DEFAULT_OLDER_THAN = 300.0
#: Where the audit keeps when it first saw an allocation of a consumer
#: without any decision (its age), in the state directory.
SEEN_FILE = "audit-seen.json"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = arguments.command(
        subparsers, "audit", "compare Placement's allocations on the hosts' "
        "trees with the host-state store's decisions; --fix repairs what is "
        "older than the grace period",
        uses=("format", "placement_url"),
        unused="it audits every host of the host-state store")
    parser.add_argument("--fix", action="store_true",
                        help="free orphan allocations, restore missing ones, "
                        "withdraw expired decisions (only those older than "
                        "--older-than)")
    parser.add_argument("--older-than", type=arguments.seconds, metavar="S",
                        default=DEFAULT_OLDER_THAN,
                        help="grace period in seconds: younger findings are "
                        "in-flight work, never touched (default: %g)"
                        % DEFAULT_OLDER_THAN)
    parser.add_argument("--project-id", default="compute-plugins",
                        help="project of a restored allocation")
    parser.add_argument("--user-id", default="compute-plugins",
                        help="user of a restored allocation")
    parser.set_defaults(func=run)


def _load_seen(directory: str) -> dict[str, float]:
    from compute_plugins.util import files

    path = os.path.join(directory, SEEN_FILE)
    if not os.path.lexists(path):
        return {}
    try:
        doc = json.loads(files.read_text(path))
        return {str(c): float(t) for c, t in doc.items()}
    except (files.UnreadableFile, ValueError, TypeError, AttributeError) as err:
        LOG.warning("%s: unreadable (%s): ages start again", path, err)
        return {}


def _save_seen(directory: str, seen: dict[str, float]) -> None:
    from compute_plugins.util import files

    # NOTE: the repairs are done by now: an unwritable state directory
    # loses the ages (the next audit starts them again), never the report.
    try:
        files.ensure_private_dir(directory)
        fd = files.open_dir(directory)
        try:
            files.write_atomic(fd, SEEN_FILE, json.dumps(seen, sort_keys=True), 0o600)
        finally:
            os.close(fd)
    except OSError as err:
        LOG.warning("%s: cannot keep the ages of orphan allocations (%s): the next "
                    "audit starts them again", os.path.join(directory, SEEN_FILE),
                    err.strerror or err)


def run(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    from compute_plugins.conf import plugins as plugins_conf
    from compute_plugins.hoststate.store import HostStateStore
    from compute_plugins.placement import connect
    from compute_plugins.scheduler import audit
    from compute_plugins.scheduler.selection import CONSUMER_TYPE, CONSUMER_TYPE_VERSION

    # NOTE: --project-id and --user-id are checked by main (arguments.check_ids).
    directory = plugins_conf.state_dir(conf)
    seen = _load_seen(directory)
    before = dict(seen)
    with connect.placement_client(conf, args.placement_url) as placement, \
            HostStateStore.from_config(conf) as store:
        hosts = len(store.generations())
        findings = audit.audit(placement, store, seen)
        if args.fix:
            consumer_type = (CONSUMER_TYPE if placement.microversion
                             >= CONSUMER_TYPE_VERSION else None)
            findings = audit.fix(placement, store, findings, args.older_than,
                                 args.project_id, args.user_id, consumer_type)
            # NOTE: a freed consumer's next allocation (a re-run schedule
            # --consumer, between its PUT and its decision) is new work: its
            # age starts again, never from this sighting.
            for finding in findings:
                if finding.kind == audit.ORPHAN and finding.action.startswith("freed"):
                    seen.pop(finding.consumer, None)
        else:
            findings = [f if f.age >= args.older_than
                        else _young(f) for f in findings]
    if seen != before:
        _save_seen(directory, seen)
    _print(args, hosts, findings)
    if args.fix:
        return EXIT_FOUND if any(f.failed for f in findings) else EXIT_OK
    return EXIT_FOUND if any(f.action == "" for f in findings) else EXIT_OK


def _young(finding: Any) -> Any:
    import dataclasses

    return dataclasses.replace(finding, action="in grace period")


def _describe(finding: Any) -> str:
    d = finding.decision
    providers = ", ".join("%s %s" % (rp, ",".join("%s:%d" % (rc, n)
                                                    for rc, n in sorted(res.items())))
                          for rp, res in sorted(finding.allocations.items()))
    if d is None:
        said = "no decision ever"
    else:
        said = "decision %d %s" % (d.id, d.status.value)
    line = "%s: consumer %s on host %s (%s; %s; %ds old)" % (
        finding.kind, finding.consumer, finding.host, said,
        providers or "no allocation", int(finding.age))
    return line + (": %s" % finding.action if finding.action else "")


def _print(args: argparse.Namespace, hosts: int, findings: list[Any]) -> None:
    from compute_plugins.cmd import common
    from compute_plugins.util.text import printable

    if args.format == "json":
        common.print_json({"hosts": hosts, "older_than": args.older_than,
                           "fix": bool(args.fix),
                           "findings": [f.to_dict() for f in findings]})
        return
    for finding in findings:
        common.say(printable(_describe(finding)))
    if not findings:
        common.say("nothing found: Placement and the host-state store agree on "
                   "%d host(s)" % hosts)
