"""Checks on Placement's answer that the query itself cannot express.

:func:`compute_plugins.scheduler.query.derive` asks Placement with
``group_policy=none`` (unless the user set one), because ``isolate`` keeps
*every* numbered group apart: two ports could then never share a PF, nor a
device its guest node's provider. What must stay apart is only the guest's
NUMA nodes (and the parts of a split floating guest): each alternative names
them in ``distinct``, and :func:`accept` drops the allocation requests that
put two of them on one provider.

For ``legacy`` NUMA affinity an alternative asks a device without
``same_subtree`` (``numa_free``): nova's ``legacy`` accepts a device the host
reports without NUMA node, not one on another node. With the provider
summaries (Placement sends them with the answer), :func:`accept` drops the
requests whose device sits under a NUMA node provider (trait
``HW_NUMA_ROOT``): those were the affine alternatives' job.

The scheduler and every test that runs queries call :func:`accept` on each
allocation request (:func:`accepted` filters a whole answer).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

import os_traits

if TYPE_CHECKING:
    from compute_plugins.scheduler.query import AllocationCandidatesQuery


def accept(alternative: AllocationCandidatesQuery, allocation_request: Mapping[str, Any],
           provider_summaries: Optional[Mapping[str, Any]] = None) -> bool:
    """True when ``allocation_request`` (one item of Placement's
    ``allocation_requests``) honours what ``alternative`` could not ask.

    :param provider_summaries: Placement's ``provider_summaries`` of the same
        answer; without them the ``numa_free`` check is skipped.
    """
    mappings = allocation_request.get("mappings") or {}
    return (_apart(alternative.distinct, mappings)
            and _numa_free(alternative.numa_free, mappings, provider_summaries))


def accepted(alternative: AllocationCandidatesQuery,
             answer: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The allocation requests of a ``GET /allocation_candidates`` answer
    that :func:`accept` keeps."""
    summaries = answer.get("provider_summaries")
    return [req for req in answer.get("allocation_requests", ())
            if accept(alternative, req, summaries)]


def _apart(suffixes: tuple[str, ...], mappings: Mapping[str, Any]) -> bool:
    """No provider serves two of ``suffixes``."""
    used: set[str] = set()
    for suffix in suffixes:
        providers = set(mappings.get(suffix, ()))
        if providers & used:
            return False
        used |= providers
    return True


def _numa_free(suffixes: tuple[str, ...], mappings: Mapping[str, Any],
               summaries: Optional[Mapping[str, Any]]) -> bool:
    """No provider of ``suffixes`` has a NUMA node provider above it."""
    if not suffixes or summaries is None:
        return True
    return not any(_under_numa_node(rp, summaries)
                   for suffix in suffixes for rp in mappings.get(suffix, ()))


def _under_numa_node(rp: str, summaries: Mapping[str, Any]) -> bool:
    seen: set[str] = set()
    current = summaries.get(rp, {}).get("parent_provider_uuid")
    while current and current not in seen:
        seen.add(current)
        summary = summaries.get(current, {})
        if os_traits.HW_NUMA_ROOT in summary.get("traits", ()):
            return True
        current = summary.get("parent_provider_uuid")
    return False
