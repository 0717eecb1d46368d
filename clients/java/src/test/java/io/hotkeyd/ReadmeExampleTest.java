package io.hotkeyd;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import org.junit.jupiter.api.Test;
import redis.clients.jedis.JedisPooled;

/** The README's ten lines, run against a real redis-server (and kept identical to it). */
class ReadmeExampleTest {
  static final String EXAMPLE = """
      try (JedisPooled redis = new JedisPooled("localhost", 6379);
           HotCache cache = HotCache.builder(redis).build().start()) { // subscribe, read snapshots
        cache.set("product:1", "v1");         // SET, then an invalidation to every cache
        String v = cache.get("product:1");    // local while the daemon says it is hot
        Map<String, String> h = cache.hgetAll("user:7");
        String row = cache.cached("sql:product:1", () -> loadFromDatabase(1));
        System.out.println(v + " " + h + " " + row + " " + cache.stats());
      }
      """;

  static String loadFromDatabase(int id) {
    return "row-" + id;
  }

  @Test
  void theReadmeShowsThisCode() throws Exception {
    String readme = Files.readString(Path.of("README.md"));
    assertTrue(readme.contains(EXAMPLE), "README.md's example differs from ReadmeExampleTest");
  }

  @Test
  void theExampleRuns() throws Exception {
    try (RedisServer server = new RedisServer()) {
      int port = server.port;
      ByteArrayOutputStream buf = new ByteArrayOutputStream();
      PrintStream out = System.out;
      System.setOut(new PrintStream(buf, true, StandardCharsets.UTF_8));
      try {
        // ---- the README's lines, with the port of the test server ----
        try (JedisPooled redis = new JedisPooled("localhost", port);
             HotCache cache = HotCache.builder(redis).build().start()) { // subscribe, read snapshots
          cache.set("product:1", "v1");         // SET, then an invalidation to every cache
          String v = cache.get("product:1");    // local while the daemon says it is hot
          Map<String, String> h = cache.hgetAll("user:7");
          String row = cache.cached("sql:product:1", () -> loadFromDatabase(1));
          System.out.println(v + " " + h + " " + row + " " + cache.stats());
        }
      } finally {
        System.setOut(out);
      }
      assertTrue(buf.toString(StandardCharsets.UTF_8).startsWith("v1 {} row-1 CacheStats{"), buf.toString());
    }
  }
}
