/**
 * Typed errors: the local journal's, the lease's, and one class per refusal code of the LoopX API.
 *
 * Every API refusal is an `ApiError` with `status`, `code`, `detail`, `line` and the answer's other fields
 * in `body` (the server's one error shape: `{error, detail, line}` plus the code's fields). Catch the status
 * family (`Conflict`, `BadRequest`, ...) or the exact code's class (`Fenced`, `OffsetMismatch`, ...). A code
 * this client does not know yet still arrives as its status family's class, with the code in `code`.
 */

import type { JsonObject, JsonValue } from "./json.js";

export class LoopxError extends Error {
  override name = "LoopxError";
}

// --- the local journal ---------------------------------------------------------------------------------

export class JournalError extends LoopxError {}

/** Reopening found a line that is not one complete record (`storage_corruption`): a torn tail after a crash
 * mid-write, or damage. Nothing is repaired or dropped. `line` (1-based), `offset` (bytes), `tornTail`: the
 * last line, without its final newline (the signature of a write cut short). */
export class JournalCorrupt extends JournalError {
  constructor(
    readonly path: string,
    readonly line: number,
    readonly offset: number,
    readonly reason: string,
    readonly tornTail: boolean,
  ) {
    super(`${path}: ${tornTail ? "a torn tail" : "a corrupt line"} at line ${line} (byte ${offset}): ${reason}`);
  }
}

/** The file holds a journal this client cannot continue: another run, v1 records, a broken chain or lsn order. */
export class JournalMismatch extends JournalError {}

/** The journal was closed, or an earlier write failed part-way (reopen it to see what is on disk). */
export class JournalClosed extends JournalError {}

/** A record the contract would call invalid; nothing was written. */
export class RecordRefused extends JournalError {}

/** The record's line is over the server's line limit: refused before it is written (it would be refused on
 * every ship and wedge the run). `size`, `limit` in bytes. */
export class RecordTooLarge extends RecordRefused {
  constructor(readonly size: number, readonly limit: number) {
    super(`the record is ${size} bytes, over the server's line limit of ${limit} bytes`);
  }
}

/** An unsafe intent dispatched again while its previous dispatch has no `failed` readback. */
export class UnsafeRedispatch extends RecordRefused {}

/** An unsafe effect asked of a bare journal: its dispatch cannot be acknowledged by the server first. */
export class WriteAheadRequired extends JournalError {}

/** The server holds records of this run that the local journal does not. */
export class ShipDiverged extends LoopxError {
  constructor(readonly branch: number, readonly serverLsn: number, readonly localLsn: number) {
    super(`branch ${branch}: the server acknowledges lsn ${serverLsn}, the local journal ends at ${localLsn}`);
  }
}

/** A record read back from the server does not hash to the digest it was stored with (a field served
 * redacted): nothing may resume from those bytes. */
export class RecordNotVerbatim extends LoopxError {
  constructor(readonly branch: number, readonly lsn: number) {
    super(`record ${branch}:${lsn} is not served byte-identical to what was stored`);
  }
}

// --- leases and effects ----------------------------------------------------------------------------------

/** The turn's lease does not allow an effect now; nothing was dispatched by this call. */
export class LeaseError extends LoopxError {}

export class LeaseLost extends LeaseError {
  constructor(readonly turn: string, readonly reason: string) {
    super(`turn ${turn}: the lease is lost (${reason})`);
  }
}

/** What is left of the lease is shorter than the effect's declared duration plus the margin. */
export class LeaseTooShort extends LeaseError {
  constructor(readonly turn: string, readonly intent: string, readonly remaining: number, readonly needed: number) {
    super(`turn ${turn}, intent ${intent}: ${Math.max(remaining, 0).toFixed(3)} s of lease left, ${needed.toFixed(3)} s needed`);
  }
}

/** The server did not acknowledge the effect's dispatch: the body never ran, and the journal holds the
 * dispatch with a `failed` readback. */
export class WriteAheadFailed extends LoopxError {
  constructor(readonly turn: string, readonly intent: string, readonly lsn: number, override readonly cause: unknown, detail = "") {
    super(`turn ${turn}, intent ${intent}: the dispatch (lsn ${lsn}) was not acknowledged by the server; ` +
      `the effect was not run (${detail || String(cause)})`);
  }
}

/** The gate holds the turn: nothing of it may run until an operator decides. */
export class TurnHeld extends LoopxError {
  constructor(readonly turn: string, readonly decision: { reason: string | null; decision: string }) {
    super(`turn ${turn}: the gate holds it (${decision.reason ?? decision.decision})`);
  }
}

/** Thrown by an effect's body to say the effect definitively did not happen: its readback is `failed`. */
export class EffectFailed extends LoopxError {}

// --- the API ---------------------------------------------------------------------------------------------

/** No answer from the server: the request may or may not have been carried out. */
export class TransportError extends LoopxError {}

export class ApiError extends LoopxError {
  static statusFamily = 0;
  readonly body: JsonObject;
  constructor(
    readonly status: number,
    readonly code: string,
    readonly detail: string,
    body: JsonObject,
    /** Seconds the server asked to wait before a repeat (Retry-After), when it said. */
    readonly retryAfter: number | null = null,
  ) {
    super(`HTTP ${status} ${code}: ${detail}`);
    this.body = body;
  }

  /** The 1-based line of the batch at fault, when a record was. */
  get line(): number | null {
    return num(this.body["line"]);
  }
}

export type ApiErrorClass = (new (
  status: number, code: string, detail: string, body: JsonObject, retryAfter?: number | null,
) => ApiError) & { statusFamily: number };

function num(value: JsonValue | undefined): number | null {
  return typeof value === "number" ? value : null;
}
function str(value: JsonValue | undefined): string | null {
  return typeof value === "string" ? value : null;
}

export class BadRequest extends ApiError { static override statusFamily = 400; }
export class Unauthorized extends ApiError { static override statusFamily = 401; }
export class Forbidden extends ApiError { static override statusFamily = 403; }
export class NotFound extends ApiError { static override statusFamily = 404; }
export class MethodNotAllowed extends ApiError { static override statusFamily = 405; }
export class NotAcceptable extends ApiError { static override statusFamily = 406; }
export class Conflict extends ApiError { static override statusFamily = 409; }
export class PayloadTooLarge extends ApiError { static override statusFamily = 413; }
export class UnsupportedMediaType extends ApiError { static override statusFamily = 415; }
export class Unprocessable extends ApiError { static override statusFamily = 422; }
export class Throttled extends ApiError { static override statusFamily = 429; }
export class ServerError extends ApiError { static override statusFamily = 500; }
/** 503: the database or another dependency is down for now; `retryAfter` says when to try again. */
export class Unavailable extends ServerError { static override statusFamily = 503; }

/** The fencing token sent is not the turn's current one (a newer claim took the turn). Nothing was stored;
 * stop writing this turn. */
export class Fenced extends Conflict {
  get turn(): string | null { return str(this.body["turn"]); }
  get token(): number | null { return num(this.body["token"]); }
  get current(): number | null { return num(this.body["current"]); }
}
/** Under `LoopX-Expect` the batch does not continue the stored branch (an lsn skipped, a wrong `prev`). */
export class ChainMismatch extends Conflict {
  get branch(): number | null { return num(this.body["branch"]); }
  get lsn(): number | null { return num(this.body["lsn"]); }
  get expectedLsn(): number | null { return num(this.body["expected_lsn"]); }
  get expectedPrev(): string | null { return str(this.body["expected_prev"]); }
}
/** `LoopX-Expect` named a high-water the store does not hold. */
export class OffsetMismatch extends Conflict {
  get branch(): number | null { return num(this.body["branch"]); }
  get expected(): number | null { return num(this.body["expected"]); }
  get stored(): number | null { return num(this.body["stored"]); }
}
/** Another record is stored at the same (branch, lsn). Nothing of the batch was stored. */
export class LsnConflict extends Conflict {
  get branch(): number | null { return num(this.body["branch"]); }
  get lsn(): number | null { return num(this.body["lsn"]); }
  get storedDigest(): string | null { return str(this.body["stored_digest"]); }
  get receivedDigest(): string | null { return str(this.body["received_digest"]); }
}
/** Another worker holds the lease. */
export class ClaimHeld extends Conflict {
  get holder(): string | null { return str(this.body["holder"]); }
  get expiresAt(): string | null { return str(this.body["expires_at"]); }
}
/** Evidence `not_happened` refused while the dispatching worker's claim is live. */
export class ClaimLive extends Conflict {
  get holder(): string | null { return str(this.body["holder"]); }
  get expiresAt(): string | null { return str(this.body["expires_at"]); }
}
/** The request body could not be parsed (not the JSON its content type says). */
export class ParseError extends BadRequest {}
/** Under `LoopX-Expect` a record of the batch breaks the contract by itself. */
export class RecordInvalid extends Unprocessable {}
class SizeLimit extends PayloadTooLarge {
  get limit(): number | null { return num(this.body["limit"]); }
}
export class LineTooLarge extends SizeLimit {}
export class BatchTooLarge extends SizeLimit {}
export class TooManyRecords extends SizeLimit {}
export class AssigneeInvalid extends BadRequest {}
export class OperatorRequired extends Forbidden {}
export class TurnDone extends Conflict {}
export class EffectMapExists extends Conflict {}
export class EffectMapInvalid extends BadRequest {}
export class EffectMapNameInvalid extends BadRequest {}
export class EffectMapUnchanged extends BadRequest {}
export class EffectMapUnknown extends BadRequest {}
export class FilterChanged extends Conflict {}
export class FilterInvalid extends BadRequest {}
export class FilterRequired extends BadRequest {}
export class HistoryTooLarge extends PayloadTooLarge {}
export class ImportFinished extends Conflict {}
export class ImportInvalid extends BadRequest {}
export class IntegrityHold extends Conflict {}
export class IfMatchInvalid extends BadRequest {}
export class IntervalInvalid extends BadRequest {}
export class JournalInvalid extends BadRequest {}
export class JournalRequired extends BadRequest {}
export class JournalTooLarge extends PayloadTooLarge {}
export class JournalUnchanged extends Conflict {}
export class NotAnInterval extends Conflict {}
export class NothingToChange extends BadRequest {}
export class PreviewRequired extends BadRequest {}
export class PreviewStale extends Conflict {}
export class RepairInvalid extends BadRequest {}
export class RepairKindInvalid extends BadRequest {}
export class RepairNotVerified extends Conflict {}
export class RepairQuarantined extends Conflict {}
export class RunNotBroken extends Conflict {}
export class SourceInvalid extends BadRequest {}
export class SourceKeyInvalid extends BadRequest {}
export class StateChanged extends Conflict {}
export class TeamInvalid extends BadRequest {}
export class ThroughSeqInvalid extends BadRequest {}
export class TokenNameTaken extends Conflict {}
export class TokenRevoked extends Conflict {}
export class TooMany extends BadRequest {}
export class UploadFinished extends Conflict {}
export class NotJson extends BadRequest {}
export class EnvelopeInvalid extends BadRequest {}
export class RunMismatch extends BadRequest {}
export class IdentifierTooLong extends BadRequest {}
export class IdentifierInvalid extends BadRequest {}
export class EmptyBatch extends BadRequest {}
export class FencingInvalid extends BadRequest {}
export class ExpectInvalid extends BadRequest {}
export class WorkerInvalid extends BadRequest {}
export class FencingTokenInvalid extends BadRequest {}
export class ActionInvalid extends BadRequest {}
export class NoteInvalid extends BadRequest {}
export class ReasonRequired extends BadRequest {}
export class ReasonTooLong extends BadRequest {}
export class EvidenceInvalid extends BadRequest {}
export class InvalidRequest extends BadRequest {}
export class RunForbidden extends Forbidden {}
export class PermissionDenied extends Forbidden {}
export class Unauthenticated extends Unauthorized {}
export class TokenInvalid extends Unauthorized {}
export class RoleRequired extends Forbidden {}
export class FencingRequired extends Conflict {}
export class StaleToken extends Conflict {}
export class TurnBlocked extends Conflict {}
export class NothingToRecover extends Conflict {}
export class RecoveryAttemptsExceeded extends Conflict {}
export class AuditClosed extends Conflict {}
export class NothingToApprove extends Conflict {}
export class TurnDiscarded extends Conflict {}
export class RunLevelViolation extends Conflict {}
export class EvidenceRequired extends Conflict {}
export class PackageMissing extends BadRequest {}
export class EmptyPackage extends BadRequest {}
export class FormatInvalid extends BadRequest {}
export class PackageTooLarge extends PayloadTooLarge {}
export class TooManyCorruptLines extends BadRequest {}
export class FindingNotOpen extends Conflict {}
export class FindingResolved extends Conflict {}
export class DeliveryBusy extends Conflict {}

/** Every code the server answers, and its class. */
export const BY_CODE: Record<string, ApiErrorClass> = {
  chain_mismatch: ChainMismatch,
  record_invalid: RecordInvalid,
  assignee_invalid: AssigneeInvalid,
  operator_required: OperatorRequired,
  turn_done: TurnDone,
  effect_map_exists: EffectMapExists,
  effect_map_invalid: EffectMapInvalid,
  effect_map_name_invalid: EffectMapNameInvalid,
  effect_map_unchanged: EffectMapUnchanged,
  effect_map_unknown: EffectMapUnknown,
  filter_changed: FilterChanged,
  filter_invalid: FilterInvalid,
  filter_required: FilterRequired,
  history_too_large: HistoryTooLarge,
  import_finished: ImportFinished,
  import_invalid: ImportInvalid,
  integrity_hold: IntegrityHold,
  if_match_invalid: IfMatchInvalid,
  interval_invalid: IntervalInvalid,
  journal_invalid: JournalInvalid,
  journal_required: JournalRequired,
  journal_too_large: JournalTooLarge,
  journal_unchanged: JournalUnchanged,
  not_an_interval: NotAnInterval,
  nothing_to_change: NothingToChange,
  preview_required: PreviewRequired,
  preview_stale: PreviewStale,
  repair_invalid: RepairInvalid,
  repair_kind_invalid: RepairKindInvalid,
  repair_not_verified: RepairNotVerified,
  repair_quarantined: RepairQuarantined,
  run_not_broken: RunNotBroken,
  source_invalid: SourceInvalid,
  source_key_invalid: SourceKeyInvalid,
  state_changed: StateChanged,
  team_invalid: TeamInvalid,
  through_seq_invalid: ThroughSeqInvalid,
  token_name_taken: TokenNameTaken,
  token_revoked: TokenRevoked,
  too_many: TooMany,
  upload_finished: UploadFinished,
  not_json: NotJson,
  envelope_invalid: EnvelopeInvalid,
  run_mismatch: RunMismatch,
  identifier_too_long: IdentifierTooLong,
  identifier_invalid: IdentifierInvalid,
  empty_batch: EmptyBatch,
  fencing_invalid: FencingInvalid,
  expect_invalid: ExpectInvalid,
  worker_invalid: WorkerInvalid,
  fencing_token_invalid: FencingTokenInvalid,
  action_invalid: ActionInvalid,
  note_invalid: NoteInvalid,
  reason_required: ReasonRequired,
  reason_too_long: ReasonTooLong,
  evidence_invalid: EvidenceInvalid,
  invalid_request: InvalidRequest,
  run_forbidden: RunForbidden,
  permission_denied: PermissionDenied,
  line_too_large: LineTooLarge,
  batch_too_large: BatchTooLarge,
  too_many_records: TooManyRecords,
  lsn_conflict: LsnConflict,
  claim_live: ClaimLive,
  unavailable: Unavailable,
  unauthenticated: Unauthenticated,
  token_invalid: TokenInvalid,
  role_required: RoleRequired,
  method_not_allowed: MethodNotAllowed,
  unsupported_media_type: UnsupportedMediaType,
  throttled: Throttled,
  offset_mismatch: OffsetMismatch,
  fenced: Fenced,
  fencing_required: FencingRequired,
  claim_held: ClaimHeld,
  stale_token: StaleToken,
  turn_blocked: TurnBlocked,
  nothing_to_recover: NothingToRecover,
  recovery_attempts_exceeded: RecoveryAttemptsExceeded,
  audit_closed: AuditClosed,
  nothing_to_approve: NothingToApprove,
  turn_discarded: TurnDiscarded,
  run_level_violation: RunLevelViolation,
  evidence_required: EvidenceRequired,
  package_missing: PackageMissing,
  empty_package: EmptyPackage,
  format_invalid: FormatInvalid,
  package_too_large: PackageTooLarge,
  too_many_corrupt_lines: TooManyCorruptLines,
  finding_not_open: FindingNotOpen,
  finding_resolved: FindingResolved,
  delivery_busy: DeliveryBusy,
  not_found: NotFound,
  not_acceptable: NotAcceptable,
  parse_error: ParseError,
};

const FAMILIES: Record<number, ApiErrorClass> = {
  400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 405: MethodNotAllowed, 406: NotAcceptable, 409: Conflict,
  413: PayloadTooLarge, 415: UnsupportedMediaType, 422: Unprocessable, 429: Throttled,
};

// Answers without a typed `error` (a proxy's, say) get a code after their status.
const DEFAULT_CODES: Record<number, string> = {
  400: "bad_request", 401: "unauthenticated", 403: "permission_denied", 404: "not_found",
  405: "method_not_allowed", 406: "not_acceptable", 409: "conflict", 413: "payload_too_large", 415: "unsupported_media_type",
  422: "unprocessable", 429: "throttled",
};

/** The typed error of an answer with a 4xx or 5xx status (`retryAfter`: its Retry-After, in seconds). */
export function errorFor(status: number, body: unknown, retryAfter: number | null = null): ApiError {
  const data: JsonObject =
    typeof body === "object" && body !== null && !Array.isArray(body) ? (body as JsonObject) : {};
  let code = data["error"];
  if (typeof code !== "string" || code === "") {
    code = DEFAULT_CODES[status] ?? (status >= 500 ? "server_error" : `http_${status}`);
  }
  const rawDetail = data["detail"];
  const detail = typeof rawDetail === "string" ? rawDetail : rawDetail == null ? "" : String(rawDetail);
  const family: ApiErrorClass =
    status >= 500 ? (status === 503 ? Unavailable : ServerError) : (FAMILIES[status] ?? ApiError);
  let cls: ApiErrorClass = Object.hasOwn(BY_CODE, code) ? (BY_CODE[code] ?? family) : family;
  if (cls.statusFamily !== status && cls !== ApiError) cls = family; // a known code under another status
  return new cls(status, code, detail, data, retryAfter);
}
