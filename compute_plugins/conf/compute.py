"""``[compute]``: host CPU and memory options, with nova's names and meaning."""

from __future__ import annotations

from collections.abc import Sequence

from oslo_config import cfg

from compute_plugins.conf import FiniteFloat, ratio_opt, register_group_opts

#: ``agent_lease_duration``'s default (seconds): also the lease a host-state
#: store assumes when opened without a configuration
#: (:data:`compute_plugins.hoststate.engine.DEFAULT_LEASE_DURATION` is this
#: value, so the two cannot differ).
AGENT_LEASE_DURATION = 30.0

GROUP = cfg.OptGroup(
    "compute",
    title="Compute host resources",
    help="Options shared by the resource plugins, named as in nova.",
)

OPTS = [
    cfg.StrOpt(
        "cpu_dedicated_set",
        help="Host CPUs reported as ``PCPU`` (for pinned guests), in nova's "
        "syntax: ranges, single ids and exclusions, e.g. ``4-12,^8,15``.",
    ),
    cfg.StrOpt(
        "cpu_shared_set",
        help="Host CPUs reported as ``VCPU`` (floating guests), in nova's "
        "syntax. When both this and ``cpu_dedicated_set`` are unset, "
        "every host CPU is a VCPU, as in nova.",
    ),
    cfg.StrOpt(
        "vcpu_pin_set",
        deprecated_group="DEFAULT",
        help="nova's legacy (deprecated) ``[DEFAULT] vcpu_pin_set``, also "
        "read from ``[DEFAULT]``: the host CPUs reported as ``VCPU``, "
        "instead of ``cpu_shared_set``. Incompatible with "
        "``cpu_dedicated_set``. A host with neither ``cpu_dedicated_set`` "
        "nor ``cpu_shared_set`` (or with this option) is a legacy host, as "
        "in nova: it reports no ``PCPU``, and pinned guests that nova's "
        "scheduler places there through its fallback ``VCPU`` query "
        "(``[workarounds] disable_fallback_pcpu_query = False``) are pinned "
        "to its ``VCPU`` CPUs.",
    ),
    ratio_opt("cpu_allocation_ratio", 4.0,
              "Allocation ratio of the ``VCPU`` inventory."),
    ratio_opt("ram_allocation_ratio", 1.0,
              "Allocation ratio of the ``MEMORY_MB`` inventory."),
    cfg.IntOpt(
        "reserved_host_memory_mb",
        default=512,
        min=0,
        help="Memory (MiB) kept for the host. It is reserved on the "
        "NUMA cells in order of their id: cell 0 first, and what does not "
        "fit there on the next cell.",
    ),
    cfg.BoolOpt(
        "packing_host_numa_cells_allocation_strategy",
        default=True,
        help="How the NUMA fit orders host NUMA cells for a guest with a NUMA "
        "topology (nova's option and ordering). ``True``: cells with the "
        "most resources used come first, so guests pack onto them before a "
        "new cell is used. ``False``: cells with the most resources free "
        "come first (spread). NOTE: nova 34 defaults to ``False``; this "
        "project packs by default.",
    ),
    cfg.IntOpt(
        "resource_provider_association_refresh",
        default=300,
        min=0,
        mutable=True,
        help="Seconds between refreshes of the cached provider tree from "
        "Placement. 0 disables the periodic refresh: the cache is then "
        "refreshed only at start-up, after a local change, after a failed "
        "update and on SIGHUP (which clears it).",
    ),
    cfg.Opt(
        "claim_poll_interval",
        type=FiniteFloat(min=0.05, max=3600.0),
        default=1.0,
        help="Seconds between the agent's polls of the host-state store for "
        "decisions addressed to its host (claims and releases), between "
        "periodics. Each poll is one indexed read and no write. Where the "
        "store pushes (``[host_state] push``: through ``push_transport_url``'s "
        "broker, or PostgreSQL's ``NOTIFY``) the agent is told "
        "of decisions instead and reads nothing while idle; it polls at this "
        "interval only while its listening connection is down.",
    ),
    cfg.Opt(
        "placement_audit_interval",
        type=FiniteFloat(min=0.0, max=86400.0),
        default=600.0,
        help="Seconds between the agent's audits of its own provider tree "
        "(after the one at start): Placement's allocations on the tree "
        "against its claims ledger, one GET per provider, nothing written. "
        "A mismatch is logged once, when two audits in a row saw it (a "
        "schedule in flight is not one); ``compute-plugins audit --fix`` "
        "repairs. 0: only at start.",
    ),
    cfg.Opt(
        "release_timeout",
        type=FiniteFloat(min=0.0, max=86400.0),
        default=60.0,
        help="Seconds ``compute-plugins release`` waits for the host's agent "
        "to free the consumer before it gives up (the release stays "
        "requested: the agent frees it when it runs).",
    ),
    cfg.StrOpt(
        "machine_id_file",
        help="The file holding this machine's identity, which the compute "
        "agent records (hashed) in its state directory's "
        "``compute_node.json`` at its first start and checks at every "
        "start: a state directory copied to another machine makes the agent "
        "refuse to start (exit 2) instead of running a second agent under "
        "the same node uuid. Default: the first of ``/etc/machine-id``, "
        "``/var/lib/dbus/machine-id`` and ``/sys/class/dmi/id/product_uuid`` "
        "that holds one (none: not checked). In a container whose machine id "
        "is not the host's, point it at the host's ``/etc/machine-id`` "
        "mounted in; an empty value turns the check off.",
    ),
    cfg.Opt(
        "agent_lease_duration",
        type=FiniteFloat(min=3.0, max=3600.0),
        default=AGENT_LEASE_DURATION,
        help="Seconds the compute agent's lease on its host in the host-state "
        "store lasts (one agent per host: another agent for the same host "
        "name, from another state directory, is refused while it holds). "
        "The agent renews it every third of that (one store write, its only "
        "steady-state write); when it crashed or hangs, another agent may "
        "take the host over once the lease expired, and the old one's writes "
        "are refused from then on (fencing). It is also the agent's "
        "heartbeat: a host whose lease expired is down, no scheduling "
        "candidate, and a decision pending on it is withdrawn and placed "
        "elsewhere at once; a stopped agent's host is down within one lease "
        "duration (the default keeps that within 30 s). At least 3 x "
        "claim_poll_interval; the machines' clocks must agree to within a "
        "small part of it.",
    ),
    cfg.Opt(
        "move_step_timeout",
        type=FiniteFloat(min=0.0, max=86400.0),
        default=600.0,
        help="Seconds a move of an instance (resize, migrate, evacuate; "
        "issue 21) may stay in a step its command should have ended before "
        "the hosts' agents end it themselves at their periodic: a move left "
        "preparing or handed-over (the mover stopped) is rolled back by the "
        "source's agent, or reverted when a destination claimed it; one "
        "left confirming is confirmed, one left reverting reverted, an "
        "evacuation left once its new claim held is finished. Keep it well "
        "above ``[scheduler]``'s wait for a claim (a live mover is never "
        "overtaken) and above the machines' clock difference. 0: at the "
        "next periodic.",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    register_group_opts(conf, GROUP, OPTS)


def list_opts() -> list[tuple[cfg.OptGroup, Sequence[cfg.Opt]]]:
    return [(GROUP, OPTS)]
