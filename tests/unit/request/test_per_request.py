"""What a plugin derives from a request alone is built once per request
(``compute_plugins.request.groups.per_request``): the scheduler fits one
request object on every candidate host."""

from __future__ import annotations

import dataclasses

from compute_plugins.request.groups import PluginRequest, per_request
from resources.numa import fit as numa_fit
from resources.numa import request as numa_request
from resources.numa.request import GuestCell, NUMARequest
from resources.numa.state import CellState


@dataclasses.dataclass(frozen=True)
class Wants(PluginRequest):
    count: int = 1


BUILT: list[int] = []


@per_request
def units(request: Wants) -> list[int]:
    BUILT.append(request.count)
    return list(range(request.count))


def test_built_once_per_request_object_and_each_caller_gets_its_own_list():
    BUILT.clear()
    request = Wants(3)
    first = units(request)
    first.append(99)
    assert units(request) == [0, 1, 2]
    assert BUILT == [3]
    # NOTE: another request object, even an equal one, is built anew.
    assert units(Wants(3)) == [0, 1, 2]
    assert BUILT == [3, 3]


def test_kept_value_is_no_field_of_the_request():
    request = Wants(2)
    units(request)
    assert request == Wants(2)
    assert dataclasses.asdict(request) == {"count": 2}
    assert dataclasses.replace(request, count=4).count == 4


def pinned(nodes: int) -> NUMARequest:
    cells = tuple(GuestCell(id=i, cpus=frozenset(),
                            pcpus=frozenset(range(4 * i, 4 * i + 4)), memory_mb=1024)
                  for i in range(nodes))
    return NUMARequest(cells=cells, cpu_policy="dedicated", vcpus=4 * nodes,
                       memory_mb=1024 * nodes)


def test_numa_groups_and_demands_are_the_same_on_every_call():
    request = pinned(2)
    groups = numa_request.request_groups(request)
    assert [g.requester_id for g in groups] == ["_NUMA0", "_NUMA1"]
    groups.clear()
    again = numa_request.request_groups(request)
    assert [g.requester_id for g in again] == ["_NUMA0", "_NUMA1"]
    assert again[0] is numa_request.request_groups(request)[0]
    demands = numa_fit.node_demands(request)
    assert [d.dedicated for d in demands] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert numa_fit.node_demands(request)[1] is demands[1]


def test_a_cells_fit_class_is_its_signature_and_ignores_its_ids():
    one = CellState(id=0, provider_uuid="a", pcpus=frozenset(range(4)),
                    pinned=frozenset({0}), siblings=(frozenset({0, 1}),
                                                     frozenset({2, 3})),
                    memory_mb=4096)
    other = dataclasses.replace(one, id=1, provider_uuid="b",
                                pcpus=frozenset(range(4, 8)), pinned=frozenset({4}),
                                siblings=(frozenset({4, 5}), frozenset({6, 7})))
    fuller = dataclasses.replace(one, pinned=frozenset({0, 2}))
    assert one.fit_class == other.fit_class
    assert one.fit_class != fuller.fit_class
    assert one.fit_class is one.fit_class
