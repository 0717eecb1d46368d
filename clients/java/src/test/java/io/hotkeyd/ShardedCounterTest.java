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

  /** Python's ShardedCounter on the same keys: both languages share one counter. */
  @ParameterizedTest
  @ValueSource(booleans = {true, false})
  void javaAndPythonShareOneCounter(boolean hashTag) throws Exception {
    String name = "shared:" + hashTag + System.nanoTime();
    ShardedCounter c = new ShardedCounter(jedis, name, 4, hashTag);
    c.setTotal(10);
    java.nio.file.Path py = java.nio.file.Path.of(System.getProperty("hotkeyd.spec", "../../spec"),
        "..", ".venv", "bin", "python");
    if (System.getenv("CI") == null) {
      org.junit.jupiter.api.Assumptions.assumeTrue(java.nio.file.Files.exists(py), "no .venv");
    }
    String script = "import redis,sys; from hotkeyd.client import ShardedCounter as S; "
        + "c=S(redis.Redis(port=int(sys.argv[1])), sys.argv[2], shards=4, hash_tag=sys.argv[3]=='1'); "
        + "print(c.take('py-user', 3), c.shard_of('user-9'), c.value())";
    Process p = new ProcessBuilder(py.toString(), "-c", script, Integer.toString(server.port), name,
        hashTag ? "1" : "0").redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes()).trim();
    assertEquals(0, p.waitFor(), out);
    String[] parts = out.split(" ");
    assertEquals("7", parts[0], out);
    assertEquals(Integer.toString(c.shardOf("user-9")), parts[1]);
    assertEquals(7, c.value());
    assertEquals(0, c.take("java-user", 7));
    assertEquals(-1, c.take("java-user", 1));
    c.clear();
  }
}
