package io.hotkeyd;

import com.github.benmanes.caffeine.cache.Cache;
import com.github.benmanes.caffeine.cache.Caffeine;
import com.github.benmanes.caffeine.cache.RemovalCause;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * The bounded local copy of hot keys: Caffeine underneath, single-flight refresh with logical
 * expiry on top.
 *
 * <p>Why single-flight: a key is promoted <i>because</i> thousands of callers read it; when its
 * copy expires, letting each of them go to Redis would recreate the spike the cache absorbs.
 * One caller (the leader) refreshes; the others get the stale copy while it is within {@code
 * staleFor} of its expiry, or wait up to {@code waitTimeout} for the leader's value, then read
 * through uncached.
 *
 * <p>Invalidation beats refresh: a refresh in flight when its key is invalidated does not
 * store its (possibly old) value.
 *
 * <p>Bounds: Caffeine's weight bound is {@code maxBytes} and every entry weighs at least {@code
 * maxBytes / maxEntries}, so both the byte and the entry bound hold. A value heavier than
 * {@code maxBytes / 8} is served but not cached.
 */
final class LocalCache {
  private static final int ENTRY_OVERHEAD = 120;

  /** What is cached for one Redis key: GET as text or bytes, one HGET field, HGETALL ... */
  record CacheKey(char kind, KeyId id, Object sub) {}

  /** One cached reply; also referenced from its hot item for the fast path (GET). */
  record Entry(Object value, int weight, long expiresNanos) {}

  /** GET replies (text and binary): the kinds with a fast slot on the hot item. */
  static final char GET_TEXT = 'g';
  static final char GET_BYTES = 'G';

  static final class Flight {
    final CompletableFuture<Object> done = new CompletableFuture<>();
    final KeyId id;
    volatile boolean tainted;

    Flight(KeyId id) {
      this.id = id;
    }
  }

  private final Clock clock;
  private final long maxBytes;
  private final int minWeight;
  private final long staleForNanos;
  private final long waitTimeoutNanos;
  private final CacheStats stats;
  private final Cache<CacheKey, Entry> cache;
  /** Kinds cached without a sub-key: invalidation removes them directly, no index needed. */
  private final char[] plainKinds;
  /** Entries with a sub-key (HGET fields), by Redis key. */
  private final ConcurrentHashMap<KeyId, Set<CacheKey>> byKey = new ConcurrentHashMap<>();
  private final ConcurrentHashMap<CacheKey, Flight> flights = new ConcurrentHashMap<>();
  /** The hot item of a key (null when not hot): where the fast slots live. */
  private final Function<KeyId, HotItem> items;
  private int fastHits; // racy on purpose: only samples accesses for Caffeine's policy

  LocalCache(Clock clock, int maxEntries, long maxBytes, long staleForNanos, long waitTimeoutNanos,
      CacheStats stats, Function<KeyId, HotItem> items, char... plainKinds) {
    this.items = items;
    if (maxEntries < 1 || maxBytes < 1) {
      throw new IllegalArgumentException("maxEntries and maxBytes must be >= 1");
    }
    this.clock = clock;
    this.plainKinds = plainKinds.clone();
    this.maxBytes = maxBytes;
    this.minWeight = (int) Math.min(Integer.MAX_VALUE, (maxBytes + maxEntries - 1) / maxEntries);
    this.staleForNanos = staleForNanos;
    this.waitTimeoutNanos = waitTimeoutNanos;
    this.stats = stats;
    this.cache =
        Caffeine.newBuilder()
            .maximumWeight(maxBytes)
            .weigher((CacheKey k, Entry e) -> e.weight)
            .executor(Runnable::run)
            .removalListener((CacheKey k, Entry e, RemovalCause cause) -> {
              if (k != null && cause != RemovalCause.REPLACED) {
                clearFast(k, e); // synchronous (same-thread executor): no stale fast slot
              }
              if (cause.wasEvicted()) {
                stats.evictions.increment();
                if (k != null && k.sub() != null) {
                  Set<CacheKey> s = byKey.get(k.id());
                  if (s != null) {
                    s.remove(k);
                  }
                }
              }
            })
            .build();
  }

  long estimatedSize() {
    cache.cleanUp();
    return cache.estimatedSize();
  }

  /** Total weight now (bytes, with the per-entry floor). */
  long weight() {
    cache.cleanUp();
    return cache.policy().eviction().map(ev -> ev.weightedSize().orElse(0)).orElse(0L);
  }

  boolean contains(KeyId id) {
    for (char kind : plainKinds) {
      if (cache.getIfPresent(new CacheKey(kind, id, null)) != null) {
        return true;
      }
    }
    Set<CacheKey> s = byKey.get(id);
    return s != null && !s.isEmpty();
  }

  /**
   * The cached value of {@code ck}, or the loader's (single-flight). {@code served} counts reads
   * answered without this caller going to Redis (for demand reports).
   */
  <T> T load(CacheKey ck, Supplier<T> loader, long ttlNanos, LongAdder served) {
    return load(ck, loader, ttlNanos, served, clock.nanoTime());
  }

  /** As {@link #load(CacheKey, Supplier, long, LongAdder)} with the caller's clock reading. */
  @SuppressWarnings("unchecked")
  <T> T load(CacheKey ck, Supplier<T> loader, long ttlNanos, LongAdder served, long now) {
    Entry e = cache.getIfPresent(ck);
    if (e != null && e.expiresNanos - now > 0) {
      stats.hits.increment();
      served.increment();
      return (T) e.value;
    }
    stats.misses.increment();
    Flight mine = new Flight(ck.id());
    Flight leader = flights.putIfAbsent(ck, mine);
    if (leader == null) {
      return lead(ck, mine, loader, ttlNanos);
    }
    if (e != null && now - (e.expiresNanos + staleForNanos) < 0) {
      stats.staleHits.increment();
      served.increment();
      return (T) e.value;
    }
    stats.waits.increment();
    try {
      Object v = leader.done.get(waitTimeoutNanos, TimeUnit.NANOSECONDS);
      served.increment();
      return (T) v;
    } catch (ExecutionException ex) {
      Throwable c = ex.getCause();
      if (c instanceof RuntimeException re) {
        throw re;
      }
      if (c instanceof Error err) {
        throw err;
      }
      throw new HotkeydException("refresh failed", c);
    } catch (TimeoutException ex) {
      return loader.get(); // leader too slow: read through, uncached
    } catch (InterruptedException ex) {
      Thread.currentThread().interrupt();
      return loader.get();
    }
  }

  private <T> T lead(CacheKey ck, Flight f, Supplier<T> loader, long ttlNanos) {
    stats.refreshes.increment();
    T value;
    try {
      value = loader.get();
    } catch (RuntimeException | Error ex) {
      flights.remove(ck, f);
      f.done.completeExceptionally(ex);
      throw ex;
    }
    try {
      store(ck, f, value, ttlNanos);
    } finally {
      flights.remove(ck, f);
      f.done.complete(value);
    }
    return value;
  }

  private void store(CacheKey ck, Flight f, Object value, long ttlNanos) {
    if (ttlNanos <= 0) {
      return;
    }
    long size = estimateSize(value) + ck.id().key().length + ENTRY_OVERHEAD;
    if (size > maxBytes / 8) {
      stats.tooBig.increment();
      return;
    }
    int weight = (int) Math.max(size, minWeight);
    if (ck.sub() != null) {
      byKey.computeIfAbsent(ck.id(), k -> ConcurrentHashMap.newKeySet()).add(ck);
    }
    Entry e = new Entry(value, weight, clock.nanoTime() + ttlNanos);
    // The fast slot is set before the entry is in Caffeine and only while the flight is
    // registered: an invalidation in between taints the flight and the check below removes
    // the entry, whose removal clears the slot.
    setFast(ck, e);
    cache.put(ck, e);
    if (f.tainted) { // invalidated while we loaded: the value may predate the write
      cache.invalidate(ck);
      clearFast(ck, e);
    }
  }

  private void setFast(CacheKey ck, Entry e) {
    if (ck.kind() != GET_TEXT && ck.kind() != GET_BYTES) {
      return;
    }
    HotItem it = items.apply(ck.id());
    if (it != null) {
      if (ck.kind() == GET_TEXT) {
        it.fastText = e;
      } else {
        it.fastBytes = e;
      }
    }
  }

  private void clearFast(CacheKey ck, Entry e) {
    if (ck.kind() != GET_TEXT && ck.kind() != GET_BYTES) {
      return;
    }
    HotItem it = items.apply(ck.id());
    if (it != null) {
      if (it.fastText == e) {
        it.fastText = null;
      }
      if (it.fastBytes == e) {
        it.fastBytes = null;
      }
    }
  }

  /** Count a hit served from a hot item's fast slot; now and then tell Caffeine (recency). */
  void fastHit(HotItem item, char kind, KeyId id) {
    stats.hits.increment();
    item.localReads.increment();
    if ((++fastHits & 63) == 0) {
      cache.getIfPresent(new CacheKey(kind, id, null));
    }
  }

  // The same single-flight, split for a batch (MGET): begin a flight per key, read the
  // keys this caller leads in one round trip, finish those flights, then await the others.

  /** A flight of {@code ck} begun by a batch: its own ({@code leads}) or another caller's. */
  record Begun(Flight flight, boolean leads) {}

  /** A fresh copy of {@code ck} (counted as a hit), or null (no flight, no waiting). */
  Entry fresh(CacheKey ck, long now) {
    Entry e = cache.getIfPresent(ck);
    if (e != null && e.expiresNanos - now > 0) {
      stats.hits.increment();
      return e;
    }
    return null;
  }

  /** Join or lead the flight of {@code ck} (a miss); a leader must {@link #finish} or {@link #fail}. */
  Begun begin(CacheKey ck) {
    stats.misses.increment();
    Flight mine = new Flight(ck.id());
    Flight other = flights.putIfAbsent(ck, mine);
    if (other == null) {
      stats.refreshes.increment();
      return new Begun(mine, true);
    }
    return new Begun(other, false);
  }

  /** A copy of {@code ck} expired less than {@code staleFor} ago (someone refreshes it), or null. */
  Entry stale(CacheKey ck, long now) {
    Entry e = cache.getIfPresent(ck);
    if (e != null && now - (e.expiresNanos + staleForNanos) < 0) {
      stats.staleHits.increment();
      return e;
    }
    return null;
  }

  /** Store a led flight's value (unless null: MGET's answer for a missing or non-string key). */
  void finish(CacheKey ck, Flight f, Object value, long ttlNanos) {
    try {
      if (value != null) {
        store(ck, f, value, ttlNanos);
      }
    } finally {
      flights.remove(ck, f);
      f.done.complete(value);
    }
  }

  void fail(CacheKey ck, Flight f, Throwable ex) {
    flights.remove(ck, f);
    f.done.completeExceptionally(ex);
  }

  /** What {@link #await} returns when the leader failed or took longer than waitTimeout. */
  static final Object NO_VALUE = new Object();

  /** The leader's value, waiting up to waitTimeout; {@link #NO_VALUE}: read it yourself. */
  Object await(Flight leader) {
    stats.waits.increment();
    try {
      return leader.done.get(waitTimeoutNanos, TimeUnit.NANOSECONDS);
    } catch (ExecutionException | TimeoutException e) {
      return NO_VALUE;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return NO_VALUE;
    }
  }

  /** Drop every copy of {@code id} and spoil refreshes in flight. */
  void invalidate(KeyId id) {
    for (Flight f : flights.values()) {
      if (f.id.equals(id)) {
        f.tainted = true;
      }
    }
    for (char kind : plainKinds) {
      if (cache.asMap().remove(new CacheKey(kind, id, null)) != null) {
        stats.invalidations.increment();
      }
    }
    Set<CacheKey> s = byKey.get(id);
    if (s != null) {
      for (CacheKey ck : s) {
        s.remove(ck);
        if (cache.asMap().remove(ck) != null) {
          stats.invalidations.increment();
        }
      }
      byKey.computeIfPresent(id, (k, set) -> set.isEmpty() ? null : set);
    }
  }

  void clear() {
    for (Flight f : flights.values()) {
      f.tainted = true;
    }
    long n = cache.estimatedSize();
    cache.invalidateAll();
    byKey.clear();
    stats.invalidations.add(n);
  }

  /** Rough memory of a reply: text, bytes, lists and maps of them, numbers. */
  static long estimateSize(Object v) {
    if (v == null) {
      return 0;
    }
    if (v instanceof byte[] b) {
      return b.length + 16;
    }
    if (v instanceof String s) {
      return s.length() + 40;
    }
    if (v instanceof Map<?, ?> m) {
      long n = 48;
      for (Map.Entry<?, ?> e : m.entrySet()) {
        n += estimateSize(e.getKey()) + estimateSize(e.getValue()) + 32;
      }
      return n;
    }
    if (v instanceof Collection<?> c) {
      long n = 40;
      for (Object o : c) {
        n += estimateSize(o) + 8;
      }
      return n;
    }
    return 32;
  }

}
