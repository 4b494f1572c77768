"""Bipartite matching of guest nodes to host cells, in order of preference.

The NUMA fit reduces to this: guest node ``i`` may go on the cells of
``prefs[i]`` (its feasible cells, most preferred first) and no two nodes
share a cell. :func:`preferred_matching`

1. finds a maximum matching by augmenting paths (Kuhn); when it does not
   cover every node, no assignment exists, and it returns the proof: the
   nodes that may go nowhere, or a set of nodes whose feasible cells are
   fewer than they are (Hall's condition, found by the alternating search
   from an unmatched node);
2. otherwise improves the matching node by node: node 0 gets the most
   preferred cell with which every other node can still be matched, then
   node 1, and so on (one alternating-path search per try). The result is
   the lexicographically first perfect matching: exactly the first
   permutation nova's ``numa_fit_instance_to_host`` would accept, in
   polynomial time (at most nodes x cells searches of O(edges) each).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Optional, Union


@dataclasses.dataclass(frozen=True)
class NoMatching:
    """Why no matching covers every node.

    :param stranded: nodes with no feasible cell at all.
    :param crowd: (when none is stranded) nodes that need distinct cells...
    :param room: ...but can only go on these cells, fewer than they are.
    """

    stranded: tuple[int, ...] = ()
    crowd: tuple[int, ...] = ()
    room: tuple[int, ...] = ()


class _Matcher:
    def __init__(self, prefs: Sequence[Sequence[int]]) -> None:
        self.prefs = prefs
        self.match: list[int | None] = [None] * len(prefs)
        self.owner: dict[int, int] = {}
        self.fixed: set[int] = set()

    def augment(self, node: int, seen: set[int]) -> bool:
        """Find a cell for ``node``, moving unfixed nodes along an
        alternating path; changes nothing when it fails."""
        for cell in self.prefs[node]:
            if cell in seen:
                continue
            seen.add(cell)
            holder = self.owner.get(cell)
            if holder is not None and (holder in self.fixed
                                       or not self.augment(holder, seen)):
                continue
            self.owner[cell] = node
            self.match[node] = cell
            return True
        return False

    def hall_violator(self, node: int) -> NoMatching:
        crowd, room = {node}, set()
        todo = [node]
        while todo:
            current = todo.pop()
            for cell in self.prefs[current]:
                if cell in room:
                    continue
                room.add(cell)
                holder = self.owner[cell]
                if holder not in crowd:
                    crowd.add(holder)
                    todo.append(holder)
        return NoMatching(crowd=tuple(sorted(crowd)), room=tuple(sorted(room)))

    def improve(self, node: int) -> None:
        """Give ``node`` its most preferred cell that keeps a perfect
        matching of the nodes after it; then fix it."""
        current = self.match[node]
        assert current is not None
        for cell in self.prefs[node]:
            if cell == current:
                break
            holder = self.owner.get(cell)
            if holder in self.fixed:
                continue
            # Move node to cell; its old cell is free for the holder's path.
            del self.owner[current]
            self.fixed.add(node)
            self.owner[cell] = node
            self.match[node] = cell
            if holder is None or self.augment(holder, {cell}):
                self.fixed.discard(node)
                break
            self.fixed.discard(node)
            self.owner[cell] = holder
            self.owner[current] = node
            self.match[node] = current
        self.fixed.add(node)


def preferred_matching(prefs: Sequence[Sequence[int]],
                       ranked: Optional[int] = None
                       ) -> Union[list[int], NoMatching]:
    """The lexicographically first matching covering every node, or why none
    exists.

    :param prefs: per node, the cells it may take, most preferred first.
    :param ranked: only the first ``ranked`` nodes' choices are made the
        most preferred (the others, placeholders that only have to be
        matched, keep any cells: :func:`resources.numa.fit.network_matching`);
        None: every node's.
    :returns: the cell of each node, or a :class:`NoMatching`.
    """
    stranded = tuple(node for node, cells in enumerate(prefs) if not cells)
    if stranded:
        return NoMatching(stranded=stranded)
    matcher = _Matcher(prefs)
    for node in range(len(prefs)):
        if not matcher.augment(node, set()):
            return matcher.hall_violator(node)
    for node in range(len(prefs) if ranked is None else ranked):
        matcher.improve(node)
    return [cell for cell in matcher.match if cell is not None]
