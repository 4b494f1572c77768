"""``compute-plugins host rename OLD NEW``: rename a compute node on
purpose.

The agent refuses to start when the host's name changed under its state
directory (its node identity, ``compute_node.json``): that would register
a second host over the same CPUs. Renaming is this explicit step, with the
agent stopped: :func:`compute_plugins.compute.rename.rename_node` moves the
node's Placement providers (renamed, uuids and allocations kept), its
host-state records and its claims ledger to the new name.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from compute_plugins.cmd import arguments
from compute_plugins.util.text import printable

if TYPE_CHECKING:
    from oslo_config import cfg


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = arguments.command(
        subparsers, "host", "manage this compute node's identity (rename it)")
    actions = parser.add_subparsers(dest="host_command", metavar="ACTION")
    actions.required = True
    rename = arguments.command(
        actions, "rename",
        "rename this compute node from OLD to NEW, with its agent stopped",
        uses=("format", "placement_url"),
        unused="it renames what the state directory, the host-state store "
        "and Placement hold, not a host it discovers",
        details="""With its agent (compute-plugins report) stopped, it moves
        the node's Placement providers (root OLD -> NEW, children OLD_* ->
        NEW_*; their uuids and the guests' allocations are kept), its
        host-state store records (its decisions in force re-addressed; the
        agent publishes its state again) and its claims ledger to NEW, then
        records NEW as the node's name ([compute_plugins] state_dir,
        compute_node.json).

        Then change the host's name (the OS hostname, or host.json of a
        snapshot) to NEW and start the agent. Run it again if it stopped
        half-way: done steps are skipped. Exit 2 when the agent runs, the
        state directory belongs to another node or NEW is taken.""")
    rename.add_argument("old", metavar="OLD", help="the node's current name")
    rename.add_argument("new", metavar="NEW", help="its new name")
    rename.set_defaults(func=run_rename)


def run_rename(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    from compute_plugins.compute import identity
    from compute_plugins.compute.rename import rename_node
    from compute_plugins.conf import plugins as plugins_conf
    from compute_plugins.hoststate.store import HostStateStore
    from compute_plugins.placement import connect

    state_dir = plugins_conf.state_dir(conf)
    with identity.StateDirLock(state_dir), \
            connect.placement_client(conf, args.placement_url) as placement, \
            HostStateStore.from_config(conf) as store:
        placement.negotiate()
        done = rename_node(state_dir, args.old, args.new, placement, store)
    if args.format == "json":
        print(json.dumps(done.to_dict(), sort_keys=True))
        return 0
    print(printable(
        "compute node %s renamed to %s (uuid %s): %d Placement provider%s, "
        "%d decision%s in force, %s claim%s moved; set the host's name to %s "
        "and start the agent" % (
            done.old, done.new, done.node, len(done.providers),
            "" if len(done.providers) == 1 else "s", done.decisions,
            "" if done.decisions == 1 else "s",
            "no ledger:" if done.claims is None else "%d" % done.claims,
            "" if done.claims == 1 else "s", done.new)))
    return 0
