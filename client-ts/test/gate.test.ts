// The Gate and the turn session against a small stand-in server on the loopback (node:http): the headers
// a batch carries, retries only where a repeat is harmless, typed errors, write-ahead at the server, leases.
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { test } from "node:test";

import {
  ClaimHeld, Conflict, errorFor, Fenced, LeaseTooShort, LineTooLarge, NotFound, Unavailable, WriteAheadFailed,
} from "../src/errors.js";
import { Gate } from "../src/gate.js";
import { Journal } from "../src/journal.js";
import { scratchDir } from "./scratch.js";

interface Seen { method: string; path: string; headers: IncomingMessage["headers"]; body: string }
type Reply = { status?: number; body?: unknown; headers?: Record<string, string> };
type Handler = (req: Seen) => Reply;

async function stub(handler: Handler): Promise<{ url: string; seen: Seen[]; close: () => Promise<void> }> {
  const seen: Seen[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const entry = { method: req.method ?? "", path: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks).toString("utf8") };
      seen.push(entry);
      const reply = handler(entry);
      res.writeHead(reply.status ?? 200, { "Content-Type": "application/json", ...reply.headers });
      res.end(JSON.stringify(reply.body ?? {}));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, seen, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

const journalAt = () => Journal.open(join(scratchDir(), "j.jsonl"), { run: "r1" });

function ingest(req: Seen, cursor: { lsn: number }): Reply {
  const lines = req.body.split("\n").filter(Boolean);
  cursor.lsn += lines.length;
  return { body: { stored: lines.length, duplicates: 0, first_seq: 1, last_seq: 1, violations: [],
    branches: [{ branch: 0, committed_lsn: cursor.lsn, last_lsn: cursor.lsn, records: lines.length }] } };
}

function claimAnswer(lease: number, token = 7): Reply {
  return { body: { worker_id: "w", fencing_token: token, lease_seconds: lease,
    expires_at: new Date(Date.now() + lease * 1000).toISOString() } };
}

test("a batch carries LoopX-Expect from the ack cursors, and LoopX-Fencing once its turn is claimed", async () => {
  const cursor = { lsn: -1 };
  const server = await stub((req) => {
    if (req.path.endsWith("/branches")) return { status: 404, body: { error: "not_found", detail: "no run", line: null } };
    if (req.path === "/api/v1/limits") return { body: { max_line_bytes: 1000, max_batch_bytes: 100000, max_batch_records: 2, claim_lease_seconds: 60 } };
    if (req.path.endsWith("/claim")) return claimAnswer(60, 12);
    return ingest(req, cursor);
  });
  const gate = new Gate(server.url, "secret-token", { sleep: async () => undefined });
  const j = journalAt();
  j.plan("t 1", "job");
  j.commit("t 1", "plan");
  j.commit("t 1", "envelope");
  const first = await gate.ship(j);
  assert.deepEqual([first.stored, first.batches, [...first.acknowledged]], [3, 2, [[0, 2]]]); // max_batch_records 2
  assert.deepEqual(first.violations, []);
  const posts = server.seen.filter((s) => s.method === "POST");
  assert.deepEqual(posts.map((p) => p.headers["loopx-expect"]), ["0:-1", "0:1"]);
  assert.equal(posts[0]?.headers["content-type"], "application/x-ndjson");
  assert.equal(posts[0]?.headers["authorization"], "Bearer secret-token");
  assert.equal(posts[0]?.body, j.entries.slice(0, 2).map((e) => e.line.toString() + "\n").join(""));
  await gate.claim("r1", "t 1", "w");
  j.commit("t 1", "dispatch");
  await gate.ship(j);
  const last = server.seen.at(-1);
  assert.equal(last?.headers["loopx-fencing"], "t%201=12");
  assert.equal(last?.headers["loopx-expect"], "0:2");
  assert.ok(!String(gate).includes("secret-token"));
  j.close();
  await server.close();
});

test("a read is retried after a 503, waiting at least its Retry-After; a release is never retried", async () => {
  let calls = 0;
  const server = await stub((req) => {
    if (req.path.includes("/decision")) {
      calls += 1;
      if (calls < 3) return { status: 503, body: { error: "unavailable", detail: "db down", line: null }, headers: { "Retry-After": "7" } };
      return { body: { state: "proceed", decision: "resume", resume_from: "plan", planned: [], intents: [] } };
    }
    return { status: 503, body: { error: "unavailable", detail: "db down", line: null }, headers: { "Retry-After": "7" } };
  });
  const slept: number[] = [];
  const gate = new Gate(server.url, "t", { sleep: async (s) => { slept.push(s); } });
  const decision = await gate.decision("r1", "t1", { expect: new Map([[0, 4]]) });
  assert.equal(decision.state, "proceed");
  assert.equal(decision.resumeFrom, "plan");
  assert.deepEqual(slept, [7, 7]);
  assert.match(server.seen[0]?.path ?? "", /\?expect=0%3A4$/);
  const before = server.seen.length;
  const { Claim } = await import("../src/gate.js");
  await assert.rejects(gate.release(new Claim("r1", "t1", "w", 1, new Date(), 60, 0)), Unavailable);
  assert.equal(server.seen.length, before + 1);
  await server.close();
});

test("waitForDecision polls with a growing interval until the turn is no longer held", async () => {
  const states = ["hold", "hold", "hold", "proceed"];
  const server = await stub(() => ({ body: { state: states.shift() ?? "proceed", decision: "resume", reason: "effect_indeterminate" } }));
  const slept: number[] = [];
  const gate = new Gate(server.url, "t", { sleep: async (s) => { slept.push(s); } });
  const answer = await gate.waitForDecision("r1", "t1", { timeout: 3600, poll: 1, maxPoll: 3 });
  assert.equal(answer.state, "proceed");
  assert.deepEqual(slept, [1, 2, 3]);
  await server.close();
});

test("every refusal is the typed error of its code, with its fields", () => {
  const fenced = errorFor(409, { error: "fenced", detail: "taken", line: null, turn: "t1", token: 3, current: 4 });
  assert.ok(fenced instanceof Fenced && fenced instanceof Conflict);
  assert.deepEqual([fenced.turn, fenced.token, fenced.current, fenced.line], ["t1", 3, 4, null]);
  const big = errorFor(413, { error: "line_too_large", detail: "long", line: 2, limit: 262144 });
  assert.ok(big instanceof LineTooLarge && big.limit === 262144 && big.line === 2);
  assert.ok(errorFor(409, { error: "claim_held", detail: "" }) instanceof ClaimHeld);
  const unknown = errorFor(409, { error: "brand_new_code", detail: "" });
  assert.ok(unknown instanceof Conflict && unknown.code === "brand_new_code");
  assert.ok(errorFor(404, "not json") instanceof NotFound);
  assert.ok(errorFor(503, {}, 2) instanceof Unavailable);
});

test("an unsafe effect whose dispatch the server fences never runs; its dispatch gets a failed readback", async () => {
  const cursor = { lsn: -1 };
  let fence = false;
  const server = await stub((req) => {
    if (req.path.endsWith("/branches")) return { body: cursor.lsn < 0 ? [] : [{ branch: 0, committed_lsn: cursor.lsn }] };
    if (req.path === "/api/v1/limits") return { status: 404, body: { error: "not_found", detail: "", line: null } };
    if (req.path.includes("/decision")) return { body: { state: "proceed", decision: "resume", resume_from: "plan", planned: [], intents: [] } };
    if (req.path.endsWith("/claim")) return claimAnswer(120);
    if (req.path.endsWith("/release")) return { body: {} };
    if (req.path.endsWith("/records")) {
      if (fence && req.body.includes('"intent_dispatched"')) {
        return { status: 409, body: { error: "fenced", detail: "another worker", line: null, turn: "t1", token: 7, current: 8 } };
      }
      return ingest(req, cursor);
    }
    return { status: 404, body: { error: "not_found", detail: "", line: null } };
  });
  const gate = new Gate(server.url, "t", { sleep: async () => undefined });
  const j = journalAt();
  let ran = 0;
  await assert.rejects(gate.turn(j, "t1", { lineage: "job", workerId: "w", keepLease: false }, async (t) => {
    await assert.rejects(t.call("send", "unsafe", () => { ran += 1; }, { maxDuration: 500 }), LeaseTooShort);
    assert.equal(j.entries.length, 1); // nothing written for a lease too short
    await t.call("send", "unsafe", () => { ran += 1; }, { maxDuration: 5 }); // acknowledged: runs
    fence = true;
    await t.call("send-2", "unsafe", () => { ran += 1; }, { maxDuration: 5 });
  }), Fenced);
  assert.equal(ran, 1);
  const last = j.entries.at(-1)?.record;
  assert.deepEqual([last?.["kind"], last?.["intent"], last?.["outcome"], last?.["source"]], ["effect_observed", "send-2", "failed", "not_sent"]);
  j.close();
  await server.close();
});

test("a dispatch the server does not acknowledge (no answer) fails the write-ahead: the body never runs", async () => {
  const cursor = { lsn: -1 };
  let down = false;
  const server = await stub((req) => {
    if (req.path.endsWith("/branches")) return { body: cursor.lsn < 0 ? [] : [{ branch: 0, committed_lsn: cursor.lsn }] };
    if (req.path.includes("/decision")) return { body: { state: "proceed", decision: "resume", planned: [], intents: [] } };
    if (req.path.endsWith("/claim")) return claimAnswer(120);
    if (req.path.endsWith("/records")) return down ? { status: 500, body: { error: "server_error", detail: "", line: null } } : ingest(req, cursor);
    return { body: {} };
  });
  const gate = new Gate(server.url, "t", { sleep: async () => undefined, retries: 1 });
  const j = journalAt();
  let ran = false;
  await assert.rejects(gate.turn(j, "t1", { lineage: "job", workerId: "w", keepLease: false }, async (t) => {
    down = true;
    await t.call("send", "unsafe", () => { ran = true; }, { maxDuration: 5 });
  }), WriteAheadFailed);
  assert.equal(ran, false);
  assert.equal(j.readback("t1", "send"), "failed");
  j.close();
  await server.close();
});

test("a dispatch written ahead that the server never held is failed on resuming: the send runs once, no operator", async () => {
  const cursor = { lsn: -1 };
  const server = await stub((req) => {
    if (req.path.endsWith("/branches")) return { body: cursor.lsn < 0 ? [] : [{ branch: 0, committed_lsn: cursor.lsn }] };
    if (req.path.includes("/decision")) return { body: { state: "proceed", decision: "resume", planned: [], intents: [] } };
    if (req.path.endsWith("/claim")) return claimAnswer(120);
    if (req.path.endsWith("/recovery")) return { body: { id: 1, planned: [] } };
    if (req.path.endsWith("/records")) return ingest(req, cursor);
    return { body: {} };
  });
  const gate = new Gate(server.url, "t", { sleep: async () => undefined });
  const j = journalAt();
  j.plan("t1", "job");
  // What a worker killed between writing its dispatch and shipping it leaves behind.
  j.dispatch("t1", "send", "unsafe", { extra: { write_ahead: "server" } });
  let sends = 0;
  await gate.turn(j, "t1", { lineage: "job", workerId: "w", keepLease: false }, async (t) => {
    await t.call("send", "unsafe", () => { sends += 1; }, { maxDuration: 5 });
  });
  assert.equal(sends, 1);
  assert.deepEqual(j.entries.map((e) => [e.kind, e.record["outcome"] ?? null, e.record["source"] ?? null]), [
    ["turn_planned", null, null],
    ["intent_dispatched", null, null],
    ["effect_observed", "failed", "not_acknowledged"],
    ["intent_dispatched", null, null],
    ["effect_observed", "succeeded", null],
  ]);
  assert.equal(j.entries[3]?.record["write_ahead"], "server");
  j.close();
  await server.close();
});
