package io.hotkeyd.idempotency;

/**
 * One final result as a durable {@link IdempotencyStore} keeps it.
 *
 * @param digest the record digest ({@link IdempotencyKeys#recordDigest}): the unique key
 * @param key the idempotency key
 * @param fingerprint the request's fingerprint (as the lease holds it)
 * @param failed a recorded failure ({@link Lease#fail}) rather than a result
 * @param token the fencing token of the lease that completed it
 * @param result the result bytes
 */
public record StoredFinal(String digest, String key, String fingerprint, boolean failed,
    long token, byte[] result) {}
