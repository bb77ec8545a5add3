// The TypeScript client against the contract's shipped test vectors (docs/contract-vectors.json), the same
// file the engine's and the Python client's tests check: every case's canonical bytes and digest, every
// invalid line refused with its code, and the chained journal written byte for byte.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { canonicalBytes, digest, sha256Hex } from "../src/canonical.js";
import { Journal } from "../src/journal.js";
import { parseLine } from "../src/json.js";
import { scratchDir } from "./scratch.js";

const here = fileURLToPath(new URL(".", import.meta.url));
// dist/test/ -> client-ts/ -> the repository
const VECTORS_PATH = resolve(here, "..", "..", "..", "docs", "contract-vectors.json");

interface Case { name: string; json: string; canonical: string; canonical_hex: string; sha256: string }
interface Invalid { name: string; hex: string; code: string }
interface ChainRecord { branch: number; lsn: number; kind: string; prev: string | null; line: string; sha256: string }
interface Vectors {
  cases: Case[];
  invalid: Invalid[];
  chained_journal: { run: string; records: ChainRecord[]; journal_sha256: string };
}

const VECTORS = JSON.parse(readFileSync(VECTORS_PATH, "ascii")) as Vectors;

test("the vectors file holds cases, invalid lines and a chained journal", () => {
  assert.ok(VECTORS.cases.length >= 20);
  assert.ok(VECTORS.invalid.length >= 15);
  assert.equal(VECTORS.chained_journal.records.length, 10);
});

for (const c of VECTORS.cases) {
  test(`case ${c.name}: canonical bytes and digest`, () => {
    const expected = Buffer.from(c.canonical_hex, "hex");
    assert.equal(expected.toString("utf8"), c.canonical);
    const parsed = parseLine(Buffer.from(c.json, "utf8"));
    assert.ok(parsed.ok, parsed.ok ? "" : parsed.detail);
    const bytes = canonicalBytes(parsed.record);
    assert.equal(bytes.toString("hex"), c.canonical_hex);
    assert.equal(digest(parsed.record), c.sha256);
    assert.equal(sha256Hex(expected), c.sha256);
  });
}

for (const c of VECTORS.invalid) {
  test(`invalid ${c.name}: refused as ${c.code}`, () => {
    const parsed = parseLine(Buffer.from(c.hex, "hex"));
    if (c.name === "boolean_as_integer") {
      // Well-formed JSON; the envelope's rule (an integer v) refuses it, which the journal checks on
      // reopening (test/journal.test.ts).
      assert.ok(parsed.ok);
      assert.equal(parsed.record["v"], true);
      return;
    }
    assert.equal(parsed.ok, false);
    assert.equal(parsed.ok ? null : parsed.code, c.code);
  });
}

test("the journal writes the chained journal byte for byte, and continues it on reopening", () => {
  const chain = VECTORS.chained_journal;
  const objs = chain.records.map((r) => {
    const p = parseLine(Buffer.from(r.line, "utf8"));
    assert.ok(p.ok);
    return p.record;
  });
  const stamps = objs.map((o) => String(o["at"]));
  const dir = scratchDir();
  const path = join(dir, "chain.jsonl");
  const journal = Journal.open(path, { run: chain.run, clock: () => stamps.shift() ?? "" });
  for (const o of objs) {
    const s = (k: string) => String(o[k]);
    switch (o["kind"]) {
      case "turn_planned":
        journal.plan(s("turn"), s("lineage"), { phases: o["phases"] as string[] });
        break;
      case "phase_committed":
        journal.commit(s("turn"), s("phase"));
        break;
      case "intent_dispatched":
        journal.dispatch(s("turn"), s("intent"), s("effect_class") as "idempotent", { idempotencyKey: s("idempotency_key") });
        break;
      case "effect_observed":
        journal.observe(s("turn"), s("intent"), s("outcome") as "succeeded");
        break;
      case "fork":
        assert.equal(journal.fork(Number(o["from_lsn"]), s("reason")), o["new_branch"]);
        break;
      case "turn_terminal":
        journal.terminal(s("turn"), s("status") as "completed");
        break;
      case "checkpoint":
        journal.checkpoint(Number(o["covers_lsn"]), s("state_digest"));
        break;
      default:
        assert.fail(`a kind the vectors do not hold: ${String(o["kind"])}`);
    }
  }
  const written = journal.entries;
  journal.close();
  assert.deepEqual(written.map((e) => e.line.toString("utf8")), chain.records.map((r) => r.line));
  assert.deepEqual(written.map((e) => [e.branch, e.lsn]), chain.records.map((r) => [r.branch, r.lsn]));
  written.forEach((e, i) => assert.equal(sha256Hex(e.line), chain.records[i]?.sha256));
  assert.equal(sha256Hex(readFileSync(path)), chain.journal_sha256);
  const again = Journal.open(path, { run: chain.run, clock: () => "2026-01-01T00:01:00Z" });
  assert.deepEqual(again.highWater(), new Map([[0, 4], [1, 4]]));
  const next = again.plan("t2", "job-2");
  again.close();
  assert.equal(next["prev"], chain.records[9]?.sha256);
  assert.deepEqual([next["branch"], next["lsn"]], [1, 5]);
});
