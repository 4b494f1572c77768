"""Calling a plugin: timing, logging and failure, in one place.

Every call the runtime makes into a plugin goes through :func:`invoke`: it
times the call (logged at debug, so a quiet service pays two clock reads at
most), lets through the exceptions the hook's contract defines (a
:class:`~compute_plugins.plugin.state.AssignmentConflict` from ``host_state``, the
request's validation error from ``parse_request``...) and turns anything
else the plugin raises into :class:`PluginFailed`, which names the plugin,
where it comes from (its entry point, or its class for a test instance) and
the hook. :meth:`~compute_plugins.runtime.PluginSet` methods turn that into
the reason their caller handles (a rejection of the host, a problem of the
request), so a plugin's bug never reaches the scheduler, the agent or nova
as an exception. A hook that returns what its contract does not allow is
the same failure (:func:`garbage`).
"""

from __future__ import annotations

import logging as std_logging
import time
from collections.abc import Callable
from typing import Optional, ParamSpec, TypeVar

from oslo_log import log as logging

LOG = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

#: What the plugin was doing, by hook, for messages ("failed while ...").
DOING = {
    "discover": "discovering the host",
    "provider_contributions": "contributing its providers",
    "parse_request": "parsing the request",
    "request_groups": "deriving its request groups",
    "host_state": "building its host state",
    "encode_state": "encoding its host state",
    "decode_state": "reading its host state",
    "fit": "fitting",
    "alternatives": "offering alternatives",
    "verify": "verifying the decision",
    "allocations": "building its allocation",
    "guest_config": "building the guest configuration",
    "describe": "describing its assignment",
    "utilization": "weighing the host",
    "free_devices_by_cell": "counting its free devices per host cell",
    "with_cell_devices": "ordering its cells by free devices",
}

#: Hooks whose failures the manager reports (once per failure, not once
#: per periodic): not logged here.
REPORTED_BY_CALLER = frozenset({"discover", "provider_contributions"})


class PluginFailed(Exception):
    """A plugin hook raised, or returned what its contract does not allow.

    Raised by :func:`invoke` and :func:`garbage` inside the runtime only:
    every :class:`~compute_plugins.runtime.PluginSet` method turns it into
    its caller's reason.

    :param plugin: the plugin's name.
    :param origin: ``entry point <module:Class>`` or ``class <module:Class>``.
    :param hook: the hook called (``fit``, ``host_state``...).
    :param detail: what went wrong: ``ValueError: ...`` for an exception,
        ``returned a str, not ...`` for a wrong value.
    :param error: the exception the plugin raised (None: a wrong value).
    """

    def __init__(self, plugin: str, origin: str, hook: str, detail: str,
                 error: Optional[BaseException] = None) -> None:
        self.plugin = plugin
        self.origin = origin
        self.hook = hook
        self.detail = detail
        self.error = error
        super().__init__("resource plugin %s (%s): %s: %s"
                         % (plugin, origin, hook, detail))

    def reason(self, host: str = "") -> str:
        """One sentence for a rejection: what the plugin was doing, where,
        what went wrong and where the plugin comes from."""
        where = " on host %s" % host if host else ""
        if self.error is None:
            return "the plugin's %s%s %s (%s)" % (self.hook, where, self.detail,
                                                  self.origin)
        return "the plugin failed while %s%s: %s (%s)" % (
            DOING.get(self.hook, self.hook), where, self.detail, self.origin)


def _text(err: BaseException) -> str:
    """``Type: first line of the message``."""
    lines = str(err).splitlines()
    return "%s%s" % (type(err).__name__, ": " + lines[0] if lines and lines[0] else "")


def invoke(plugin: str, origin: Callable[[], str], hook: str,
           allowed: tuple[type[BaseException], ...],
           fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)``: one hook of ``plugin``, timed.

    :param origin: says where the plugin comes from (called on failure only).
    :param allowed: exceptions the hook's contract defines: raised as they are.
    :raises PluginFailed: for any other exception (logged with the
        traceback at debug; but see :data:`REPORTED_BY_CALLER`).
    """
    debug = LOG.isEnabledFor(std_logging.DEBUG)
    start = time.perf_counter() if debug else 0.0
    try:
        result = fn(*args, **kwargs)
    except allowed:
        raise
    except Exception as err:  # noqa: BLE001 - a plugin's bug: isolated
        failed = PluginFailed(plugin, origin(), hook, _text(err), err)
        if hook not in REPORTED_BY_CALLER:
            LOG.error("%s", failed)
            LOG.debug("resource plugin %s: %s failed", plugin, hook,
                      exc_info=True)
        raise failed from err
    if debug:
        LOG.debug("resource plugin %s: %s took %.3f ms", plugin, hook,
                  (time.perf_counter() - start) * 1000)
    return result


def garbage(plugin: str, origin: str, hook: str, value: object,
            expected: str, *, show: bool = False) -> PluginFailed:
    """The failure of a hook that returned ``value`` instead of ``expected``
    (logged).

    :param show: say the value itself (a number out of range), not its type.
    """
    failed = PluginFailed(plugin, origin, hook, "returned %s, not %s"
                          % (repr(value) if show else _a(value), expected))
    LOG.error("%s", failed)
    return failed


def _a(value: object) -> str:
    name = type(value).__name__
    return "%s %s" % ("an" if name[:1].lower() in "aeiou" else "a", name)
