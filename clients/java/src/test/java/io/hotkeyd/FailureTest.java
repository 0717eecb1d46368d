package io.hotkeyd;

import static io.hotkeyd.SubscriberTest.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import org.junit.jupiter.api.Test;
import redis.clients.jedis.JedisPooled;

/** The failure contract (spec/failure.md): each scenario of spec/vectors/failure.json. */
class FailureTest {
  static JsonNode scenario(String name) throws Exception {
    Path file = Path.of(System.getProperty("hotkeyd.spec", "../../spec"), "vectors", "failure.json");
    for (JsonNode s : Wire.JSON.readTree(Files.readAllBytes(file)).get("scenarios")) {
      if (s.get("name").asText().equals(name)) {
        return s;
      }
    }
    throw new AssertionError("no scenario " + name + " in " + file);
  }

  @Test
  void startWithRedisDownThrowsWithinTheBound() throws Exception {
    JsonNode sc = scenario("start_redis_down");
    assertEquals(5000, Limits.START_TIMEOUT_MS);
    long bound = sc.get("test_bound_ms").asLong();
    try (JedisPooled down = new JedisPooled("127.0.0.1", RedisServer.freePort())) {
      HotCache cache = HotCache.builder(down).startTimeout(Duration.ofMillis(bound)).build();
      long t0 = System.nanoTime();
      assertThrows(HotkeydException.class, cache::start);
      long tookMs = (System.nanoTime() - t0) / 1_000_000;
      assertTrue(tookMs <= bound + sc.get("slack_ms").asLong(), "threw after " + tookMs + " ms");
      cache.close();
    }
  }

  @Test
  void aLostSubscriptionDropsEveryCopyAndTheReconnectResyncs() throws Exception {
    try (RedisServer server = new RedisServer();
        JedisPooled jedis = new JedisPooled("127.0.0.1", server.port)) {
      Namespace ns = Namespace.of("fl");
      FakeDaemon d = new FakeDaemon(jedis, ns, "d");
      jedis.set("k", "old");
      try (HotCache cache = HotCache.builder(jedis).namespace(ns).build().start()) {
        d.publish(FakeDaemon.hot("k", 60_000));
        await(() -> cache.hotset().isHot(KeyId.of("k")), "hot");
        assertEquals("old", cache.get("k"));
        SubscriberStats st = cache.subscriber().stats();
        long lost = st.lost.get();
        long connects = st.connects.get();
        long resyncs = st.resyncs.get();
        jedis.sendCommand(redis.clients.jedis.Protocol.Command.CLIENT, "KILL", "TYPE", "pubsub");
        jedis.set("k", "new"); // not announced
        await(() -> st.lost.get() > lost, "the loss to be counted");
        assertEquals("new", cache.get("k"), "a copy from before the loss was served");
        await(() -> st.connects.get() > connects && st.resyncs.get() > resyncs, "the reconnect and its resync");
        d.publish(FakeDaemon.hot("k2", 60_000));
        await(() -> cache.hotset().isHot(KeyId.of("k2")), "announcements followed again");
      }
    }
  }

  @Test
  void aStoppedDaemonsKeysExpireByTheirTtl() throws Exception {
    JsonNode sc = scenario("daemon_stopped");
    long ttl = sc.get("test_ttl_ms").asLong();
    try (RedisServer server = new RedisServer();
        JedisPooled jedis = new JedisPooled("127.0.0.1", server.port)) {
      Namespace ns = Namespace.of("fd");
      FakeDaemon d = new FakeDaemon(jedis, ns, "d");
      jedis.set("k", "old");
      try (HotCache cache = HotCache.builder(jedis).namespace(ns).build().start()) {
        d.publish(FakeDaemon.hot("k", ttl)); // and then the daemon says nothing
        await(() -> cache.hotset().isHot(KeyId.of("k")), "hot");
        assertEquals("old", cache.get("k"));
        long t0 = System.nanoTime();
        jedis.set("k", "new"); // not announced
        await(() -> !cache.hotset().isHot(KeyId.of("k")), "the key to expire");
        assertEquals("new", cache.get("k"));
        long tookMs = (System.nanoTime() - t0) / 1_000_000;
        assertTrue(tookMs <= ttl + sc.get("slack_ms").asLong(), "served for " + tookMs + " ms");
        long last = cache.subscriber().stats().lastNotificationMillis.get();
        assertTrue(last > 0 && System.currentTimeMillis() - last >= ttl,
            "the stats do not show the daemon's silence");
      }
    }
  }
}
