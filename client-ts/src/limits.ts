/** The server's ingest limits (`GET /api/v1/limits`), which the client keeps to so that nothing it writes is
 * refused for its size. */
export interface Limits {
  /** A record's line, without its newline, in bytes. */
  maxLineBytes: number;
  /** A batch, newlines included, in bytes. */
  maxBatchBytes: number;
  maxBatchRecords: number;
  /** The claim lease the server grants, in seconds. */
  claimLeaseSeconds: number;
}

/** The server's documented defaults: what a journal with no gate keeps to. */
export const DEFAULT_LIMITS: Readonly<Limits> = Object.freeze({
  maxLineBytes: 262144,
  maxBatchBytes: 8388608,
  maxBatchRecords: 10000,
  claimLeaseSeconds: 300,
});

/** The limits of a `/limits` answer; a field missing or not a positive number keeps its default. */
export function limitsFromAnswer(body: unknown): Limits {
  const data = (typeof body === "object" && body !== null ? body : {}) as Record<string, unknown>;
  const positive = (name: string, fallback: number): number => {
    const value = data[name];
    return typeof value === "number" && value > 0 ? value : fallback;
  };
  return {
    maxLineBytes: Math.floor(positive("max_line_bytes", DEFAULT_LIMITS.maxLineBytes)),
    maxBatchBytes: Math.floor(positive("max_batch_bytes", DEFAULT_LIMITS.maxBatchBytes)),
    maxBatchRecords: Math.floor(positive("max_batch_records", DEFAULT_LIMITS.maxBatchRecords)),
    claimLeaseSeconds: positive("claim_lease_seconds", DEFAULT_LIMITS.claimLeaseSeconds),
  };
}
