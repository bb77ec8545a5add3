/**
 * The local turn journal: the contract's v2 records, durable before a write returns.
 *
 * One file, one run, one JSON object per line in canonical bytes. Every record carries the contract's
 * envelope (`v` 2, `run`, `branch`, `lsn` counting per branch from 0, `kind`, `at`) and `prev`, the digest
 * of the previous record of its branch (for lsn 0 of a forked branch, the digest of its `fork` record;
 * none for lsn 0 of branch 0). A write is appended and fsynced before the method returns.
 *
 * Reopening a file continues it: the chain, the lsns and the live branch are read back and checked. A
 * line that is not a complete record raises `JournalCorrupt` (with `tornTail` for a last line cut short)
 * and the file is left exactly as it is: a torn tail is never silently dropped.
 */

import { closeSync, constants, fsyncSync, openSync, readFileSync, unlinkSync, writeFileSync, writeSync } from "node:fs";
import { dirname } from "node:path";

import { canonicalBytes, digest, RecordValueError } from "./canonical.js";
import {
  EffectFailed,
  JournalClosed,
  JournalCorrupt,
  JournalError,
  JournalMismatch,
  RecordRefused,
  RecordTooLarge,
  UnsafeRedispatch,
  WriteAheadRequired,
} from "./errors.js";
import { type JsonObject, type JsonValue, newObject, parseLine } from "./json.js";
import { DEFAULT_LIMITS, type Limits } from "./limits.js";

export type EffectClass = "safe" | "idempotent" | "unsafe";
export type Outcome = "succeeded" | "failed" | "unknown";
export type Status = "completed" | "failed" | "cancelled";

export const DEFAULT_PHASES = ["plan", "envelope", "dispatch", "execute", "readback", "writeback", "spend"] as const;
export const EFFECT_CLASSES: readonly EffectClass[] = ["safe", "idempotent", "unsafe"];
const OUTCOMES: readonly string[] = ["succeeded", "failed", "unknown"];
const STATUSES: readonly string[] = ["completed", "failed", "cancelled"];
// Fields of the envelope, written by the journal itself: a caller's extra fields may not name them.
const ENVELOPE = new Set(["v", "run", "branch", "lsn", "kind", "at", "prev"]);

/** RFC 3339 in UTC with milliseconds (shown only: the contract never orders by it). */
export function utcNow(): string {
  return new Date().toISOString();
}

/** One record of the journal as written: its place and its exact line (without the newline). */
export interface Entry {
  readonly branch: number;
  readonly lsn: number;
  readonly kind: string;
  readonly turn: string | null;
  readonly line: Buffer;
  readonly record: JsonObject;
}

interface IntentState {
  effectClass: string;
  key: string | null;
  outcome: string | null; // the latest dispatch's readback; null: none yet
}

/** The intent an effect body runs; the body may say how it ended (the readback written after it). */
export class Effect {
  outcome: Outcome | null = null;
  readback: JsonObject | null = null;
  constructor(
    readonly turn: string,
    readonly intent: string,
    readonly effectClass: EffectClass,
    readonly idempotencyKey: string | null,
    readonly dispatch: JsonObject,
  ) {}
  succeeded(): void { this.outcome = "succeeded"; }
  /** The effect did not happen: a retry is legal. */
  failed(): void { this.outcome = "failed"; }
  /** It may or may not have happened. */
  unknown(): void { this.outcome = "unknown"; }
}

export interface JournalOptions {
  run: string;
  clock?: () => string;
  limits?: Limits;
}

export type Extra = Record<string, JsonValue | undefined>;

export interface EffectOptions {
  key?: string;
  argsDigest?: string;
  /** Errors the caller knows mean "the receiver refused, nothing happened": readback `failed`. */
  failedOn?: (error: unknown) => boolean;
  /** An unsafe effect on a bare journal: only with this, knowingly (no protection against a stalled worker). */
  localWriteAhead?: boolean;
  extra?: Extra;
}

function nonEmpty(value: unknown, name: string): string {
  if (typeof value !== "string" || value === "") throw new RecordRefused(`${name} must be a non-empty string`);
  return value;
}

function isInt(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value);
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Make a directory entry durable (a new file's name, a lock's removal). */
export function fsyncDir(dir: string): void {
  let fd: number | undefined;
  try {
    fd = openSync(dir, constants.O_RDONLY);
    fsyncSync(fd);
  } catch {
    // some filesystems refuse fsync on a directory
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/**
 * A durable local journal for one run. `Journal.open(path, {run})` creates the file or reopens it.
 * Methods named after the record kinds append one record each and return it as written: `plan`, `commit`,
 * `dispatch`, `observe`, `terminal`, `fork`, `checkpoint`; `append(kind, fields)` for anything else.
 * One process writes a journal at a time: `PATH.lock` holds the writer's pid (a lock whose process is gone,
 * after a crash, is taken over).
 */
export class Journal {
  readonly path: string;
  readonly run: string;
  limits: Limits;
  private readonly clock: () => string;
  private fd: number | null = null;
  private readonly lockPath: string;
  private readonly entryList: Entry[] = [];
  private readonly nextLsn = new Map<number, number>([[0, 0]]);
  private readonly lastDigest = new Map<number, string | null>([[0, null]]);
  private liveBranch = 0;
  private highest = 0;
  private readonly plannedTurns = new Map<string, string>();
  private readonly intents = new Map<string, IntentState>();
  private needsNewline = false;
  private locked = false;
  private broken: string | null = null;

  private constructor(path: string, options: JournalOptions) {
    this.path = path;
    this.run = nonEmpty(options.run, "run");
    this.limits = options.limits ?? { ...DEFAULT_LIMITS };
    this.clock = options.clock ?? utcNow;
    this.lockPath = `${path}.lock`;
  }

  static open(path: string, options: JournalOptions): Journal {
    const journal = new Journal(path, options);
    journal.lock();
    try {
      let created = false;
      let fd: number;
      try {
        fd = openSync(path, constants.O_RDWR | constants.O_APPEND);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
        fd = openSync(path, constants.O_RDWR | constants.O_APPEND | constants.O_CREAT, 0o644);
        created = true;
      }
      journal.fd = fd;
      if (created) fsyncDir(dirname(path));
      journal.load(readFileSync(path));
    } catch (error) {
      journal.close();
      throw error;
    }
    return journal;
  }

  private lock(): void {
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        const fd = openSync(this.lockPath, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o644);
        writeSync(fd, `${process.pid}\n`);
        fsyncSync(fd);
        closeSync(fd);
        this.locked = true;
        return;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      }
      let holder = NaN;
      try {
        holder = parseInt(readFileSync(this.lockPath, "utf8"), 10);
      } catch {
        // vanished meanwhile: try again
      }
      if (Number.isInteger(holder) && pidAlive(holder)) {
        throw new JournalError(`${this.path}: another writer (pid ${holder}) has this journal open`);
      }
      try {
        unlinkSync(this.lockPath); // its writer is gone (a crash): the lock is stale
      } catch {
        // removed by someone else meanwhile
      }
    }
    throw new JournalError(`${this.path}: could not take the journal's lock`);
  }

  // -- reading back --------------------------------------------------------------------------------------
  private load(data: Buffer): void {
    if (data.length === 0) return;
    const complete = data[data.length - 1] === 0x0a;
    const parts: Buffer[] = [];
    let start = 0;
    for (let i = 0; i < data.length; i++) {
      if (data[i] === 0x0a) {
        parts.push(data.subarray(start, i));
        start = i + 1;
      }
    }
    if (!complete) parts.push(data.subarray(start));
    let offset = 0;
    parts.forEach((raw, index) => {
      const number = index + 1;
      const isLast = number === parts.length;
      const blank = raw.toString("utf8").trim() === "";
      const parsed = blank ? null : parseLine(raw);
      if (parsed === null || !parsed.ok) {
        const reason = parsed === null ? "an empty line" : `not one complete JSON record (${parsed.code}: ${parsed.detail})`;
        throw new JournalCorrupt(this.path, number, offset, reason, isLast && !complete);
      }
      this.replay(parsed.record, raw, number);
      offset += raw.length + 1;
    });
    // A complete last record without its newline counts; the next write ends its line first.
    this.needsNewline = !complete;
  }

  private replay(record: JsonObject, raw: Buffer, number: number): void {
    const where = `${this.path}: line ${number}`;
    if (record["v"] !== 2) throw new JournalMismatch(`${where}: v=${String(record["v"])}; this client continues v2 journals only`);
    if (record["run"] !== this.run) throw new JournalMismatch(`${where}: a record of another run than ${this.run}`);
    const { branch, lsn, kind } = record;
    if (!isInt(branch) || !isInt(lsn) || typeof kind !== "string") {
      throw new JournalMismatch(`${where}: a record without an integer branch and lsn and a kind`);
    }
    const expected = this.nextLsn.get(branch);
    if (expected === undefined) throw new JournalMismatch(`${where}: a record on branch ${branch}, which no fork created`);
    if (lsn !== expected) throw new JournalMismatch(`${where}: lsn ${lsn} on branch ${branch}, expected ${expected}`);
    if ((record["prev"] ?? null) !== this.lastDigest.get(branch) || ("prev" in record && record["prev"] === null)) {
      throw new JournalMismatch(`${where}: prev does not chain to the previous record of branch ${branch}`);
    }
    this.account(record);
    this.push(record, raw);
  }

  private push(record: JsonObject, line: Buffer): void {
    const branch = record["branch"] as number;
    const lsn = record["lsn"] as number;
    const kind = record["kind"] as string;
    this.nextLsn.set(branch, lsn + 1);
    const d = digest(record);
    this.lastDigest.set(branch, d);
    const turn = record["turn"];
    this.entryList.push({ branch, lsn, kind, turn: typeof turn === "string" ? turn : null, line, record });
    if (kind === "fork") {
      const fresh = record["new_branch"] as number;
      this.highest = fresh;
      this.liveBranch = fresh;
      this.nextLsn.set(fresh, 0);
      this.lastDigest.set(fresh, d);
    }
  }

  private account(record: JsonObject): void {
    const kind = record["kind"];
    const turn = record["turn"];
    const intent = record["intent"];
    if (kind === "turn_planned" && typeof turn === "string") {
      if (!this.plannedTurns.has(turn)) this.plannedTurns.set(turn, String(record["lineage"]));
    } else if (kind === "intent_dispatched" && typeof turn === "string" && typeof intent === "string") {
      const key = record["idempotency_key"];
      this.intents.set(JSON.stringify([turn, intent]), {
        effectClass: String(record["effect_class"]),
        key: typeof key === "string" ? key : null,
        outcome: null,
      });
    } else if (kind === "effect_observed" && typeof turn === "string" && typeof intent === "string") {
      const known = this.intents.get(JSON.stringify([turn, intent]));
      if (known !== undefined && (known.outcome === null || known.outcome === "unknown")) {
        known.outcome = String(record["outcome"]); // a later `unknown` never downgrades a definitive one
      }
    } else if (kind === "fork") {
      const fresh = record["new_branch"];
      if (!isInt(fresh) || fresh !== this.highest + 1 || record["branch"] !== this.liveBranch) {
        throw new JournalMismatch(`${this.path}: a fork that does not create the next branch from the live one`);
      }
    }
  }

  // -- state ---------------------------------------------------------------------------------------------
  /** The live branch (the highest numbered). */
  get branch(): number {
    return this.liveBranch;
  }

  /** Every record written, in file order. */
  get entries(): Entry[] {
    return [...this.entryList];
  }

  /** branch -> its last lsn in this journal (-1: none yet): the `expect` of the gate's decision. */
  highWater(): Map<number, number> {
    return new Map([...this.nextLsn.entries()].sort((a, b) => a[0] - b[0]).map(([b, n]) => [b, n - 1]));
  }

  /** turn -> lineage, for every turn planned in this journal, in order of planning. */
  planned(): Map<string, string> {
    return new Map(this.plannedTurns);
  }

  /** The latest dispatch's readback of the intent (null: not dispatched, or no readback yet). */
  readback(turn: string, intent: string): string | null {
    return this.intents.get(JSON.stringify([turn, intent]))?.outcome ?? null;
  }

  dispatched(turn: string, intent: string): boolean {
    return this.intents.has(JSON.stringify([turn, intent]));
  }

  get closed(): boolean {
    return this.fd === null;
  }

  // -- writing -------------------------------------------------------------------------------------------
  /** Write one record of `kind` on the live branch, durably; returns it as written. */
  append(kind: string, fields: Extra = {}): JsonObject {
    nonEmpty(kind, "kind");
    const clash = Object.keys(fields).filter((k) => ENVELOPE.has(k)).sort();
    if (clash.length > 0) throw new RecordRefused(`the journal writes the envelope itself: ${clash.join(", ")}`);
    this.writable();
    const branch = this.liveBranch;
    const record = newObject();
    record["v"] = 2;
    record["run"] = this.run;
    record["branch"] = branch;
    record["lsn"] = this.nextLsn.get(branch) ?? 0;
    record["kind"] = kind;
    record["at"] = this.clock();
    const prev = this.lastDigest.get(branch) ?? null;
    if (prev !== null) record["prev"] = prev;
    for (const [key, value] of Object.entries(fields)) {
      if (value !== undefined) record[key] = value;
    }
    let line: Buffer;
    try {
      line = canonicalBytes(record);
    } catch (error) {
      if (error instanceof RecordValueError) throw new RecordRefused(error.message);
      throw error;
    }
    this.check(record);
    if (line.length > this.limits.maxLineBytes) throw new RecordTooLarge(line.length, this.limits.maxLineBytes);
    this.write(Buffer.concat([this.needsNewline ? Buffer.from("\n") : Buffer.alloc(0), line, Buffer.from("\n")]));
    this.needsNewline = false;
    this.account(record);
    this.push(record, line);
    return record;
  }

  private writable(): void {
    if (this.broken !== null) throw new JournalClosed(`${this.path}: an earlier write failed (${this.broken}); reopen the journal`);
    if (this.fd === null) throw new JournalClosed(`${this.path}: the journal is closed`);
  }

  /** Refuse, before anything is written, what the contract would call a violation of this writer. */
  private check(record: JsonObject): void {
    const kind = record["kind"];
    const turn = record["turn"];
    const intent = record["intent"];
    if (kind === "turn_planned") {
      const lineage = record["lineage"];
      if (typeof lineage !== "string" || lineage === "") {
        throw new RecordRefused("a turn's lineage must be a non-empty string (lineage_missing)");
      }
      if (typeof turn === "string" && this.plannedTurns.has(turn) && this.plannedTurns.get(turn) !== lineage) {
        throw new RecordRefused(`turn ${turn} is planned with another lineage (lineage_conflict)`);
      }
      const phases = record["phases"];
      if (phases !== undefined && (!Array.isArray(phases) || phases.length === 0 ||
          new Set(phases).size !== phases.length || !phases.every((p) => typeof p === "string" && p !== ""))) {
        throw new RecordRefused("phases must be a non-empty list of distinct phase names");
      }
    }
    if (["turn_planned", "phase_committed", "intent_dispatched", "effect_observed", "turn_terminal"].includes(String(kind))) {
      nonEmpty(turn, "turn");
      if (kind !== "turn_planned" && !this.plannedTurns.has(turn as string)) {
        throw new RecordRefused(`turn ${String(turn)} is not planned in this journal (unknown_turn)`);
      }
    }
    if (kind === "phase_committed") {
      nonEmpty(record["phase"], "phase");
    } else if (kind === "intent_dispatched") {
      nonEmpty(intent, "intent");
      const cls = record["effect_class"];
      const rawKey = record["idempotency_key"];
      if (!EFFECT_CLASSES.includes(cls as EffectClass)) throw new RecordRefused(`effect_class must be one of ${EFFECT_CLASSES.join(", ")}`);
      if (cls === "idempotent" && (typeof rawKey !== "string" || rawKey === "")) {
        throw new RecordRefused("an idempotent intent needs an idempotency_key (idempotency_key_missing)");
      }
      const key = typeof rawKey === "string" ? rawKey : null;
      const known = this.intents.get(JSON.stringify([turn, intent]));
      if (known !== undefined) {
        if (known.effectClass !== cls || known.key !== key) {
          throw new RecordRefused(`intent ${String(intent)} was dispatched with another class or key (intent_conflict)`);
        }
        if (cls === "unsafe" && known.outcome !== "failed") {
          throw new UnsafeRedispatch(`unsafe intent ${String(turn)}/${String(intent)} was dispatched and its readback is ` +
            `${known.outcome ?? "missing"}: a second dispatch would be a second effect`);
        }
      }
    } else if (kind === "effect_observed") {
      nonEmpty(intent, "intent");
      if (!this.intents.has(JSON.stringify([turn, intent]))) {
        throw new RecordRefused(`intent ${String(turn)}/${String(intent)} was never dispatched (intent_unknown)`);
      }
      if (!OUTCOMES.includes(record["outcome"] as string)) throw new RecordRefused(`outcome must be one of ${OUTCOMES.join(", ")}`);
    } else if (kind === "turn_terminal") {
      if (!STATUSES.includes(record["status"] as string)) throw new RecordRefused(`status must be one of ${STATUSES.join(", ")}`);
    } else if (kind === "fork") {
      const fromLsn = record["from_lsn"];
      const lsn = record["lsn"] as number;
      if (!isInt(fromLsn) || fromLsn < -1 || fromLsn >= lsn) {
        throw new RecordRefused(`from_lsn must be -1 to ${lsn - 1}: a fork rewinds to before itself`);
      }
      if (record["new_branch"] !== this.highest + 1) throw new RecordRefused("new_branch is the next branch number; let fork() choose it");
      nonEmpty(record["reason"], "reason");
    } else if (kind === "checkpoint") {
      const covers = record["covers_lsn"];
      if (!isInt(covers) || covers < -1 || covers >= (record["lsn"] as number)) {
        throw new RecordRefused("covers_lsn must be below the checkpoint's own lsn");
      }
      nonEmpty(record["state_digest"], "state_digest");
    }
  }

  private write(data: Buffer): void {
    const fd = this.fd;
    if (fd === null) throw new JournalClosed(`${this.path}: the journal is closed`);
    try {
      let done = 0;
      while (done < data.length) done += writeSync(fd, data, done, data.length - done);
      fsyncSync(fd);
    } catch (error) {
      // What reached the file is unknown (a part of the line, perhaps): the next open says.
      this.broken = String(error);
      throw new JournalError(`${this.path}: the write did not complete (${this.broken})`);
    }
  }

  // -- the record kinds ----------------------------------------------------------------------------------
  /** `turn_planned`: the turn exists; `phases` its plan (default: the contract's seven). */
  plan(turn: string, lineage: string, options: { phases?: string[]; extra?: Extra } = {}): JsonObject {
    return this.append("turn_planned", { ...options.extra, turn, lineage, phases: options.phases });
  }

  /** `phase_committed`: the phase's effects are durable. */
  commit(turn: string, phase: string, extra: Extra = {}): JsonObject {
    return this.append("phase_committed", { ...extra, turn, phase });
  }

  /** `intent_dispatched`: written before the effect is sent. `UnsafeRedispatch` for an unsafe intent whose
   * previous dispatch has no `failed` readback. */
  dispatch(
    turn: string,
    intent: string,
    effectClass: EffectClass,
    options: { idempotencyKey?: string | null; argsDigest?: string; extra?: Extra } = {},
  ): JsonObject {
    return this.append("intent_dispatched", {
      ...options.extra,
      turn,
      intent,
      effect_class: effectClass,
      idempotency_key: options.idempotencyKey ?? undefined,
      args_digest: options.argsDigest,
    });
  }

  /** `effect_observed`: the readback of the intent's latest dispatch. */
  observe(turn: string, intent: string, outcome: Outcome, extra: Extra = {}): JsonObject {
    return this.append("effect_observed", { ...extra, turn, intent, outcome });
  }

  /** `turn_terminal`: the turn is over (`completed` needs every planned phase committed). */
  terminal(turn: string, status: Status = "completed", extra: Extra = {}): JsonObject {
    return this.append("turn_terminal", { ...extra, turn, status });
  }

  /** `fork`: rewind the live branch to its own `fromLsn` (-1: none of its records); returns the new branch. */
  fork(fromLsn: number, reason: string, extra: Extra = {}): number {
    const fresh = this.highest + 1;
    this.append("fork", { ...extra, new_branch: fresh, from_lsn: fromLsn, reason });
    return fresh;
  }

  /** `checkpoint`: writes the digest it is given, which must be the server's canonical fold (not computed
   * here); a wrong one is `checkpoint_mismatch` and blocks the whole run. */
  checkpoint(coversLsn: number, stateDigest: string, options: { state?: JsonObject; extra?: Extra } = {}): JsonObject {
    return this.append("checkpoint", { ...options.extra, covers_lsn: coversLsn, state_digest: stateDigest, state: options.state });
  }

  /**
   * Run a side effect between its dispatch and its readback, the dispatch fsynced before `body` runs.
   * An unsafe effect needs its dispatch acknowledged by the server first: use a turn session
   * (`gate.turn(...)`); here it is refused (`WriteAheadRequired`, nothing written) unless
   * `localWriteAhead` is set. The readback: `succeeded` when the body returns (or what it set on the
   * `Effect`), `failed` when it throws `EffectFailed` (or what `failedOn` accepts), `unknown` otherwise.
   */
  async effect<T>(
    turn: string,
    intent: string,
    effectClass: EffectClass,
    body: (effect: Effect) => T | Promise<T>,
    options: EffectOptions = {},
  ): Promise<T> {
    if (effectClass === "unsafe" && !options.localWriteAhead) {
      throw new WriteAheadRequired(`${turn}/${intent}: an unsafe effect runs only after the server acknowledged its dispatch; ` +
        "use gate.turn(...), or localWriteAhead: true (no protection against a stalled worker)");
    }
    const record = this.dispatch(turn, intent, effectClass, { idempotencyKey: options.key, argsDigest: options.argsDigest, extra: options.extra });
    const effect = new Effect(turn, intent, effectClass, options.key ?? null, record);
    return this.readbackOf(effect, body, options.failedOn);
  }

  /** Run `body` for `effect` (whose dispatch is written) and write its readback after it. */
  async readbackOf<T>(effect: Effect, body: (effect: Effect) => T | Promise<T>, failedOn?: (error: unknown) => boolean): Promise<T> {
    let result: T;
    try {
      result = await body(effect);
    } catch (error) {
      const failed = error instanceof EffectFailed || (failedOn !== undefined && failedOn(error));
      effect.readback = this.observe(effect.turn, effect.intent, failed ? "failed" : "unknown");
      throw error;
    }
    effect.readback = this.observe(effect.turn, effect.intent, effect.outcome ?? "succeeded");
    return result;
  }

  /** A new local journal at `path` holding `lines` (e.g. `gate.records(run)`), written whole and fsynced;
   * refused when `path` exists. */
  static rebuild(path: string, options: JournalOptions & { lines: Buffer[] }): Journal {
    const data = Buffer.concat(options.lines.flatMap((l) => [l, Buffer.from("\n")]));
    const fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o644);
    try {
      writeFileSync(fd, data);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    fsyncDir(dirname(path));
    return Journal.open(path, options);
  }

  /** Release the file (every record written is already durable) and its lock. */
  close(): void {
    const fd = this.fd;
    this.fd = null;
    if (fd !== null) closeSync(fd);
    if (this.locked) {
      this.locked = false;
      try {
        unlinkSync(this.lockPath);
      } catch {
        // already gone
      }
    }
  }
}
