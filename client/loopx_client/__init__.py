"""loopx-client: the runtime's side of LoopX Recovery Audit.

- :class:`Journal`: a durable local turn journal (the contract's v2 records, fsynced before a write
  returns), with :meth:`Journal.effect` for dispatch-before-effect.
- :class:`Gate`: the LoopX API over HTTP: ship a journal, ask the recovery gate, claim turns (fencing),
  report recoveries. Every refusal is a typed error (:mod:`loopx_client.errors`).
"""

from .canonical import canonical_bytes, digest
from .errors import (
    ApiError,
    Conflict,
    EffectFailed,
    Fenced,
    FencingRequired,
    JournalClosed,
    JournalCorrupt,
    JournalError,
    JournalMismatch,
    LoopxError,
    LsnConflict,
    OffsetMismatch,
    RecordNotVerbatim,
    RecordRefused,
    ShipDiverged,
    TransportError,
    UnsafeRedispatch,
)
from .gate import Claim, Decision, Gate, RecoveryAudit, Shippable, ShipResult
from .journal import DEFAULT_PHASES, Effect, Entry, Journal

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_PHASES",
    "ApiError",
    "Claim",
    "Conflict",
    "Decision",
    "Effect",
    "EffectFailed",
    "Entry",
    "Fenced",
    "FencingRequired",
    "Gate",
    "Journal",
    "JournalClosed",
    "JournalCorrupt",
    "JournalError",
    "JournalMismatch",
    "LoopxError",
    "LsnConflict",
    "OffsetMismatch",
    "RecordNotVerbatim",
    "RecordRefused",
    "RecoveryAudit",
    "ShipDiverged",
    "Shippable",
    "ShipResult",
    "TransportError",
    "UnsafeRedispatch",
    "__version__",
    "canonical_bytes",
    "digest",
]
