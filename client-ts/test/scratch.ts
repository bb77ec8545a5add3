// Scratch directories for a test file's journals, all under one directory that is removed when the file's
// tests end, so that a run of the suite leaves nothing behind in the system's temporary directory.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after } from "node:test";

const root = mkdtempSync(join(tmpdir(), "loopx-ts-"));
after(() => rmSync(root, { recursive: true, force: true }));

/** A fresh, empty directory of its own for one test. */
export function scratchDir(): string {
  return mkdtempSync(join(root, "t-"));
}
