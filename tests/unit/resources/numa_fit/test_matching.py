"""Preferred bipartite matching: complete, lexicographically first, Hall proof."""

from __future__ import annotations

import itertools
import random

from resources.numa.matching import NoMatching, preferred_matching


def brute_force(prefs, cells):
    """The first assignment in lexicographic order of preference ranks."""
    best = None
    for chosen in itertools.permutations(cells, len(prefs)):
        if all(c in p for c, p in zip(chosen, prefs, strict=True)):
            ranks = [p.index(c) for c, p in zip(chosen, prefs, strict=True)]
            if best is None or ranks < best[0]:
                best = (ranks, list(chosen))
    return None if best is None else best[1]


def test_a_node_gives_up_its_first_choice_when_it_must():
    assert preferred_matching([[0, 1], [0]]) == [1, 0]
    assert preferred_matching([[0, 1, 2], [0, 1], [0]]) == [2, 1, 0]


def test_stranded_nodes():
    assert preferred_matching([[0], [], [1], []]) == NoMatching(stranded=(1, 3))


def test_hall_violator():
    got = preferred_matching([[0, 1], [1, 0], [0], [2]])
    assert isinstance(got, NoMatching)
    assert got.crowd == (0, 1, 2) and got.room == (0, 1)


def test_random_graphs_against_brute_force():
    rng = random.Random(5)
    for _ in range(1500):
        cells = list(range(rng.randint(1, 6)))
        prefs = []
        for _ in range(rng.randint(1, 5)):
            chosen = [c for c in cells if rng.random() < 0.45]
            rng.shuffle(chosen)
            prefs.append(chosen)
        expected = brute_force(prefs, cells)
        got = preferred_matching(prefs)
        if expected is None:
            assert isinstance(got, NoMatching), (prefs, got)
            if got.stranded:
                assert all(not prefs[n] for n in got.stranded)
            else:
                reach = set().union(*(prefs[n] for n in got.crowd))
                assert reach == set(got.room) and len(got.room) < len(got.crowd)
        else:
            assert got == expected, prefs


# -- with the networks' NUMA affinity (resources.numa.fit.network_matching) ------

def first_meeting(prefs, cells, required):
    """nova's first permutation (cells in rank order) that is a matching and
    uses a cell of each of ``required``."""
    for chosen in itertools.permutations(cells, len(prefs)):
        if all(c in p for c, p in zip(chosen, prefs, strict=True)) and all(
                set(chosen) & need for _, need in required):
            return list(chosen)
    return None


def test_network_matching_is_novas_first_permutation_meeting_the_networks():
    from resources.numa.fit import network_matching
    rng = random.Random(17)
    met = 0
    for _ in range(1500):
        cells = list(range(rng.randint(1, 7)))
        order = cells[:]
        rng.shuffle(order)                      # the cell order (rank)
        prefs = []
        for _ in range(rng.randint(1, len(cells))):
            chosen = {c for c in cells if rng.random() < 0.6}
            prefs.append([c for c in order if c in chosen])
        required = [("n%d" % k, frozenset(c for c in cells if rng.random() < 0.3))
                    for k in range(rng.randint(0, 4))]
        required = [(what, need) for what, need in required if need]
        rank = {c: i for i, c in enumerate(order)}
        got = network_matching(prefs, required, rank)
        expected = first_meeting(prefs, order, required)
        if isinstance(got, NoMatching):
            assert first_meeting(prefs, order, []) is None
            continue
        assert got == expected, (prefs, required, order)
        met += expected is not None and bool(required)
    assert met > 200, met


def test_network_matching_on_a_16_cell_host_finds_the_one_cell_with_room():
    """8 guest nodes, 16 host cells; the networks are affine to cells 8-15,
    of which only cell 15 has room: nova takes cells 0-6 and 15. It was
    refused ('no placement ... meets it') after 4096 tries, and a guest
    the tries did place took tens of milliseconds per host."""
    from resources.numa.fit import network_matching
    prefs = [[c for c in range(16) if not 8 <= c < 15]] * 8
    required = [(name, frozenset(range(8, 16))) for name in "abcd"]
    got = network_matching(prefs, required, {c: c for c in range(16)})
    assert got == [0, 1, 2, 3, 4, 5, 6, 15]
    roomy = [list(range(16))] * 8
    assert network_matching(roomy, required, {c: c for c in range(16)}) == [
        0, 1, 2, 3, 4, 5, 6, 8]
