"""``[placement]``: how to reach Placement, with nova's option names.

The keystoneauth1 session, auth and adapter options are registered with
keystoneauth's own loading helpers (as ``nova/conf/placement.py`` does), so
any cloud's auth works. When neither an auth type nor an endpoint is set,
the command line runs an embedded Placement on SQLite instead; the
``embedded_*`` options say where its database lives.
"""

from __future__ import annotations

from typing import cast

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg, types

from compute_plugins.conf import database_url_opt, register_group_opts

GROUP = cfg.OptGroup(
    "placement",
    title="Placement service options",
    help="How to reach the Placement API. With no auth_type and no "
    "endpoint_override, an embedded Placement on SQLite is used.",
)

SERVICE_TYPE = "placement"

#: Version options of the adapter: the code knows which microversions it
#: needs, the operator does not choose them (nova removes them too).
_ADAPTER_VERSION_OPTS = ("version", "min_version", "max_version")

EMBEDDED_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "embedded_state_dir",
        help="Directory of the embedded Placement's SQLite database "
        "(``placement.sqlite``). Default: ``$XDG_STATE_HOME/compute-plugins`` "
        "or ``~/.local/state/compute-plugins``.",
    ),
    database_url_opt(
        "embedded_connection",
        help="SQLAlchemy URL of the embedded Placement's database; overrides "
        "``embedded_state_dir``. ``sqlite://`` keeps it in memory.",
    ),
]


def _adapter_opts() -> list[cfg.Opt]:
    # NOTE: keystoneauth's adapter loader still reads the version options
    # removed here; _DUMMY_OPTS (which no value can set) keep them None.
    opts = [
        o
        for o in ks_loading.get_adapter_conf_options(include_deprecated=False)
        if o.dest not in _ADAPTER_VERSION_OPTS
    ]
    cfg.set_defaults(
        opts, valid_interfaces=["internal", "public"], service_type=SERVICE_TYPE
    )
    return opts


def _ignored(value: str) -> None:
    return None


# NOTE: module-level objects, so registering twice is a no-op as for every
# other option (a new Opt with an equal name would be a duplicate).
# oslo.config accepts any callable as ``type`` but annotates it as a
# ConfigType; it casts its own plain functions the same way (cfg.ConfigOpt).
_DUMMY_OPTS = [
    cfg.Opt(name, type=cast(types.ConfigType, _ignored)) for name in _ADAPTER_VERSION_OPTS
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    register_group_opts(conf, GROUP, EMBEDDED_OPTS)
    ks_loading.register_session_conf_options(conf, GROUP.name)
    ks_loading.register_auth_conf_options(conf, GROUP.name)
    conf.register_opts(_adapter_opts(), group=GROUP.name)
    conf.register_opts(_DUMMY_OPTS, group=GROUP.name)


def list_opts() -> list[tuple[cfg.OptGroup | str, list[cfg.Opt]]]:
    return [
        (
            GROUP,
            ks_loading.get_session_conf_options()
            + ks_loading.get_auth_common_conf_options()
            + ks_loading.get_auth_plugin_conf_options("password")
            + ks_loading.get_auth_plugin_conf_options("v3password")
            + _adapter_opts()
            + EMBEDDED_OPTS,
        )
    ]
