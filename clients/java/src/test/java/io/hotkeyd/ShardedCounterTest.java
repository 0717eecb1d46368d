package io.hotkeyd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import redis.clients.jedis.JedisPooled;

class ShardedCounterTest {
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

  @ParameterizedTest
  @ValueSource(booleans = {true, false})
  void concurrentTakesNeverOversell(boolean hashTag) throws Exception {
    ShardedCounter c = new ShardedCounter(jedis, "stock:" + hashTag + System.nanoTime(), 8, hashTag);
    c.setTotal(500);
    assertEquals(500, c.value());
    ExecutorService pool = Executors.newFixedThreadPool(8);
    List<Future<Long>> fs = new ArrayList<>();
    for (int t = 0; t < 8; t++) {
      final int caller = t;
      fs.add(pool.submit(() -> {
        long taken = 0;
        while (true) {
          long amount = 1 + (caller % 3);
          long left = c.take("user-" + caller, amount);
          if (left < 0) {
            // sold out for this amount; take singles until nothing remains
            if (amount == 1 || c.take("user-" + caller, 1) < 0) {
              return taken;
            }
            taken += 1;
            continue;
          }
          assertTrue(left >= 0);
          taken += amount;
        }
      }));
    }
    long total = 0;
    for (Future<Long> f : fs) {
      total += f.get(60, TimeUnit.SECONDS);
    }
    pool.shutdown();
    assertEquals(500, total, "everything sold, nothing oversold");
    assertEquals(0, c.value());
    for (String k : c.keys()) {
      assertTrue(Long.parseLong(jedis.get(k)) >= 0, "no shard below zero");
    }
    assertEquals(-1, c.take("late", 1));
    c.clear();
  }
}
