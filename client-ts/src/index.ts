/** loopx-client: the runtime's side of LoopX Recovery Audit for Node (see README.md). */
export { canonicalBytes, checkValue, digest, MAX_WRITE_DEPTH, RecordValueError, sha256Hex } from "./canonical.js";
export * from "./errors.js";
export { Claim, Gate, monotonic, retryAfterSeconds, USER_AGENT } from "./gate.js";
export type { Decision, GateOptions, RecoveryAudit, Shippable, ShipResult } from "./gate.js";
export { DEFAULT_PHASES, EFFECT_CLASSES, Effect, fsyncDir, Journal, utcNow } from "./journal.js";
export type { EffectClass, EffectOptions, Entry, Extra, JournalOptions, Outcome, Status } from "./journal.js";
export { newObject, parseJson, parseLine } from "./json.js";
export type { JsonObject, JsonValue, LineCode, ParsedLine } from "./json.js";
export { DEFAULT_LIMITS, limitsFromAnswer } from "./limits.js";
export type { Limits } from "./limits.js";
export { LeaseKeeper, TurnSession } from "./session.js";
export type { CallOptions, TurnOptions } from "./session.js";
