"""Guest options the NUMA plugin reads beside its fit: nova's
``hw:locked_memory`` and guest CPU topology.

Neither changes where the guest goes; both change its domain XML
(:mod:`resources.numa.guest`) and both are refused, as nova's API refuses
them at boot, when they contradict each other:

- ``hw:locked_memory`` / image ``hw_locked_memory`` (nova's
  ``hardware.get_locked_memory_constraint``): locked guest memory
  (``<memoryBacking><locked/>``) needs ``hw:mem_page_size`` (flavor or
  image: nova's ``LockMemoryForbidden``), and flavor and image may not
  disagree (``FlavorImageLockedMemoryConflict``);
- ``hw:cpu_sockets|cores|threads`` and ``hw:cpu_max_sockets|cores|threads``
  with their image twins ``hw_cpu_*`` (nova's
  ``get_cpu_topology_constraints`` and ``get_best_cpu_topology``): the
  guest's ``<cpu><topology sockets cores threads>``. The image may only
  lower the flavor's limits, its preferred topology must be within them,
  and the limits must allow the flavor's vCPUs (nova's
  ``ImageVCPULimitsRangeExceeded``, ``ImageVCPUTopologyRangeExceeded``,
  ``ImageVCPULimitsRangeImpossible``, with nova's messages). The last one
  nova's driver raises at spawn; here it is a problem of the request, so
  no host is chosen for a guest that cannot boot.

Kept apart from :func:`resources.numa.request.parse` (one function per
concern); the plugin's ``parse_request`` applies :func:`parse` after it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Optional

from compute_plugins.request import rules
from compute_plugins.request.inputs import RequestInput
from resources.numa.request import NUMARequest

#: nova's default limit per dimension (``get_cpu_topology_constraints``).
TOPOLOGY_MAX = 65536

#: ``(sockets, cores, threads)``.
Topology = tuple[int, int, int]

_DIMENSIONS = ("sockets", "cores", "threads")


def locked_memory(ri: RequestInput) -> bool:
    """nova's ``get_locked_memory_constraint`` (less memory encryption,
    which no plugin models): True when the flavor or image asks locked
    memory; problems on ``ri`` where nova raises."""
    flavor_value, image_value = ri.flavor_image("locked_memory")
    flavor_locked = rules.check_bool(ri, "hw:locked_memory", flavor_value)
    image_locked = rules.check_bool(ri, "hw_locked_memory", image_value,
                                    source="image")
    if flavor_value is not None:
        if flavor_locked is None:
            return False
        if image_locked is not None and image_locked != flavor_locked:
            ri.report("hw_locked_memory", image_value, "locked_memory value in "
                      "image (%s) and flavor (%s) conflict. A consistent value "
                      "is expected if both specified." % (image_locked,
                                                           flavor_locked),
                      source="image")
            return False
        locked = flavor_locked
    else:
        locked = bool(image_locked)
    page_flavor, page_image = ri.flavor_image("mem_page_size")
    if locked and not (page_flavor or page_image):
        key, source = (("hw:locked_memory", "flavor") if flavor_value is not None
                       else ("hw_locked_memory", "image"))
        ri.report(key, flavor_value if source == "flavor" else image_value,
                  "locked_memory value in image or flavor is forbidden when "
                  "mem_page_size is not set.", source)
        return False
    return locked


def _topology_values(ri: RequestInput, prefix: str
                     ) -> Optional[tuple[Topology, Topology]]:
    """``(flavor's, image's)`` values of ``hw:cpu_<prefix><dimension>``
    (0: unset, as in nova); None when one is not a valid number."""
    flavor, image, ok = [], [], True
    for dimension in _DIMENSIONS:
        key = "cpu_%s%s" % (prefix, dimension)
        flavor_value, image_value = ri.flavor_image(key)
        number = rules.check_int(ri, "hw:" + key, flavor_value, minimum=1,
                                 maximum=TOPOLOGY_MAX)
        image_number = rules.check_int(ri, "hw_" + key, image_value, minimum=0,
                                       maximum=TOPOLOGY_MAX, source="image")
        ok = ok and (flavor_value is None or number is not None) and (
            image_value is None or image_number is not None)
        flavor.append(number or 0)
        image.append(image_number or 0)
    if not ok:
        return None
    return ((flavor[0], flavor[1], flavor[2]), (image[0], image[1], image[2]))


def _text(values: Topology) -> str:
    return "sockets=%d, cores=%d, threads=%d" % values


def _report(ri: RequestInput, prefix: str, dimensions: Sequence[int],
            rule: str, image_first: bool = True) -> None:
    """Report ``rule`` on the key of the first of ``dimensions`` (indexes
    into :data:`_DIMENSIONS`) that the image sets (``image_first``) or else
    the flavor sets: the key, source and value the user wrote."""
    for source in (("image", "flavor") if image_first else ("flavor", "image")):
        for index in dimensions:
            key = "cpu_%s%s" % (prefix, _DIMENSIONS[index])
            flavor_value, image_value = ri.flavor_image(key)
            value = image_value if source == "image" else flavor_value
            if value:
                ri.report(("hw_" if source == "image" else "hw:") + key, value,
                          rule, source)
                return
    ri.report("hw:cpu_%s%s" % (prefix, _DIMENSIONS[0]), None, rule)


def topology_constraints(ri: RequestInput
                         ) -> Optional[tuple[Topology, Topology]]:
    """nova's ``get_cpu_topology_constraints``: ``(preferred, maximum)``;
    None (and problems on ``ri``) where nova raises."""
    limits = _topology_values(ri, "max_")
    preferred = _topology_values(ri, "")
    if limits is None or preferred is None:
        return None
    flavor_max, image_max = limits
    exceeded = [d for d, (f, i) in enumerate(zip(flavor_max, image_max, strict=True))
                if f and i > f]
    if exceeded:
        _report(ri, "max_", exceeded, "Image vCPU topology limits (%s) exceeds "
                "the limits of the flavor (%s)" % (_text(image_max), _text(flavor_max)))
        return None
    maximum = tuple(i or f or TOPOLOGY_MAX
                    for f, i in zip(flavor_max, image_max, strict=True))
    flavor_pref, image_pref = preferred
    if any(f > m for f, m in zip(flavor_pref, maximum, strict=True)):
        flavor_pref = (0, 0, 0)
    exceeded = [d for d, (i, m) in enumerate(zip(image_pref, maximum, strict=True))
                if i > m]
    if exceeded:
        _report(ri, "", exceeded, "Image vCPU topology (%s) exceeds the limits "
                "of the flavor or image (%s)"
                % (_text(image_pref), _text(maximum)))  # type: ignore[arg-type]
        return None
    wanted = image_pref if any(image_pref) else flavor_pref
    return wanted, (maximum[0], maximum[1], maximum[2])


def _divisors(number: int, limit: int) -> list[int]:
    """The divisors of ``number`` up to ``limit``, ascending."""
    small, large = [], []
    factor = 1
    while factor * factor <= number:
        if number % factor == 0:
            small.append(factor)
            if factor != number // factor:
                large.append(number // factor)
        factor += 1
    return [d for d in small + large[::-1] if d <= limit]


def best_topology(vcpus: int, preferred: Topology, maximum: Topology
                  ) -> Optional[Topology]:
    """nova's ``get_best_cpu_topology`` (threads allowed, as nova's
    libvirt driver asks): of every ``sockets * cores * threads == vcpus``
    within ``maximum``, the one matching most of ``preferred``'s set
    values, then the most sockets * cores, then the most sockets (nova's
    sort, whose keys are unique for one vCPU count). None: no topology fits.
    Over the divisors of ``vcpus`` only, not nova's cube of ranges."""
    best: Optional[tuple[tuple[int, int, int], Topology]] = None
    max_sockets, max_cores, max_threads = maximum
    for sockets in _divisors(vcpus, max_sockets):
        for cores in _divisors(vcpus // sockets, max_cores):
            threads = vcpus // (sockets * cores)
            if threads > max_threads:
                continue
            candidate = (sockets, cores, threads)
            score = sum(1 for want, got in zip(preferred, candidate, strict=True)
                        if want and want == got)
            key = (score, sockets * cores, sockets)
            if best is None or key > best[0]:
                best = (key, candidate)
    return best[1] if best else None


def cpu_topology(ri: RequestInput, vcpus: int) -> Optional[tuple[int, ...]]:
    """The guest's ``(sockets, cores, threads)``; ``()`` when nothing
    constrains it (the guest XML then gives nova's default, a socket per
    vCPU: a request recorded before this was read reads the same); None
    (and a problem on ``ri``) when the constraints are invalid or no
    topology fits."""
    constraints = topology_constraints(ri)
    if constraints is None:
        return None
    preferred, maximum = constraints
    if not any(preferred) and maximum == (TOPOLOGY_MAX,) * 3 \
            and vcpus <= TOPOLOGY_MAX:
        return ()
    best = best_topology(vcpus, preferred, maximum)
    if best is None:
        limits = tuple(min(vcpus, m) for m in maximum)
        # NOTE: the image's limit of a dimension wins over the flavor's
        _report(ri, "max_", range(3), "Requested vCPU limits %d:%d:%d are "
                "impossible to satisfy for vcpus count %d" % (*limits, vcpus))
    return best


def parse(ri: RequestInput, request: NUMARequest) -> NUMARequest:
    """``request`` with the guest options of ``ri`` (problems on ``ri``)."""
    topology = cpu_topology(ri, request.vcpus) or ()
    return dataclasses.replace(request, locked_memory=locked_memory(ri),
                               cpu_topology=topology)
