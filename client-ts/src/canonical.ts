/**
 * Canonical bytes and digests, exactly as docs/contract.md ("Canonical bytes and digests") spells them:
 * keys sorted by code point (their UTF-8 bytes, not JavaScript's UTF-16 order) at every depth, no
 * whitespace, strings raw in UTF-8 with only `"`, `\` and U+0000..U+001F escaped, integers as their
 * decimal digits at any magnitude (a `bigint` beyond 2^53 - 1, never a rounded double).
 *
 * What a record may not hold is refused (`RecordValueError`) before any byte is produced: a float, an
 * unsafe-integer `number` (it may already have been rounded), a lone surrogate, `undefined`, a function,
 * nesting past `MAX_WRITE_DEPTH` levels.
 */

import { createHash } from "node:crypto";

import type { JsonObject, JsonValue } from "./json.js";

/** The deepest record this writer produces (the record itself is level 1): the contract asks writers to keep
 * records shallow, and 254 levels is what every reader of the project handles on its fast path. */
export const MAX_WRITE_DEPTH = 254;

export class RecordValueError extends Error {
  override name = "RecordValueError";
}

function hasLoneSurrogate(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        i++;
        continue;
      }
      return true;
    }
    if (c >= 0xdc00 && c <= 0xdfff) return true;
  }
  return false;
}

const SHORT: Record<number, string> = { 0x08: "\\b", 0x09: "\\t", 0x0a: "\\n", 0x0c: "\\f", 0x0d: "\\r" };

function writeString(s: string, where: string): string {
  if (hasLoneSurrogate(s)) throw new RecordValueError(`${where}: a lone surrogate has no canonical bytes`);
  let out = '"';
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    let escaped: string | undefined;
    if (c === 0x22) escaped = '\\"';
    else if (c === 0x5c) escaped = "\\\\";
    else if (c < 0x20) escaped = SHORT[c] ?? `\\u00${c.toString(16).padStart(2, "0")}`;
    if (escaped !== undefined) {
      out += s.slice(start, i) + escaped;
      start = i + 1;
    }
  }
  return out + s.slice(start) + '"';
}

function byUtf8(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
}

function write(value: unknown, depth: number, where: string): string {
  if (value === null) return "null";
  switch (typeof value) {
    case "boolean":
      return value ? "true" : "false";
    case "string":
      return writeString(value, where);
    case "bigint":
      return value.toString();
    case "number":
      if (!Number.isInteger(value)) throw new RecordValueError(`${where}: a float (${value}); records hold integers only`);
      if (!Number.isSafeInteger(value)) {
        throw new RecordValueError(`${where}: ${value} is beyond 2^53 - 1 as a number; pass it as a bigint to keep it exact`);
      }
      return value === 0 ? "0" : String(value);
    case "object":
      break;
    default:
      throw new RecordValueError(`${where}: a ${typeof value} is not a JSON value`);
  }
  if (depth + 1 > MAX_WRITE_DEPTH) throw new RecordValueError(`${where}: nested more than ${MAX_WRITE_DEPTH} levels`);
  if (Array.isArray(value)) {
    return "[" + value.map((item, i) => write(item, depth + 1, `${where}[${i}]`)).join(",") + "]";
  }
  const proto = Object.getPrototypeOf(value) as unknown;
  if (proto !== null && proto !== Object.prototype) {
    throw new RecordValueError(`${where}: a ${(value as object).constructor?.name ?? "object"} is not a JSON object`);
  }
  const obj = value as Record<string, unknown>;
  const keys = Object.keys(obj).sort(byUtf8);
  const parts: string[] = [];
  for (const key of keys) {
    parts.push(writeString(key, `${where} key`) + ":" + write(obj[key], depth + 1, `${where}.${key}`));
  }
  return "{" + parts.join(",") + "}";
}

/** The canonical bytes of a record (UTF-8). RecordValueError for what a record may not hold. */
export function canonicalBytes(value: JsonValue | JsonObject): Buffer {
  return Buffer.from(write(value, 0, "record"), "utf8");
}

/** Lowercase hex sha256 of some bytes. */
export function sha256Hex(data: Uint8Array): string {
  return createHash("sha256").update(data).digest("hex");
}

/** A record's digest: the lowercase hex sha256 of its canonical bytes (what `prev` names). */
export function digest(value: JsonValue | JsonObject): string {
  return sha256Hex(canonicalBytes(value));
}

/** Throw RecordValueError unless `value` can be written as canonical bytes. */
export function checkValue(value: unknown): void {
  write(value, 0, "record");
}
