"""Pick the Placement a command talks to.

In order: ``--placement-url`` (a ``noauth2`` Placement, token ``admin``,
or on 127.0.0.1 ``placement serve``'s token from the state directory);
``[placement]`` keystoneauth options (``auth_type`` set: a real cloud;
only ``endpoint_override`` set: a ``noauth2`` Placement there, the same
tokens); otherwise the
embedded Placement on SQLite (``[placement] embedded_connection`` or
``embedded_state_dir``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Optional

from oslo_config import cfg

from compute_plugins import exception
from compute_plugins.placement import client as pclient
from compute_plugins.placement import embedded
from compute_plugins.placement import token as ptoken
from compute_plugins.util import urls


@contextlib.contextmanager
def placement_client(
    conf: cfg.ConfigOpts, placement_url: Optional[str] = None
) -> Iterator[pclient.PlacementClient]:
    """Yield a :class:`PlacementClient`; an embedded Placement is closed on
    exit."""
    group = conf.placement
    if placement_url:
        yield pclient.PlacementClient.for_url(
            placement_url, token=_token(conf, placement_url))
    elif group.auth_type:
        yield pclient.PlacementClient.from_conf(conf)
    elif group.endpoint_override:
        try:
            urls.check_http_url(group.endpoint_override)
        except ValueError as err:
            raise exception.ConfigError(
                "[placement] endpoint_override: %s" % err) from None
        yield pclient.PlacementClient.for_url(
            group.endpoint_override,
            token=_token(conf, group.endpoint_override))
    else:
        service = embedded.EmbeddedPlacement(embedded.connection_for(conf))
        try:
            service.start()
        except embedded.EmbeddedDatabaseError as err:
            raise exception.ConfigError("%s: %s" % (embedded_option(conf),
                                                    err)) from err
        with service:
            yield service.client()


def state_dir(conf: cfg.ConfigOpts) -> str:
    """The embedded Placement's state directory: its database's and its
    token's (``[placement] embedded_state_dir`` or the default)."""
    return str(conf.placement.embedded_state_dir or embedded.default_state_dir())


def _token(conf: cfg.ConfigOpts, url: str) -> str:
    """The token for the Placement at ``url`` (see
    :func:`compute_plugins.placement.token.for_url`)."""
    return ptoken.for_url(url, state_dir(conf))


def embedded_option(conf: cfg.ConfigOpts) -> str:
    """Which option chose the embedded database, with its value."""
    group = conf.placement
    if group.embedded_connection:
        return "[placement] embedded_connection = %s" % urls.masked(
            group.embedded_connection)
    if group.embedded_state_dir:
        return "[placement] embedded_state_dir = %s" % (
            group.embedded_state_dir)
    return ("the default state directory %s ([placement] embedded_state_dir "
            "unset)" % embedded.default_state_dir())
