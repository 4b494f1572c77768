"""Differential: our NUMA fit against nova 34's ``numa_fit_instance_to_host``.

2000 random cases: hosts of 1 to 8 cells (SMT or not, some CPUs pinned,
shared load, small, 2 MiB and 1 GiB pages, used memory), guests of 1 to 4 nodes,
dedicated, shared and mixed, thread policies ``prefer``/``require`` (and
``isolate`` on non-SMT hosts), emulator threads, page sizes
(small|large|any|2048|1048576). nova's semantics where they are shared (the
modern configuration of test_nova_numa_fit: no ``isolate`` on SMT hosts,
huge pages for pinned guests only, no reserved host memory).

- wherever nova finds a valid placement, we find one (nova's answer is
  first checked against the host: its fit cache can return a pinning
  computed on another cell; such answers are counted, and there we fit
  exactly when the exhaustive reference below finds a placement);
- wherever only we find one, an independent checker (below, built on the
  exhaustive reference of tests/unit/resources/numa_fit/test_property,
  not on the plugin) confirms our assignment: distinct cells, free CPUs
  pinned once, thread policy, emulator CPU, shared CPUs and their load,
  memory in an allowed page size with room. The exhaustive reference also
  says whether the guest fits at all, so "nova missed a fit" is counted.

The counts are printed (``pytest -s``) and asserted loosely: the point is
that the categories that must be empty are.

Skipped without nova, except under ``COMPUTE_PLUGINS_COMPAT``.
"""

from __future__ import annotations

import os
import random
import time

import pytest

if os.environ.get("COMPUTE_PLUGINS_COMPAT"):
    import nova  # noqa: F401
else:
    pytest.importorskip("nova.virt.hardware")

from bench.fit import nova_model  # noqa: E402
from resources.numa.fit import fit  # noqa: E402
from resources.numa.request import NUMAAssignment  # noqa: E402
from tests.compat.test_nova_numa_fit import nova_valid  # noqa: E402
from tests.unit.resources.numa_fit import test_property as ref  # noqa: E402
from tests.unit.resources.numa_fit.helpers import cell, request, state  # noqa: E402

CASES = 2000


def random_case(rng):
    smt = rng.random() < 0.5
    cells, next_cpu = [], 0
    for cell_id in range(rng.choice([1, 1, 2, 2, 2, 3, 4, 4, 5, 6, 7, 8])):
        pcpus, groups = [], []
        for _ in range(rng.randint(0, 4)):
            size = rng.choice([2, 2, 2, 3]) if smt else 1
            groups.append(list(range(next_cpu, next_cpu + size)))
            pcpus += groups[-1]
            next_cpu += size
        shared = list(range(next_cpu, next_cpu + rng.randint(0, 3)))
        next_cpu += len(shared)
        memory = rng.choice([1024, 2048, 4096])
        pages = ([(2048, rng.choice([256, 512]), rng.choice([0, 0, 200]))]
                 if rng.random() < 0.4 else [])
        if rng.random() < 0.2:
            pages.append((1048576, 1, rng.choice([0, 0, 1])))
        cells.append(cell(cell_id, pcpus=pcpus, shared=shared, siblings=groups,
                          pinned=[x for x in pcpus if rng.random() < 0.2],
                          memory_mb=memory, used_mb=rng.choice([0, 0, memory // 2]),
                          pages=pages, load=rng.randint(0, 3)))
    st = state(*cells, cpu_ratio=rng.choice([1.0, 1.5, 2.0, 4.0]),
               pack=rng.random() < 0.5)
    policy = rng.choice(["dedicated", "dedicated", "mixed", "shared", None])
    pinned = policy in ("dedicated", "mixed")
    nodes, shared = [], []
    for _ in range(rng.randint(1, min(4, len(cells)))):
        count = rng.randint(1, 4) if pinned else rng.randint(1, 2)
        extra = rng.randint(0, 1) if policy == "mixed" else 0
        nodes.append((count + extra, rng.choice([256, 512, 1024])))
        shared.append(extra)
    if policy == "mixed" and not any(shared):
        nodes[0], shared[0] = (nodes[0][0] + 1, nodes[0][1]), 1
    threads = ["prefer", None, "require"] + ([] if smt else ["isolate"])
    page, page_kb = None, None
    if pinned:
        page = rng.choice([None, None, "small", "large", "any", "2048",
                           "1048576"])
        if page in ("2048", "1048576"):
            page, page_kb = None, int(page)
    req = request(
        nodes, policy=policy, shared=shared,
        thread=rng.choice(threads) if pinned else None,
        emulator=rng.choice([None, "isolate", "share"]) if pinned else None,
        page=page, page_kb=page_kb)
    return st, req


# -- the independent checker ---------------------------------------------------------

def check_assignment(st, req, got):
    """Why ``got`` is not a valid placement of ``req`` on ``st`` (None: it
    is), from the definitions in the exhaustive reference."""
    if len(got.cells) != len(req.cells):
        return "not one placement per guest node"
    if len({c.host_cell for c in got.cells}) != len(got.cells):
        return "two guest nodes on one host cell"
    strict = req.cpu_policy in ("dedicated", "mixed") or bool(
        req.mem_page_size or req.page_size_kb)
    taken = []
    for guest, placed in zip(req.cells, got.cells, strict=True):
        host = st.by_id[placed.host_cell]
        if placed.guest_cell != guest.id:
            return "guest node %d placed as %d" % (guest.id, placed.guest_cell)
        if set(placed.pinning) != set(guest.pcpus):
            return "node %d: pinned vCPUs %s, dedicated %s" % (
                guest.id, sorted(placed.pinning), sorted(guest.pcpus))
        emulator = sorted(got.emulator_threads) if (
            req.extra_pcpus and guest.id == 0) else []
        if len(emulator) != (req.extra_pcpus if guest.id == 0 else 0):
            return "emulator threads %s, want %d CPU" % (emulator, req.extra_pcpus)
        cpus = list(placed.pinning.values())
        if not ref.ref_pinning_ok(host, req.cpu_thread_policy, cpus, emulator):
            return "node %d: pinning %s (emulator %s) breaks the %s policy or " \
                   "takes a CPU not free on cell %d" % (
                       guest.id, cpus, emulator, req.cpu_thread_policy, host.id)
        # held: dedicated CPUs taken without a vCPU (the emulator's, idle
        # siblings)
        free = set(host.pcpus) - set(host.pinned)
        if not placed.held_cpus <= free - set(cpus):
            return "node %d holds CPUs %s that are not free" % (
                guest.id, sorted(placed.held_cpus))
        if not set(emulator) <= placed.held_cpus:
            return "node 0's emulator CPUs %s are not held" % emulator
        taken += cpus + sorted(placed.held_cpus)
        if placed.shared_vcpus != len(guest.cpus):
            return "node %d: %d shared vCPUs, asked %d" % (
                guest.id, placed.shared_vcpus, len(guest.cpus))
        if guest.cpus and not (placed.shared_cpus
                               and placed.shared_cpus <= host.shared_cpus):
            return "node %d floats on %s, not shared CPUs of cell %d" % (
                guest.id, sorted(placed.shared_cpus), host.id)
        if not ref.ref_shared_fits(st, host, len(guest.cpus)):
            return "node %d: cell %d's shared CPUs are over their limit" % (
                guest.id, host.id)
        size = placed.page_size_kb or ref.SMALL
        if size not in ref.ref_page_sizes(host, req.mem_page_size, req.page_size_kb):
            return "node %d: page size %d KiB not allowed" % (guest.id, size)
        if placed.memory_mb != guest.memory_mb or not ref.ref_memory_fits(
                st, host, guest.memory_mb, size, strict):
            return "node %d: %d MiB in %d KiB pages do not fit cell %d" % (
                guest.id, placed.memory_mb, size, host.id)
    if len(set(taken)) != len(taken):
        return "a dedicated host CPU used twice: %s" % sorted(taken)
    return None


def test_checker_refuses_broken_assignments():
    """The checker is not vacuous: it refuses each kind of mistake."""
    import dataclasses
    st = state(cell(0, pcpus=[0, 1, 2], pinned=[2], memory_mb=1024),
               cell(1, pcpus=[3, 4], memory_mb=1024), pack=False)
    req = request([(2, 512), (1, 512)])
    good = fit(st, req, None)
    assert isinstance(good, NUMAAssignment)
    assert check_assignment(st, req, good) is None
    first, second = good.cells
    on_pinned = dataclasses.replace(first, pinning=type(first.pinning)(
        {k: 2 if i == 0 else v for i, (k, v) in enumerate(first.pinning.items())}))
    same_cell = dataclasses.replace(second, host_cell=first.host_cell)
    too_big = dataclasses.replace(first, memory_mb=2048)
    for broken in ([on_pinned, second], [first, same_cell], [too_big, second]):
        bad = dataclasses.replace(good, cells=tuple(broken))
        assert check_assignment(st, req, bad) is not None, broken


def test_nova_fits_we_fit_and_only_ours_are_valid():
    rng = random.Random(1234)
    counts = dict.fromkeys(
        ("both", "neither", "only_ours", "only_ours_reference_fits",
         "nova_invalid", "only_nova"), 0)
    started = time.perf_counter()
    for case in range(CASES):
        st, req = random_case(rng)
        theirs = nova_model.placed(nova_model.fit(st, req))
        mine = fit(st, req, None)
        where = (case, st, req, theirs, mine)
        ours_fits = isinstance(mine, NUMAAssignment)
        if ours_fits:
            problem = check_assignment(st, req, mine)
            assert problem is None, (problem, where)
        if theirs is not None and not nova_valid(st, req, theirs):
            # nova's fit cache answered with a pinning it computed for
            # another cell: nova is no reference here, the exhaustive one is
            counts["nova_invalid"] += 1
            assert ours_fits == (ref.ref_first_fit(st, req) is not None), where
            continue
        if theirs is not None and not ours_fits:
            counts["only_nova"] += 1
            continue
        if theirs is None and ours_fits:
            counts["only_ours"] += 1
            counts["only_ours_reference_fits"] += ref.ref_first_fit(st, req) is not None
        elif theirs is None:
            counts["neither"] += 1
            # nobody fits: the exhaustive reference agrees (no fit missed
            # by both)
            assert ref.ref_first_fit(st, req) is None, where
        else:
            counts["both"] += 1
    elapsed = time.perf_counter() - started
    print("\nNUMA fit vs nova 34 on %d random cases (%.1f s): %s"
          % (CASES, elapsed, ", ".join("%s=%d" % kv for kv in counts.items())))
    assert counts["only_nova"] == 0, counts
    assert counts["only_ours"] == counts["only_ours_reference_fits"], counts
    assert counts["both"] > CASES // 4, counts
    assert counts["neither"] > CASES // 10, counts


# -- guest options read from the flavor and image (issue 17) ------------------------

def _nova_flavor_image(vcpus, specs, props):
    objects = nova_model.nova()["objects"]
    flavor = objects.Flavor(vcpus=vcpus, memory_mb=1024, extra_specs=dict(specs))
    image = objects.ImageMeta.from_dict({"properties": dict(props)})
    return flavor, image


def _ours(vcpus, specs, props):
    from compute_plugins.request.inputs import RequestInput
    from resources.numa import options
    from resources.numa import request as numa_request
    ri = RequestInput.from_dicts(
        {"name": "f", "vcpus": vcpus, "memory_mb": 1024, "extra_specs": specs},
        image={"properties": props}).for_plugin("numa")
    req = options.parse(ri, numa_request.parse(ri))
    return req, [p.rule for p in ri.problems]


TOPOLOGY_KEYS = ("sockets", "cores", "threads", "max_sockets", "max_cores",
                 "max_threads")


def test_cpu_topology_is_novas_get_best_cpu_topology():
    """``<cpu><topology>`` (sockets, cores, threads) equals nova's
    ``get_best_cpu_topology`` for random flavor and image constraints;
    where nova raises, we report a problem (the same message)."""
    from nova import exception as nova_exception

    from resources.numa import guest
    hardware = nova_model.nova()["hardware"]
    rng = random.Random(17)
    agreed = refused = 0
    for case in range(600):
        vcpus = rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 32])
        specs, props = {}, {}
        for key in TOPOLOGY_KEYS:
            if rng.random() < 0.3:
                specs["hw:cpu_" + key] = str(rng.choice([1, 2, 3, 4, 8]))
            if rng.random() < 0.2:
                props["hw_cpu_" + key] = rng.choice([1, 2, 4, 8])
        flavor, image = _nova_flavor_image(vcpus, specs, props)
        try:
            best = hardware.get_best_cpu_topology(flavor, image)
            theirs = (best.sockets, best.cores, best.threads)
        except nova_exception.Invalid as err:
            theirs = str(err)
        req, problems = _ours(vcpus, specs, props)
        where = (case, vcpus, specs, props, theirs, problems)
        if isinstance(theirs, str):
            assert any(theirs in p for p in problems), where
            refused += 1
        else:
            topology = guest._cpu_topology(req).find("topology")
            ours = tuple(int(topology.get(k)) for k in ("sockets", "cores",
                                                        "threads"))
            assert problems == [] and ours == theirs, where
            agreed += 1
    assert agreed > 300 and refused > 20, (agreed, refused)


@pytest.mark.parametrize("specs, props", [
    ({"hw:locked_memory": "true"}, {}),
    ({"hw:locked_memory": "true", "hw:mem_page_size": "large"}, {}),
    ({"hw:locked_memory": "false"}, {}),
    ({"hw:mem_page_size": "large"}, {"hw_locked_memory": True}),
    ({}, {"hw_locked_memory": True}),
    ({"hw:locked_memory": "true", "hw:mem_page_size": "small"},
     {"hw_locked_memory": False}),
    ({"hw:locked_memory": "yes", "hw:mem_page_size": "2048"},
     {"hw_locked_memory": "true"}),
])
def test_locked_memory_is_novas_get_locked_memory_constraint(specs, props):
    """``hw:locked_memory``/``hw_locked_memory``: locked exactly when nova's
    ``get_locked_memory_constraint`` says so; refused with nova's message
    where nova raises (LockMemoryForbidden, FlavorImageLockedMemoryConflict)."""
    from nova import exception as nova_exception
    hardware = nova_model.nova()["hardware"]
    flavor, image = _nova_flavor_image(2, specs, props)
    try:
        theirs = bool(hardware.get_locked_memory_constraint(flavor, image))
    except nova_exception.NovaException as err:
        theirs = str(err)
    req, problems = _ours(2, specs, props)
    if isinstance(theirs, str):
        assert any(theirs in p for p in problems), (theirs, problems)
    else:
        assert problems == [] and req.locked_memory is theirs
