"""The host-state store (see :mod:`compute_plugins.hoststate.store`)."""

from compute_plugins.hoststate.errors import (
    AnswerTimeout,
    DecisionExists,
    DecisionNotFound,
    DecisionStatusConflict,
    GenerationConflict,
    HostStateError,
    ProviderConflict,
    SchemaVersionMismatch,
    StoreUnavailable,
)
from compute_plugins.hoststate.schema import SCHEMA_VERSION
from compute_plugins.hoststate.store import (
    ACTIVE,
    DecisionStatus,
    HostDecision,
    HostSnapshot,
    HostStateStore,
    PublishResult,
)

__all__ = ["ACTIVE", "AnswerTimeout", "DecisionExists", "DecisionNotFound",
           "DecisionStatus", "DecisionStatusConflict", "GenerationConflict",
           "HostDecision", "HostSnapshot", "HostStateError", "HostStateStore",
           "ProviderConflict", "PublishResult", "SCHEMA_VERSION",
           "SchemaVersionMismatch", "StoreUnavailable"]
