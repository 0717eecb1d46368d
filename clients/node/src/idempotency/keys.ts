/**
 * Idempotency keys and fingerprints: the digests every hotkeyd client computes the same
 * way (spec/vectors/idempotency.json), so records are shared across languages.
 */
import { createHash } from "node:crypto";
import { limit } from "../limits.js";

/** The longest key a client may send in an Idempotency-Key header (spec/limits.json). */
export const MAX_KEY_HEADER = limit("idempotency_key_chars_max");

/** A bad idempotency key: empty, too long, or not printable ASCII. */
export class IdempotencyKeyError extends Error {
  override name = "IdempotencyKeyError";
}

function digest32(parts: readonly (Buffer | string)[]): string {
  const h = createHash("sha256");
  const n = Buffer.alloc(8);
  for (const p of parts) {
    const b = typeof p === "string" ? Buffer.from(p, "utf8") : p;
    n.writeBigUInt64BE(BigInt(b.length));
    h.update(n);
    h.update(b);
  }
  return h.digest("hex").slice(0, 32);
}

/** The fixed-length fingerprint of a request's parts (e.g. method, path, query, body). */
export function fingerprint(...parts: (Buffer | string)[]): string {
  return digest32(parts);
}

/** The fixed-length name of `key` within `scope`: what Redis sees. */
export function recordDigest(scope: string, key: string): string {
  return digest32([scope, key]);
}

/** Throws IdempotencyKeyError unless `key` is 1..maxLength printable ASCII characters. */
export function checkKey(key: string, maxLength = MAX_KEY_HEADER): string {
  if (typeof key !== "string") throw new TypeError(`an idempotency key must be a string, not ${typeof key}`);
  if (key.length === 0) throw new IdempotencyKeyError("idempotency key is empty");
  if (key.length > maxLength) {
    throw new IdempotencyKeyError(`idempotency key is ${key.length} characters; at most ${maxLength} are allowed`);
  }
  if (!/^[\x20-\x7e]+$/.test(key)) throw new IdempotencyKeyError("idempotency key must be printable ASCII (0x20-0x7E)");
  return key;
}
