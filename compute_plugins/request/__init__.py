"""The request model: inputs, groups, typed per-plugin requests, errors.

:mod:`compute_plugins.request.spec` builds a
:class:`~compute_plugins.request.spec.RequestSpec` from these parts.
"""

from compute_plugins.request.errors import (
    Problem,
    RequestFormatError,
    RequestInputError,
    RequestValidationError,
)
from compute_plugins.request.groups import (
    Decision,
    PluginAssignment,
    PluginRequest,
    RequestGroup,
)
from compute_plugins.request.inputs import Flavor, Port, RequestInput
from compute_plugins.request.types import FrozenMap

__all__ = ["Decision", "Flavor", "FrozenMap", "PluginAssignment",
           "PluginRequest", "Port", "Problem", "RequestFormatError",
           "RequestGroup", "RequestInput", "RequestInputError",
           "RequestValidationError"]
