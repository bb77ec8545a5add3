/**
 * The server's side over HTTP: ship a journal, ask the recovery gate, claim turns, report recoveries.
 *
 * Node's built-in `fetch`; no dependency. Every refusal throws the typed error of its code (errors.ts).
 *
 * Retries, with exponential backoff and jitter, only where repeating a request cannot do anything twice:
 * reads (the decision, the ack cursors, the limits, records, evidence); shipping records (ingest stores a
 * record once whatever the number of deliveries); a claim (the holder claiming again renews its lease and
 * keeps its token). A throttle (429) or an outage (503 `unavailable`) is waited out at least as long as the
 * server's `Retry-After` asks (at most `maxRetryAfter` seconds).
 *
 * Never retried: release, opening a recovery, reporting an action and closing an audit. Each changes the
 * gate's state once, so a lost answer is the caller's to look into, not this client's to repeat.
 */

import { canonicalBytes, digest } from "./canonical.js";
import {
  ApiError,
  errorFor,
  MethodNotAllowed,
  NotFound,
  LoopxError,
  OffsetMismatch,
  RecordNotVerbatim,
  ServerError,
  ShipDiverged,
  Throttled,
  TransportError,
} from "./errors.js";
import type { Entry, Journal } from "./journal.js";
import { type JsonObject, type JsonValue, parseJson } from "./json.js";
import { DEFAULT_LIMITS, type Limits, limitsFromAnswer } from "./limits.js";
import { TurnSession, type TurnOptions } from "./session.js";

export const USER_AGENT = "loopx-client-ts/0.2";

/** Seconds on a monotonic clock (never goes back, unlike the wall clock). */
export function monotonic(): number {
  return performance.now() / 1000;
}

/** What `Gate.ship` sends: a run's records in file order (a `Journal` is one). */
export interface Shippable {
  readonly run: string;
  readonly entries: Entry[];
  highWater(): Map<number, number>;
}

/**
 * A lease on a turn and its fencing token. `expiresAt`: the server's end of the lease (for people and
 * logs). `leaseSeconds`: what the server granted. `deadline`: the local monotonic time at which the lease is
 * over for this worker, counted from *before* the claim was sent, so never later than the server's end.
 */
export class Claim {
  constructor(
    readonly run: string,
    readonly turn: string,
    readonly workerId: string,
    readonly fencingToken: number,
    readonly expiresAt: Date,
    readonly leaseSeconds: number,
    readonly deadline: number,
  ) {}

  /** Seconds of lease left by the local monotonic clock (negative: over). */
  remaining(): number {
    return this.deadline - monotonic();
  }
}

/** The gate's answer for a turn: `state` `proceed` (recover as `planned` says), `hold` (blocked, for
 * `reason`) or `done` (nothing may run). `body` is the whole answer. */
export interface Decision {
  state: string;
  decision: string;
  reason: string | null;
  resumeFrom: string | null;
  planned: JsonObject[];
  intents: JsonObject[];
  offsetMismatch: JsonObject | null;
  body: JsonObject;
}

/** An open recovery of a turn, under the claim it was opened with; `planned` is the gate's plan. */
export interface RecoveryAudit {
  id: number;
  run: string;
  turn: string;
  fencingToken: number;
  planned: JsonObject[];
  body: JsonObject;
}

export interface ShipResult {
  stored: number;
  duplicates: number;
  batches: number;
  /** branch -> the server's ack cursor after shipping (every lsn 0..n of the branch is stored). */
  acknowledged: Map<number, number>;
  /** The run-level violations the server found in what was stored (`{code, line, branch, lsn, detail}`):
   * empty for a journal this client wrote, unless another writer broke the run. */
  violations: JsonObject[];
}

export interface GateOptions {
  /** Seconds per request. */
  timeout?: number;
  retries?: number;
  backoff?: number;
  maxBackoff?: number;
  batchRecords?: number;
  batchBytes?: number;
  maxRetryAfter?: number;
  sleep?: (seconds: number) => Promise<void>;
}

interface RequestOptions {
  body?: Buffer;
  contentType?: string;
  headers?: Record<string, string>;
}

function obj(value: JsonValue | undefined): JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value) ? value : {};
}
function list(value: JsonValue | undefined): JsonObject[] {
  return Array.isArray(value) ? value.map((v) => obj(v)) : [];
}
function int(value: JsonValue | undefined): number {
  if (typeof value === "number") return value;
  if (typeof value === "bigint" || typeof value === "string") return Number(value);
  throw new TransportError(`an answer without an integer where one is due (${String(value)})`);
}
function strOrNull(value: JsonValue | undefined): string | null {
  return typeof value === "string" ? value : null;
}

/** Seconds of a Retry-After header (delta-seconds, or an HTTP date). */
export function retryAfterSeconds(value: string | null): number | null {
  if (!value) return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds);
  const when = Date.parse(value);
  return Number.isNaN(when) ? null : Math.max(0, (when - Date.now()) / 1000);
}

const sleepSeconds = (seconds: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

function retryable(error: unknown): error is LoopxError {
  return error instanceof TransportError || error instanceof ServerError || error instanceof Throttled;
}

/**
 * The LoopX API for a runtime: `new Gate("https://loopx.example", token)`. `token` is a runtime API token
 * (`manage.py create_api_token`), sent as a bearer token and never shown. Claimed turns' fencing tokens are
 * kept here and sent (`LoopX-Fencing`) with every batch that names those turns.
 */
export class Gate {
  readonly base: string;
  readonly timeout: number;
  readonly retries: number;
  readonly backoff: number;
  readonly maxBackoff: number;
  readonly batchRecords: number;
  readonly batchBytes: number;
  readonly maxRetryAfter: number;
  readonly sleep: (seconds: number) => Promise<void>;
  readonly #token: string;
  #limits: Promise<Limits> | null = null;
  readonly #fencing = new Map<string, number>();
  // run -> branch -> the ack cursor of the server's last answer (absent: ask the server first).
  readonly #acked = new Map<string, Map<number, number>>();

  constructor(baseUrl: string, token: string, options: GateOptions = {}) {
    this.base = baseUrl.replace(/\/+$/, "") + "/api/v1";
    this.#token = token;
    this.timeout = options.timeout ?? 30;
    this.retries = options.retries ?? 5;
    this.backoff = options.backoff ?? 0.2;
    this.maxBackoff = options.maxBackoff ?? 5;
    this.batchRecords = options.batchRecords ?? 1000;
    this.batchBytes = options.batchBytes ?? 4 * 1024 * 1024;
    this.maxRetryAfter = options.maxRetryAfter ?? 60;
    this.sleep = options.sleep ?? sleepSeconds;
  }

  toString(): string {
    return `Gate(${this.base})`; // never the token
  }

  // -- HTTP ----------------------------------------------------------------------------------------------
  /** One request; the typed error of a refusal, TransportError when no answer came. */
  async request(method: string, path: string, options: RequestOptions = {}): Promise<JsonValue> {
    const url = path.startsWith("http") ? path : this.base + path;
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.#token}`,
      Accept: "application/json",
      "User-Agent": USER_AGENT,
      ...options.headers,
    };
    if (options.contentType) headers["Content-Type"] = options.contentType;
    let status: number;
    let text: string;
    let retryAfter: string | null;
    try {
      const init: RequestInit = { method, headers, signal: AbortSignal.timeout(this.timeout * 1000) };
      if (options.body !== undefined) init.body = options.body;
      const response = await fetch(url, init);
      status = response.status;
      retryAfter = response.headers.get("Retry-After");
      text = await response.text();
    } catch (error) {
      // Refused, reset, timed out, or cut off in the middle of the answer: the request may or may not
      // have been carried out.
      throw new TransportError(`${method} ${url}: no answer (${String(error)})`);
    }
    let data: JsonValue = null;
    let parsed = true;
    try {
      data = text ? parseJson(text) : null;
    } catch {
      parsed = false;
    }
    if (status >= 400) throw errorFor(status, parsed ? data : {}, retryAfterSeconds(retryAfter));
    if (!parsed) throw new TransportError(`${method} ${url}: an answer that is not JSON`);
    return data;
  }

  /** `call` again after a lost answer, a throttle or a server error, with backoff: for requests that are
   * safe to repeat only. */
  async retrying<T>(call: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; ) {
      try {
        return await call();
      } catch (error) {
        if (!retryable(error) || attempt >= this.retries) throw error;
        attempt += 1;
        await this.pause(attempt, error);
      }
    }
  }

  /** Back off before the `attempt`-th repeat; at least the server's Retry-After when it gave one. */
  private async pause(attempt: number, error: unknown): Promise<void> {
    let delay = Math.min(this.maxBackoff, this.backoff * 2 ** (attempt - 1)) * (0.5 + Math.random() / 2);
    const asked = error instanceof ApiError ? error.retryAfter : null;
    if (asked !== null) delay = Math.max(delay, Math.min(asked, this.maxRetryAfter));
    await this.sleep(delay);
  }

  private q(value: string): string {
    return encodeURIComponent(value);
  }

  private turnPath(run: string, turn: string): string {
    return `/runs/${this.q(run)}/turns/${this.q(turn)}`;
  }

  private post(path: string, payload: JsonObject): Promise<JsonValue> {
    return this.request("POST", path, { body: canonicalBytes(payload), contentType: "application/json" });
  }

  // -- limits --------------------------------------------------------------------------------------------
  /** The server's ingest limits and claim lease (`GET /api/v1/limits`), asked once per Gate. A server
   * without the endpoint: the documented defaults. */
  limits(): Promise<Limits> {
    if (this.#limits === null) {
      const asked = this.retrying(() => this.request("GET", "/limits")).then(
        (answer) => limitsFromAnswer(answer),
        (error: unknown) => {
          if (error instanceof NotFound || error instanceof MethodNotAllowed) return { ...DEFAULT_LIMITS };
          this.#limits = null; // ask again next time
          throw error;
        },
      );
      this.#limits = asked;
    }
    return this.#limits;
  }

  // -- shipping ------------------------------------------------------------------------------------------
  /** branch -> the server's ack cursor (every lsn 0..n stored), asked of the server now. */
  async acknowledged(run: string): Promise<Map<number, number>> {
    let rows: JsonValue;
    try {
      rows = await this.retrying(() => this.request("GET", `/runs/${this.q(run)}/branches`));
    } catch (error) {
      if (error instanceof NotFound) return new Map(); // the run does not exist yet: nothing stored
      throw error;
    }
    const cursors = new Map<number, number>();
    for (const row of list(rows)) {
      const committed = int(row["committed_lsn"]);
      if (committed >= 0) cursors.set(int(row["branch"]), committed);
    }
    this.#acked.set(run, new Map(cursors));
    return cursors;
  }

  /**
   * Send the server every record of `journal` it has not acknowledged, in file order. Safe to repeat at
   * any time: the ack cursors say where to resume, and a record delivered twice is stored once. Each batch
   * carries `LoopX-Expect` (the cursors it is sent against) and `LoopX-Fencing` (the tokens of claimed
   * turns it names). After a lost answer the cursors are asked again and the record at each cursor is sent
   * again, so that the server compares its bytes (`LsnConflict` when the two journals differ).
   * `ShipDiverged`: the server holds records the local journal does not.
   */
  async ship(journal: Shippable): Promise<ShipResult> {
    const result: ShipResult = { stored: 0, duplicates: 0, batches: 0, acknowledged: new Map(), violations: [] };
    const entries = journal.entries;
    const local = journal.highWater();
    let cursors = this.#acked.get(journal.run);
    let probe = cursors === undefined;
    if (cursors === undefined) cursors = await this.acknowledged(journal.run);
    let mismatches = 0;
    let failures = 0;
    for (;;) {
      for (const [branch, lsn] of cursors) {
        if (lsn > (local.get(branch) ?? -1)) throw new ShipDiverged(branch, lsn, local.get(branch) ?? -1);
      }
      const at = cursors;
      const pending = entries.filter((e) => e.lsn > (at.get(e.branch) ?? -1) || (probe && e.lsn === at.get(e.branch)));
      if (pending.length === 0) {
        result.acknowledged = new Map(cursors);
        this.#acked.set(journal.run, new Map(cursors));
        return result;
      }
      const batch = await this.batch(pending);
      let answer: JsonObject;
      try {
        answer = obj(await this.postBatch(journal.run, batch, cursors));
      } catch (error) {
        if (retryable(error)) {
          // The batch may have been stored: ask where the server is, and resume from there.
          this.#acked.delete(journal.run);
          failures += 1;
          if (failures > this.retries) throw error;
          await this.pause(failures, error);
          cursors = await this.retrying(() => this.acknowledged(journal.run));
          probe = true;
          continue;
        }
        if (error instanceof OffsetMismatch) {
          // Another delivery moved the cursor (ours, whose answer was lost): ask again, once or twice.
          mismatches += 1;
          if (mismatches > 2) throw error;
          cursors = await this.acknowledged(journal.run);
          probe = true;
          continue;
        }
        throw error;
      }
      result.batches += 1;
      result.stored += int(answer["stored"]);
      result.duplicates += int(answer["duplicates"]);
      result.violations.push(...list(answer["violations"]));
      for (const row of list(answer["branches"])) {
        const committed = int(row["committed_lsn"]);
        if (committed >= 0) cursors.set(int(row["branch"]), committed);
      }
      this.#acked.set(journal.run, new Map(cursors));
      probe = false;
      failures = 0;
    }
  }

  private async batch(pending: Entry[]): Promise<Entry[]> {
    const limits = await this.limits();
    const maxRecords = Math.min(this.batchRecords, limits.maxBatchRecords);
    const maxBytes = Math.min(this.batchBytes, limits.maxBatchBytes);
    const out: Entry[] = [];
    let size = 0;
    for (const entry of pending) {
      if (out.length > 0 && (out.length >= maxRecords || size + entry.line.length + 1 > maxBytes)) break;
      out.push(entry);
      size += entry.line.length + 1;
    }
    return out;
  }

  private postBatch(run: string, batch: Entry[], cursors: Map<number, number>): Promise<JsonValue> {
    const branches = [...new Set(batch.map((e) => e.branch))].sort((a, b) => a - b);
    const headers: Record<string, string> = {
      "LoopX-Expect": branches.map((b) => `${b}:${cursors.get(b) ?? -1}`).join(", "),
    };
    const fencing = this.fencingHeader(run, new Set(batch.flatMap((e) => (e.turn === null ? [] : [e.turn]))));
    if (fencing) headers["LoopX-Fencing"] = fencing;
    const body = Buffer.concat(batch.flatMap((e) => [e.line, Buffer.from("\n")]));
    return this.request("POST", `/runs/${this.q(run)}/records`, { body, contentType: "application/x-ndjson", headers });
  }

  /** `LoopX-Fencing` for the claimed ones of `turns` (turn ids percent-encoded). */
  fencingHeader(run: string, turns: Set<string>): string {
    const held: [string, number][] = [];
    for (const turn of turns) {
      const token = this.#fencing.get(JSON.stringify([run, turn]));
      if (token !== undefined) held.push([turn, token]);
    }
    held.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    return held.map(([turn, token]) => `${this.q(turn)}=${token}`).join(", ");
  }

  /** After a restart: claim again every turn named by a record the server has not acknowledged (the same
   * `workerId` gets its token back while its lease holds), so that `ship` can send them with their fencing
   * tokens. A turn the server does not know yet is skipped; `ClaimHeld` when another worker took one over. */
  async reclaim(journal: Journal, workerId: string): Promise<Map<string, Claim>> {
    const cursors = await this.acknowledged(journal.run);
    const turns: string[] = [];
    for (const entry of journal.entries) {
      if (entry.turn !== null && entry.lsn > (cursors.get(entry.branch) ?? -1) && !turns.includes(entry.turn)) {
        turns.push(entry.turn);
      }
    }
    const claims = new Map<string, Claim>();
    for (const turn of turns) {
      try {
        claims.set(turn, await this.claim(journal.run, turn, workerId));
      } catch (error) {
        if (!(error instanceof NotFound)) throw error;
      }
    }
    return claims;
  }

  // -- reading back --------------------------------------------------------------------------------------
  /** Every stored record of `run` in the server's order, as canonical bytes, each checked against the digest
   * the server stored (`RecordNotVerbatim` when they differ). A run not stored yet: []. */
  async records(run: string): Promise<Buffer[]> {
    const out: Buffer[] = [];
    let url: string | null = `/runs/${this.q(run)}/records`;
    while (url !== null) {
      const at: string = url;
      let page: JsonObject;
      try {
        page = obj(await this.retrying(() => this.request("GET", at)));
      } catch (error) {
        if (error instanceof NotFound && out.length === 0) return [];
        throw error;
      }
      for (const item of list(page["results"])) {
        const record = obj(item["record"]);
        if (digest(record) !== item["digest"]) {
          throw new RecordNotVerbatim(int(item["branch"]), int(item["lsn"]));
        }
        out.push(canonicalBytes(record));
      }
      url = strOrNull(page["next"]);
    }
    return out;
  }

  /** The operators' findings on the turn's intents, oldest first. A turn not stored yet: []. */
  async evidence(run: string, turn: string): Promise<JsonObject[]> {
    const found: JsonObject[] = [];
    let url: string | null = this.turnPath(run, turn) + "/evidence";
    while (url !== null) {
      const at: string = url;
      let page: JsonValue;
      try {
        page = await this.retrying(() => this.request("GET", at));
      } catch (error) {
        if (error instanceof NotFound && found.length === 0) return [];
        throw error;
      }
      found.push(...(Array.isArray(page) ? list(page) : list(obj(page)["results"])));
      url = Array.isArray(page) ? null : strOrNull(obj(page)["next"]);
    }
    return found.sort((a, b) => String(a["created_at"]).localeCompare(String(b["created_at"])));
  }

  // -- the gate ------------------------------------------------------------------------------------------
  /** The gate's decision for the turn. `expect` (branch -> the last lsn the runtime believes committed,
   * e.g. `journal.highWater()` after a ship): a stored prefix that differs is `hold` / `offset_mismatch`. */
  async decision(run: string, turn: string, options: { expect?: Map<number, number> } = {}): Promise<Decision> {
    let path = this.turnPath(run, turn) + "/decision";
    if (options.expect !== undefined && options.expect.size > 0) {
      const text = [...options.expect.entries()].sort((a, b) => a[0] - b[0]).map(([b, l]) => `${b}:${l}`).join(",");
      path += "?" + new URLSearchParams({ expect: text }).toString();
    }
    const body = obj(await this.retrying(() => this.request("GET", path)));
    const mismatch = body["offset_mismatch"];
    return {
      state: String(body["state"]),
      decision: String(body["decision"]),
      reason: strOrNull(body["reason"]),
      resumeFrom: strOrNull(body["resume_from"]),
      planned: list(body["planned"]),
      intents: list(body["intents"]),
      offsetMismatch: mismatch === undefined || mismatch === null ? null : obj(mismatch),
      body,
    };
  }

  /** A lease on the turn and its fencing token; `ClaimHeld` while another worker's lease holds,
   * `NothingToRecover` for a turn that is complete or discarded. Retried: the holder's repeat renews. */
  async claim(run: string, turn: string, workerId: string): Promise<Claim> {
    const started = monotonic(); // before the request: the local deadline is never later than the server's
    const body = obj(await this.retrying(() => this.post(this.turnPath(run, turn) + "/claim", { worker_id: workerId })));
    const expiresAt = new Date(String(body["expires_at"]));
    let lease = body["lease_seconds"];
    if (typeof lease !== "number" || lease <= 0) {
      // A server that does not say: what is left until its expires_at by this machine's clock.
      lease = Math.max(0, (expiresAt.getTime() - Date.now()) / 1000);
    }
    const claim = new Claim(run, turn, String(body["worker_id"]), int(body["fencing_token"]), expiresAt, lease, started + lease);
    this.#fencing.set(JSON.stringify([run, turn]), claim.fencingToken);
    return claim;
  }

  /** Renew the lease (the holder's claim again): the same token and a later end, or a refusal. */
  renew(claim: Claim): Promise<Claim> {
    return this.claim(claim.run, claim.turn, claim.workerId);
  }

  /** End the lease. Never retried. */
  async release(claim: Claim): Promise<void> {
    await this.post(this.turnPath(claim.run, claim.turn) + "/release", { fencing_token: claim.fencingToken });
  }

  /** Stop sending the turn's fencing token. */
  forget(run: string, turn: string): void {
    this.#fencing.delete(JSON.stringify([run, turn]));
  }

  /**
   * Run `work` as one turn session (see session.ts): plans the turn if the journal has not, ships, asks the
   * gate (`TurnHeld` on `hold`), claims, keeps the lease, and on leaving ships, closes the recovery audit and
   * releases the lease (also after an error). Returns what `work` returned.
   */
  async turn<T>(journal: Journal, turn: string, options: TurnOptions, work: (t: TurnSession) => Promise<T>): Promise<T> {
    const session = new TurnSession(this, journal, turn, options);
    await session.enter();
    let result: T;
    try {
      result = await work(session);
    } catch (error) {
      await session.exit(error);
      throw error;
    }
    await session.exit(null);
    return result;
  }

  /** Ask the gate until the turn is no longer held or `timeout` seconds have passed; the poll interval
   * doubles from `poll` to `maxPoll`. Returns the last decision: check its `state`. */
  async waitForDecision(
    run: string,
    turn: string,
    options: { timeout: number; poll?: number; maxPoll?: number; expect?: Map<number, number> },
  ): Promise<Decision> {
    const deadline = monotonic() + options.timeout;
    let interval = options.poll ?? 1;
    const maxPoll = options.maxPoll ?? 30;
    for (;;) {
      const answer = await this.decision(run, turn, { expect: options.expect });
      if (answer.state !== "hold" && answer.state !== "pending") return answer;
      const left = deadline - monotonic();
      if (left <= 0) return answer;
      await this.sleep(Math.min(interval, left));
      interval = Math.min(maxPoll, interval * 2);
    }
  }

  // -- recovery audits -----------------------------------------------------------------------------------
  /** Open a recovery of the claimed turn: its plan is the gate's `planned`. Never retried. */
  async openRecovery(claim: Claim): Promise<RecoveryAudit> {
    const body = obj(await this.post(this.turnPath(claim.run, claim.turn) + "/recovery", { fencing_token: claim.fencingToken }));
    return { id: int(body["id"]), run: claim.run, turn: claim.turn, fencingToken: claim.fencingToken, planned: list(body["planned"]), body };
  }

  /** Report an action the recovery actually took (`kind`: `phase`, `intent` or `terminal`). Never retried. */
  async report(audit: RecoveryAudit, kind: string, target: string, detail: JsonObject = {}): Promise<JsonObject> {
    const path = this.turnPath(audit.run, audit.turn) + `/recovery/${audit.id}/actions`;
    return obj(await this.post(path, { fencing_token: audit.fencingToken, kind, target, detail }));
  }

  /** Close the audit: planned actions never reported become `planned_action_missing` divergences. */
  async closeRecovery(audit: RecoveryAudit, note = ""): Promise<JsonObject> {
    const path = this.turnPath(audit.run, audit.turn) + `/recovery/${audit.id}/close`;
    return obj(await this.post(path, { fencing_token: audit.fencingToken, note }));
  }
}
