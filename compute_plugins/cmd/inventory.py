"""``compute-plugins inventory``: discover the host and print its provider tree.

Runs every enabled plugin's part of ``update_provider_tree`` on a fresh tree;
talks to no Placement.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from compute_plugins.cmd import arguments, common

if TYPE_CHECKING:
    from oslo_config import cfg


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = arguments.command(
        subparsers, "inventory", "discover the host with the enabled plugins "
        "and print its provider tree (no Placement)",
        uses=("format", "libvirt_uri", "host_snapshot"))
    parser.set_defaults(func=run)


def run(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    from compute_plugins.tree import render as tree_view
    from compute_plugins.tree.provider_tree import ProviderTree

    manager = common.plugin_manager(conf)
    host = common.discover(conf, args)
    manager.discover(host)
    manager.raise_config_errors()
    tree = ProviderTree()
    manager.update_provider_tree(tree, host.hostname)
    document = tree_view.tree_to_dict(tree)
    if args.format == "json":
        common.print_json(document)
    else:
        common.say(tree_view.render_text(document))
    return common.report_degraded(manager)
