"""Typed errors: the local journal's, and one class per refusal code of the LoopX API.

Every API refusal is an :class:`ApiError` with ``status``, ``code``, ``detail`` and the answer's other
fields in ``body``. Catch the status family (``Conflict``, ``BadRequest``, ...) or the exact code's class
(``Fenced``, ``OffsetMismatch``, ...). A code this client does not know yet still arrives as its status
family's class, with the code in ``code``.
"""

from __future__ import annotations

from typing import Any, ClassVar


class LoopxError(Exception):
    """Anything this package raises on purpose."""


# --- the local journal ---------------------------------------------------------------------------------


class JournalError(LoopxError):
    """The local journal cannot be used as asked."""


class JournalCorrupt(JournalError):
    """Reopening found a line that is not one complete record (``storage_corruption`` in the contract):
    a torn tail after a crash mid-write, or damage. Nothing is repaired or dropped: the file is left as
    it is, and an operator decides (the repair itself is audited on the server's side).

    ``line``: its 1-based number; ``offset``: the byte offset where it starts; ``torn_tail``: it is the
    last line and has no final newline (the signature of a write cut short)."""

    def __init__(self, path: str, line: int, offset: int, reason: str, *, torn_tail: bool) -> None:
        where = "a torn tail" if torn_tail else "a corrupt line"
        super().__init__(f"{path}: {where} at line {line} (byte {offset}): {reason}")
        self.path = path
        self.line = line
        self.offset = offset
        self.reason = reason
        self.torn_tail = torn_tail


class JournalMismatch(JournalError):
    """The file holds a valid journal that is not the one asked for (another run), or one this client
    cannot continue (v1 records, a broken chain or lsn sequence)."""


class JournalClosed(JournalError):
    """The journal was closed, or an earlier write failed part-way (reopen it to see what is on disk)."""


class RecordRefused(JournalError, ValueError):
    """A record the contract would call invalid; nothing was written."""


class RecordTooLarge(RecordRefused):
    """The record's line is longer than the server's line limit (``size`` > ``limit`` bytes): the server
    would refuse it on every ship and wedge the run, so it is refused before it is written. Nothing was
    written; the journal stays usable (store the large value elsewhere and journal its digest)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"the record is {size} bytes, over the server's line limit of {limit} bytes")
        self.size = size
        self.limit = limit


class NothingToDrop(JournalError):
    """``drop_torn_tail`` found no torn last line: the file ends with a complete record (or is empty, or
    the damage is not on its last line). Nothing was changed."""


class WriteAheadRequired(JournalError):
    """An unsafe effect (or one marked ``write_ahead=True``) asked of a journal with no gate: its dispatch
    cannot be acknowledged by the server before the body runs. Use a turn session (``Gate.turn``), or
    pass ``local_write_ahead=True`` knowingly (no protection against a stalled worker). Nothing was
    written."""


class UnsafeRedispatch(RecordRefused):
    """An ``unsafe`` intent dispatched again while its previous dispatch has no ``failed`` readback: that
    would be the double effect recovery exists to prevent (contract section 2). Nothing was written."""


class ShipDiverged(LoopxError):
    """The server holds records of this run that the local journal does not (a branch's ack cursor is
    beyond the local journal's end): the two are never reconciled by trusting either side."""

    def __init__(self, branch: int, server_lsn: int, local_lsn: int) -> None:
        super().__init__(
            f"branch {branch}: the server acknowledges lsn {server_lsn}, the local journal ends at {local_lsn}"
        )
        self.branch = branch
        self.server_lsn = server_lsn
        self.local_lsn = local_lsn


class RecordNotVerbatim(LoopxError):
    """A record read back from the server does not hash to the digest it was stored with (a field served
    redacted): those bytes are not the journal's, and nothing may resume from them."""

    def __init__(self, branch: int, lsn: int) -> None:
        super().__init__(f"record {branch}:{lsn} is not served byte-identical to what was stored")
        self.branch = branch
        self.lsn = lsn


class LeaseError(LoopxError):
    """The turn's lease does not allow an effect now; nothing was dispatched by this call."""


class LeaseLost(LeaseError):
    """The lease on the turn is gone (a renewal was refused or came too late, or the turn was released):
    this worker may no longer act on the turn. ``turn``, ``reason``."""

    def __init__(self, turn: str, reason: str) -> None:
        super().__init__(f"turn {turn}: the lease is lost ({reason})")
        self.turn = turn
        self.reason = reason


class LeaseTooShort(LeaseError):
    """What is left of the lease (``remaining`` seconds, by the local monotonic clock) is shorter than what
    the effect needs (``needed``: its ``max_duration`` plus the clock margin): it could still be running
    when another worker takes the turn over. Nothing was sent."""

    def __init__(self, turn: str, intent: str, remaining: float, needed: float) -> None:
        super().__init__(
            f"turn {turn}, intent {intent}: {max(remaining, 0.0):.3f} s of lease left, {needed:.3f} s needed"
        )
        self.turn = turn
        self.intent = intent
        self.remaining = remaining
        self.needed = needed


class WriteAheadFailed(LoopxError):
    """The server did not acknowledge the effect's dispatch (no answer, or a refusal other than
    ``Fenced``): the body never ran, and the journal holds the dispatch with a ``failed`` readback.
    ``turn``, ``intent``, ``lsn`` (of the dispatch) and ``cause`` (the error, also ``__cause__``)."""

    def __init__(self, turn: str, intent: str, lsn: int, cause: BaseException | None, detail: str = "") -> None:
        super().__init__(
            f"turn {turn}, intent {intent}: the dispatch (lsn {lsn}) was not acknowledged by the server; "
            f"the effect was not run ({detail or cause!r})"
        )
        self.turn = turn
        self.intent = intent
        self.lsn = lsn
        self.cause = cause


class TurnHeld(LoopxError):
    """The gate holds the turn (``decision.state == "hold"``, for ``decision.reason``): nothing of the turn
    may run until an operator decides. ``Gate.wait_for_decision`` waits for that. ``intent`` and ``console``:
    the intent held and the console page of the turn, when the raiser knows them (else None)."""

    def __init__(self, turn: str, decision: Any, *, intent: str | None = None, console: str | None = None) -> None:
        why = decision.reason or decision.decision
        where = f"; the intent {intent}" if intent else ""
        link = f"; see {console}" if console else ""
        super().__init__(f"turn {turn}: the gate holds it ({why}{where}){link}")
        self.turn = turn
        self.decision = decision
        self.intent = intent  # the intent the turn is held for, when the caller names it (the LangGraph adapter)
        self.console = console  # the console page of the turn, when the caller knows the server's address


class DurabilityNotSync(LoopxError):
    """A LangGraph graph journaled by ``loopx_client.langgraph`` runs with a durability other than ``"sync"``:
    nothing runs (a step's checkpoint could be saved after the next step sent an effect)."""


class EffectOutsideGraph(LoopxError):
    """A tool declared ``idempotent`` or ``unsafe`` with ``loopx_client.langgraph.effect`` was called outside a
    graph compiled with a ``LoopxCheckpointer``: there is no turn to journal it in, so it does not run."""


class EffectFailed(LoopxError):
    """Raised by (or around) an effect's body to say the effect definitively did not happen: the readback
    is ``failed`` (a retry is then legal, also for an unsafe intent)."""


# --- the API --------------------------------------------------------------------------------------------


class TransportError(LoopxError):
    """No answer from the server (connection refused or reset, timeout): the request may or may not have
    been carried out."""


class ApiError(LoopxError):
    """A refusal by the server: ``status``, ``code``, ``detail`` and every field of the answer in ``body``."""

    status_family: ClassVar[int] = 0

    def __init__(
        self, status: int, code: str, detail: str, body: dict[str, Any], *, retry_after: float | None = None
    ) -> None:
        super().__init__(f"HTTP {status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.body = body
        # Seconds the server asked to wait before a repeat (its Retry-After header), when it said.
        self.retry_after = retry_after

    @property
    def line(self) -> int | None:
        """The 1-based line of the batch at fault, when a record was."""
        value = self.body.get("line")
        return value if isinstance(value, int) else None


class BadRequest(ApiError):
    status_family = 400


class Unauthorized(ApiError):
    status_family = 401


class Forbidden(ApiError):
    status_family = 403


class NotFound(ApiError):
    status_family = 404


class Conflict(ApiError):
    status_family = 409


class PayloadTooLarge(ApiError):
    status_family = 413


class MethodNotAllowed(ApiError):
    status_family = 405


class NotAcceptable(ApiError):
    status_family = 406


class Unprocessable(ApiError):
    status_family = 422


class UnsupportedMediaType(ApiError):
    status_family = 415


class Throttled(ApiError):
    status_family = 429


class ServerError(ApiError):
    status_family = 500


class Unavailable(ServerError):
    """503: the database or another dependency is down for now; ``retry_after`` says when to try again.
    Requests that are safe to repeat are retried after it."""

    status_family = 503


# 400: the request or a record of the batch is malformed; nothing was stored or changed.
class NotJson(BadRequest):
    pass


class EnvelopeInvalid(BadRequest):
    pass


class RunMismatch(BadRequest):
    pass


class IdentifierTooLong(BadRequest):
    pass


class IdentifierInvalid(BadRequest):
    pass


class EmptyBatch(BadRequest):
    pass


class FencingInvalid(BadRequest):
    pass


class ExpectInvalid(BadRequest):
    pass


class WorkerInvalid(BadRequest):
    pass


class FencingTokenInvalid(BadRequest):
    pass


class ActionInvalid(BadRequest):
    pass


class NoteInvalid(BadRequest):
    pass


class ReasonRequired(BadRequest):
    pass


class ReasonTooLong(BadRequest):
    pass


class EvidenceInvalid(BadRequest):
    pass


class ParseError(BadRequest):
    """The request body could not be parsed (not the JSON its content type says)."""


class InvalidRequest(BadRequest):
    """The request body failed validation; ``body["fields"]`` says which field."""


# 401
class Unauthenticated(Unauthorized):
    """No credentials were sent."""


class TokenInvalid(Unauthorized):
    """The token is unknown, revoked or malformed."""


# 403
class RoleRequired(Forbidden):
    """The caller's role may not do this (a runtime token never approves, for instance)."""


class RunForbidden(Forbidden):
    """The token's run prefix does not cover this run."""


class PermissionDenied(Forbidden):
    pass


# 413
class LineTooLarge(PayloadTooLarge):
    pass


class BatchTooLarge(PayloadTooLarge):
    pass


class TooManyRecords(PayloadTooLarge):
    pass


# 409: refused by the state of the store or the gate.
class LsnConflict(Conflict):
    """Another record is stored at the same (branch, lsn): ``branch``, ``lsn``, ``stored_digest``,
    ``received_digest``. Nothing of the batch was stored."""


class OffsetMismatch(Conflict):
    """``LoopX-Expect`` named a high-water the store does not hold: ``branch``, ``expected``, ``stored``."""


class ChainMismatch(Conflict):
    """Under ``LoopX-Expect`` the batch does not continue the stored branch: an lsn skipped or a ``prev``
    that is not the digest of the record before it. ``branch``, ``lsn``, ``expected_lsn``,
    ``expected_prev``, ``violation``. Nothing of the batch was stored."""


class RecordInvalid(Unprocessable):
    """Under ``LoopX-Expect`` a record of the batch breaks the contract by itself (``violation``: a float,
    an unknown kind, a schema version other than 1 or 2...). Nothing of the batch was stored."""


class ClaimLive(Conflict):
    """An operator's "it did not happen" while a worker's lease on the turn still holds (that worker may be
    sending the effect): ``holder``, ``expires_at``. A worker that stops on a hold releases its claim."""


class Fenced(Conflict):
    """The fencing token sent is not the turn's current one (a newer claim took the turn): ``turn``,
    ``token`` (sent), ``current``. Nothing of the batch was stored; stop writing this turn."""

    @property
    def turn(self) -> str | None:
        value = self.body.get("turn")
        return value if isinstance(value, str) else None

    @property
    def token(self) -> int | None:
        value = self.body.get("token")
        return value if isinstance(value, int) else None

    @property
    def current(self) -> int | None:
        value = self.body.get("current")
        return value if isinstance(value, int) else None


class FencingRequired(Conflict):
    """A record names a turn that has been claimed, and the batch carried no fencing token for it."""


class ClaimHeld(Conflict):
    """Another worker holds the lease: ``holder``, ``expires_at``."""


class StaleToken(Conflict):
    """The fencing token is not the current claim's (lease lost, released or taken over)."""


class TurnBlocked(Conflict):
    """The gate holds the turn: ``reason``."""


class NothingToRecover(Conflict):
    """The turn needs no recovery (done): ``decision``."""


class RecoveryAttemptsExceeded(Conflict):
    """Too many recoveries without progress: the gate parked the turn until an operator approves."""


class AuditClosed(Conflict):
    pass


class NothingToApprove(Conflict):
    pass


class TurnDiscarded(Conflict):
    pass


class RunLevelViolation(Conflict):
    pass


class EvidenceRequired(Conflict):
    pass


# Recovery packages (upload and export) and findings: the API's other refusals.
class PackageMissing(BadRequest):
    pass


class EmptyPackage(BadRequest):
    pass


class FormatInvalid(BadRequest):
    pass


class PackageTooLarge(PayloadTooLarge):
    pass


class TooManyCorruptLines(BadRequest):
    pass


class FindingNotOpen(Conflict):
    pass


class FindingResolved(Conflict):
    pass


class DeliveryBusy(Conflict):
    pass


# Refusals of the operator-side API (bulk decisions, review assignments, repairs, imports, effect maps,
# tokens, schedules).
class AssigneeInvalid(BadRequest):
    """The reviewer named is not an operator of a team that sees the turn's run."""


class OperatorRequired(Forbidden):
    pass


class TurnDone(Conflict):
    """A finished or discarded turn needs no reviewer."""


class EffectMapExists(Conflict):
    pass


class EffectMapInvalid(BadRequest):
    pass


class EffectMapNameInvalid(BadRequest):
    pass


class EffectMapUnchanged(BadRequest):
    pass


class EffectMapUnknown(BadRequest):
    pass


class FilterChanged(Conflict):
    pass


class FilterInvalid(BadRequest):
    pass


class FilterRequired(BadRequest):
    pass


class HistoryTooLarge(PayloadTooLarge):
    pass


class ImportFinished(Conflict):
    pass


class ImportInvalid(BadRequest):
    pass


class IntegrityHold(Conflict):
    pass


class IfMatchInvalid(BadRequest):
    pass


class IntervalInvalid(BadRequest):
    pass


class JournalInvalid(BadRequest):
    pass


class JournalRequired(BadRequest):
    pass


class JournalTooLarge(PayloadTooLarge):
    pass


class JournalUnchanged(Conflict):
    pass


class NotAnInterval(Conflict):
    pass


class NothingToChange(BadRequest):
    pass


class PreviewRequired(BadRequest):
    pass


class PreviewStale(Conflict):
    pass


class RepairInvalid(BadRequest):
    pass


class RepairKindInvalid(BadRequest):
    pass


class RepairNotVerified(Conflict):
    pass


class RepairQuarantined(Conflict):
    pass


class RunNotBroken(Conflict):
    pass


class SourceInvalid(BadRequest):
    pass


class StateChanged(Conflict):
    """An approval or block sent with `If-Match` whose version is not the turn's state now: nothing was
    written; `body["state"]` and `body["state_version"]` say what it is."""


class SourceKeyInvalid(BadRequest):
    pass


class TeamInvalid(BadRequest):
    pass


class ThroughSeqInvalid(BadRequest):
    pass


class TokenNameTaken(Conflict):
    pass


class TokenRevoked(Conflict):
    pass


class TooMany(BadRequest):
    pass


class UploadFinished(Conflict):
    pass


BY_CODE: dict[str, type[ApiError]] = {
    "chain_mismatch": ChainMismatch,
    "claim_live": ClaimLive,
    "record_invalid": RecordInvalid,
    "assignee_invalid": AssigneeInvalid,
    "operator_required": OperatorRequired,
    "turn_done": TurnDone,
    "effect_map_exists": EffectMapExists,
    "effect_map_invalid": EffectMapInvalid,
    "effect_map_name_invalid": EffectMapNameInvalid,
    "effect_map_unchanged": EffectMapUnchanged,
    "effect_map_unknown": EffectMapUnknown,
    "filter_changed": FilterChanged,
    "filter_invalid": FilterInvalid,
    "filter_required": FilterRequired,
    "history_too_large": HistoryTooLarge,
    "import_finished": ImportFinished,
    "import_invalid": ImportInvalid,
    "integrity_hold": IntegrityHold,
    "if_match_invalid": IfMatchInvalid,
    "interval_invalid": IntervalInvalid,
    "journal_invalid": JournalInvalid,
    "journal_required": JournalRequired,
    "journal_too_large": JournalTooLarge,
    "journal_unchanged": JournalUnchanged,
    "not_an_interval": NotAnInterval,
    "nothing_to_change": NothingToChange,
    "preview_required": PreviewRequired,
    "preview_stale": PreviewStale,
    "repair_invalid": RepairInvalid,
    "repair_kind_invalid": RepairKindInvalid,
    "repair_not_verified": RepairNotVerified,
    "repair_quarantined": RepairQuarantined,
    "run_not_broken": RunNotBroken,
    "source_invalid": SourceInvalid,
    "source_key_invalid": SourceKeyInvalid,
    "state_changed": StateChanged,
    "team_invalid": TeamInvalid,
    "through_seq_invalid": ThroughSeqInvalid,
    "token_name_taken": TokenNameTaken,
    "token_revoked": TokenRevoked,
    "too_many": TooMany,
    "upload_finished": UploadFinished,
    "not_json": NotJson,
    "envelope_invalid": EnvelopeInvalid,
    "run_mismatch": RunMismatch,
    "identifier_too_long": IdentifierTooLong,
    "identifier_invalid": IdentifierInvalid,
    "empty_batch": EmptyBatch,
    "fencing_invalid": FencingInvalid,
    "expect_invalid": ExpectInvalid,
    "worker_invalid": WorkerInvalid,
    "fencing_token_invalid": FencingTokenInvalid,
    "action_invalid": ActionInvalid,
    "note_invalid": NoteInvalid,
    "reason_required": ReasonRequired,
    "reason_too_long": ReasonTooLong,
    "evidence_invalid": EvidenceInvalid,
    "invalid_request": InvalidRequest,
    "run_forbidden": RunForbidden,
    "permission_denied": PermissionDenied,
    "line_too_large": LineTooLarge,
    "batch_too_large": BatchTooLarge,
    "too_many_records": TooManyRecords,
    "lsn_conflict": LsnConflict,
    "unavailable": Unavailable,
    "unauthenticated": Unauthenticated,
    "token_invalid": TokenInvalid,
    "role_required": RoleRequired,
    "method_not_allowed": MethodNotAllowed,
    "not_acceptable": NotAcceptable,
    "parse_error": ParseError,
    "unsupported_media_type": UnsupportedMediaType,
    "throttled": Throttled,
    "offset_mismatch": OffsetMismatch,
    "fenced": Fenced,
    "fencing_required": FencingRequired,
    "claim_held": ClaimHeld,
    "stale_token": StaleToken,
    "turn_blocked": TurnBlocked,
    "nothing_to_recover": NothingToRecover,
    "recovery_attempts_exceeded": RecoveryAttemptsExceeded,
    "audit_closed": AuditClosed,
    "nothing_to_approve": NothingToApprove,
    "turn_discarded": TurnDiscarded,
    "run_level_violation": RunLevelViolation,
    "evidence_required": EvidenceRequired,
    "package_missing": PackageMissing,
    "empty_package": EmptyPackage,
    "format_invalid": FormatInvalid,
    "package_too_large": PackageTooLarge,
    "too_many_corrupt_lines": TooManyCorruptLines,
    "finding_not_open": FindingNotOpen,
    "finding_resolved": FindingResolved,
    "delivery_busy": DeliveryBusy,
    "not_found": NotFound,
}

_FAMILIES: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    406: NotAcceptable,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    422: Unprocessable,
    429: Throttled,
}

# Answers without a typed `error` (the framework's own: authentication, permissions, not found, throttling,
# media type) get a code after their status.
_DEFAULT_CODES = {
    400: "bad_request",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "throttled",
}


def error_for(status: int, body: Any, *, retry_after: float | None = None) -> ApiError:
    """The typed error of an answer with a 4xx or 5xx status (``retry_after``: its Retry-After, seconds)."""
    data: dict[str, Any] = body if isinstance(body, dict) else {}
    code = data.get("error")
    if not isinstance(code, str) or not code:
        code = _DEFAULT_CODES.get(status, "server_error" if status >= 500 else f"http_{status}")
    detail = data.get("detail")
    if not isinstance(detail, str):
        detail = "" if detail is None else str(detail)
    family = (Unavailable if status == 503 else ServerError) if status >= 500 else _FAMILIES.get(status, ApiError)
    cls = BY_CODE.get(code, family)
    if cls.status_family != status and cls is not ApiError:
        cls = family  # a known code under another status: trust the status's family
    return cls(status, code, detail, data, retry_after=retry_after)
