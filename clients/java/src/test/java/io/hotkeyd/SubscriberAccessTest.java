package io.hotkeyd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.JedisPooled;
import redis.clients.jedis.Protocol;

/** Redis refusing the credentials or the ACL stops the subscriber with a typed error, no retries. */
class SubscriberAccessTest {
  static RedisServer server;
  static Jedis admin; // ACL commands
  static JedisPooled data;

  @BeforeAll
  static void up() throws Exception {
    server = new RedisServer();
    admin = new Jedis("127.0.0.1", server.port);
    data = new JedisPooled("127.0.0.1", server.port);
  }

  @AfterAll
  static void down() {
    admin.close();
    data.close();
    server.close();
  }

  static JedisPooled as(int port, String user, String password) {
    DefaultJedisClientConfig.Builder cfg = DefaultJedisClientConfig.builder().password(password);
    if (user != null) {
      cfg.user(user);
    }
    return new JedisPooled(new HostAndPort("127.0.0.1", port), cfg.build());
  }

  /** Failed attempts Redis logged (auth failures and ACL denials). */
  static long refusals(Jedis by) {
    // raw ACL LOG: Jedis 5.2's parser wants the entry-id field Redis 7.2 added
    long n = 0;
    for (Object entry : (List<?>) by.sendCommand(Protocol.Command.ACL, "LOG")) {
      List<?> kv = (List<?>) entry;
      for (int i = 0; i + 1 < kv.size(); i += 2) {
        if ("count".equals(new String((byte[]) kv.get(i), StandardCharsets.UTF_8))) {
          n += (Long) kv.get(i + 1);
        }
      }
    }
    return n;
  }

  /**
   * The subscriber fails fast with RedisAccessException naming {@code code}, and does not try
   * again: the server sees no further attempts after the error.
   */
  static void refusedOnce(Supplier<JedisPooled> client, Jedis by, String code) throws Exception {
    if (by != null) {
      by.aclLogReset();
    }
    Namespace ns = Namespace.of("acl-" + System.nanoTime());
    new FakeDaemon(data, ns, "d1").snapshot(FakeDaemon.hot("a", 60_000));
    try (JedisPooled redis = client.get();
         Subscriber sub = Subscriber.builder(redis).namespace(ns).backoff(0.01, 0.02).build().start()) {
      long t0 = System.nanoTime();
      RedisAccessException e =
          assertThrows(RedisAccessException.class, () -> sub.awaitReady(10, TimeUnit.SECONDS));
      assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(5), "fails fast");
      assertTrue(e.getMessage().contains(code), e.getMessage());
      assertTrue(e instanceof HotkeydException);
      assertSame(e, sub.error());
      assertFalse(sub.connected());
      long seen = by == null ? 0 : refusals(by);
      long connects = sub.stats().connects.get(); // 1 if SUBSCRIBE passed and a read did not
      Thread.sleep(300); // a retrying subscriber (10-20 ms backoff) would try ~15 more times
      if (by != null) {
        assertTrue(seen >= 1, "Redis logged the refusal");
        assertEquals(seen, refusals(by), "no retries after the refusal");
      }
      assertEquals(connects, sub.stats().connects.get(), "no reconnects after the refusal");
      assertEquals(0, sub.stats().reconnects.get());
    }
  }

  @Test
  void wrongPassword() throws Exception {
    admin.aclSetUser("app-" + System.nanoTime(), "on", ">right", "~*", "&*", "+@all");
    refusedOnce(() -> as(server.port, "app-user", "wrong"), admin, "WRONGPASS");
  }

  @Test
  void aclWithoutChannelPermission() throws Exception {
    admin.aclSetUser("nosub", "reset", "on", ">pw", "~*", "resetchannels", "+@all");
    refusedOnce(() -> as(server.port, "nosub", "pw"), admin, "NOPERM");
  }

  @Test
  void aclWithoutSnapshotReadPermission() throws Exception {
    admin.aclSetUser("noread", "reset", "on", ">pw", "~*", "&*", "+@all", "-zrangebyscore");
    refusedOnce(() -> as(server.port, "noread", "pw"), admin, "NOPERM");
  }

  @Test
  void noPasswordGivenToAServerThatNeedsOne() throws Exception {
    try (RedisServer locked = new RedisServer(List.of("--requirepass", "s3cret"))) {
      refusedOnce(() -> new JedisPooled("127.0.0.1", locked.port), null, "NOAUTH");
    }
  }

  @Test
  void hotCacheStartSurfacesTheRefusal() {
    admin.aclSetUser("nosub2", "reset", "on", ">pw", "~*", "resetchannels", "+@all");
    try (JedisPooled redis = as(server.port, "nosub2", "pw")) {
      HotCache cache = HotCache.builder(redis).namespace(Namespace.of("acl-hc-" + System.nanoTime())).build();
      RedisAccessException e = assertThrows(RedisAccessException.class, cache::start);
      assertTrue(e.getMessage().contains("NOPERM"), e.getMessage());
      cache.close();
    }
  }
}
