"""Watching the plugin under test: the calls into it and what it raised.

The framework contains a plugin's exception (the host or request is
refused with a reason naming the plugin), so the kit cannot see it in the
framework's answers alone: :class:`Recorder` wraps the plugin's hooks,
counts the calls and keeps every exception the hook's contract does not
let it raise, then lets the exception go on to the framework as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from compute_plugins.testing import _framework as fw

__all__ = ["Recorder"]


class Recorder:
    """Counts the calls into the plugin under test and keeps what it raised
    on its own: an exception its hook's contract does not let it raise
    (:data:`~compute_plugins.testing._framework.CONTRACT_ERRORS`) is a bug,
    even where the framework contains it. The exception still goes on to
    the framework."""

    #: The hooks watched (those the kit makes the framework call).
    HOOKS = ("sample_requests", "discover", "parse_request", "request_groups",
             "host_state", "fit", "alternatives", "verify", "guest_config")

    def __init__(self) -> None:
        self.calls = 0
        #: (hook, "Type: message") -> how many times.
        self.raised: dict[tuple[str, str], int] = {}
        self._paused = 0

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Nothing is recorded inside (the kit's own injected failures)."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def _record(self, hook: str, err: Exception) -> None:
        if self._paused or isinstance(err, fw.CONTRACT_ERRORS.get(hook, ())):
            return
        key = (hook, "%s: %s" % (type(err).__name__, err))
        self.raised[key] = self.raised.get(key, 0) + 1

    def _iterate(self, hook: str, items: Iterable[Any]) -> Iterator[Any]:
        try:
            yield from items
        except Exception as err:
            self._record(hook, err)
            raise

    def _wrap(self, hook: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def watched(*args: Any, **kwargs: Any) -> Any:
            if not self._paused:
                self.calls += 1
            try:
                result = method(*args, **kwargs)
            except Exception as err:
                self._record(hook, err)
                raise
            return self._iterate(hook, result) if hook == "alternatives" else result
        return watched

    def install(self, plugin: fw.AnyPlugin) -> dict[str, Any]:
        """Watch ``plugin``'s hooks; returns what :meth:`uninstall` needs."""
        saved = {hook: plugin.__dict__[hook] for hook in self.HOOKS
                 if hook in plugin.__dict__}
        for hook in self.HOOKS:
            setattr(plugin, hook, self._wrap(hook, getattr(plugin, hook)))
        return saved

    def uninstall(self, plugin: fw.AnyPlugin, saved: Mapping[str, Any]) -> None:
        """Undo :meth:`install`."""
        for hook in self.HOOKS:
            if hook in saved:
                setattr(plugin, hook, saved[hook])
            else:
                delattr(plugin, hook)
