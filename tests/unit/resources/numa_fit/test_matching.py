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
