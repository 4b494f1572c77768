"""oslo.policy's checks in the embedded Placement, without inspecting each
check's signature on every request.

Every Placement request is authorised (``context.can``: oslo.policy's
``Enforcer.enforce``), and oslo.policy calls each check of the rule
through ``_checks._check``, which asks ``inspect.getfullargspec(rule.
__call__)`` every time to learn whether the check takes the rule's name:
2,100 inspections in 300 ``PUT /allocations`` (7 a request, 5% of the
embedded Placement's CPU under cProfile). A check's ``__call__`` is a
method of its class; what it takes is the same on every call. Here the
inspection is answered once per function (:class:`ArgspecOnce`), as
``inspect`` answers it; anything that is not a plain method (a callable
object, a builtin) is inspected as before.

Only on the oslo.policy releases whose ``_check`` was read
(:data:`AUDITED_RELEASES`); elsewhere a warning says so and oslo.policy
runs as shipped. Applied by the embedded Placement only.
"""

from __future__ import annotations

import inspect
import types
from importlib import metadata
from typing import Any, Optional

from oslo_log import log as logging

from compute_plugins.placement.aliases import ModuleStandIn

LOG = logging.getLogger(__name__)

#: oslo.policy releases whose ``_checks._check`` was read (its one use of
#: ``inspect``: ``getfullargspec(rule.__call__)``).
AUDITED_RELEASES = frozenset({"6.0.1"})

#: Functions whose argspec is remembered at most (checks are a few dozen
#: classes; the memo starts again when full).
MAX_FUNCTIONS = 1024


class ArgspecOnce(ModuleStandIn):
    """``inspect`` as ``oslo_policy._checks`` sees it, but with
    ``getfullargspec`` of a bound method remembered per function.

    ``getfullargspec`` of a bound method lists its ``self`` (it does not
    skip the bound argument): its answer is the function's, whichever
    object it is bound to. Every other attribute is ``inspect``'s own.
    """

    def __init__(self, module: Any = inspect) -> None:
        super().__init__(module)
        self._specs: dict[Any, Any] = {}

    def getfullargspec(self, func: Any) -> Any:
        """``inspect.getfullargspec(func)``, once per method's function."""
        function = getattr(func, "__func__", None)
        if not isinstance(func, types.MethodType) or not isinstance(
                function, types.FunctionType):
            return self._module.getfullargspec(func)
        spec = self._specs.get(function)
        if spec is None:
            spec = self._module.getfullargspec(func)
            with self._lock:
                if len(self._specs) >= MAX_FUNCTIONS:
                    self._specs.clear()
                self._specs[function] = spec
        return spec


def _checks() -> Any:
    """``oslo_policy._checks`` (its ``inspect`` is not exported: typed Any)."""
    import importlib

    return importlib.import_module("oslo_policy._checks")


def _release() -> str:
    try:
        return metadata.version("oslo.policy")
    except metadata.PackageNotFoundError:
        return "unknown"


def problems(release: Optional[str] = None) -> list[str]:
    """Why the checks' signatures cannot be remembered here (none: they can)."""
    release = _release() if release is None else release
    if release not in AUDITED_RELEASES:
        return ["oslo.policy %s is not a release whose checks were read (%s)"
                % (release, ", ".join(sorted(AUDITED_RELEASES)))]
    checks = _checks()
    code = getattr(getattr(checks, "_check", None), "__code__", None)
    if code is None or "getfullargspec" not in code.co_names:
        return ["oslo_policy._checks._check does not call inspect.getfullargspec"]
    if checks.inspect is not inspect and not isinstance(checks.inspect, ArgspecOnce):
        return ["oslo_policy._checks.inspect is not inspect"]
    return []


def argspecs_once() -> bool:
    """Make oslo.policy inspect each check's ``__call__`` once
    (:class:`ArgspecOnce`); idempotent. Where that was not checked
    (:func:`problems`) it logs a warning, changes nothing and returns
    False."""
    checks = _checks()
    if isinstance(checks.inspect, ArgspecOnce):
        return True
    found = problems()
    if found:
        LOG.warning("oslo.policy inspects its checks on every request (not "
                    "remembered): %s", "; ".join(found))
        return False
    checks.inspect = ArgspecOnce(inspect)
    return True


def restore() -> None:
    """oslo.policy as shipped again."""
    checks = _checks()
    if isinstance(checks.inspect, ArgspecOnce):
        checks.inspect = inspect


__all__ = ["AUDITED_RELEASES", "ArgspecOnce", "argspecs_once", "problems", "restore"]
