package io.hotkeyd;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import redis.clients.jedis.UnifiedJedis;
import redis.clients.jedis.exceptions.JedisException;
import redis.clients.jedis.util.JedisClusterCRC16;

/**
 * An integer counter (stock, likes, quota) split over {@code shards} Redis keys, so a
 * write-hot counter does not serialize on one key. A read sums the shards. The twin of
 * Python's {@code ShardedCounter}: same keys, same shard choice ({@code murmur3(id, 0x5EED)
 * mod shards}), same Lua ({@code spec/lua/sharded_*.lua}), so Java and Python callers can
 * share one counter.
 *
 * <p>{@link #take} ("take if stock remains") never oversells and never says "sold out" while
 * enough stock remains:
 *
 * <ul>
 *   <li>hash tag (default): the shard keys share {@code {key}} (one cluster slot) and one
 *       script checks the total and takes from the caller's shard, then the next ones.
 *   <li>spread ({@code hashTag=false}, shards over slots and nodes): units are reserved shard
 *       by shard under a token with a lease ({@code sharded_reserve.lua}), then committed, or
 *       released when the shards cannot supply the amount ({@code sharded_settle.lua}). A
 *       caller that dies mid-take leaves holds that come back when their lease runs out.
 * </ul>
 */
public final class ShardedCounter {
  static final int SEED = 0x5EED;
  private static final String TAKE_ALL = Scripts.load("sharded_take_all.lua");
  private static final String RESERVE = Scripts.load("sharded_reserve.lua");
  private static final String SETTLE = Scripts.load("sharded_settle.lua");

  private final UnifiedJedis jedis;
  private final String key;
  private final int shards;
  private final boolean hashTag;
  private final long leaseMillis;
  private final long waitMillis;
  private final List<String> keys;
  private final List<String> holds;

  public ShardedCounter(UnifiedJedis jedis, String key, int shards) {
    this(jedis, key, shards, true);
  }

  public ShardedCounter(UnifiedJedis jedis, String key, int shards, boolean hashTag) {
    this(jedis, key, shards, hashTag, Duration.ofSeconds(5), null);
  }

  /**
   * @param hashTag put {@code {key}} in every shard key (one slot: one atomic script per take)
   * @param lease spread mode: how long a reservation survives a caller that died mid-take
   * @param wait spread mode: longest a take retries while other callers hold the units it
   *     needs (null: 2 x lease + 1 s); past it, take throws rather than guess "sold out"
   */
  public ShardedCounter(UnifiedJedis jedis, String key, int shards, boolean hashTag,
      Duration lease, Duration wait) {
    if (shards < 1 || shards > 1024) {
      throw new IllegalArgumentException("shards must be in 1..1024, got " + shards);
    }
    if (lease.isNegative() || lease.isZero()) {
      throw new IllegalArgumentException("lease must be > 0, got " + lease);
    }
    this.jedis = jedis;
    this.key = key;
    this.shards = shards;
    this.hashTag = hashTag;
    this.leaseMillis = lease.toMillis();
    this.waitMillis = wait == null ? 2 * leaseMillis + 1000 : wait.toMillis();
    List<String> ks = new ArrayList<>(shards);
    List<String> hs = new ArrayList<>(shards);
    for (int i = 0; i < shards; i++) {
      String k = hashTag ? "{" + key + "}:" + i : key + ":shard:" + i;
      ks.add(k);
      if (!hashTag) {
        hs.add(holdsKey(k));
      }
    }
    this.keys = List.copyOf(ks);
    this.holds = List.copyOf(hs);
  }

  /** The hash of in-flight holds beside {@code shardKey}, in the same cluster slot. */
  static String holdsKey(String shardKey) {
    int slot = JedisClusterCRC16.getSlot(shardKey);
    for (String c : List.of("{" + shardKey + "}:held", shardKey + ":held")) {
      if (JedisClusterCRC16.getSlot(c) == slot) {
        return c;
      }
    }
    throw new IllegalArgumentException("cannot place a holds key in the slot of " + shardKey);
  }

  public List<String> keys() {
    return keys;
  }

  /** Shard index of {@code callerId} (stable across processes, hosts and languages). */
  public int shardOf(Object callerId) {
    return shardOf(Keys.toBytes(callerId), shards);
  }

  static int shardOf(byte[] caller, int shards) {
    return (int) (Murmur3.hash32(caller, SEED) % shards);
  }

  /** Add {@code amount} to the caller's shard; returns that shard's new value. */
  public long incr(Object callerId, long amount) {
    return jedis.incrBy(keys.get(shardOf(callerId)), amount);
  }

  /** The total over all shards, units held by takes in flight included. */
  public long value() {
    long total = 0;
    if (hashTag) {
      for (String v : jedis.mget(keys.toArray(new String[0]))) {
        total += v == null ? 0 : Long.parseLong(v);
      }
      return total;
    }
    for (int i = 0; i < shards; i++) {
      String v = jedis.get(keys.get(i));
      total += v == null ? 0 : Long.parseLong(v);
      for (String h : jedis.hvals(holds.get(i))) {
        total += units(h);
      }
    }
    return total;
  }

  private static long units(String hold) {
    int colon = hold.indexOf(':');
    String n = colon < 0 ? hold : hold.substring(0, colon);
    return n.isEmpty() ? 0 : Long.parseLong(n);
  }

  /** Spread {@code total} evenly over the shards (e.g. to load stock); drops holds in flight. */
  public void setTotal(long total) {
    if (total < 0) {
      throw new IllegalArgumentException("total must be >= 0, got " + total);
    }
    long base = total / shards;
    long extra = total % shards;
    if (hashTag) {
      List<String> flat = new ArrayList<>();
      for (int i = 0; i < shards; i++) {
        flat.add(keys.get(i));
        flat.add(Long.toString(base + (i < extra ? 1 : 0)));
      }
      jedis.mset(flat.toArray(new String[0]));
      return;
    }
    for (int i = 0; i < shards; i++) {
      jedis.set(keys.get(i), Long.toString(base + (i < extra ? 1 : 0)));
      jedis.del(holds.get(i));
    }
  }

  /**
   * Take {@code amount} if that much remains in total.
   *
   * @return the total left afterwards, or -1 (nothing taken) when the stock is short
   * @throws PartialTakeException spread mode: a failure after some units were committed
   * @throws HotkeydException spread mode: other callers held the units past {@code wait}
   */
  public long take(Object callerId, long amount) {
    if (amount < 1) {
      throw new IllegalArgumentException("amount must be >= 1, got " + amount);
    }
    int first = shardOf(callerId);
    if (hashTag) {
      Object r = jedis.eval(TAKE_ALL, keys, List.of(Integer.toString(first), Long.toString(amount)));
      return ((Number) r).longValue();
    }
    return takeSpread(first, amount);
  }

  private long takeSpread(int first, long amount) {
    String token = UUID.randomUUID().toString().replace("-", "");
    Backoff backoff = new Backoff(0.001, 0.05);
    long deadline = System.nanoTime() + waitMillis * 1_000_000L;
    while (true) {
      Map<Integer, Long> held = new LinkedHashMap<>();
      long got = 0;
      long free = 0;
      long others = 0;
      try {
        for (int j = 0; j < shards && got < amount; j++) {
          int i = (first + j) % shards;
          List<?> r = (List<?>) jedis.eval(RESERVE, List.of(keys.get(i), holds.get(i)),
              List.of(token, Long.toString(amount - got), Long.toString(leaseMillis)));
          long now = ((Number) r.get(0)).longValue();
          if (now > 0) {
            held.merge(i, now, Long::sum);
            got += now;
          }
          free += Math.max(0, ((Number) r.get(1)).longValue());
          others += ((Number) r.get(2)).longValue();
        }
      } catch (RuntimeException e) {
        release(token, held.keySet(), false);
        throw e;
      }
      if (got == amount) {
        return commit(token, held, amount);
      }
      release(token, held.keySet(), true);
      if (got + free + others < amount) {
        return -1; // even if every hold in flight came back, it is short
      }
      if (System.nanoTime() >= deadline) {
        throw new HotkeydException("take(" + amount + ") on '" + key + "': other callers held "
            + "the units for longer than " + waitMillis + " ms; nothing was taken");
      }
      try {
        Thread.sleep(backoff.nextDelayMillis() + 1);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new HotkeydException("interrupted; nothing was taken", e);
      }
    }
  }

  private long settle(String token, int i, String how) {
    return ((Number) jedis.eval(SETTLE, List.of(keys.get(i), holds.get(i)), List.of(token, how)))
        .longValue();
  }

  /** Give reserved units back; a failure here leaves them to their lease. */
  private void release(String token, Iterable<Integer> shardsHeld, boolean rethrow) {
    try {
      for (int i : shardsHeld) {
        settle(token, i, "release");
      }
    } catch (JedisException e) {
      if (rethrow) {
        throw e;
      }
    }
  }

  private long commit(String token, Map<Integer, Long> held, long amount) {
    Map<Integer, Long> committed = new LinkedHashMap<>();
    try {
      for (int i : held.keySet()) {
        committed.put(i, settle(token, i, "commit"));
      }
    } catch (JedisException e) {
      List<Integer> rest = new ArrayList<>();
      for (int i : held.keySet()) {
        if (!committed.containsKey(i)) {
          rest.add(i);
        }
      }
      release(token, rest, false);
      throw giveBack(committed, amount, e);
    }
    long taken = committed.values().stream().mapToLong(Long::longValue).sum();
    if (taken != amount) { // a hold outlived its lease: those units went back to the stock
      throw giveBack(committed, amount, null);
    }
    return value();
  }

  /** Return committed units of a take that cannot complete; the exception to throw. */
  private PartialTakeException giveBack(Map<Integer, Long> committed, long amount, Throwable cause) {
    long taken = committed.values().stream().mapToLong(Long::longValue).sum();
    String why = cause != null ? cause.toString() : "a reservation outlived its lease";
    try {
      for (Map.Entry<Integer, Long> e : committed.entrySet()) {
        if (e.getValue() > 0) {
          jedis.incrBy(keys.get(e.getKey()), e.getValue());
        }
      }
    } catch (JedisException e) {
      return new PartialTakeException("take(" + amount + ") on '" + key + "' failed (" + why
          + ") after taking " + taken + " unit(s), which could not be given back", taken, amount,
          cause);
    }
    return new PartialTakeException("take(" + amount + ") on '" + key + "' failed (" + why
        + "); nothing was taken", 0, amount, cause);
  }

  /** Delete every shard key (and, spread, the holds). */
  public void clear() {
    for (String k : keys) {
      jedis.del(k);
    }
    for (String h : holds) {
      jedis.del(h);
    }
  }

  public String key() {
    return key;
  }
}
