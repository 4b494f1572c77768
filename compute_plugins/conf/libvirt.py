"""``[libvirt]``: where the host's facts come from."""

from __future__ import annotations

from collections.abc import Sequence

from oslo_config import cfg

from compute_plugins.conf import register_group_opts

GROUP = cfg.OptGroup(
    "libvirt",
    title="Host discovery",
    help="The libvirt connection (or host snapshot) the host is discovered from.",
)

OPTS = [
    cfg.StrOpt(
        "connection_uri",
        default="qemu:///system",
        help="libvirt URI of the host to discover. ``test:///default`` "
        "uses libvirt's built-in test driver.",
    ),
    cfg.StrOpt(
        "host_snapshot",
        help="Directory of a host snapshot written by ``compute-plugins "
        "record-host``; when set it replaces the libvirt connection.",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    register_group_opts(conf, GROUP, OPTS)


def list_opts() -> list[tuple[cfg.OptGroup, Sequence[cfg.Opt]]]:
    return [(GROUP, OPTS)]
