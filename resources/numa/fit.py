"""The NUMA plugin's decision: ``fit`` and ``verify``.

``fit`` places a guest on one host (pure, deterministic, no I/O):

- a guest with a NUMA topology: each guest node on a distinct host cell.
  Whether node ``i`` fits cell ``c`` depends only on that pair
  (:func:`resources.numa.cell.place`), so the fit builds the table of
  feasible pairs (computed once per class of identical cells and identical
  nodes) and matches nodes to cells (:mod:`resources.numa.matching`): it
  finds an assignment whenever one exists, in polynomial time, and prefers
  the cells nova's packing order prefers (:mod:`resources.numa.order`).
  With Placement's ``mappings``, node ``N`` may only go on the cell of the
  provider of group ``_NUMA<N>``;
- a guest without one: :mod:`resources.numa.floating`.

``verify`` tests a recorded assignment on a (newer) state with the same
per-cell :func:`resources.numa.cell.check` that ``fit`` passes its own
choice through.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Optional, Union

from compute_plugins.plugin.contract import Mappings, Rejection
from compute_plugins.plugin.cpuset import format_cpu_spec
from compute_plugins.request.groups import per_request
from resources.numa import cell as cellfit
from resources.numa import floating, networks
from resources.numa.cell import NodeDemand
from resources.numa.matching import NoMatching, preferred_matching
from resources.numa.order import cell_order
from resources.numa.pinning import Subject
from resources.numa.request import (
    CellAssignment,
    NUMAAssignment,
    NUMARequest,
    cell_group_id,
)
from resources.numa.state import CellState, NUMAState

NO_STATE = "the host has no NUMA state (its NUMA discovery failed)"


def pins(request: NUMARequest) -> bool:
    """The guest pins CPUs (``dedicated`` or ``mixed``)."""
    return request.cpu_policy in ("dedicated", "mixed")


@per_request
def node_demands(request: NUMARequest) -> list[NodeDemand]:
    """What each guest node asks of its host cell (once per request:
    the same on every host)."""
    strict = (pins(request) or request.mem_page_size is not None
              or request.page_size_kb is not None)
    return [NodeDemand(
        node=cell.id,
        who="guest node %d" % cell.id,
        dedicated=tuple(sorted(cell.pcpus)),
        emulator=request.extra_pcpus if cell.id == 0 else 0,
        shared=len(cell.cpus),
        memory_mb=cell.memory_mb,
        page_alias=request.mem_page_size,
        page_size_kb=request.page_size_kb,
        thread_policy=request.cpu_thread_policy,
        strict_memory=strict,
    ) for cell in request.cells]


def emulator_threads(state: NUMAState, request: NUMARequest,
                     cells: Sequence[CellAssignment],
                     isolated: frozenset[int]) -> frozenset[int]:
    """Where the emulator threads run (nova's ``_get_emulatorpin_cpuset``):
    their own CPU (``isolate``), ``cpu_shared_set`` (``share``, when set),
    else with the guest's non-realtime vCPUs."""
    if request.extra_pcpus:
        return isolated
    if request.emulator_threads_policy == "share" and state.emulator_share_cpus:
        return state.emulator_share_cpus
    by_node = {cell.guest_cell: cell for cell in cells}
    cpus: set[int] = set()
    for guest in request.cells:
        placed = by_node[guest.id]
        cpus.update(placed.pinning[cpu] for cpu in guest.pcpus
                    if cpu not in request.realtime_cpus)
        if guest.cpus - request.realtime_cpus:
            cpus.update(placed.shared_cpus)
    return frozenset(cpus)


def _allowed(state: NUMAState, demands: Sequence[NodeDemand],
             placement: Mappings) -> Union[list[list[CellState]], Rejection]:
    """Per node, the cells it may go on: all, or Placement's."""
    if placement is None:
        return [list(state.cells) for _ in demands]
    allowed = []
    for demand in demands:
        group = cell_group_id(demand.node)
        uuids = placement.get(group)
        if uuids is None:
            return Rejection("Placement's mappings name no provider for %s "
                             "(group %s)" % (demand.who, group))
        cells = [state.by_uuid[uuid] for uuid in uuids if uuid in state.by_uuid]
        if not cells:
            return Rejection("Placement put %s (group %s) on provider %s, "
                             "which is no NUMA cell of this host"
                             % (demand.who, group, ", ".join(uuids)),
                             provider=uuids[0] if uuids else "")
        allowed.append(cells)
    return allowed


def _reasons(state: NUMAState, demand: NodeDemand,
             cells: Sequence[CellState]) -> list[str]:
    """Why ``demand`` fits none of ``cells``: one reason per class."""
    classes: dict[tuple[object, ...], list[CellState]] = {}
    for cell in cells:
        classes.setdefault(cellfit.signature(cell), []).append(cell)
    reasons = []
    for members in classes.values():
        subject = Subject.of([cell.id for cell in members])
        placed = cellfit.place(state, members[0], demand, subject)
        if isinstance(placed, str):
            reasons.append(placed)
    return reasons


def _explain(state: NUMAState, demands: Sequence[NodeDemand],
             allowed: Sequence[Sequence[CellState]], placement: Mappings,
             failure: NoMatching) -> Rejection:
    if failure.stranded:
        texts = []
        provider = ""
        for node in failure.stranded:
            demand, cells = demands[node], allowed[node]
            reasons = "; ".join(_reasons(state, demand, cells))
            if placement is not None:
                texts.append("%s does not fit %s, where Placement put it: %s"
                             % (demand.who, Subject.of([c.id for c in cells]).name,
                                reasons))
                if len(failure.stranded) == 1 and len(cells) == 1:
                    provider = cells[0].provider_uuid
            else:
                texts.append("%s fits no host cell: %s" % (demand.who, reasons))
        return Rejection(". ".join(texts), provider=provider)
    nodes = [demands[i].node for i in failure.crowd]
    return Rejection(
        "guest nodes %s need distinct host cells but only %s can take any of "
        "them" % (format_cpu_spec(nodes),
                  "host cell %d" % failure.room[0] if len(failure.room) == 1
                  else "%d host cells (%s)" % (len(failure.room),
                                               format_cpu_spec(failure.room))))


#: A guest node placed on a host cell (:func:`cellfit.place`), by the
#: node and the cell: :func:`_preferences` places a node on one cell of
#: each class, :func:`_assignment` reuses those it matched.
Placed = dict[tuple[int, int], Union[tuple[CellAssignment, frozenset[int]], str]]


def _preferences(state: NUMAState, request: NUMARequest, placement: Mappings,
                 placed: Optional[Placed] = None
                 ) -> Union[tuple[list[NodeDemand], list[list[CellState]],
                                  list[list[int]]], Rejection]:
    """Per guest node, its demand, the cells it may go on and, of those, the
    ones it fits in packing order (the matching's preferences).

    :param placed: filled with the placements made to find them."""
    demands = node_demands(request)
    if len(demands) > len(state.cells):
        return Rejection("the guest has %d NUMA nodes, the host only %d NUMA "
                         "cells" % (len(demands), len(state.cells)))
    allowed = _allowed(state, demands, placement)
    if isinstance(allowed, Rejection):
        return allowed
    # NOTE: each cell's class numbered once per fit (a signature is a
    # nested tuple, hashed anew on every lookup), and the preferences of
    # nodes alike (same numbers, same cells allowed: the nodes of most
    # guests) found once: an 8-node guest on an 8-cell host looked up 64
    # (node, cell) pairs for one class.
    numbers: dict[tuple[object, ...], int] = {}
    classes = {cell.id: numbers.setdefault(cellfit.signature(cell), len(numbers))
               for cell in state.cells}
    feasible: dict[tuple[object, ...], bool] = {}

    def fits(demand: NodeDemand, key: tuple[int, ...], cell: CellState) -> bool:
        pair = (key, classes[cell.id])
        known = feasible.get(pair)
        if known is None:
            result = cellfit.place(state, cell, demand)
            if placed is not None:
                placed[demand.node, cell.id] = result
            known = feasible[pair] = not isinstance(result, str)
        return known

    order = cell_order(state, len(demands), pins(request))
    prefs = []
    alike: dict[tuple[object, ...], list[int]] = {}
    for demand, cells in zip(demands, allowed, strict=True):
        ids = frozenset(cell.id for cell in cells)
        key = demand.key
        found = alike.get((key, ids))
        if found is None:
            found = alike[key, ids] = [cell.id for cell in order
                                       if cell.id in ids and fits(demand, key, cell)]
        prefs.append(list(found))
    return demands, allowed, prefs


def _assignment(state: NUMAState, request: NUMARequest,
                demands: Sequence[NodeDemand], matched: Sequence[int],
                known: Optional[Placed] = None
                ) -> Union[NUMAAssignment, Rejection]:
    """The CPUs and memory of each node on its matched cell (those in
    ``known`` as they were placed: :func:`cellfit.place` is a pure
    function of the state, the cell and the node)."""
    placed_cells = []
    isolated: frozenset[int] = frozenset()
    for demand, cell_id in zip(demands, matched, strict=True):
        cell = state.by_id[cell_id]
        placed = (known or {}).get((demand.node, cell_id))
        if placed is None:
            placed = cellfit.place(state, cell, demand)
        if isinstance(placed, str):  # NOTE: a class is only ever feasible whole
            return Rejection(placed, provider=cell.provider_uuid)
        assignment, emulator = placed
        placed_cells.append(assignment)
        isolated |= emulator
    return NUMAAssignment(
        cells=tuple(placed_cells),
        emulator_threads=emulator_threads(state, request, placed_cells, isolated))


def _hitting_sets(required: Sequence[frozenset[int]], limit: int,
                  hit: frozenset[int] = frozenset()) -> Iterator[frozenset[int]]:
    """The sets of at most ``limit`` cells that take one cell of each of
    ``required``, built one unmet set at a time (so no set holds a cell that
    meets nothing new: the minimal ones and few others)."""
    unmet = next((cells for cells in required if not cells & hit), None)
    if unmet is None:
        yield hit
        return
    if len(hit) == limit:
        return
    for cell in sorted(unmet):
        yield from _hitting_sets(required, limit, hit | {cell})


def network_matching(prefs: Sequence[Sequence[int]],
                     required: Sequence[tuple[str, frozenset[int]]],
                     rank: dict[int, int]
                     ) -> Union[list[int], NoMatching, None]:
    """The preferred matching whose cells include one cell of each of
    ``required`` (:func:`resources.numa.networks.constraints`); None when
    every matching misses one.

    nova takes the first permutation, in cell order, that meets the
    networks. Every such matching uses a set of cells that takes one cell
    of each network (a hitting set); for each such set ``H``, the preferred
    matching that uses every cell of ``H`` is found by one matching with
    placeholder nodes that may take any cell but those of ``H`` (as many as
    the cells beyond the guest's nodes: every cell is used, so ``H``'s by
    guest nodes), and the best of them by ``rank`` (the cells' order) is
    nova's first. A set holding another gives no better matching, so the
    sets are built minimal; cells no node may take, and networks another
    network's cells meet, are left out first.
    """
    first = preferred_matching(prefs)
    if isinstance(first, NoMatching) or not required:
        return first
    if networks.problem(required, first) is None:
        return first
    usable = frozenset(cell for choices in prefs for cell in choices)
    sets = {cells & usable for _, cells in required}
    if frozenset() in sets:
        return None
    needed = sorted((s for s in sets if not any(other < s for other in sets)),
                    key=lambda s: (len(s), sorted(s)))
    placeholders = len(usable) - len(prefs)
    best: Optional[tuple[list[int], list[int]]] = None
    tried: list[frozenset[int]] = []
    for hit in _hitting_sets(needed, len(prefs)):
        if any(done <= hit for done in tried):
            continue
        tried.append(hit)
        others = sorted(usable - hit)
        matched = preferred_matching(
            list(prefs) + [others] * placeholders, ranked=len(prefs))
        if isinstance(matched, NoMatching):
            continue
        key = [rank[cell] for cell in matched[:len(prefs)]]
        if best is None or key < best[0]:
            best = (key, matched[:len(prefs)])
    return best[1] if best else None


def fit_topology(state: NUMAState, request: NUMARequest,
                 placement: Mappings) -> Union[NUMAAssignment, Rejection]:
    """Place every guest node of ``request`` on a distinct host cell (with
    its networks' NUMA affinity: :mod:`resources.numa.networks`)."""
    known: Placed = {}
    prepared = _preferences(state, request, placement, known)
    if isinstance(prepared, Rejection):
        return prepared
    demands, allowed, prefs = prepared
    required = networks.constraints(state.cells, request.physnets,
                                    request.tunneled)
    rank = {cell.id: index for index, cell in enumerate(
        cell_order(state, len(demands), pins(request)))} if required else {}
    matched = network_matching(prefs, required, rank)
    if matched is None:
        unconstrained = preferred_matching(prefs)
        assert not isinstance(unconstrained, NoMatching)
        return Rejection("%s; no placement of the guest's NUMA nodes on this "
                         "host's cells meets it"
                         % networks.problem(required, unconstrained))
    if isinstance(matched, NoMatching):
        return _explain(state, demands, allowed, placement, matched)
    return _assignment(state, request, demands, matched, known)


def _host_cells(assignment: NUMAAssignment) -> frozenset[int]:
    return frozenset(cell.host_cell for cell in assignment.cells)


def alternatives(state: Optional[NUMAState], request: NUMARequest,
                 placement: Mappings) -> Iterator[NUMAAssignment]:
    """``fit``'s answer, then other placements whose host cells differ in
    what a device's NUMA affinity can see, best first.

    A device is affine when its cell is one of the guest's host cells, so
    what matters to the devices is the *set* of host cells. After ``fit``'s
    answer, for each host cell in packing order that no placement yielded
    so far uses: the preferred placement with some guest node on that cell
    (the matching with node ``i`` held to it, nodes in order, meeting the
    networks' NUMA affinity), if any. At most one placement per host cell,
    each one polynomial (one matching per guest node, and per set of cells
    meeting the networks when the guest has some): no search over
    permutations. A guest without NUMA
    topology has no alternatives (devices ignore where it floats).
    """
    first = fit(state, request, placement)
    if isinstance(first, Rejection):
        return
    yield first
    if state is None or not request.cells:
        return
    prepared = _preferences(state, request, placement)
    if isinstance(prepared, Rejection):  # NOTE: fit passed the same checks
        return
    demands, _, prefs = prepared
    required = networks.constraints(state.cells, request.physnets,
                                    request.tunneled)
    covered = set(_host_cells(first))
    order = cell_order(state, len(demands), pins(request))
    rank = {cell.id: index for index, cell in enumerate(order)}
    for cell in order:
        if cell.id in covered:
            continue
        for node, cells in enumerate(prefs):
            if cell.id not in cells:
                continue
            held = [[cell.id] if other == node
                    else [c for c in choices if c != cell.id]
                    for other, choices in enumerate(prefs)]
            # NOTE: the preferred placement with the node held that meets
            # the networks (the unconstrained one may miss them where
            # another with the same held cell meets them)
            matched = network_matching(held, required, rank)
            if matched is None or isinstance(matched, NoMatching):
                continue
            placed = _assignment(state, request, demands, matched)
            if isinstance(placed, NUMAAssignment):
                covered |= _host_cells(placed)
                yield placed
            break


#: nova's ``RealtimeMaskNotFoundOrInvalid``.
REALTIME_INVALID = ("Use of realtime CPUs requires either one or more "
                    "non-realtime CPU(s) or offloaded emulator threads.")


def host_problem(state: NUMAState, request: NUMARequest) -> Optional[Rejection]:
    """What the host's configuration refuses whatever the cells: nova's
    libvirt driver (``_get_guest_memory_backing_config``) fails a realtime
    guest with ``hw:emulator_threads_policy=share`` on a host without
    ``[compute] cpu_shared_set`` (its emulator threads would have nowhere
    apart from the realtime vCPUs to run)."""
    if (request.realtime_cpus and request.emulator_threads_policy == "share"
            and not state.emulator_share_cpus):
        return Rejection("hw:emulator_threads_policy=share with realtime vCPUs "
                         "needs [compute] cpu_shared_set for the emulator "
                         "threads, and this host sets none: " + REALTIME_INVALID)
    return None


def fit(state: Optional[NUMAState], request: NUMARequest,
        placement: Mappings) -> Union[NUMAAssignment, Rejection]:
    """The guest's CPUs and memory on the host in ``state``, or why not."""
    if state is None:
        return Rejection(NO_STATE)
    problem = host_problem(state, request)
    if problem is not None:
        return problem
    if request.cells:
        return fit_topology(state, request, placement)
    return floating.fit(state, request, placement)


def _verify_topology(state: NUMAState, request: NUMARequest,
                     assignment: NUMAAssignment) -> Optional[Rejection]:
    demands = node_demands(request)
    if assignment.floating:
        return Rejection("the decision places the guest as one without NUMA "
                         "topology; it has %d NUMA nodes" % len(demands))
    by_node = {cell.guest_cell: cell for cell in assignment.cells}
    if (len(by_node) != len(assignment.cells)
            or sorted(by_node) != [d.node for d in demands]):
        return Rejection("the decision places guest nodes %s; the guest has "
                         "nodes %s" % (
                             format_cpu_spec(c.guest_cell for c in assignment.cells),
                             format_cpu_spec(d.node for d in demands)))
    hosts = [cell.host_cell for cell in assignment.cells]
    if len(set(hosts)) != len(hosts):
        return Rejection("the decision puts two guest nodes on one host cell "
                         "(host cells %s)" % ", ".join(map(str, hosts)))
    network = networks.problem(networks.constraints(
        state.cells, request.physnets, request.tunneled), hosts)
    if network is not None:
        return Rejection(network)
    isolated: frozenset[int] = frozenset()
    for demand in demands:
        recorded = by_node[demand.node]
        cell = state.by_id.get(recorded.host_cell)
        if cell is None:
            return Rejection("the decision puts %s on host cell %d; the host "
                             "has cells %s" % (
                                 demand.who, recorded.host_cell,
                                 format_cpu_spec(state.by_id) or "none"))
        emulator = assignment.emulator_threads if demand.emulator else frozenset()
        problem = cellfit.check(state, cell, demand, recorded, emulator)
        if problem:
            return Rejection(problem, provider=cell.provider_uuid)
        isolated |= emulator
    expected = emulator_threads(state, request, assignment.cells, isolated)
    if assignment.emulator_threads != expected:
        return Rejection("the decision pins emulator threads to CPUs %s; "
                         "they belong on %s" % (
                             format_cpu_spec(assignment.emulator_threads) or "(none)",
                             format_cpu_spec(expected) or "(none)"))
    return None


def verify(state: Optional[NUMAState], request: NUMARequest,
           assignment: NUMAAssignment) -> Optional[Rejection]:
    """None when ``assignment`` still holds on ``state``, else why not."""
    if state is None:
        return Rejection(NO_STATE)
    problem = host_problem(state, request)
    if problem is not None:
        return problem
    if request.cells:
        return _verify_topology(state, request, assignment)
    return floating.verify(state, request, assignment)
