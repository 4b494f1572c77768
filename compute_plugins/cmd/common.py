"""What several subcommands share: host selection, plugin loading, output.

Light to import (the command line's start-up, :mod:`compute_plugins.cmd.main`):
oslo.config, the plugins and host discovery are imported by the functions
that use them.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from typing import TYPE_CHECKING, Any

from compute_plugins import exception
from compute_plugins.util.text import printable, wrap_lines

if TYPE_CHECKING:
    from oslo_config import cfg

    from compute_plugins.host.model import HostInfo
    from compute_plugins.runtime.manager import PluginManager


def check_values(conf: cfg.ConfigOpts) -> None:
    """Read every registered option so a bad value fails now, by name.

    oslo.config converts values lazily; without this a typo in a config file
    would surface as a traceback in the middle of a periodic. A float that
    is not finite is refused too, whoever registered the option: ours are
    :class:`~compute_plugins.conf.FiniteFloatOpt` already, but oslo.config's
    ``FloatOpt`` (keystoneauth's ``[placement] timeout``, a third-party
    plugin's option) takes ``nan`` and ``inf``.
    """
    from oslo_config import cfg

    for name, _ in list(conf.items()):
        group = conf[name]
        if isinstance(group, cfg.ConfigOpts.GroupAttr):
            for opt_name in list(group):
                try:
                    value = getattr(group, opt_name)
                except cfg.ConfigSourceValueError as err:
                    raise exception.ConfigError(
                        "[%s] %s: %s" % (name, opt_name, _value_error(err))) from None
                if isinstance(value, float) and not math.isfinite(value):
                    raise exception.ConfigError(
                        "[%s] %s: Should be a finite number, got %r%s"
                        % (name, opt_name, str(value), _where(conf, name, opt_name)))


def _where(conf: cfg.ConfigOpts, group: str, option: str) -> str:
    """`` (in FILE)`` where the option's value came from, when known."""
    try:
        location = conf.get_location(option, group)
    except Exception:  # noqa: BLE001 - only a detail of the message
        return ""
    detail = getattr(location, "detail", None)
    return " (in %s)" % detail if detail else ""


def _value_error(err: cfg.ConfigSourceValueError) -> str:
    """oslo.config's "Value for option X from LocationInfo(..., detail='F')
    is not valid: RULE" as "RULE (in F)"."""
    text = str(err)
    rule = text.rpartition("is not valid: ")[2] or text
    found = re.search(r"detail='([^']*)'", text)
    return "%s (in %s)" % (rule, found.group(1)) if found else rule


def plugin_manager(conf: cfg.ConfigOpts) -> PluginManager:
    """Load the enabled plugins and validate every option they registered."""
    from compute_plugins.runtime.manager import PluginManager

    manager = PluginManager(conf)
    check_values(conf)
    return manager


def discover(conf: cfg.ConfigOpts, args: argparse.Namespace) -> HostInfo:
    """The host named by ``--host-snapshot``/``--libvirt-uri`` or the config."""
    from compute_plugins import host as host_discovery

    snapshot = args.host_snapshot or conf.libvirt.host_snapshot
    uri = args.libvirt_uri or conf.libvirt.connection_uri
    if snapshot:
        return host_discovery.discover_host(host_snapshot=snapshot)
    return host_discovery.discover_host(libvirt_uri=uri)


def report_degraded(manager: PluginManager) -> int:
    """Print one line per failed plugin to stderr; 1 when degraded, else 0."""
    for failure in manager.failures.values():
        error("plugin %s failed to %s: %s" % (failure.plugin, failure.stage,
                                              failure.reason),
              prefix="compute-plugins: host degraded: ")
    return 1 if manager.degraded else 0


def print_json(document: Any) -> None:
    """``document`` as indented JSON; encoded whole before anything is
    written, so a value that cannot be encoded never leaves half a document
    on stdout. Non-ASCII is escaped (``\\ud800`` included)."""
    text = json.dumps(document, indent=2, sort_keys=False)
    sys.stdout.write(text + "\n")


#: What Ctrl-C prints, whatever the command (exit :data:`EXIT_INTERRUPTED`).
INTERRUPTED = "compute-plugins: interrupted"
EXIT_INTERRUPTED = 130


def interrupted(detail: str = "") -> int:
    """Say on stderr, in one line, that the command was interrupted;
    returns 130 (128 + SIGINT, as a shell reports it)."""
    try:
        print(INTERRUPTED + (" (%s)" % detail if detail else ""), file=sys.stderr,
              flush=True)
    except (KeyboardInterrupt, OSError):
        pass
    return EXIT_INTERRUPTED


def error(*lines: str, prefix: str = "compute-plugins: error: ") -> None:
    """Print an error on stderr: ``prefix`` and the first of ``lines``, then
    the others; each line is :func:`~compute_plugins.util.text.printable`
    (a newline or a terminal escape in a user's value stays inside its
    line, escaped)."""
    for index, line in enumerate(lines):
        print((prefix if index == 0 else "") + printable(line), file=sys.stderr)


def say(text: str) -> None:
    """Print human output (``text`` output): lines wider than
    :data:`~compute_plugins.util.text.WIDTH` are wrapped, never cut."""
    print(wrap_lines(text))
