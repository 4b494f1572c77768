"""``compute-plugins host rename OLD NEW``: rename a compute node on
purpose. ``compute-plugins host disable|enable NAME``: take a host out of
scheduling and back (:mod:`compute_plugins.compute.disable`).

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

from compute_plugins.cmd import arguments, common
from compute_plugins.util.text import printable

if TYPE_CHECKING:
    from oslo_config import cfg

    from compute_plugins.compute.disable import HostStatusResult

EXIT_OK, EXIT_FAILED = 0, 1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = arguments.command(
        subparsers, "host", "manage compute hosts: disable or enable one for "
        "new instances, rename this compute node")
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

    disable = arguments.command(
        actions, "disable",
        "disable host NAME for new instances: no new decision goes to it, its "
        "instances stay",
        uses=("format", "placement_url"),
        unused="it changes what the host-state store and Placement hold of a "
        "host its agent published, not a host it discovers",
        details="""Records NAME as disabled in the host-state store (the
        reason, who and when: the scheduler skips the host and says "host
        NAME is disabled: REASON"), then sets COMPUTE_STATUS_DISABLED on its
        root provider in Placement, as nova does for a disabled compute
        service (nova's scheduler forbids that trait too). Its instances
        stay; its agent keeps running, reporting and releasing, and keeps
        the trait as the store says at every periodic.

        Disabling a disabled host changes nothing (its first reason is
        kept) and exits 0. Exit 1 when Placement could not be updated (the
        store's record is written: the scheduler skips the host, its agent
        sets the trait); exit 2 when the host-state store never saw NAME
        published, or the reason is too long; nothing is changed then.""")
    disable.add_argument("name", metavar="NAME",
                         help="the host, as its agent publishes it")
    disable.add_argument("--reason", default="", metavar="TEXT",
                         help="why (at most 255 characters): shown by schedule "
                         "for this host")
    disable.set_defaults(func=run_disable)

    enable = arguments.command(
        actions, "enable",
        "enable host NAME again for new instances",
        uses=("format", "placement_url"),
        unused="it changes what the host-state store and Placement hold of a "
        "host its agent published, not a host it discovers",
        details="""Removes the host-state store's record of NAME being
        disabled, then COMPUTE_STATUS_DISABLED from its root provider in
        Placement. Enabling a host that is not disabled changes nothing and
        exits 0. Exit 1 when Placement could not be updated (the host's
        agent removes the trait at its next periodic); exit 2 when the
        host-state store knows no host NAME.""")
    enable.add_argument("name", metavar="NAME",
                        help="the host, as its agent publishes it")
    enable.set_defaults(func=run_enable)


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


def run_disable(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    """``host disable``: exit 0 disabled (or so already), 1 Placement not
    updated, 2 unknown host or reason too long (InputError)."""
    from compute_plugins import exception
    from compute_plugins.cmd.report import quiet_placement_logs
    from compute_plugins.compute import disable as status
    from compute_plugins.hoststate.store import HostStateStore
    from compute_plugins.placement import connect

    quiet_placement_logs(conf.debug)
    with HostStateStore.from_config(conf) as store, \
            connect.placement_client(conf, args.placement_url) as placement:
        try:
            done = status.disable_host(store, placement, args.name, args.reason)
        except ValueError as err:
            # NOTE: the store's own message names the value and the rule.
            raise exception.InputError(str(err)) from None
    return _said(args, done)


def run_enable(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    """``host enable``: exit 0 enabled (or so already), 1 Placement not
    updated, 2 unknown host (InputError)."""
    from compute_plugins.cmd.report import quiet_placement_logs
    from compute_plugins.compute import disable as status
    from compute_plugins.hoststate.store import HostStateStore
    from compute_plugins.placement import connect

    quiet_placement_logs(conf.debug)
    with HostStateStore.from_config(conf) as store, \
            connect.placement_client(conf, args.placement_url) as placement:
        done = status.enable_host(store, placement, args.name)
    return _said(args, done)


def _said(args: argparse.Namespace, done: HostStatusResult) -> int:
    """Print ``done`` (``--format``); its exit code."""
    code = EXIT_OK if done.placement_error is None else EXIT_FAILED
    if args.format == "json":
        print(json.dumps(done.to_dict(), sort_keys=True))
    else:
        common.say(printable(_status_line(done)))
    return code


def _status_line(done: HostStatusResult) -> str:
    """The command's line: what changed, and Placement's part."""
    record = done.record
    why = "" if record is None else ": %s" % (record.reason or "no reason given")
    since = "" if record is None else " since %s by %s" % (
        record.at.isoformat(sep=" ", timespec="seconds"), record.by)
    if done.disabled:
        verb = "set on"
        what = ("host %s disabled%s; its instances stay, no new one goes to it"
                % (done.host, why) if done.changed else
                "host %s is already disabled%s%s; nothing changed" % (done.host, since, why))
    else:
        verb = "removed from"
        what = ("host %s enabled (it was disabled%s%s)" % (done.host, since, why)
                if done.changed else "host %s is already enabled; nothing changed" % done.host)
    if done.placement_error is not None:
        part = ("Placement not updated (%s): the host's agent %s "
                "COMPUTE_STATUS_DISABLED at its next periodic, or run this again"
                % (done.placement_error, "sets" if done.disabled else "removes"))
    elif done.root is None:
        part = "Placement has no root provider for it yet"
    elif done.trait_changed:
        part = "COMPUTE_STATUS_DISABLED %s its root provider %s" % (verb, done.root)
    else:
        part = None
    return what if part is None else "%s; %s" % (what, part)
