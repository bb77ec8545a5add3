/**
 * A JSON reader and writer for journal records that keeps integers exact.
 *
 * `JSON.parse` reads every number as a double, so an integer above 2^53 - 1 comes back changed, and a
 * record written from it would carry another digest. This reader gives an integer as a `number` when it
 * is a safe integer and as a `bigint` beyond; it refuses what the contract refuses (docs/contract.md,
 * "Canonical bytes and digests") and says which code a reader reports for it:
 *
 * - `storage_corruption`: not one complete JSON object (a torn line, bytes that are not UTF-8, NaN,
 *   Infinity, a byte order mark, an empty line, a value that is not an object);
 * - `record_invalid`: a float (a fraction or an exponent), a key twice in one object, a lone surrogate
 *   written as an escape, nesting of 1,025 levels or more (the contract: a reader reads at least 1,000).
 */

export type JsonValue = null | boolean | number | bigint | string | JsonValue[] | JsonObject;
export interface JsonObject {
  [key: string]: JsonValue;
}

export type LineCode = "storage_corruption" | "record_invalid";

export type ParsedLine =
  | { ok: true; record: JsonObject }
  | { ok: false; code: LineCode; detail: string };

/** The reference reader refuses to convert more digits than this (Python's own limit). */
const MAX_INTEGER_DIGITS = 4300;
/** A record nested this deep or deeper is `record_invalid` (the record itself is level 1). */
const INVALID_DEPTH = 1025;

const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

class Corrupt extends Error {}

/** An object with no prototype, so that a key such as `__proto__` is an ordinary member. */
export function newObject(): JsonObject {
  return Object.create(null) as JsonObject;
}

class Reader {
  pos = 0;
  invalid: string | null = null;

  constructor(readonly text: string) {}

  fail(what: string): never {
    throw new Corrupt(`${what} at character ${this.pos}`);
  }

  flag(what: string): void {
    if (this.invalid === null) this.invalid = what;
  }

  ws(): void {
    const t = this.text;
    while (this.pos < t.length) {
      const c = t.charCodeAt(this.pos);
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) this.pos++;
      else break;
    }
  }

  value(depth: number): JsonValue {
    this.ws();
    const c = this.text[this.pos];
    if (c === "{") return this.object(depth + 1);
    if (c === "[") return this.array(depth + 1);
    if (c === '"') return this.string();
    if (c === "-" || (c !== undefined && c >= "0" && c <= "9")) return this.number();
    if (this.text.startsWith("true", this.pos)) {
      this.pos += 4;
      return true;
    }
    if (this.text.startsWith("false", this.pos)) {
      this.pos += 5;
      return false;
    }
    if (this.text.startsWith("null", this.pos)) {
      this.pos += 4;
      return null;
    }
    return this.fail(c === undefined ? "the line ends early" : "not a JSON value");
  }

  object(depth: number): JsonObject {
    if (depth >= INVALID_DEPTH) this.flag(`nested ${INVALID_DEPTH} levels or more`);
    this.pos++; // {
    const out = newObject();
    const seen = new Set<string>();
    this.ws();
    if (this.text[this.pos] === "}") {
      this.pos++;
      return out;
    }
    for (;;) {
      this.ws();
      if (this.text[this.pos] !== '"') this.fail("a key that is not a string");
      const key = this.string();
      this.ws();
      if (this.text[this.pos] !== ":") this.fail("no ':' after a key");
      this.pos++;
      const value = this.value(depth);
      if (seen.has(key)) this.flag("the same key twice in one object");
      seen.add(key);
      out[key] = value;
      this.ws();
      const next = this.text[this.pos];
      if (next === ",") {
        this.pos++;
        continue;
      }
      if (next === "}") {
        this.pos++;
        return out;
      }
      this.fail("no ',' or '}' after a member");
    }
  }

  array(depth: number): JsonValue[] {
    if (depth >= INVALID_DEPTH) this.flag(`nested ${INVALID_DEPTH} levels or more`);
    this.pos++; // [
    const out: JsonValue[] = [];
    this.ws();
    if (this.text[this.pos] === "]") {
      this.pos++;
      return out;
    }
    for (;;) {
      out.push(this.value(depth));
      this.ws();
      const next = this.text[this.pos];
      if (next === ",") {
        this.pos++;
        continue;
      }
      if (next === "]") {
        this.pos++;
        return out;
      }
      this.fail("no ',' or ']' after an element");
    }
  }

  string(): string {
    const t = this.text;
    this.pos++; // "
    let out = "";
    let start = this.pos;
    for (;;) {
      if (this.pos >= t.length) this.fail("a string that does not end");
      const c = t.charCodeAt(this.pos);
      if (c === 0x22) {
        out += t.slice(start, this.pos);
        this.pos++;
        return out;
      }
      if (c < 0x20) this.fail("a raw control character in a string");
      if (c !== 0x5c) {
        this.pos++;
        continue;
      }
      out += t.slice(start, this.pos);
      const e = t[this.pos + 1];
      this.pos += 2;
      switch (e) {
        case '"': out += '"'; break;
        case "\\": out += "\\"; break;
        case "/": out += "/"; break;
        case "b": out += "\b"; break;
        case "f": out += "\f"; break;
        case "n": out += "\n"; break;
        case "r": out += "\r"; break;
        case "t": out += "\t"; break;
        case "u": {
          const unit = this.hex4();
          if (unit >= 0xd800 && unit <= 0xdbff && t.startsWith("\\u", this.pos)) {
            const save = this.pos;
            this.pos += 2;
            const low = this.hex4();
            if (low >= 0xdc00 && low <= 0xdfff) {
              out += String.fromCharCode(unit, low);
              break;
            }
            this.pos = save; // not a pair: the high one stands alone, the next escape is read on its own
          }
          if (unit >= 0xd800 && unit <= 0xdfff) {
            this.flag("a lone surrogate in a string");
            out += String.fromCharCode(unit);
          } else {
            out += String.fromCharCode(unit);
          }
          break;
        }
        default:
          this.fail("an unknown escape in a string");
      }
      start = this.pos;
    }
  }

  hex4(): number {
    const digits = this.text.slice(this.pos, this.pos + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(digits)) this.fail("a \\u escape without four hex digits");
    this.pos += 4;
    return parseInt(digits, 16);
  }

  number(): number | bigint {
    const match = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(this.text.slice(this.pos, this.pos + 5000));
    if (match === null) return this.fail("a malformed number");
    const spelled = match[0];
    // A number whose digits run past what we looked at is longer than any integer the reader accepts.
    if (spelled.length >= 5000) this.fail("an integer of more than 4300 digits");
    this.pos += spelled.length;
    if (match[2] !== undefined || match[3] !== undefined) {
      this.flag("a number with a fraction or an exponent (a float)");
      return 0;
    }
    const digits = match[1] ?? "";
    if (digits.length > MAX_INTEGER_DIGITS) this.fail("an integer of more than 4300 digits");
    const big = BigInt(spelled);
    if (big >= BigInt(Number.MIN_SAFE_INTEGER) && big <= BigInt(Number.MAX_SAFE_INTEGER)) {
      return Number(big) || 0; // -0 is the integer 0
    }
    return big;
  }
}

/**
 * Read one journal line (its bytes, without the newline) as a record, or say why it is not one: the
 * code a reader of the contract reports for a journal of that line alone.
 */
export function parseLine(line: Uint8Array): ParsedLine {
  let text: string;
  try {
    text = decoder.decode(line);
  } catch {
    return { ok: false, code: "storage_corruption", detail: "bytes that are not UTF-8" };
  }
  const reader = new Reader(text);
  let value: JsonValue;
  try {
    reader.ws();
    if (text[reader.pos] !== "{") {
      return { ok: false, code: "storage_corruption", detail: "not a JSON object" };
    }
    value = reader.value(0);
    reader.ws();
    if (reader.pos !== text.length) reader.fail("more after the object");
  } catch (error) {
    if (error instanceof Corrupt) return { ok: false, code: "storage_corruption", detail: error.message };
    if (error instanceof RangeError) {
      return { ok: false, code: "record_invalid", detail: "nested too deep to read" };
    }
    throw error;
  }
  if (reader.invalid !== null) return { ok: false, code: "record_invalid", detail: reader.invalid };
  return { ok: true, record: value as JsonObject };
}

/** Read one JSON value that is not a journal line (an API answer): integers exact as in `parseLine`. */
export function parseJson(text: string): JsonValue {
  const reader = new Reader(text);
  try {
    const value = reader.value(0);
    reader.ws();
    if (reader.pos !== text.length) reader.fail("more after the value");
    return value;
  } catch (error) {
    if (error instanceof Corrupt) throw new SyntaxError(`not JSON: ${error.message}`);
    throw error;
  }
}
