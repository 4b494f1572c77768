"""The report client: a provider cache that sends Placement only changes.

:class:`ReportClient` is the compute agent's side of nova's
``SchedulerReportClient``, reduced to what the periodic needs and with a
stricter cache:

* bootstrap: one ``GET /resource_providers?in_tree=<root>`` plus the
  inventory, traits and aggregates of each provider found;
* steady state: **zero** calls. The tree handed to ``update_tree`` is built
  from the cache; when the result equals the cache nothing is sent (nova 34
  makes a GET per provider and per consumer every periodic);
* refresh (every ``[compute] resource_provider_association_refresh``
  seconds, 0 = never): one ``GET ?in_tree=``, then only the providers whose
  generation moved are re-read;
* writes: providers created top-down and deleted bottom-up; inventories,
  traits and aggregates written only when they differ from the cache; custom
  traits and resource classes created once;
* what operators set is kept: traits and aggregates are merged three ways
  (what Placement has now, plus what the plugins added, minus what they
  removed); an inventory record without ``reserved`` keeps Placement's
  (an operator's, e.g. draining a device; 0 for a new inventory), a record
  with ``reserved`` (set by a plugin's configuration) wins, as in nova
  (:func:`normalize_inventory`);
* a provider whose parent changed is moved with ``PUT
  /resource_providers/{uuid}`` (microversion 1.37; its allocations stay);
* a node Placement already knows under another uuid (registered by nova)
  is found by name and its provider adopted as the root;
* a ``placement.concurrent_update`` conflict re-reads that one provider and
  retries, bounded and jittered; a provider the plugins removed that has
  allocations (``placement.resource_provider.inuse``) or a class removed
  while allocated (``placement.inventory.inuse``) is kept with ``reserved =
  total`` (one WARNING) and tried again after each read of the tree, the
  rest of the sync goes on; any other Placement failure or unexpected error
  clears the cache and fails the periodic (:class:`PeriodicResult`), logged
  as one line;
* reshape: ``update_tree`` raising ``ReshapeNeeded`` is retried with the
  tree's allocations, and the result goes through ``POST /reshaper``.

One module per idea:

* :mod:`.records`: Placement's record shapes and the pure rules on them
  (defaults and ``reserved``, three-way merges, parents first);
* :mod:`.cache`: the provider cache, bootstrap, refresh and adoption;
* :mod:`.writers`: one write per aspect of a provider, with the bounded
  conflict retries;
* :mod:`.hold`: what is kept, reserved, while consumers use it, and the
  inventory each provider should have;
* :mod:`.reshape`: ``POST /reshaper`` and its retries;
* :mod:`.periodic`: the periodic's result and error policy;
* :mod:`.client`: :class:`ReportClient`, the order of a periodic and of a
  write pass.

Every piece of state is the client's own (nothing process-wide).
"""

from compute_plugins.placement.report.client import ReportClient
from compute_plugins.placement.report.periodic import PeriodicResult
from compute_plugins.placement.report.records import (
    INVENTORY_DEFAULTS,
    merge_set,
    normalize_inventory,
)
from compute_plugins.placement.report.reshape import UpdateTree
from compute_plugins.placement.report.writers import (
    MAX_CONFLICT_RETRIES,
    REPARENT_MICROVERSION,
    RETRY_BASE_DELAY,
)

#: The name the three-way merge had before the split (tests use it).
_merge_set = merge_set

__all__ = [
    "INVENTORY_DEFAULTS",
    "MAX_CONFLICT_RETRIES",
    "REPARENT_MICROVERSION",
    "RETRY_BASE_DELAY",
    "PeriodicResult",
    "ReportClient",
    "UpdateTree",
    "merge_set",
    "normalize_inventory",
]
