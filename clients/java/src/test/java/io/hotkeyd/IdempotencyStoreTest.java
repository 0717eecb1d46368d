package io.hotkeyd;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.hotkeyd.idempotency.Begin;
import io.hotkeyd.idempotency.DuplicateCompletionException;
import io.hotkeyd.idempotency.IdempotencyGuard;
import io.hotkeyd.idempotency.JdbcIdempotencyStore;
import io.hotkeyd.idempotency.LeaseLostException;
import io.hotkeyd.idempotency.Outcome;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.junit.jupiter.api.Test;
import redis.clients.jedis.JedisPooled;

/**
 * Defect 2's rule on a real PostgreSQL: a result whose Redis record was lost (a restart
 * between begin and complete) is still written to the store and replayed; a true double
 * completion raises DuplicateCompletionException with the first result.
 */
class IdempotencyStoreTest {
  static byte[] b(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  @Test
  void aResultOutlivesRedisAndADoubleCompletionIsCaught() throws Exception {
    try (RedisServer redis = new RedisServer(); PostgresServer pg = new PostgresServer();
        JedisPooled jedis = new JedisPooled("127.0.0.1", redis.port)) {
      JdbcIdempotencyStore store = new JdbcIdempotencyStore(pg.dataSource(), "idem_java");
      store.createTable();
      IdempotencyGuard g = IdempotencyGuard.builder(jedis).lease(Duration.ofSeconds(5))
          .ttl(Duration.ofMinutes(1)).store(store).build();

      Begin a = g.begin("k1", b("f"));
      jedis.flushAll(); // a restart without persistence
      a.lease().complete(b("r1")); // stored, though Redis forgot the record
      jedis.flushAll();
      Begin replay = g.begin("k1", b("f"));
      assertEquals(Outcome.DONE, replay.outcome());
      assertArrayEquals(b("r1"), replay.result());
      assertEquals(Outcome.DONE, g.begin("k1", b("f")).outcome(), "Redis learnt it again");
      jedis.flushAll();
      assertEquals(Outcome.MISMATCH, g.begin("k1", b("other")).outcome());

      Begin first = g.begin("k2", b("f"));
      jedis.flushAll();
      Begin second = g.begin("k2", b("f"));
      assertEquals(Outcome.NEW, second.outcome(), "the operation runs twice");
      second.lease().complete(b("from second"));
      jedis.flushAll();
      DuplicateCompletionException dup = assertThrows(DuplicateCompletionException.class,
          () -> first.lease().complete(b("from first")));
      assertArrayEquals(b("from second"), dup.stored().result());
      assertArrayEquals(b("from second"), g.begin("k2", b("f")).result());
      assertEquals(1, g.stats().duplicates.get());
      assertTrue(g.stats().storeReplays.get() >= 2);

      // A record taken over by another holder stays refused: that holder completes.
      IdempotencyGuard quick = IdempotencyGuard.builder(jedis).lease(Duration.ofMillis(50))
          .ttl(Duration.ofMinutes(1)).store(store).build();
      Begin old = quick.begin("k3", b("f"));
      Thread.sleep(100);
      assertTrue(quick.begin("k3", b("f")).takeover());
      assertThrows(LeaseLostException.class, () -> old.lease().complete(b("stale")));
      g.close();
      quick.close();
    }
  }
}
