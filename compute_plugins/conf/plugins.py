"""``[compute_plugins]``: which resource plugins run."""

from __future__ import annotations

from oslo_config import cfg

from compute_plugins.conf import register_group_opts

GROUP = cfg.OptGroup(
    "compute_plugins",
    title="Resource plugins",
    help="Which resource plugins (entry points in the "
    "``compute_plugins.resources`` namespace) are loaded.",
)

OPTS = [
    cfg.ListOpt(
        "enabled_plugins",
        default=["numa", "vgpu", "sriov", "disk"],
        help="Names of the resource plugins to load, from the "
        "``compute_plugins.resources`` entry-point namespace. Plugins run "
        "in the order given. An unknown name is a configuration error.",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    register_group_opts(conf, GROUP, OPTS)


def list_opts() -> list[tuple[cfg.OptGroup, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]
