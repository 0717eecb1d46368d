package io.hotkeyd;

import static io.hotkeyd.SubscriberTest.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.JedisCluster;
import redis.clients.jedis.exceptions.JedisMovedDataException;
import redis.clients.jedis.util.JedisClusterCRC16;

/** The client on a real 3-primary Redis Cluster through JedisCluster. */
class ClusterTest {
  static RedisCluster cluster;
  static JedisCluster jedis;

  @BeforeAll
  static void up() throws Exception {
    cluster = new RedisCluster(3);
    jedis = new JedisCluster(cluster.hosts());
  }

  @AfterAll
  static void down() throws Exception {
    jedis.close();
    cluster.close();
  }

  @Test
  void hotCacheAndInvalidationOnACluster() throws Exception {
    Namespace ns = Namespace.of("cl-" + System.nanoTime());
    assertEquals(JedisClusterCRC16.getSlot(ns.instances()), JedisClusterCRC16.getSlot(ns.snapshot("d1")));
    FakeDaemon d = new FakeDaemon(jedis, ns, "d1");
    d.snapshot(FakeDaemon.hot("item:1", 60_000), FakeDaemon.hot("item:2", 60_000));
    jedis.set("item:1", "a");
    jedis.set("item:2", "b");
    try (HotCache one = HotCache.builder(jedis).namespace(ns).build().start();
        HotCache two = HotCache.builder(jedis).namespace(ns).build().start()) {
      assertEquals("a", one.get("item:1"));
      assertEquals("b", one.get("item:2"));
      long hits = one.stats().hits.sum();
      assertEquals("a", one.get("item:1"));
      assertEquals(hits + 1, one.stats().hits.sum(), "served locally");
      two.set("item:1", "a2");
      await(() -> "a2".equals(one.get("item:1")), "invalidation across the cluster's pub/sub");
      d.publish(FakeDaemon.hot("item:3", 60_000));
      await(() -> one.hotset().isHot(KeyId.of("item:3")), "events from any node");
    }
  }

  /**
   * Subscriber and publisher meet on the invalidation channel's slot owner (a message sent
   * elsewhere crosses the cluster bus: Nagle on Redis 7.0's outgoing links, ~40 ms).
   */
  @Test
  void plainPubSubMeetsOnTheInvalidationChannelsSlotOwner() throws Exception {
    Namespace ns = Namespace.of("home-" + System.nanoTime());
    FakeDaemon d = new FakeDaemon(jedis, ns, "d1");
    d.snapshot(FakeDaemon.hot("hitem:1", 60_000));
    try (HotCache one = HotCache.builder(jedis).namespace(ns).build().start()) {
      HostAndPort home = null;
      long subs = 0;
      java.util.Map<HostAndPort, Long> before = new java.util.HashMap<>();
      for (HostAndPort hp : cluster.hosts()) {
        try (Jedis n = new Jedis(hp)) {
          try {
            n.get(ns.invalidateChannel()); // the channel's name as a key: MOVED elsewhere
            home = hp;
          } catch (JedisMovedDataException e) {
            // not the owner
          }
          long c = n.pubsubNumSub(ns.invalidateChannel()).get(ns.invalidateChannel());
          subs += c;
          before.put(hp, publishCalls(n));
        }
      }
      assertTrue(home != null);
      try (Jedis n = new Jedis(home)) {
        assertEquals(1L, n.pubsubNumSub(ns.invalidateChannel()).get(ns.invalidateChannel()));
      }
      assertEquals(1L, subs, "one subscription, on the slot owner");
      one.set("hitem:1", "v");
      for (HostAndPort hp : cluster.hosts()) {
        try (Jedis n = new Jedis(hp)) {
          assertEquals(hp.equals(home) ? 1L : 0L, publishCalls(n) - before.get(hp), "PUBLISH on " + hp);
        }
      }
    }
  }

  private static long publishCalls(Jedis n) {
    for (String line : n.info("commandstats").split("\r?\n")) {
      if (line.startsWith("cmdstat_publish:calls=")) {
        return Long.parseLong(line.substring("cmdstat_publish:calls=".length()).split(",")[0]);
      }
    }
    return 0;
  }

  @Test
  void shardedPubSubOnACluster() throws Exception {
    // Events and invalidations on two channels of different slots: one SSUBSCRIBE each.
    Namespace ns = null;
    for (int i = 0; ns == null || JedisClusterCRC16.getSlot(ns.channel()) / 5462
        == JedisClusterCRC16.getSlot(ns.invalidateChannel()) / 5462; i++) {
      ns = Namespace.of("shcl-" + System.nanoTime() + "-" + i).withSharded(true);
    }
    FakeDaemon d = new FakeDaemon(jedis, ns, "d1");
    d.snapshot(FakeDaemon.hot("sitem:1", 60_000));
    jedis.set("sitem:1", "a");
    try (HotCache one = HotCache.builder(jedis).namespace(ns).build().start();
        HotCache two = HotCache.builder(jedis).namespace(ns).build().start()) {
      assertEquals("a", one.get("sitem:1"));
      two.set("sitem:1", "a2");
      await(() -> "a2".equals(one.get("sitem:1")), "invalidation on its channel's shard");
      d.publish(FakeDaemon.hot("sitem:2", 60_000));
      await(() -> one.hotset().isHot(KeyId.of("sitem:2")), "events on their channel's shard");
    }
  }

  @Test
  void shardedCounterOnACluster() throws Exception {
    for (boolean tag : new boolean[] {true, false}) {
      ShardedCounter c = new ShardedCounter(jedis, "stock-" + tag + System.nanoTime(), 6, tag);
      c.setTotal(12);
      long taken = 0;
      while (c.take("u" + taken, 1) >= 0) {
        taken++;
      }
      assertEquals(12, taken, "hash tag " + tag);
      assertEquals(0, c.value());
      if (!tag) {
        long slots = c.keys().stream().mapToInt(JedisClusterCRC16::getSlot).distinct().count();
        assertTrue(slots > 1, "spread shards live in several slots");
      }
      c.clear();
    }
  }
}
