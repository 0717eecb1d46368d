package io.hotkeyd.idempotency;

/**
 * The durable backstop of a guard ({@link IdempotencyGuard.Builder#store}): final results
 * in a table with a unique key. Redis replicates asynchronously, so a failover or a
 * restart can lose a fresh record; with a store, {@code begin} that finds nothing in Redis
 * replays what the store has, and a result whose record Redis lost is written to the store
 * anyway, its unique key fencing a second completion ({@link DuplicateCompletionException}).
 * {@link JdbcIdempotencyStore} is the JDBC one, with the Python {@code DurableStore}'s table.
 */
public interface IdempotencyStore {
  /** The final result stored for {@code digest}, or null. */
  StoredFinal get(String digest);

  /** Inserts {@code f} unless its digest is there already; returns what the store holds. */
  StoredFinal put(StoredFinal f);
}
