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
    FiniteFloatOpt(
        "placement_view_seconds",
        default=60.0,
        min=0.0,
        help="How long, at most, a scheduler serves Placement's answer to "
        "which hosts have room for a request shape again instead of asking "
        "Placement on every decision (``GET /resource_providers``, 2-3 MB "
        "at 1,000 hosts). The answer is asked again sooner when a host "
        "appears, publishes other providers or is disabled or enabled, "
        "and before a request is refused. Placement still checks every "
        "allocation atomically (its 409 sends the request to the next host "
        "and leaves that host out of the kept answer), and the plugins "
        "fit each host's state as it last published it; what this bounds "
        "is how long a change made in "
        "Placement alone (an operator's trait or aggregate, shared "
        "storage, a host whose room grew back) goes unseen by the choice. "
        "An answer served past 90 % of this age is asked again in the "
        "background (every host, once per shape), so that it is renewed "
        "before it expires and no decision waits for that ask. "
        "0 asks Placement on every decision.",
    ),
    cfg.IntOpt(
        "hosts_to_score_percentage",
        default=0,
        min=0,
        max=100,
        help="Of the hosts Placement said have room, a decision stops "
        "fitting once it found this percentage of them that fit (and at "
        "least ``min_hosts_to_score``), as kube-scheduler's "
        "``percentageOfNodesToScore``; the next decision starts after the "
        "hosts this one fitted. 0 is adaptive: 50 % minus 1 % per 125 "
        "hosts, at least 5 % (42 % of 1,000 hosts, 5 % of 10,000). 100 "
        "fits every candidate. A request that fits only on a host not "
        "fitted yet is still placed: fitting goes on until enough hosts "
        "fit or every candidate was fitted.",
    ),
    cfg.IntOpt(
        "min_hosts_to_score",
        default=100,
        min=1,
        help="Below this many hosts that fit, a decision fits every "
        "candidate (kube-scheduler's 100).",
    ),
    cfg.IntOpt(
        "host_subset_size",
        default=1,
        min=1,
        help="The first host offered is drawn at random among at least "
        "this many best hosts that fit (nova's option of the same name). "
        "With 1 it is drawn among the hosts as good as the best (weights "
        "within 1 % of one plugin's utilization at the largest multiplier, "
        "as kube-scheduler's "
        "selectHost draws among the nodes of the best score), so several "
        "schedulers on the same states do not all race for one host; a host "
        "better than all others is always offered first. More (e.g. 2 per "
        "scheduler) also spreads them over hosts of nearly the best weight: "
        "Placement and the host's agent refuse all but one of racers, who "
        "then try again.",
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
