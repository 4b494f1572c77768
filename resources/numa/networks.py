"""NUMA-affine networks: nova's ``[neutron_physnet_NAME]`` and
``[neutron_tunnel]`` ``numa_nodes``.

An operator's ``nova.conf`` values carry over unchanged (nova's groups and
option names, ``nova.conf.neutron``):

- ``[neutron] physnets``: the physnets of this host; for each, a group
  ``[neutron_physnet_<name>]`` with ``numa_nodes``, the host cells its NICs
  are on (registered when the plugin is built, as nova's
  ``register_dynamic_opts`` does after reading ``physnets``);
- ``[neutron_tunnel] numa_nodes``: the cells of the NICs tunneled networks
  (vxlan, gre, geneve) use.

As nova's driver (``InvalidNetworkNUMAAffinity``), a physnet listed without
``numa_nodes`` and a ``numa_nodes`` cell the host does not have are
configuration errors (a typo would silently drop the affinity).

A guest with a NUMA topology and ports on such networks goes on host cells
that include, for every physnet of its ports with an affinity, one of that
physnet's cells, and one of the tunnel's cells when a port is tunneled
(nova's ``_numa_cells_support_network_metadata``, applied by
``numa_fit_instance_to_host`` to each permutation). A physnet or tunnel
with no affinity on this host constrains nothing; a guest without NUMA
topology is not constrained (nova checks network affinity in the NUMA fit
only). The constraint is on the *set* of the guest's host cells, not on a
node: :func:`resources.numa.fit.fit_topology` searches the matchings that
use a cell of each constraint (:func:`constraints`), nova's first
permutation among them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Optional, Protocol

from oslo_config import cfg, types

from compute_plugins import exception
from compute_plugins.plugin.devices import InvalidOptionValue
from compute_plugins.request.inputs import RequestInput
from resources.numa.request import NUMARequest

NEUTRON = "neutron"
TUNNEL = "neutron_tunnel"
PHYSNET_GROUP = "neutron_physnet_%s"

_NODES = types.Integer(min=0)


def _numa_nodes_opt(what: str) -> cfg.Opt:
    return cfg.ListOpt(
        "numa_nodes", item_type=_NODES, default=[],
        help="The host NUMA cells the NICs of %s are on (nova's option): a "
        "guest with a NUMA topology and ports there is placed with one of "
        "its nodes on one of these cells." % what)


PHYSNETS_OPT = cfg.ListOpt(
    "physnets", default=[],
    help="The physnets present on this host (nova's option). For each, the "
    "group [neutron_physnet_<name>] takes numa_nodes, the host NUMA cells "
    "its NICs are on.")
TUNNEL_OPT = _numa_nodes_opt("tunneled networks (vxlan, gre, geneve)")


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """The static groups (the physnet groups depend on ``physnets``)."""
    return [(NEUTRON, [PHYSNETS_OPT]), (TUNNEL, [TUNNEL_OPT])]


def _register(conf: cfg.ConfigOpts, group: str, opt: cfg.Opt) -> None:
    try:
        conf.register_opt(opt, group=group)
    except cfg.DuplicateOptError:
        pass  # NOTE: nova's own CONF (the nova adapters) has them already


def register_dynamic_opts(conf: cfg.ConfigOpts) -> None:
    """Register the static groups and a ``[neutron_physnet_<name>]`` group
    per name of ``[neutron] physnets`` (nova's ``register_dynamic_opts``).

    Call once the configuration files are loaded (the group names depend
    on ``physnets``): the plugin does when it is built, so the command
    line's check of every option at start finds a bad ``numa_nodes`` there
    (exit 2, one line naming the group) as it does in static groups.
    Calling it again is harmless.
    """
    for group, opts in list_opts():
        for opt in opts:
            _register(conf, group, opt)
    for name in conf[NEUTRON].physnets:
        _register(conf, PHYSNET_GROUP % name, _numa_nodes_opt("physnet %s" % name))


def _numa_nodes(conf: cfg.ConfigOpts, group: str) -> frozenset[int]:
    """``[group] numa_nodes``; a bad value is a :class:`ConfigError` naming
    the group and option (where no start-time check read it first)."""
    try:
        return frozenset(conf[group].numa_nodes)
    except cfg.ConfigSourceValueError as err:
        rule = str(err).rpartition("is not valid: ")[2] or str(err)
        raise exception.ConfigError("[%s] numa_nodes: %s" % (group, rule)) from None


def affinity(conf: cfg.ConfigOpts
             ) -> tuple[dict[str, frozenset[int]], frozenset[int]]:
    """``({physnet: cells}, tunnel cells)`` from the configuration (the
    physnet groups registered: :func:`register_dynamic_opts`).

    :raises ConfigError: a physnet of ``[neutron] physnets`` has no
        ``numa_nodes`` (nova's driver refuses it too:
        ``InvalidNetworkNUMAAffinity``; a typo in the group's name would
        silently drop the affinity).
    """
    register_dynamic_opts(conf)
    physnets: dict[str, frozenset[int]] = {}
    for name in conf[NEUTRON].physnets:
        group = PHYSNET_GROUP % name
        nodes = _numa_nodes(conf, group)
        if not nodes:
            raise exception.ConfigError(
                "[%s] physnets lists %s, but [%s] numa_nodes is not set: "
                "list the host cells of its NICs there, or leave it out of "
                "[%s] physnets (nova refuses it too)" % (NEUTRON, name, group, NEUTRON))
        physnets[name] = nodes
    return physnets, _numa_nodes(conf, TUNNEL)


def cell_networks(conf: cfg.ConfigOpts, cell_ids: Iterable[int]
                  ) -> dict[int, tuple[frozenset[str], bool]]:
    """Per host cell: the physnets affine to it and whether tunneled
    networks are.

    :raises InvalidOptionValue: a ``numa_nodes`` names a cell the host does
        not have (nova's driver refuses it: ``InvalidNetworkNUMAAffinity``).
    """
    physnets, tunnel = affinity(conf)
    ids = frozenset(cell_ids)
    for where, nodes in [(PHYSNET_GROUP % n, c) for n, c in physnets.items()] + [
            (TUNNEL, tunnel)]:
        missing = sorted(nodes - ids)
        if missing:
            raise InvalidOptionValue(
                "[%s] numa_nodes" % where, ",".join(map(str, sorted(nodes))),
                "host cell %s %s not exist (the host's cells: %s)"
                % (", ".join(map(str, missing)), "does" if len(missing) == 1 else "do",
                   ", ".join(map(str, sorted(ids))) or "none"))
    return {cell: (frozenset(n for n, c in physnets.items() if cell in c),
                   cell in tunnel) for cell in ids}


def request_networks(ri: RequestInput) -> tuple[frozenset[str], bool]:
    """The physnets of the guest's ports and whether one is tunneled (nova's
    ``NetworkMetadata`` of the request)."""
    physnets = frozenset(p.physnet for p in ri.ports if p.physnet)
    return physnets, any(p.tunneled for p in ri.ports)


class _Cell(Protocol):
    """What :func:`constraints` reads of a host cell."""

    @property
    def id(self) -> int:
        ...

    @property
    def physnets(self) -> frozenset[str]:
        ...

    @property
    def tunneled(self) -> bool:
        ...


def constraints(cells: Sequence[_Cell], physnets: frozenset[str],
                tunneled: bool) -> list[tuple[str, frozenset[int]]]:
    """``(what, cells)``: the guest's host cells must include one of
    ``cells`` for each; physnets or a tunnel without affinity on this host
    are none (nova skips them)."""
    found = []
    for name in sorted(physnets):
        affine = frozenset(c.id for c in cells if name in c.physnets)
        if affine:
            found.append(("physnet %s" % name, affine))
    if tunneled:
        affine = frozenset(c.id for c in cells if c.tunneled)
        if affine:
            found.append(("tunneled networks", affine))
    return found


def problem(required: Sequence[tuple[str, frozenset[int]]],
            host_cells: Iterable[int]) -> Optional[str]:
    """Why a guest on ``host_cells`` breaks the network affinity
    ``required``; None when it does not."""
    chosen = frozenset(host_cells)
    missed = [(what, cells) for what, cells in required if not cells & chosen]
    if not missed:
        return None
    return "; ".join(
        "the guest's ports on %s need one of its NUMA nodes on host cell(s) %s "
        "(%s numa_nodes), it is on %s"
        % (what, ", ".join(map(str, sorted(cells))), _option(what),
           ", ".join(map(str, sorted(chosen)))) for what, cells in missed)


def _option(what: str) -> str:
    if what.startswith("physnet "):
        return "[%s]" % (PHYSNET_GROUP % what.removeprefix("physnet "))
    return "[%s]" % TUNNEL


def parse(ri: RequestInput, request: NUMARequest) -> NUMARequest:
    """``request`` with its ports' networks, for a guest with a NUMA
    topology (nova applies network affinity in the NUMA fit only)."""
    if not request.cells:
        return request
    physnets, tunneled = request_networks(ri)
    if not physnets and not tunneled:
        return request
    return dataclasses.replace(request, physnets=physnets, tunneled=tunneled)
