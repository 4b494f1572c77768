"""Pick the Placement a command talks to.

In order: ``--placement-url`` (a ``noauth2`` Placement, token ``admin``);
``[placement]`` keystoneauth options (``auth_type`` set: a real cloud;
only ``endpoint_override`` set: a ``noauth2`` Placement there); otherwise the
embedded Placement on SQLite (``[placement] embedded_connection`` or
``embedded_state_dir``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Optional

from oslo_config import cfg

from compute_plugins.placement import client as pclient
from compute_plugins.placement import embedded


@contextlib.contextmanager
def placement_client(
    conf: cfg.ConfigOpts, placement_url: Optional[str] = None
) -> Iterator[pclient.PlacementClient]:
    """Yield a :class:`PlacementClient`; an embedded Placement is closed on
    exit."""
    group = conf.placement
    if placement_url:
        yield pclient.PlacementClient.for_url(placement_url)
    elif group.auth_type:
        yield pclient.PlacementClient.from_conf(conf)
    elif group.endpoint_override:
        yield pclient.PlacementClient.for_url(group.endpoint_override)
    else:
        with embedded.EmbeddedPlacement(embedded.connection_for(conf)) as emb:
            yield emb.client()
