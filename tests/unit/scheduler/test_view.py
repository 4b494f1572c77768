"""How many hosts a decision fits, where it starts, and its first choice
(:mod:`compute_plugins.scheduler.view`)."""

from __future__ import annotations

import random

import pytest

from compute_plugins.scheduler import view


@pytest.mark.parametrize("candidates, percentage, expected", [
    (50, 0, 50),        # below kube's 100: every candidate
    (100, 0, 100),
    (150, 0, 100),      # 49 % of 150 is 73: at least 100
    (1000, 0, 420),     # adaptive: 50 - 1000/125 = 42 %
    (5000, 0, 500),     # 10 %
    (10000, 0, 500),    # 50 - 80 < 5: 5 %
    (1000, 10, 100),
    (1000, 5, 100),     # 50 hosts: at least 100
    (1000, 100, 1000),
    (1000, 60, 600),
])
def test_scoring_target_is_kube_schedulers(candidates, percentage, expected):
    assert view.scoring_target(candidates, percentage) == expected


def test_scoring_target_minimum_is_configurable():
    assert view.scoring_target(6, 34, minimum=2) == 2
    assert view.scoring_target(6, 34, minimum=6) == 6


def test_rotation_starts_after_the_hosts_fitted_last():
    rotation = view.Rotation()
    hosts = ["a", "b", "c", "d", "e"]
    assert rotation.order(hosts) == hosts
    rotation.advance(2, 5)
    assert rotation.order(hosts) == ["c", "d", "e", "a", "b"]
    rotation.advance(4, 5)
    assert rotation.order(hosts) == ["b", "c", "d", "e", "a"]
    rotation.advance(5, 5)  # every host fitted: no move
    assert rotation.order(hosts)[0] == "b"
    assert rotation.order([]) == []
    assert view.Rotation(7).order(hosts) == ["c", "d", "e", "a", "b"]


def test_draw_is_the_best_unless_others_are_as_good_or_a_subset_is_asked():
    rng = random.Random(7)
    # a best host better than every other by more than the tolerance
    assert {view.draw([0.0, -0.5, -0.9], 1, rng, 0.01) for _ in range(50)} == {0}
    assert view.draw([0.0], 5, rng) == 0
    assert view.draw([0.0] * 10, 5, None) == 0
    # equal best weights: drawn among them, never beyond
    assert {view.draw([0.0, 0.0, 0.0, -0.5], 1, rng) for _ in range(200)} == {0, 1, 2}
    # near-equal: within the tolerance
    assert {view.draw([-0.100, -0.105, -0.2], 1, rng, 0.01)
            for _ in range(100)} == {0, 1}
    # host_subset_size: at least that many of the best
    assert {view.draw([0.0, -0.5, -0.6, -0.7], 3, rng) for _ in range(200)} == {0, 1, 2}
    assert {view.draw([0.0, -0.5], 8, rng) for _ in range(100)} == {0, 1}
    assert {view.draw([0.0] * 4 + [-1.0] * 4, 2, rng) for _ in range(200)} == {0, 1, 2, 3}


def test_the_tie_tolerance_is_a_hundredth_of_one_plugins_range():
    assert view.tie_tolerance({"a": -1.0}) == 0.01
    assert view.tie_tolerance({"a": -1.0, "b": 3.0, "c": -1.0}) == 0.03
    assert view.tie_tolerance({}) == 0.0


def test_the_trees_of_hosts_gone_from_the_store_are_forgotten():
    """A long-running scheduler remembers each host's providers to see its
    tree change; a deleted or renamed host's are dropped, a down host's
    kept (its tree is compared when it comes back)."""
    kept = view.PlacementView(60.0)
    assert kept.providers_seen("a", {"u1": "a"}) is False
    assert kept.providers_seen("b", {"u2": "b"}) is False
    kept.forget_gone({"a"})
    assert kept.known_trees() == 1
    # a's tree is still remembered: a change is seen
    assert kept.providers_seen("a", {"u3": "a"}) is True
