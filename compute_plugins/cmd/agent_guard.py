"""What ``compute-plugins report`` adds to keep one agent per host and its
claims whole (issue 20): the state directory's lock, held for the agent's
life, and ``--rebuild-ledger``. Kept apart from :mod:`.report` so that the
report command's own code stays as it is."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oslo_config import cfg

    from compute_plugins.compute import identity




def add_options(parser: argparse.ArgumentParser) -> None:
    """``report``'s options of this module."""
    parser.add_argument(
        "--rebuild-ledger", action="store_true",
        help="rebuild a missing or empty claims ledger from the claims the "
        "host-state store holds for this host, then run (the agent refuses "
        "to start on a missing or empty ledger while the store or Placement "
        "still show claims on the host); refused when the ledger holds claims")


def lock_into(held: list[identity.StateDirLock]) -> Callable[[cfg.ConfigOpts], None]:
    """:func:`lock_state_dir`, the lock kept in ``held``: for
    :func:`~compute_plugins.compute.agent.load_host`'s ``lock``, which
    takes it once the options and the host were checked (a bad option or
    host name creates nothing in the state directory) and before the
    identity and the ledger are read."""
    def run(conf: cfg.ConfigOpts) -> None:
        held.append(lock_state_dir(conf))
    return run


def lock_state_dir(conf: cfg.ConfigOpts) -> identity.StateDirLock:
    """Take ``[compute_plugins] state_dir``'s lock for the process's life
    (the kernel drops it when the process ends, however it ends).

    :raises AgentRunning: another agent holds it (exit 2, naming its pid).
    """
    from compute_plugins.compute import identity
    from compute_plugins.conf import plugins as plugins_conf

    return identity.StateDirLock(plugins_conf.state_dir(conf)).__enter__()
