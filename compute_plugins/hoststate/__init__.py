"""The channel between schedulers and compute agents: host publication and
the decision protocol, over a swappable transport.

- :mod:`.records`: the values it carries (a host as published, a decision);
- :mod:`.transport`: what the scheduler and the agent ask of a transport;
- :mod:`.protocol`: the decision protocol's transition table and what each
  side does on each status;
- :mod:`.store`: the SQL transport (:mod:`.hosts`, :mod:`.decisions` on
  one :mod:`.database`).
"""

from compute_plugins.hoststate.errors import (
    AgentLeaseHeld,
    AnswerTimeout,
    DecisionExists,
    DecisionNotFound,
    DecisionStatusConflict,
    Fenced,
    GenerationConflict,
    HostDown,
    HostStateError,
    ProviderConflict,
    SchemaVersionMismatch,
    StoreCorrupt,
    StoreUnavailable,
)
from compute_plugins.hoststate.records import (
    ACTIVE,
    AgentLease,
    DecisionStatus,
    HostDecision,
    HostDisabled,
    HostSnapshot,
    HostStatus,
    PublishResult,
)
from compute_plugins.hoststate.schema import SCHEMA_VERSION
from compute_plugins.hoststate.store import HostStateStore
from compute_plugins.hoststate.transport import (
    DecisionQueue,
    HostPublication,
    HostStateTransport,
)

__all__ = ["ACTIVE", "AgentLease", "AgentLeaseHeld", "AnswerTimeout", "DecisionExists",
           "DecisionNotFound",
           "DecisionQueue", "DecisionStatus", "DecisionStatusConflict",
           "Fenced", "GenerationConflict", "HostDecision", "HostDisabled", "HostDown",
           "HostPublication", "HostSnapshot",
           "HostStateError", "HostStateStore", "HostStateTransport", "HostStatus",
           "ProviderConflict", "PublishResult", "SCHEMA_VERSION",
           "SchemaVersionMismatch", "StoreCorrupt", "StoreUnavailable"]
