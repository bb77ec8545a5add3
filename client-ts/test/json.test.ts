// The record reader keeps integers exact and says which code a bad line is; the writer sorts by code point.
import assert from "node:assert/strict";
import { test } from "node:test";

import { canonicalBytes, checkValue, RecordValueError } from "../src/canonical.js";
import { parseJson, parseLine } from "../src/json.js";

const line = (s: string) => parseLine(Buffer.from(s, "utf8"));

test("integers beyond 2^53 stay exact as bigint; safe ones are numbers; -0 is 0", () => {
  const p = line('{"a":9007199254740993,"b":-9007199254740993,"c":9007199254740991,"d":-0,"e":18446744073709551616}');
  assert.ok(p.ok);
  assert.equal(p.record["a"], 9007199254740993n);
  assert.equal(p.record["b"], -9007199254740993n);
  assert.equal(p.record["c"], 9007199254740991);
  assert.equal(p.record["d"], 0);
  assert.equal(canonicalBytes(p.record).toString(), '{"a":9007199254740993,"b":-9007199254740993,"c":9007199254740991,"d":0,"e":18446744073709551616}');
});

test("keys sort by code point, not by UTF-16 unit, at every depth", () => {
  assert.equal(canonicalBytes({ "\u{1F600}": 2, "\uFB01": 1, z: { b: 1, a: [{ d: 1, c: 2 }] } }).toString(),
    '{"z":{"a":[{"c":2,"d":1}],"b":1},"\uFB01":1,"\u{1F600}":2}');
  assert.equal(canonicalBytes({ A: 1, "\n": 2 }).toString(), '{"\\n":2,"A":1}');
});

test("a __proto__ key is an ordinary member", () => {
  const p = line('{"__proto__":{"x":1},"a":1}');
  assert.ok(p.ok);
  assert.equal(canonicalBytes(p.record).toString(), '{"__proto__":{"x":1},"a":1}');
});

test("what a record may not hold is refused with its code", () => {
  const cases: [string, string][] = [
    ['{"a":1}{', "storage_corruption"],
    ['{"a":"\u0001"}', "storage_corruption"], // a raw control character
    ['{"a":01}', "storage_corruption"],
    ['{"a":' + "1".repeat(4301) + "}", "storage_corruption"],
    ["[1]", "storage_corruption"],
    ['{"a":1e3}', "record_invalid"],
    ['{"a":{"b":1,"b":1}}', "record_invalid"],
    ['{"\\udc00":1}', "record_invalid"],
    ["[".repeat(0) + '{"a":' + "[".repeat(1024) + "]".repeat(1024) + "}", "record_invalid"],
  ];
  for (const [text, code] of cases) {
    const p = line(text);
    assert.equal(p.ok ? "ok" : p.code, code, text.slice(0, 40));
  }
  assert.ok(line('{"a":' + "[".repeat(252) + "]".repeat(252) + "}").ok);
  assert.ok(line('{"s":"\\ud83d\\ude00"}').ok);
});

test("the writer refuses floats, inexact numbers, lone surrogates, undefined and deep nesting", () => {
  for (const bad of [{ a: 1.5 }, { a: 2 ** 53 }, { a: "\udfff" }, { a: undefined }, { a: new Date() }]) {
    assert.throws(() => checkValue(bad), RecordValueError);
  }
  let deep: unknown = 1;
  for (let i = 0; i < 254; i++) deep = [deep];
  checkValue(deep); // 254 levels: the deepest a writer may produce
  assert.throws(() => checkValue([deep]), RecordValueError);
});

test("parseJson reads an API answer with exact integers", () => {
  assert.deepEqual(parseJson(' {"t": [1, 12345678901234567890]} '), Object.assign(Object.create(null), { t: [1, 12345678901234567890n] }));
  assert.throws(() => parseJson("{"), SyntaxError);
});
