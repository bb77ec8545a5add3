/**
 * A turn as a runtime lives it: claimed, its lease kept, its unsafe effects written ahead at the server.
 *
 * Write-ahead at the authority: an unsafe effect (or one with `writeAhead: true`) runs only after its
 * `intent_dispatched` record is acknowledged by the server under the turn's fencing token. The lease is
 * checked before the dispatch is written and again once it is acknowledged: the lease left, by the local
 * monotonic clock, must cover the effect's declared `maxDuration` plus a margin. The margin assumes clocks
 * whose rates differ by at most `clockDrift` (1% by default) plus `leaseMargin` seconds (1 s by default),
 * as every lease does: a body that runs longer than it declared is outside what a lease can protect.
 */

import {
  ApiError,
  Fenced,
  LeaseLost,
  LeaseTooShort,
  LoopxError,
  NothingToRecover,
  ServerError,
  Throttled,
  TransportError,
  TurnHeld,
  WriteAheadFailed,
} from "./errors.js";
import type { Claim, Decision, Gate, RecoveryAudit } from "./gate.js";
import { DEFAULT_PHASES, Effect, type EffectClass, type Extra, type Journal } from "./journal.js";

export interface TurnOptions {
  lineage: string;
  workerId: string;
  phases?: string[];
  /** Renew the lease in the background (else call `t.renew()` more often than the lease runs out). */
  keepLease?: boolean;
  clockDrift?: number;
  leaseMargin?: number;
}

export interface CallOptions {
  key?: string;
  /** Seconds the effect may take at most: the lease left must cover it (default 30). */
  maxDuration?: number;
  /** Write ahead at the server (default: for an unsafe effect only). */
  writeAhead?: boolean;
  failedOn?: (error: unknown) => boolean;
  extra?: Extra;
}

/**
 * Keeps a claim's lease: renews it every `every` seconds (a third of the lease by default) once started,
 * or when `renew()` is called. A renewal refused by the server, one that comes back with another token (the
 * lease had run out on the server), or a local deadline passed before a renewal got through marks it lost;
 * every later `check` throws `LeaseLost`. A renewal with no answer is tried again at the next tick.
 */
export class LeaseKeeper {
  readonly every: number;
  readonly clockDrift: number;
  readonly leaseMargin: number;
  #claim: Claim;
  #lost: string | null = null;
  #timer: NodeJS.Timeout | null = null;
  #inFlight: Promise<unknown> | null = null;

  constructor(readonly gate: Gate, claim: Claim, options: { every?: number; clockDrift?: number; leaseMargin?: number } = {}) {
    const drift = options.clockDrift ?? 0.01;
    if (!(drift >= 0 && drift < 1)) throw new RangeError("clockDrift is a rate between 0 and 1");
    this.#claim = claim;
    this.every = options.every ?? Math.max(claim.leaseSeconds / 3, 0.05);
    this.clockDrift = drift;
    this.leaseMargin = options.leaseMargin ?? 1;
  }

  get claim(): Claim {
    return this.#claim;
  }

  /** Why the lease is lost, or null while it is held. */
  get lost(): string | null {
    if (this.#lost === null && this.#claim.remaining() <= 0) this.#lost = "the lease ran out before it was renewed";
    return this.#lost;
  }

  remaining(): number {
    return this.#claim.remaining();
  }

  markLost(reason: string): void {
    if (this.#lost === null) this.#lost = reason;
  }

  /** Renew now; `LeaseLost` when the lease is lost (then or before). */
  async renew(): Promise<Claim> {
    const held = this.#claim;
    if (this.lost !== null) throw new LeaseLost(held.turn, this.lost);
    let renewed: Claim;
    try {
      renewed = await this.gate.renew(held);
    } catch (error) {
      if (error instanceof ServerError || error instanceof Throttled || !(error instanceof ApiError)) throw error;
      this.markLost(`the renewal was refused: ${error.code}`);
      throw new LeaseLost(held.turn, this.#lost ?? "");
    }
    if (renewed.fencingToken !== held.fencingToken) {
      // The lease had run out on the server: this worker may have acted while nobody held it. The new token
      // is not this session's to write with: forgotten and handed back.
      this.markLost("the lease had run out on the server (the renewal came back with another token)");
      this.gate.forget(renewed.run, renewed.turn);
      await this.gate.release(renewed).catch(() => undefined);
      throw new LeaseLost(held.turn, this.#lost ?? "");
    }
    this.#claim = renewed;
    return renewed;
  }

  /** Refuse (`LeaseLost`, `LeaseTooShort`) unless the lease left covers `maxDuration` seconds:
   * `remaining * (1 - clockDrift) >= maxDuration + leaseMargin`. */
  check(intent: string, maxDuration: number): void {
    const held = this.#claim;
    if (this.lost !== null) throw new LeaseLost(held.turn, this.lost);
    const needed = (maxDuration + this.leaseMargin) / (1 - this.clockDrift);
    const remaining = held.remaining();
    if (remaining < needed) throw new LeaseTooShort(held.turn, intent, remaining, needed);
  }

  start(): this {
    if (this.#timer === null) {
      this.#timer = setInterval(() => this.tick(), this.every * 1000);
      this.#timer.unref(); // the keeper never keeps the process alive by itself
    }
    return this;
  }

  private tick(): void {
    if (this.#inFlight !== null) return;
    this.#inFlight = this.renew()
      .catch((error: unknown) => {
        if (error instanceof LeaseLost) return this.stopTimer();
        if (error instanceof TransportError || error instanceof ServerError || error instanceof Throttled) return; // next tick
        this.markLost(`the renewal failed: ${String(error)}`);
        this.stopTimer();
      })
      .finally(() => {
        this.#inFlight = null;
      });
  }

  private stopTimer(): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
  }

  /** Stop renewing (waits for a renewal under way). */
  async stop(): Promise<void> {
    this.stopTimer();
    if (this.#inFlight !== null) await this.#inFlight;
  }
}

/**
 * One turn of a runtime, from claim to release (use it through `gate.turn(journal, turn, options, work)`):
 *
 *     await gate.turn(journal, "t1", { lineage: "ticket-1234", workerId: "worker-a" }, async (t) => {
 *       t.commit("plan", "envelope");
 *       const ticket = await t.call("fetch", "safe", () => fetchTicket());
 *       await t.call("save", "idempotent", () => save(ticket), { key: "run-42/t1/save" });
 *       await t.call("send", "unsafe", () => send(ticket), { maxDuration: 30 });
 *       await t.complete();
 *     });
 *
 * `done`: the gate says nothing of the turn may run (it is finished): `call` and `commit` then do nothing.
 */
export class TurnSession {
  readonly run: string;
  readonly phases: string[];
  readonly keepLease: boolean;
  readonly clockDrift: number;
  readonly leaseMargin: number;
  done = false;
  decision: Decision | null = null;
  keeper: LeaseKeeper | null = null;
  audit: RecoveryAudit | null = null;
  readonly #reported = new Set<string>();

  constructor(readonly gate: Gate, readonly journal: Journal, readonly turn: string, readonly options: TurnOptions) {
    this.run = journal.run;
    this.phases = options.phases ? [...options.phases] : [...DEFAULT_PHASES];
    this.keepLease = options.keepLease ?? true;
    this.clockDrift = options.clockDrift ?? 0.01;
    this.leaseMargin = options.leaseMargin ?? 1;
  }

  // -- entering: the gate first --------------------------------------------------------------------------
  async enter(): Promise<void> {
    const { journal, gate } = this;
    journal.limits = await gate.limits();
    if (!journal.planned().has(this.turn)) {
      const custom = this.options.phases !== undefined && this.options.phases.join("\n") !== DEFAULT_PHASES.join("\n");
      journal.plan(this.turn, this.options.lineage, custom ? { phases: this.phases } : {});
    }
    // A recovery when something of the turn beyond its plan was journaled before this session.
    const resuming = journal.entries.some((e) => e.turn === this.turn && e.kind !== "turn_planned");
    if (resuming) await this.unacknowledgedDispatchesFailed();
    await gate.reclaim(journal, this.options.workerId); // this worker's tokens back for records the server lacks
    await gate.ship(journal);
    const decision = await gate.decision(this.run, this.turn, { expect: journal.highWater() });
    this.decision = decision;
    if (decision.state === "hold") {
      await this.letGo(decision);
      throw new TurnHeld(this.turn, decision);
    }
    if (decision.state === "done") {
      this.done = true;
      return;
    }
    let claim: Claim;
    try {
      claim = await gate.claim(this.run, this.turn, this.options.workerId);
    } catch (error) {
      if (error instanceof NothingToRecover) {
        this.done = true;
        return;
      }
      throw error;
    }
    this.keeper = new LeaseKeeper(gate, claim, { clockDrift: this.clockDrift, leaseMargin: this.leaseMargin });
    if (this.keepLease) this.keeper.start();
    try {
      if (resuming) {
        this.settleFindings(decision);
        try {
          this.audit = await gate.openRecovery(claim);
        } catch (error) {
          if (!(error instanceof NothingToRecover)) throw error;
        }
      }
      await gate.ship(journal);
    } catch (error) {
      await this.leave(true);
      throw error;
    }
  }

  /** While a person decides, nobody holds the turn: the server refuses an operator's "it did not happen"
   * while a worker's lease holds (that worker could be sending the effect right now). A lease of this
   * worker's id (a crashed process of this worker: this one holds the journal's lock) is taken back, which
   * keeps its token, and released. */
  private async letGo(decision: Decision): Promise<void> {
    const holder = decision.body["claim"];
    if (typeof holder !== "object" || holder === null || Array.isArray(holder)) return;
    if (holder["worker_id"] !== this.options.workerId) return;
    try {
      const claim = await this.gate.claim(this.run, this.turn, this.options.workerId);
      await this.gate.release(claim);
    } catch (error) {
      if (!(error instanceof LoopxError)) throw error;
    }
  }

  /** A dispatch written ahead at the server (`write_ahead: "server"`) that the server does not hold now, with
   * no readback: the process that wrote it never got the acknowledgement (the server stores a record before
   * it acknowledges it), so the body never ran. Its readback is `failed`, journaled before anything is
   * shipped, so the gate need not hold the turn for an operator. */
  private async unacknowledgedDispatchesFailed(): Promise<void> {
    const cursors = await this.gate.acknowledged(this.run);
    const latest = new Map<string, { branch: number; lsn: number; aheadAtServer: boolean }>();
    for (const entry of this.journal.entries) {
      if (entry.turn === this.turn && entry.kind === "intent_dispatched") {
        latest.set(String(entry.record["intent"]), {
          branch: entry.branch, lsn: entry.lsn, aheadAtServer: entry.record["write_ahead"] === "server",
        });
      }
    }
    for (const [intent, dispatch] of latest) {
      if (!dispatch.aheadAtServer || dispatch.lsn <= (cursors.get(dispatch.branch) ?? -1)) continue;
      if (this.journal.readback(this.turn, intent) === null) {
        this.journal.observe(this.turn, intent, "failed", { source: "not_acknowledged" });
      }
    }
  }

  /** An unsafe effect without a readback got past the gate only with an operator's finding: journal it as
   * that dispatch's readback (`settled`: it happened; `replay`: it did not). */
  private settleFindings(decision: Decision): void {
    for (const seen of decision.intents) {
      const intent = seen["intent"];
      if (typeof intent !== "string" || !this.journal.dispatched(this.turn, intent)) continue;
      const readback = this.journal.readback(this.turn, intent);
      if (readback !== null && readback !== "unknown") continue;
      if (seen["resolution"] === "settled") {
        this.journal.observe(this.turn, intent, "succeeded", { source: "operator_evidence" });
      } else if (seen["resolution"] === "replay") {
        this.journal.observe(this.turn, intent, "failed", { source: "operator_evidence" });
      }
    }
  }

  get claim(): Claim | null {
    return this.keeper?.claim ?? null;
  }

  /** Renew the lease now (with `keepLease: false`, call it more often than the lease runs out). */
  renew(): Promise<Claim> {
    return this.requireKeeper().renew();
  }

  private requireKeeper(): LeaseKeeper {
    if (this.keeper === null) throw new LeaseLost(this.turn, "the turn is not claimed by this session");
    return this.keeper;
  }

  private async report(kind: string, target: string): Promise<void> {
    const audit = this.audit;
    const id = `${kind}\n${target}`;
    if (audit === null || this.#reported.has(id)) return;
    if (audit.planned.some((a) => a["kind"] === kind && a["target"] === target)) {
      await this.gate.report(audit, kind, target);
      this.#reported.add(id);
    }
  }

  // -- the turn's work -----------------------------------------------------------------------------------
  /** The phases of this turn committed in the journal (on any branch). */
  committed(): string[] {
    const phases: string[] = [];
    for (const entry of this.journal.entries) {
      const phase = entry.record["phase"];
      if (entry.kind === "phase_committed" && entry.turn === this.turn && typeof phase === "string" && !phases.includes(phase)) {
        phases.push(phase);
      }
    }
    return phases;
  }

  /** Commit each of `phases` not yet committed (a resumed turn skips what it did before). */
  async commit(...phases: string[]): Promise<void> {
    if (this.done) return;
    const done = this.committed();
    for (const phase of phases) {
      if (!done.includes(phase)) {
        this.journal.commit(this.turn, phase);
        await this.report("phase", phase);
      }
    }
  }

  /** Commit every planned phase not yet committed, then `turn_terminal` `completed`. */
  async complete(): Promise<void> {
    if (this.done) return;
    await this.commit(...this.phases);
    this.journal.terminal(this.turn, "completed");
    await this.report("terminal", "turn_terminal");
    this.done = true;
  }

  /** Whether `call` would run the effect: a safe one always (it only reads), another one unless its latest
   * dispatch has a `succeeded` readback. */
  needed(intent: string, effectClass: EffectClass): boolean {
    if (this.done) return false;
    return effectClass === "safe" || this.journal.readback(this.turn, intent) !== "succeeded";
  }

  /** Run `body` as the effect `intent` when it is needed (see `needed`) and return what it returned
   * (undefined when skipped). As `effect`, whose rules it keeps. */
  async call<T>(intent: string, effectClass: EffectClass, body: (effect: Effect) => T | Promise<T>, options: CallOptions = {}): Promise<T | undefined> {
    if (!this.needed(intent, effectClass)) return undefined;
    return this.effect(intent, effectClass, body, options);
  }

  /**
   * Run `body` as the effect `intent`, its dispatch journaled before it and its readback after. An unsafe
   * effect, or any with `writeAhead: true`, runs only after the server acknowledged its dispatch under this
   * turn's fencing token, with lease enough left for `maxDuration` seconds:
   *
   * - `LeaseLost` / `LeaseTooShort` before the dispatch: nothing is written or sent;
   * - `Fenced` (another worker took the turn), `WriteAheadFailed` (no answer, another refusal), or the lease
   *   too short once acknowledged: the body never runs; the dispatch gets a `failed` readback.
   *
   * Idempotent and safe effects keep the local write-ahead: their dispatch is durable locally before the body
   * runs, and shipped afterwards.
   */
  async effect<T>(intent: string, effectClass: EffectClass, body: (effect: Effect) => T | Promise<T>, options: CallOptions = {}): Promise<T> {
    if (this.done) throw new LeaseLost(this.turn, "the turn is finished; nothing of it may run");
    const ahead = options.writeAhead ?? effectClass === "unsafe";
    const maxDuration = options.maxDuration ?? 30;
    const keeper = this.requireKeeper();
    if (ahead) keeper.check(intent, maxDuration);
    else if (keeper.lost !== null) throw new LeaseLost(this.turn, keeper.lost); // another worker may hold the turn
    // An effect written ahead says so: its body runs only once the server holds this record.
    const extra = ahead ? { ...options.extra, write_ahead: "server" } : options.extra;
    const record = this.journal.dispatch(this.turn, intent, effectClass, { idempotencyKey: options.key, extra });
    const effect = new Effect(this.turn, intent, effectClass, options.key ?? null, record);
    if (ahead) await this.writeAhead(effect, keeper, maxDuration);
    const result = await this.journal.readbackOf(effect, body, options.failedOn);
    await this.gate.ship(this.journal);
    await this.report("intent", intent);
    return result;
  }

  /** Ship the dispatch; return only once the server acknowledged it and the lease still covers the effect.
   * Otherwise the dispatch gets its `failed` readback (the body never runs) and a typed error. */
  private async writeAhead(effect: Effect, keeper: LeaseKeeper, maxDuration: number): Promise<void> {
    const branch = effect.dispatch["branch"] as number;
    const lsn = effect.dispatch["lsn"] as number;
    try {
      let acked: number;
      try {
        const shipped = await this.gate.ship(this.journal);
        acked = shipped.acknowledged.get(branch) ?? -1;
      } catch (error) {
        if (error instanceof Fenced) {
          keeper.markLost("fenced: another worker holds the turn");
          throw error;
        }
        if (error instanceof LoopxError) throw new WriteAheadFailed(this.turn, effect.intent, lsn, error);
        throw error;
      }
      if (acked < lsn) throw new WriteAheadFailed(this.turn, effect.intent, lsn, null, "the server's ack cursor is short of it");
      keeper.check(effect.intent, maxDuration);
    } catch (error) {
      effect.outcome = "failed";
      effect.readback = this.journal.observe(this.turn, effect.intent, "failed", { source: "not_sent" });
      await this.gate.ship(this.journal).catch(() => undefined); // best effort: refused too when fenced
      throw error;
    }
  }

  // -- leaving -------------------------------------------------------------------------------------------
  private async leave(release: boolean): Promise<void> {
    const keeper = this.keeper;
    this.keeper = null;
    if (keeper === null) return;
    await keeper.stop();
    if (release && keeper.lost === null) await this.gate.release(keeper.claim).catch(() => undefined);
  }

  /** Leave the turn: after an error (`error` not null), best effort: ship what was journaled and give the
   * lease back; otherwise ship, close the recovery audit and release. */
  async exit(error: unknown): Promise<void> {
    if (error !== null && error !== undefined) {
      if (!(error instanceof Fenced || error instanceof LeaseLost)) await this.gate.ship(this.journal).catch(() => undefined);
      await this.leave(true);
      return;
    }
    try {
      if (this.keeper !== null) {
        await this.gate.ship(this.journal);
        // Closed only once the turn is done: the server holds a turn whose closed audit skipped a planned
        // action. A session that leaves earlier leaves its recovery open, as a crash does.
        if (this.audit !== null && this.done) {
          await this.gate.closeRecovery(this.audit, "resumed by loopx-client's turn session");
          this.audit = null;
        }
      }
    } catch (failure) {
      await this.leave(true);
      throw failure;
    }
    await this.leave(true);
  }
}
