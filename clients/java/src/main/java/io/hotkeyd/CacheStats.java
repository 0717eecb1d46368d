package io.hotkeyd;

import java.util.concurrent.atomic.LongAdder;

/** Counters of a {@link HotCache}'s local cache (plain counters; export them as you like). */
public final class CacheStats {
  /** Fresh local hits. */
  public final LongAdder hits = new LongAdder();
  /** Stale values served while one caller refreshed them (logical expiry). */
  public final LongAdder staleHits = new LongAdder();
  /** Reads of hot keys that found no fresh copy. */
  public final LongAdder misses = new LongAdder();
  /** Refreshes from Redis (or the loader) by a single-flight leader. */
  public final LongAdder refreshes = new LongAdder();
  /** Callers that waited for a leader's refresh. */
  public final LongAdder waits = new LongAdder();
  /** Entries dropped by invalidations (writes, broadcasts, cool, reconnects). */
  public final LongAdder invalidations = new LongAdder();
  /** Entries evicted by the entry/byte bound. */
  public final LongAdder evictions = new LongAdder();
  /** Values served but not cached because they exceed maxBytes / 8. */
  public final LongAdder tooBig = new LongAdder();
  /** Malformed invalidation payloads received. */
  public final LongAdder badInvalidations = new LongAdder();
  /** Demand reports published, and reads they carried. */
  public final LongAdder demandMessages = new LongAdder();
  public final LongAdder demandReads = new LongAdder();
  /** Reads left out of demand reports (beyond 1,000 entries, or above 2^32-1). */
  public final LongAdder demandDropped = new LongAdder();

  @Override
  public String toString() {
    return "CacheStats{hits=" + hits + ", staleHits=" + staleHits + ", misses=" + misses
        + ", refreshes=" + refreshes + ", waits=" + waits + ", invalidations=" + invalidations
        + ", evictions=" + evictions + ", tooBig=" + tooBig + ", demandMessages="
        + demandMessages + "}";
  }
}
