package io.hotkeyd;

import static io.hotkeyd.SubscriberTest.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import redis.clients.jedis.BinaryJedisPubSub;
import redis.clients.jedis.JedisPooled;

class HotCacheTest {
  static RedisServer server;
  static JedisPooled jedis;

  @BeforeAll
  static void up() throws Exception {
    server = new RedisServer();
    jedis = new JedisPooled("127.0.0.1", server.port);
  }

  @AfterAll
  static void down() throws Exception {
    jedis.close();
    server.close();
  }

  static long calls(String command) {
    String info = new String((byte[]) jedis.sendCommand(redis.clients.jedis.Protocol.Command.INFO, "commandstats"), StandardCharsets.UTF_8);
    for (String line : info.split("\r\n")) {
      if (line.startsWith("cmdstat_" + command + ":")) {
        return Long.parseLong(line.split("calls=")[1].split(",")[0]);
      }
    }
    return 0;
  }

  static Namespace freshNs() {
    return Namespace.of("hc-" + System.nanoTime());
  }

  @Test
  void hotKeysAreServedLocallyAndColdKeysPassThrough() throws Exception {
    Namespace ns = freshNs();
    FakeDaemon d = new FakeDaemon(jedis, ns, "d1");
    d.snapshot(FakeDaemon.hot("hot:1", 60_000), FakeDaemon.hot("hash:1", 60_000));
    jedis.set("hot:1", "v1");
    jedis.set("cold:1", "c1");
    jedis.hset("hash:1", Map.of("f", "x", "g", "y"));
    try (HotCache cache = HotCache.builder(jedis).namespace(ns).build().start()) {
      assertEquals("v1", cache.get("hot:1"));
      long before = calls("get");
      for (int i = 0; i < 1000; i++) {
        assertEquals("v1", cache.get("hot:1"));
        assertEquals("v1", new String(cache.get("hot:1".getBytes(StandardCharsets.UTF_8)), StandardCharsets.UTF_8));
      }
      assertTrue(calls("get") - before <= 1, "hot reads stay local");
      assertEquals("c1", cache.get("cold:1"));
      assertEquals(before + 2, calls("get"), "cold read went to Redis (plus one binary refresh)");
      assertEquals("x", cache.hget("hash:1", "f"));
      assertEquals("y", cache.hget("hash:1", "g"));
      assertEquals(Map.of("f", "x", "g", "y"), cache.hgetAll("hash:1"));
      long hgets = calls("hget");
      cache.hget("hash:1", "f");
      assertEquals(hgets, calls("hget"));
      assertEquals(List.of("v1", "c1"), cache.mget("hot:1", "cold:1"));
      assertEquals(Arrays.asList((String) null), cache.mget("missing"));
      assertTrue(cache.stats().hits.sum() >= 2000);
    }
  }

  @Test
  void aWriteThroughOneCacheInvalidatesTheOther() throws Exception {
    Namespace ns = freshNs();
    FakeDaemon d = new FakeDaemon(jedis, ns, "d1");
    d.snapshot(FakeDaemon.hot("shared", 60_000));
    jedis.set("shared", "old");
    try (HotCache a = HotCache.builder(jedis).namespace(ns).build().start();
        HotCache b = HotCache.builder(jedis).namespace(ns).build().start()) {
      assertEquals("old", a.get("shared"));
      assertEquals("old", b.get("shared"));
      long publishes = calls("publish");
      long sets = calls("set");
      b.set("shared", "new");
      assertEquals(publishes + 1, calls("publish"), "one invalidation per write");
      assertEquals(sets + 1, calls("set"));
      assertEquals("new", b.get("shared"), "the writer never serves its old copy");
      await(() -> "new".equals(a.get("shared")), "the other cache drops its copy");
      // cached(): a database read, invalidated explicitly
      AtomicInteger loads = new AtomicInteger();
      assertEquals("row-1", a.cached("shared", () -> "row-" + loads.incrementAndGet()));
      assertEquals("row-1", a.cached("shared", () -> "row-" + loads.incrementAndGet()));
      b.invalidate("shared");
      await(() -> a.cached("shared", () -> "row-" + loads.incrementAndGet()).equals("row-2"), "reload");
      // garbage on the invalidation channel is counted, never fatal
      jedis.publish(ns.invalidateChannel(), "nope");
      await(() -> a.stats().badInvalidations.sum() == 1, "bad invalidation counted");
    }
  }

  @Test
  void aRefreshedCopyIsStillInvalidated() throws Exception {
    Namespace ns = freshNs();
    FakeDaemon d = new FakeDaemon(jedis, ns, "d1");
    d.snapshot(FakeDaemon.hot("rf", 60_000));
    jedis.set("rf", "1");
    ManualClock clock = new ManualClock();
    try (HotCache a = HotCache.builder(jedis).namespace(ns).clock(clock).maxTtl(Duration.ofMillis(100))
            .staleFor(Duration.ZERO).build().start();
        HotCache b = HotCache.builder(jedis).namespace(ns).build().start()) {
      assertEquals("1", a.get("rf"));
      clock.advanceMillis(200);
      assertEquals("1", a.get("rf")); // the copy expired and was refreshed (replaced)
      b.set("rf", "2");
      await(() -> "2".equals(a.get("rf")), "the refreshed copy is dropped by the invalidation");
    }
  }

  @Test
  void singleFlightOneLoaderForManyCallers() throws Exception {
    Namespace ns = freshNs();
    FakeDaemon d = new FakeDaemon(jedis, ns, "d1");
    d.snapshot(FakeDaemon.hot("sf", 60_000));
    try (HotCache cache = HotCache.builder(jedis).namespace(ns).waitTimeout(Duration.ofSeconds(5)).build().start()) {
      AtomicInteger loads = new AtomicInteger();
      CountDownLatch go = new CountDownLatch(1);
      ExecutorService pool = Executors.newFixedThreadPool(16);
      List<Future<String>> fs = new ArrayList<>();
      for (int i = 0; i < 16; i++) {
        fs.add(pool.submit(() -> {
          go.await();
          return cache.cached("sf", () -> {
            loads.incrementAndGet();
            sleep(200);
            return "loaded";
          });
        }));
      }
      go.countDown();
      for (Future<String> f : fs) {
        assertEquals("loaded", f.get(10, TimeUnit.SECONDS));
      }
      pool.shutdown();
      assertEquals(1, loads.get(), "one load for 16 concurrent callers");
    }
  }

  @Test
  void logicalExpiryServesStaleWhileOneRefreshes() throws Exception {
    Namespace ns = freshNs();
    FakeDaemon d = new FakeDaemon(jedis, ns, "d1");
    d.snapshot(FakeDaemon.hot("le", 60_000));
    ManualClock clock = new ManualClock();
    try (HotCache cache = HotCache.builder(jedis).namespace(ns).clock(clock)
        .maxTtl(Duration.ofMillis(100)).staleFor(Duration.ofSeconds(1)).build().start()) {
      assertEquals("v0", cache.cached("le", () -> "v0"));
      clock.advanceMillis(150); // expired, within staleFor
      CountDownLatch inLoader = new CountDownLatch(1);
      CountDownLatch release = new CountDownLatch(1);
      Thread leader = new Thread(() -> cache.cached("le", () -> {
        inLoader.countDown();
        awaitLatch(release);
        return "v1";
      }));
      leader.start();
      inLoader.await();
      assertEquals("v0", cache.cached("le", () -> "other"), "stale copy while the leader loads");
      release.countDown();
      leader.join();
      assertEquals("v1", cache.cached("le", () -> "other"));
      assertTrue(cache.stats().staleHits.sum() >= 1);
    }
  }

  @Test
  void boundedByEntriesAndBytes() throws Exception {
    Namespace ns = freshNs();
    FakeDaemon d = new FakeDaemon(jedis, ns, "d1");
    var hot = new com.fasterxml.jackson.databind.node.ObjectNode[200];
    for (int i = 0; i < hot.length; i++) {
      hot[i] = FakeDaemon.hot("b:" + i, 60_000);
      jedis.set("b:" + i, "x".repeat(1000));
    }
    d.snapshot(hot);
    try (HotCache cache = HotCache.builder(jedis).namespace(ns).maxEntries(50).maxBytes(30_000).build().start()) {
      for (int i = 0; i < hot.length; i++) {
        assertEquals(1000, cache.get("b:" + i).length());
      }
      assertTrue(cache.localSize() <= 50, "entries " + cache.localSize());
      assertTrue(cache.localWeight() <= 30_000, "bytes " + cache.localWeight());
      assertTrue(cache.localSize() >= 10, "still caches " + cache.localSize());
      long fastSlots = cache.hotset().items().values().stream().filter(it -> it.fastText != null).count();
      assertTrue(fastSlots <= cache.localSize(), "evicted copies leave no fast slot: " + fastSlots);
      jedis.set("big", "y".repeat(10_000));
      d.publish(FakeDaemon.hot("big", 60_000));
      await(() -> cache.hotset().isHot(KeyId.of("big")), "big hot");
      cache.get("big");
      assertEquals(1, cache.stats().tooBig.sum(), "a value over maxBytes/8 is served, not cached");
    }
  }

  @Test
  void demandReportsGoToTheAnnouncingInstance() throws Exception {
    Namespace ns = freshNs();
    FakeDaemon d1 = new FakeDaemon(jedis, ns, "d1");
    FakeDaemon d2 = new FakeDaemon(jedis, ns, "d2");
    d1.snapshot(FakeDaemon.hot("dk:1", 60_000));
    d2.snapshot(FakeDaemon.hot("dk:2", 60_000));
    jedis.set("dk:1", "a");
    jedis.set("dk:2", "b");
    List<JsonNode> got = new CopyOnWriteArrayList<>();
    BinaryJedisPubSub ps = new BinaryJedisPubSub() {
      @Override
      public void onPMessage(byte[] pattern, byte[] channel, byte[] message) {
        try {
          JsonNode m = Wire.JSON.readTree(message);
          ((com.fasterxml.jackson.databind.node.ObjectNode) m).put("_channel", new String(channel, StandardCharsets.UTF_8));
          got.add(m);
        } catch (java.io.IOException e) {
          throw new RuntimeException(e);
        }
      }
    };
    Thread t = new Thread(() -> jedis.psubscribe(ps, (ns.prefix() + ":demand:*").getBytes(StandardCharsets.UTF_8)));
    t.start();
    await(() -> ps.isSubscribed(), "psubscribed");
    try (HotCache cache = HotCache.builder(jedis).namespace(ns).appId("app-x").build().start()) {
      for (int i = 0; i < 101; i++) {
        cache.get("dk:1");
      }
      for (int i = 0; i < 11; i++) {
        cache.get("dk:2");
      }
      await(() -> got.size() >= 2, "two reports");
    }
    ps.punsubscribe();
    t.join();
    long n1 = 0;
    long n2 = 0;
    for (JsonNode m : got) {
      assertEquals("demand", m.get("type").asText());
      assertEquals("app-x", m.get("app").asText());
      for (JsonNode e : m.get("entries")) {
        if (e.get("key").asText().equals("dk:1")) {
          assertEquals(ns.demandChannel("d1"), m.get("_channel").asText());
          n1 += e.get("n").asLong();
        } else {
          assertEquals(ns.demandChannel("d2"), m.get("_channel").asText());
          n2 += e.get("n").asLong();
        }
      }
    }
    assertEquals(100, n1, "the first read went to Redis; 100 were served locally");
    assertEquals(10, n2);
  }

  @Test
  void demandReportsAreSignedWithTheReporterKeyOfTheKeyFile() throws Exception {
    java.nio.file.Path file = java.nio.file.Files.createTempFile("demand", ".key");
    java.nio.file.Files.writeString(file, "reporter-key-0123456789\nold-reporter-key-0123456789\n");
    MessageAuth key = MessageAuth.reporterKeyFrom(Map.of(
        MessageAuth.DEMAND_KEY_FILE_ENV, file.toString(),
        MessageAuth.DEMAND_KEY_ENV, "ignored-key-0123456789"));
    assertNull(MessageAuth.reporterKeyFrom(Map.of()));
    Namespace ns = freshNs();
    new FakeDaemon(jedis, ns, "d1").snapshot(FakeDaemon.hot("sk:1", 60_000));
    jedis.set("sk:1", "a");
    List<byte[]> got = new CopyOnWriteArrayList<>();
    BinaryJedisPubSub ps = new BinaryJedisPubSub() {
      @Override
      public void onMessage(byte[] channel, byte[] message) {
        got.add(message);
      }
    };
    Thread t = new Thread(() -> jedis.subscribe(ps, ns.demandChannel("d1").getBytes(StandardCharsets.UTF_8)));
    t.start();
    await(() -> ps.isSubscribed(), "subscribed");
    try (HotCache cache = HotCache.builder(jedis).namespace(ns).demandAuth(key).build().start()) {
      for (int i = 0; i < 11; i++) {
        cache.get("sk:1");
      }
      await(() -> !got.isEmpty(), "a demand report");
    }
    ps.unsubscribe();
    t.join();
    // the file's first key signs: what the daemon's --demand-key-file verifies
    byte[] body = new MessageAuth(List.of("reporter-key-0123456789".getBytes(StandardCharsets.UTF_8)))
        .verify(got.get(0));
    assertTrue(body != null, "not signed with the file's first key");
    assertEquals("sk:1", Wire.JSON.readTree(body).get("entries").get(0).get("key").asText());
    assertNull(new MessageAuth(List.of("ignored-key-0123456789".getBytes(StandardCharsets.UTF_8)))
        .verify(got.get(0)));
  }

  static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  static void awaitLatch(CountDownLatch l) {
    try {
      l.await();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  @Test
  void coolDropsTheCopy() throws Exception {
    Namespace ns = freshNs();
    FakeDaemon d = new FakeDaemon(jedis, ns, "d1");
    d.snapshot(FakeDaemon.hot("cd", 60_000));
    jedis.set("cd", "1");
    try (HotCache cache = HotCache.builder(jedis).namespace(ns).build().start()) {
      assertEquals("1", cache.get("cd"));
      jedis.set("cd", "2"); // a write that bypasses HotCache: served stale while hot ...
      assertEquals("1", cache.get("cd"));
      d.cool("cd");
      await(() -> "2".equals(cache.get("cd")), "... and fresh once the key cools");
      assertNull(cache.get("nope"));
    }
  }

  /** Keys Redis looked up (INFO stats keyspace_hits): GET k counts 1, MGET a b counts 2. */
  static long keyLookups(JedisPooled r) {
    String info = new String((byte[]) r.sendCommand(redis.clients.jedis.Protocol.Command.INFO, "stats"), StandardCharsets.UTF_8);
    for (String line : info.split("\r\n")) {
      if (line.startsWith("keyspace_hits:")) {
        return Long.parseLong(line.substring("keyspace_hits:".length()).trim());
      }
    }
    throw new AssertionError("no keyspace_hits in INFO stats");
  }

  @Test
  void concurrentMissesAcrossGetAndMgetLoadEachKeyOnce() throws Exception {
    // A server of its own: every key lookup on it is one of ours.
    try (RedisServer own = new RedisServer(); JedisPooled r = new JedisPooled("127.0.0.1", own.port)) {
      Namespace ns = freshNs();
      new FakeDaemon(r, ns, "d1").snapshot(FakeDaemon.hot("sf:1", 60_000), FakeDaemon.hot("sf:2", 60_000));
      r.set("sf:1", "one");
      r.set("sf:2", "two");
      try (HotCache cache = HotCache.builder(r).namespace(ns).waitTimeout(Duration.ofSeconds(10)).build().start()) {
        long before = keyLookups(r);
        int threads = 8;
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        try {
          CountDownLatch go = new CountDownLatch(1);
          List<Future<List<String>>> results = new ArrayList<>();
          for (int t = 0; t < threads; t++) {
            boolean viaGet = t % 2 == 0;
            results.add(pool.submit(() -> {
              go.await();
              return viaGet ? List.of(cache.get("sf:1"), cache.get("sf:2")) : cache.mget("sf:1", "sf:2");
            }));
          }
          // Hold every command for 600 ms: whoever reads first is still in flight while
          // the other callers miss the same keys (every caller overlaps the first read).
          r.sendCommand(redis.clients.jedis.Protocol.Command.CLIENT, "PAUSE", "600", "ALL");
          go.countDown();
          for (Future<List<String>> f : results) {
            assertEquals(List.of("one", "two"), f.get(20, TimeUnit.SECONDS));
          }
        } finally {
          pool.shutdownNow();
        }
        assertEquals(2, keyLookups(r) - before, "each hot key read from Redis once " + cache.stats());
        assertTrue(cache.stats().waits.sum() >= 1, "callers waited for the flight " + cache.stats());
      }
    }
  }

  @Test
  void shardedPubSubOnOneNode() throws Exception {
    Namespace ns = freshNs().withSharded(true);
    FakeDaemon d = new FakeDaemon(jedis, ns, "d1");
    d.snapshot(FakeDaemon.hot("sh:1", 60_000));
    jedis.set("sh:1", "a");
    try (HotCache one = HotCache.builder(jedis).namespace(ns).build().start();
         HotCache two = HotCache.builder(jedis).namespace(ns).build().start()) {
      long publishes = calls("publish");
      long spublishes = calls("spublish");
      assertEquals("a", one.get("sh:1"));
      assertEquals("a", two.get("sh:1"));
      two.set("sh:1", "b"); // SPUBLISHes the invalidation
      await(() -> "b".equals(one.get("sh:1")), "invalidation over sharded pub/sub");

      // SSUBSCRIBE, not SUBSCRIBE: a plain PUBLISH on the channel is not delivered.
      d.seq++;
      jedis.publish(ns.channel().getBytes(StandardCharsets.UTF_8),
          Wire.dumps(d.message(false, new com.fasterxml.jackson.databind.node.ObjectNode[] {FakeDaemon.hot("plain", 60_000)})));
      d.publish(FakeDaemon.hot("sh:2", 60_000)); // SPUBLISH
      await(() -> one.hotset().isHot(KeyId.of("sh:2")), "SPUBLISHed event");
      assertTrue(!one.hotset().isHot(KeyId.of("plain")), "a plain PUBLISH reached a sharded subscriber");

      for (int i = 0; i < 100; i++) {
        one.get("sh:1"); // served locally: demand reports follow
      }
      await(() -> one.stats().demandMessages.sum() >= 1, "a demand report");
      assertEquals(publishes + 1, calls("publish"), "only the test's own plain PUBLISH");
      assertTrue(calls("spublish") - spublishes >= 3, "invalidation, event, demand: SPUBLISH");
    }
  }

  /** Strict mode over sharded pub/sub: the heartbeats arrive on an SSUBSCRIBE of their own. */
  @Test
  void shardedStrictFollowsTheHeartbeats() throws Exception {
    Namespace ns = freshNs().withSharded(true);
    FakeDaemon d = new FakeDaemon(jedis, ns, "d1");
    d.snapshot(FakeDaemon.hot("shs:1", 60_000));
    jedis.set("shs:1", "a");
    java.util.concurrent.atomic.AtomicBoolean beating = new java.util.concurrent.atomic.AtomicBoolean(true);
    Thread beats = new Thread(() -> {
      while (beating.get()) {
        d.heartbeat("n1", 1);
        sleep(50);
      }
    });
    beats.setDaemon(true);
    try (HotCache c = HotCache.builder(jedis).namespace(ns).consistency(Consistency.STRICT).build().start()) {
      beats.start();
      await(() -> c.watchStats().heartbeats() >= 2, "heartbeats over sharded pub/sub");
      await(() -> {
        long hits = c.stats().hits.sum();
        c.get("shs:1");
        c.get("shs:1");
        return c.stats().hits.sum() > hits;
      }, "strict serves locally while the heartbeats are fresh " + c.watchStats());
      beating.set(false);
      beats.join(2000);
      sleep(400); // past the 300 ms lease
      long hits = c.stats().hits.sum();
      long misses = c.watchStats().strictMisses();
      for (int i = 0; i < 5; i++) {
        assertEquals("a", c.get("shs:1"));
      }
      assertEquals(hits, c.stats().hits.sum(), "served locally after the lease " + c.watchStats());
      assertEquals(misses + 5, c.watchStats().strictMisses(), "strict reads sent to Redis");
    } finally {
      beating.set(false);
    }
  }
}
