"""Objects that must start afresh in a forked child.

A process forked while it holds a store (``placement serve --workers``,
a benchmark's worker processes) inherits its parent's sockets and the
objects of threads that do not exist in the child. Whatever holds such a
thing registers itself with :func:`renew_in_child`; in a forked child each
one's ``_forked()`` runs once, before anything else uses it, and drops or
sets aside what was the parent's.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol


class ForkAware(Protocol):
    """An object that knows what of its parent's to drop in a forked child."""

    def _forked(self) -> None: ...


#: Every registered object of this process, held weakly (registering keeps
#: nothing alive).
_REGISTERED: weakref.WeakSet[ForkAware] = weakref.WeakSet()


def renew_in_child(obj: ForkAware) -> None:
    """Call ``obj._forked()`` in every child this process forks from now on."""
    _REGISTERED.add(obj)


def _after_fork_in_child() -> None:
    for obj in list(_REGISTERED):
        obj._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)
