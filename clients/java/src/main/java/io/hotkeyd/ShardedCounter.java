package io.hotkeyd;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import redis.clients.jedis.UnifiedJedis;

/**
 * An integer counter (stock, likes, quota) split over {@code shards} Redis keys, so a
 * write-hot counter does not serialize on one key. A read sums the shards.
 *
 * <p>{@link #take} ("take if stock remains") is one Lua script (shared with every client:
 * {@code spec/lua/sharded_take_all.lua}) over all shard keys: it checks the total, then takes
 * from the caller's shard and the next ones, never driving a shard, and so never the total,
 * below zero: it never oversells. The shard keys share the hash tag {@code {key}} so the
 * script works on Redis Cluster. A caller id goes to shard {@code murmur3(id, 0x5EED) mod
 * shards}, exactly as in the Python client.
 */
public final class ShardedCounter {
  static final int SEED = 0x5EED;
  private static final String TAKE_ALL = Scripts.load("sharded_take_all.lua");
  private static final String TAKE_ONE = Scripts.load("sharded_take_one.lua");

  private final UnifiedJedis jedis;
  private final String key;
  private final int shards;
  private final boolean hashTag;
  private final List<String> keys;

  public ShardedCounter(UnifiedJedis jedis, String key, int shards) {
    this(jedis, key, shards, true);
  }

  /**
   * @param hashTag put {@code {key}} in every shard key (one cluster slot: the atomic take);
   *     false spreads shards over slots and takes shard by shard (still never oversells)
   */
  public ShardedCounter(UnifiedJedis jedis, String key, int shards, boolean hashTag) {
    if (shards < 1 || shards > 1024) {
      throw new IllegalArgumentException("shards must be in 1..1024, got " + shards);
    }
    this.jedis = jedis;
    this.key = key;
    this.shards = shards;
    this.hashTag = hashTag;
    List<String> ks = new ArrayList<>(shards);
    for (int i = 0; i < shards; i++) {
      ks.add(hashTag ? "{" + key + "}:" + i : key + ":shard:" + i);
    }
    this.keys = List.copyOf(ks);
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

  /** The total over all shards. */
  public long value() {
    long total = 0;
    List<String> vals = hashTag ? jedis.mget(keys.toArray(new String[0])) : getEach();
    for (String v : vals) {
      if (v != null) {
        total += Long.parseLong(v);
      }
    }
    return total;
  }

  private List<String> getEach() {
    List<String> out = new ArrayList<>(shards);
    for (String k : keys) {
      out.add(jedis.get(k));
    }
    return out;
  }

  /** Spread {@code total} evenly over the shards (e.g. to load stock). */
  public void setTotal(long total) {
    if (total < 0) {
      throw new IllegalArgumentException("total must be >= 0, got " + total);
    }
    long base = total / shards;
    long extra = total % shards;
    Map<String, String> m = new HashMap<>();
    for (int i = 0; i < shards; i++) {
      m.put(keys.get(i), Long.toString(base + (i < extra ? 1 : 0)));
    }
    if (hashTag) {
      List<String> flat = new ArrayList<>();
      m.forEach((k, v) -> {
        flat.add(k);
        flat.add(v);
      });
      jedis.mset(flat.toArray(new String[0]));
    } else {
      m.forEach(jedis::set);
    }
  }

  /**
   * Atomically take {@code amount} if that much remains in total.
   *
   * @return the total left afterwards, or -1 (nothing taken) when short
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
    for (int j = 0; j < shards; j++) {
      String k = keys.get((first + j) % shards);
      Object r = jedis.eval(TAKE_ONE, List.of(k), List.of(Long.toString(amount)));
      if (((Number) r).longValue() >= 0) {
        return value();
      }
    }
    return -1;
  }

  /** Delete every shard key. */
  public void clear() {
    if (hashTag) {
      jedis.del(keys.toArray(new String[0]));
    } else {
      keys.forEach(jedis::del);
    }
  }

  public String key() {
    return key;
  }
}
