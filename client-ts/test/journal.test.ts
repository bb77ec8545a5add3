// The local journal: durable appends, reopening (chain, lsns, torn tail), the writer's refusals, effects.
import assert from "node:assert/strict";
import { appendFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { digest, sha256Hex } from "../src/canonical.js";
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
} from "../src/errors.js";
import { Journal } from "../src/journal.js";
import { parseLine } from "../src/json.js";
import { scratchDir } from "./scratch.js";

function fresh(name = "j.jsonl"): string {
  return join(scratchDir(), name);
}

const clock = () => "2026-01-01T00:00:00Z";

test("each record is its canonical line, chained by prev, and durable on disk before append returns", () => {
  const path = fresh();
  const j = Journal.open(path, { run: "r1", clock });
  const a = j.plan("t1", "job-1");
  const b = j.commit("t1", "plan", { big: 2n ** 70n });
  assert.equal(a["prev"], undefined);
  assert.equal(b["prev"], digest(a));
  const lines = readFileSync(path).toString("utf8").split("\n");
  assert.equal(lines.length, 3);
  assert.equal(lines[2], "");
  assert.equal(sha256Hex(Buffer.from(lines[0] ?? "")), digest(a));
  assert.match(lines[1] ?? "", /"big":1180591620717411303424,/);
  j.close();
  assert.throws(() => j.commit("t1", "envelope"), JournalClosed);
});

test("reopening continues the chain and the lsns; another run or a broken chain is refused", () => {
  const path = fresh();
  const j = Journal.open(path, { run: "r1", clock });
  j.plan("t1", "job-1");
  j.commit("t1", "plan");
  j.close();
  const again = Journal.open(path, { run: "r1", clock });
  assert.deepEqual(again.highWater(), new Map([[0, 1]]));
  assert.equal(again.append("phase_committed", { turn: "t1", phase: "envelope" })["lsn"], 2);
  again.close();
  assert.throws(() => Journal.open(path, { run: "other" }), JournalMismatch);
  const text = readFileSync(path, "utf8").replace(/"prev":"[0-9a-f]{4}/, '"prev":"0000');
  const broken = fresh();
  writeFileSync(broken, text);
  assert.throws(() => Journal.open(broken, { run: "r1" }), /prev does not chain/);
  const v = fresh();
  writeFileSync(v, '{"v":true,"run":"r1","branch":0,"lsn":0,"kind":"turn_planned","turn":"t","lineage":"l","at":"2026-01-01T00:00:00Z"}\n');
  assert.throws(() => Journal.open(v, { run: "r1" }), JournalMismatch); // a boolean is not the integer v
});

test("a torn tail is reported with its line and offset and left exactly as it is", () => {
  const path = fresh();
  const j = Journal.open(path, { run: "r1", clock });
  const first = j.plan("t1", "job-1");
  j.close();
  appendFileSync(path, '{"v":2,"run":"r1","bra');
  const before = readFileSync(path);
  assert.throws(
    () => Journal.open(path, { run: "r1" }),
    (error: unknown) => error instanceof JournalCorrupt && error.tornTail && error.line === 2 &&
      error.offset === Buffer.byteLength(JSON.stringify(first)) + 1,
  );
  assert.deepEqual(readFileSync(path), before);
  assert.ok(!existsSync(`${path}.lock`)); // a refused open leaves no lock behind
  const middle = fresh();
  writeFileSync(middle, "\n" + before.toString("utf8"));
  assert.throws(() => Journal.open(middle, { run: "r1" }), (e: unknown) => e instanceof JournalCorrupt && !e.tornTail && e.line === 1);
});

test("a complete last record without its newline is complete; the next write ends its line first", () => {
  const path = fresh();
  const j = Journal.open(path, { run: "r1", clock });
  j.plan("t1", "job-1");
  j.close();
  writeFileSync(path, readFileSync(path, "utf8").trimEnd());
  const again = Journal.open(path, { run: "r1", clock });
  again.commit("t1", "plan");
  again.close();
  const lines = readFileSync(path, "utf8").split("\n");
  assert.equal(lines.length, 3);
  assert.ok(lines.slice(0, 2).every((l) => parseLine(Buffer.from(l)).ok));
});

test("one writer at a time; a lock left by a dead writer is taken over", () => {
  const path = fresh();
  const j = Journal.open(path, { run: "r1", clock });
  assert.throws(() => Journal.open(path, { run: "r1" }), JournalError);
  j.close();
  writeFileSync(`${path}.lock`, "999999999\n"); // no such process
  Journal.open(path, { run: "r1" }).close();
});

test("what the contract would call a violation of this writer is refused, nothing written", () => {
  const path = fresh();
  const j = Journal.open(path, { run: "r1", clock, limits: { maxLineBytes: 300, maxBatchBytes: 1 << 20, maxBatchRecords: 10, claimLeaseSeconds: 60 } });
  j.plan("t1", "job-1");
  const refusals: [() => unknown, new (...a: never[]) => Error][] = [
    [() => j.commit("t1", "plan", { f: 0.5 }), RecordRefused],
    [() => j.commit("t1", "plan", { n: 2 ** 60 }), RecordRefused], // a number that may have been rounded
    [() => j.commit("t1", "plan", { s: "\ud800" }), RecordRefused],
    [() => j.commit("t2", "plan"), RecordRefused],
    [() => j.plan("t1", "another-lineage"), RecordRefused],
    [() => j.plan("t3", ""), RecordRefused],
    [() => j.plan("t3", "x", { phases: ["a", "a"] }), RecordRefused],
    [() => j.dispatch("t1", "i", "idempotent"), RecordRefused],
    [() => j.observe("t1", "never", "succeeded"), RecordRefused],
    [() => j.append("phase_committed", { turn: "t1", phase: "p", lsn: 7 }), RecordRefused],
    [() => j.commit("t1", "plan", { big: "x".repeat(400) }), RecordTooLarge],
  ];
  for (const [attempt, kind] of refusals) assert.throws(attempt, kind);
  assert.equal(readFileSync(path, "utf8").split("\n").length, 2);
  j.dispatch("t1", "send", "unsafe");
  assert.throws(() => j.dispatch("t1", "send", "unsafe"), UnsafeRedispatch);
  j.observe("t1", "send", "failed");
  j.dispatch("t1", "send", "unsafe"); // a failed readback makes a retry legal
  assert.throws(() => j.dispatch("t1", "send", "safe"), RecordRefused); // intent_conflict
  j.close();
});

test("effect: dispatch before the body, readback after; unsafe needs the server unless localWriteAhead", async () => {
  const path = fresh();
  const j = Journal.open(path, { run: "r1", clock });
  j.plan("t1", "job-1");
  const order: string[] = [];
  const result = await j.effect("t1", "read", "safe", () => {
    order.push(`body after ${j.entries.length} records`);
    return 42;
  });
  assert.equal(result, 42);
  assert.deepEqual(order, ["body after 2 records"]);
  await assert.rejects(j.effect("t1", "send", "unsafe", () => 1), WriteAheadRequired);
  await assert.rejects(j.effect("t1", "save", "idempotent", () => { throw new EffectFailed("refused"); }, { key: "k" }), EffectFailed);
  await assert.rejects(j.effect("t1", "save", "idempotent", () => { throw new Error("timeout"); }, { key: "k" }), /timeout/);
  await j.effect("t1", "send", "unsafe", (e) => e.unknown(), { localWriteAhead: true });
  assert.deepEqual(j.entries.map((e) => [e.kind, e.record["outcome"] ?? e.record["effect_class"] ?? null]), [
    ["turn_planned", null],
    ["intent_dispatched", "safe"], ["effect_observed", "succeeded"],
    ["intent_dispatched", "idempotent"], ["effect_observed", "failed"],
    ["intent_dispatched", "idempotent"], ["effect_observed", "unknown"],
    ["intent_dispatched", "unsafe"], ["effect_observed", "unknown"],
  ]);
  j.close();
});

test("a fork rewinds the live branch: lsn 0 of the new branch chains to the fork record", () => {
  const j = Journal.open(fresh(), { run: "r1", clock });
  j.plan("t1", "job-1");
  j.commit("t1", "plan");
  assert.equal(j.fork(0, "rewind"), 1);
  const fork = j.entries.at(-1);
  const next = j.plan("t2", "job-2");
  assert.deepEqual([next["branch"], next["lsn"], next["prev"]], [1, 0, fork && digest(fork.record)]);
  assert.throws(() => j.fork(5, "beyond"), RecordRefused);
  j.close();
});
