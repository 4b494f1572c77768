"""``[compute_plugins]``: which resource plugins run."""

from __future__ import annotations

import os
from collections.abc import Sequence

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
    cfg.StrOpt(
        "state_dir",
        help="Directory of the agent's state: what each plugin last "
        "contributed to the provider tree (``<nodename>.contributions.json``), "
        "so that after a restart the providers and traits of a vanished "
        "device are removed. Default: ``$XDG_STATE_HOME/compute-plugins``, "
        "else ``~/.local/state/compute-plugins``.",
    ),
]


def default_state_dir() -> str:
    """``$XDG_STATE_HOME/compute-plugins`` or ``~/.local/state/compute-plugins``."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "compute-plugins")


def state_dir(conf: cfg.ConfigOpts) -> str:
    """The effective ``[compute_plugins] state_dir``."""
    return conf.compute_plugins.state_dir or default_state_dir()


def register_opts(conf: cfg.ConfigOpts) -> None:
    register_group_opts(conf, GROUP, OPTS)


def list_opts() -> list[tuple[cfg.OptGroup, Sequence[cfg.Opt]]]:
    return [(GROUP, OPTS)]
