package io.hotkeyd.idempotency;

/** The four answers of {@link IdempotencyGuard#begin}. */
public enum Outcome {
  /** Run the operation: you hold the lease. */
  NEW,
  /** Another caller holds the lease; retry after {@link Begin#retryAfter()}. */
  IN_PROGRESS,
  /** It finished before: replay {@link Begin#result()} as is. */
  DONE,
  /** The key was used with another fingerprint: a client bug (HTTP 422), never a replay. */
  MISMATCH
}
