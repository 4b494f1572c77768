"""``[scheduler]``: how ``compute-plugins schedule`` chooses and claims.

The scheduler asks Placement which providers have room, runs every plugin's
``fit`` on the candidate hosts' published states, orders the hosts that fit
by weight, writes the allocation of the best to Placement and waits for the
host's agent to claim it (see :mod:`compute_plugins.scheduler.selection`).
"""

from __future__ import annotations

from collections.abc import Sequence

from oslo_config import cfg

from compute_plugins.conf import FiniteFloatOpt, register_group_opts

GROUP = cfg.OptGroup(
    "scheduler",
    title="Scheduler",
    help="Choosing a host for a request and having its agent claim it.",
)

OPTS = [
    cfg.DictOpt(
        "weigher_multipliers",
        default={},
        help="Per plugin, how its host utilization weighs: ``plugin:multiplier`` "
        "pairs, e.g. ``numa:2.0,vgpu:-1.0``. A positive multiplier packs "
        "(fuller hosts first), a negative one spreads (emptier hosts first), "
        "0 ignores the plugin. Plugins not listed get "
        "``default_weigher_multiplier``.",
    ),
    FiniteFloatOpt(
        "default_weigher_multiplier",
        default=-1.0,
        help="Multiplier of the plugins ``weigher_multipliers`` does not list. "
        "The default spreads guests over hosts, as nova's weighers do.",
    ),
    cfg.IntOpt(
        "max_attempts",
        default=3,
        min=1,
        help="Hosts tried per request: a host whose agent rejects the "
        "decision (its state changed since it published it) or does not "
        "answer in time counts as one attempt; a race (see ``max_races``) "
        "does not.",
    ),
    cfg.IntOpt(
        "max_races",
        default=20,
        min=0,
        help="Races per request that do not count as attempts: a rejection "
        "by a host that published a new state since the fit (another "
        "guest's claim landed there first), or Placement's 409 on the "
        "allocation (another scheduler's allocation took the room). The "
        "scheduler then plans again on fresh state instead of giving up, "
        "so a request is refused only when no host has room. Past this "
        "many races, each counts as an attempt again (bounded: a request "
        "makes at most ``max_attempts + max_races`` offers).",
    ),
    FiniteFloatOpt(
        "answer_timeout",
        default=60.0,
        min=0.0,
        help="Seconds to wait for the chosen host's agent to claim or reject "
        "a decision. Then the decision is withdrawn, its allocation freed, "
        "and the next host tried.",
    ),
    cfg.BoolOpt(
        "allow_resize_to_same_host",
        default=False,
        help="Whether a resize may pick the host the instance is on (nova's "
        "option of the same name). The host then needs room for both the old "
        "and the new flavor until the resize is confirmed or reverted. A "
        "migration always goes to another host.",
    ),
    cfg.IntOpt(
        "max_reported_hosts",
        default=3,
        min=1,
        help="When nothing fits, how many hosts' reasons (per plugin) the "
        "answer lists: the hosts where the fewest plugins refused first.",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    register_group_opts(conf, GROUP, OPTS)


def list_opts() -> list[tuple[cfg.OptGroup, Sequence[cfg.Opt]]]:
    return [(GROUP, OPTS)]
