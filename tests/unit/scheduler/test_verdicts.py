"""A plan's and a request's verdicts (:class:`selection.Verdicts`): read
through layers (the first that holds a host wins), never copied per
decision, and the same map as the sorted one they stand for."""

from __future__ import annotations

import pytest

from compute_plugins.plugin.contract import Rejection
from compute_plugins.request.types import FrozenMap
from compute_plugins.scheduler.selection import Verdicts

FULL = (Rejection("Placement: no room", plugin="placement"),)
DOWN = (Rejection("host c is down"),)
NUMA = (Rejection("no cell fits", plugin="numa"),)


def test_the_first_layer_that_holds_a_host_says_its_verdict():
    excluded = {"c": FULL, "a": FULL}
    plan = Verdicts({"c": DOWN, "b": ()}, excluded)
    request = Verdicts({"b": NUMA}, plan, {})
    assert request["b"] == NUMA and plan["b"] == ()
    assert request["c"] == DOWN and request["a"] == FULL
    assert "a" in request and "z" not in request
    with pytest.raises(KeyError):
        request["z"]
    assert request.get("z") is None
    # iterated in host order, once sorted; the same map as a FrozenMap
    assert list(request) == ["a", "b", "c"] and len(request) == 3
    flat = FrozenMap(sorted({"a": FULL, "b": NUMA, "c": DOWN}.items()))
    assert request == flat and flat == request and hash(request) == hash(flat)
    assert request == {"a": FULL, "b": NUMA, "c": DOWN}
    assert request != {"a": FULL}
    # the layers read in place: nothing copied
    assert excluded in plan._layers
    assert len(Verdicts()) == 0 and list(Verdicts({}, {})) == []
    assert len(Verdicts(excluded)) == 2
    assert "Verdicts(" in repr(request)
