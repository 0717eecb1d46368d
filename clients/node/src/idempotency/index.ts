export { IdempotencyGuard, IdempotencyUnavailable, KeepAlive, LeaseLostError, type BeginResult, type IdempotencyOptions, type IdempotencyStats, type Lease, type Outcome } from "./guard.js";
export { checkKey, fingerprint, IdempotencyKeyError, MAX_KEY_HEADER, recordDigest } from "./keys.js";
export { callerScope, decodeResponse, encodeResponse, HandlerTimes, PROBLEM_TYPE, REPLAYED_HEADER } from "./http.js";
export { idempotency, type GuardedRequest, type IdempotencyPolicy } from "./middleware.js";
export { fastifyIdempotency, type FastifyLike, type FastifyReplyLike, type FastifyRequestLike } from "./fastify.js";
export { DuplicateCompletionError, SqlIdempotencyStore, type IdempotencyStore, type SqlQueryable, type StoredFinal } from "./store.js";
