"""The fit against an exhaustive reference, on thousands of random small hosts.

The reference is written here, independently of the plugin: it tries every
permutation of host cells for the guest nodes (as nova does, without its
caches) and, per node and cell, every subset of free CPUs against the
policies' definitions. It says whether the guest fits and which cells
nova's order would pick; the fit must agree on both, and its pinning must
satisfy the definitions. Seeded: deterministic.
"""

from __future__ import annotations

import itertools
import random

from compute_plugins.plugin.contract import Rejection
from resources.numa.fit import fit, verify
from resources.numa.request import FLOATING_SPLIT, NUMAAssignment
from tests.unit.resources.numa_fit.helpers import cell, floating, request, state

CASES = 3000
SMALL = 4


# -- the reference -----------------------------------------------------------------

def ref_cores(c):
    """Every core of the cell: its sibling sets, then lone CPUs."""
    cores = [frozenset(s) for s in c.siblings]
    seen = set().union(*cores) if cores else set()
    cores += [frozenset({x}) for x in sorted(set(c.pcpus) | set(c.shared_cpus))
              if x not in seen]
    return cores


def ref_core(c, cpu):
    return next(core for core in ref_cores(c) if cpu in core)


def ref_pinning_ok(c, policy, cpus, emulator):
    """The policies' definitions, for a set of vCPU CPUs and emulator CPUs."""
    free = set(c.pcpus) - set(c.pinned)
    everything = list(cpus) + list(emulator)
    if len(set(everything)) != len(everything) or not set(everything) <= free:
        return False
    smt = any(len(core) > 1 for core in ref_cores(c))
    if policy == "require":
        return smt and all(len(ref_core(c, x) & free) >= 2 for x in cpus)
    if policy == "isolate" and smt:
        return False  # nova with cpu_dedicated_set (bug 1889633)
    return True


def ref_cpus_fit(c, policy, count, emulator):
    free = sorted(set(c.pcpus) - set(c.pinned))
    for cpus in itertools.combinations(free, count):
        rest = [x for x in free if x not in cpus]
        for emu in itertools.combinations(rest, emulator):
            if ref_pinning_ok(c, policy, cpus, emu):
                return True
    return False


def ref_page_sizes(c, page, page_kb):
    huge = sorted((p.size_kb for p in c.pages), reverse=True)
    if page_kb:
        return [page_kb]
    return {"small": [SMALL], "large": huge, "any": huge + [SMALL]}.get(page, [SMALL])


def ref_memory_fits(st, c, memory, size, strict):
    if memory == 0:
        return True
    if size == SMALL:
        cap = int((c.memory_mb - c.reserved_memory_mb) * st.ram_allocation_ratio)
        if c.used_memory_mb + memory > cap:
            return False
        if strict:
            return memory <= c.memory_mb - c.reserved_memory_mb - c.used_memory_mb
        return memory <= c.memory_mb
    pools = [p for p in c.pages if p.size_kb == size]
    if not pools or memory * 1024 % size:
        return False
    return (pools[0].total - pools[0].used) * size >= memory * 1024


def ref_shared_fits(st, c, count):
    have = len(c.shared_cpus)
    return count == 0 or (count <= have and c.shared_load + count
                          <= int(have * st.cpu_allocation_ratio))


def ref_page(st, req, c, memory):
    """The page size nova picks (SMALL for small pages), None: none fits."""
    strict = req.cpu_policy in ("dedicated", "mixed") or bool(
        req.mem_page_size or req.page_size_kb)
    for size in ref_page_sizes(c, req.mem_page_size, req.page_size_kb):
        if ref_memory_fits(st, c, memory, size, strict):
            return size
    return None


def ref_node_fits(st, req, guest, c):
    emulator = req.extra_pcpus if guest.id == 0 else 0
    if ref_page(st, req, c, guest.memory_mb) is None:
        return False
    if not ref_shared_fits(st, c, len(guest.cpus)):
        return False
    if guest.pcpus or emulator:
        return ref_cpus_fit(c, req.cpu_thread_policy, len(guest.pcpus), emulator)
    return True


def ref_order(st, req):
    """nova 34's host cell sort in numa_fit_instance_to_host."""
    cells = list(st.cells)
    if len(cells) <= len(req.cells):
        return cells
    pack = st.pack

    def avail(c):
        return (c.memory_mb - c.used_memory_mb) + sum(
            p.size_kb * (p.total - p.used) for p in c.pages) // 1024

    cells = sorted(cells, reverse=not pack, key=avail)
    if req.cpu_policy in (None, "shared"):
        return sorted(cells, reverse=pack, key=lambda c: c.shared_load)
    return sorted(cells, reverse=not pack,
                  key=lambda c: len(set(c.pcpus) - set(c.pinned)))


def ref_first_fit(st, req):
    """The first permutation of the sorted cells that fits, or None."""
    cache = {}
    for perm in itertools.permutations(ref_order(st, req), len(req.cells)):
        ok = True
        for guest, c in zip(req.cells, perm, strict=True):
            key = (guest.id, c.id)
            if key not in cache:
                cache[key] = ref_node_fits(st, req, guest, c)
            if not cache[key]:
                ok = False
                break
        if ok:
            return [c.id for c in perm]
    return None


def greedy_fits(st, req):
    """Each node in turn on its first feasible free cell, no going back:
    what a fit without matching would find."""
    free = list(ref_order(st, req))
    for guest in req.cells:
        home = next((c for c in free if ref_node_fits(st, req, guest, c)), None)
        if home is None:
            return False
        free.remove(home)
    return True


def ref_floating_fits(st, req):
    def part(c, cpus, memory):
        return (ref_shared_fits(st, c, cpus)
                and ref_memory_fits(st, c, memory, SMALL, strict=False))

    cells = st.cells
    if any(part(c, req.vcpus, req.memory_mb) for c in cells):
        return True
    if any(part(a, req.vcpus, 0) and part(b, 0, req.memory_mb)
           for a, b in itertools.permutations(cells, 2)):
        return True
    for k in range(2, FLOATING_SPLIT + 1):
        cpus = [req.vcpus // k + (j < req.vcpus % k) for j in range(k)]
        mem = [req.memory_mb // k + (j < req.memory_mb % k) for j in range(k)]
        if any(not cpus[j] and not mem[j] for j in range(k)):
            continue
        if any(all(part(c, cpus[j], mem[j]) for j, c in enumerate(perm))
               for perm in itertools.permutations(cells, k)):
            return True
    return False


# -- random hosts and guests -------------------------------------------------------

def random_host(rng):
    smt = rng.random() < 0.5
    cells = []
    next_cpu = 0
    for cell_id in range(rng.choice([1, 2, 2, 3, 3, 4, 4])):
        pcpus, groups = [], []
        for _ in range(rng.choice([0, 1, 2, 3, 3, 4])):
            size = rng.choice([1, 2, 2, 2, 2, 3]) if smt else 1
            core = list(range(next_cpu, next_cpu + size))
            next_cpu += size
            pcpus += core
            groups.append(core)
        shared = list(range(next_cpu, next_cpu + rng.randint(0, 3)))
        next_cpu += len(shared)
        pinned = [x for x in pcpus if rng.random() < 0.2]
        memory = rng.choice([0, 1024, 2048, 3072, 4096, 4096])
        reserved = rng.choice([0, 0, 256])
        used = rng.randint(0, memory) if rng.random() < 0.3 else 0
        pages = []
        if rng.random() < 0.4:
            total = rng.choice([128, 512, 1024])
            pages.append((2048, total, rng.randint(0, total) if rng.random() < 0.4 else 0))
        if rng.random() < 0.2:
            total = rng.randint(1, 2)
            pages.append((1048576, total, rng.randint(0, total)))
        cells.append(cell(cell_id, pcpus=pcpus, shared=shared, pinned=pinned,
                          siblings=groups, memory_mb=memory, reserved_mb=reserved,
                          used_mb=used, pages=pages, load=rng.randint(0, 3)))
    return state(*cells, cpu_ratio=rng.choice([1.0, 2.0]),
                 ram_ratio=rng.choice([1.0, 1.0, 1.5, 0.8]), pack=rng.random() < 0.7)


def random_guest(rng, host_cells):
    policy = rng.choice(["dedicated", "dedicated", "mixed", "shared", None])
    count = rng.randint(1, min(3, host_cells + (rng.random() < 0.1)))
    pinned = policy in ("dedicated", "mixed")
    nodes, shared = [], []
    for _ in range(count):
        memory = rng.choice([256, 512, 1024, 1536])
        if pinned:
            dedicated = rng.choice([1, 1, 2, 2, 3, 4, 5])
            extra = rng.randint(0, 2) if policy == "mixed" else 0
            nodes.append((dedicated + extra, memory))
            shared.append(extra)
        else:
            nodes.append((rng.randint(1, 2), memory))
    if policy == "mixed" and not any(shared):
        nodes[0] = (nodes[0][0] + 1, nodes[0][1])
        shared[0] = 1
    page = rng.choice([None, None, None, None, "small", "large", "any"])
    page_kb = rng.choice([2048, 1048576]) if page is None and rng.random() < 0.2 else None
    return request(
        nodes, policy=policy, shared=shared,
        thread=rng.choice([None, "prefer", "isolate", "require"]) if pinned else None,
        emulator=rng.choice([None, None, "isolate", "share"]) if pinned else None,
        page=page, page_kb=page_kb)


# -- the property ----------------------------------------------------------------

def check_assignment(st, req, got, expected_cells):
    assert [c.guest_cell for c in got.cells] == [g.id for g in req.cells]
    assert [c.host_cell for c in got.cells] == expected_cells
    for guest, placed in zip(req.cells, got.cells, strict=True):
        c = st.by_id[placed.host_cell]
        assert set(placed.pinning) == set(guest.pcpus)
        emulator = got.emulator_threads if guest.id == 0 and req.extra_pcpus else ()
        assert ref_pinning_ok(c, req.cpu_thread_policy,
                              list(placed.pinning.values()), list(emulator))
        size = ref_page(st, req, c, guest.memory_mb)
        assert placed.page_size_kb == (None if size == SMALL else size)
        assert placed.memory_mb == guest.memory_mb
        assert placed.shared_vcpus == len(guest.cpus)
        assert placed.shared_cpus == (c.shared_cpus if guest.cpus else frozenset())
        assert placed.held_cpus == set(emulator)


def test_fit_agrees_with_the_exhaustive_reference():
    rng = random.Random(20240611)
    outcomes = {"fit": 0, "no fit": 0}
    beyond_greedy = 0
    for case in range(CASES):
        st = random_host(rng)
        req = random_guest(rng, len(st.cells))
        expected = ref_first_fit(st, req)
        got = fit(st, req, None)
        where = "case %d: %r\n%r\n-> %r" % (case, st, req, got)
        if expected is None:
            assert isinstance(got, Rejection), where
            outcomes["no fit"] += 1
            continue
        assert isinstance(got, NUMAAssignment), where
        check_assignment(st, req, got, expected)
        assert verify(st, req, got) is None, where
        outcomes["fit"] += 1
        beyond_greedy += not greedy_fits(st, req)
    # Both outcomes are well represented (the generator is not degenerate),
    # and so are fits that a greedy choice of cells misses.
    assert min(outcomes.values()) > CASES // 5, outcomes
    assert beyond_greedy >= 10, beyond_greedy


def test_floating_fit_agrees_with_the_reference():
    rng = random.Random(7)
    outcomes = {True: 0, False: 0}
    for case in range(CASES // 3):
        st = random_host(rng)
        req = floating(rng.randint(1, 6), rng.choice([256, 1024, 2048, 4096]))
        expected = ref_floating_fits(st, req)
        got = fit(st, req, None)
        assert isinstance(got, NUMAAssignment) == expected, (case, st, req, got)
        if expected:
            assert verify(st, req, got) is None
            assert sum(c.shared_vcpus for c in got.cells) == req.vcpus
        outcomes[expected] += 1
    assert min(outcomes.values()) > CASES // 30, outcomes
