export { IdempotencyGuard, IdempotencyUnavailable, KeepAlive, LeaseLostError, type BeginResult, type IdempotencyOptions, type IdempotencyStats, type Lease, type Outcome } from "./guard.js";
export { checkKey, fingerprint, IdempotencyKeyError, MAX_KEY_HEADER, recordDigest } from "./keys.js";
export { decodeResponse, encodeResponse, idempotency, REPLAYED_HEADER, type GuardedRequest, type IdempotencyPolicy } from "./middleware.js";
