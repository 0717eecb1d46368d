package io.hotkeyd;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;
import redis.clients.jedis.JedisPooled;

/**
 * HotCache against plain Jedis on a loopback redis-server (started by the benchmark).
 *
 * <ul>
 *   <li>{@code hotCacheGetHot} vs {@code jedisGet}: a hot key served by Caffeine vs a GET
 *       round trip (target: at least 100x faster);
 *   <li>{@code hotCacheGetCold} vs {@code jedisGet}: a key that is not hot goes through the
 *       cache's one lookup, then the same GET (target: at most 5 % overhead).
 * </ul>
 *
 * <pre>
 * cd clients/java && mvn -q -P jmh package -DskipTests && java -jar target/benchmarks.jar
 * </pre>
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class HotCacheBench {
  private Process redis;
  private JedisPooled jedis;
  private HotCache cache;

  @Setup(Level.Trial)
  public void setUp() throws Exception {
    int port;
    try (ServerSocket s = new ServerSocket(0)) {
      port = s.getLocalPort();
    }
    redis = new ProcessBuilder(List.of("redis-server", "--port", Integer.toString(port), "--bind",
            "127.0.0.1", "--save", "", "--appendonly", "no"))
        .redirectOutput(new File("/dev/null")).start();
    for (int i = 0; ; i++) {
      try (Socket s = new Socket("127.0.0.1", port)) {
        break;
      } catch (java.io.IOException e) {
        if (i > 500) {
          throw e;
        }
        Thread.sleep(20);
      }
    }
    jedis = new JedisPooled("127.0.0.1", port);
    jedis.set("hot:1", "x".repeat(100));
    jedis.set("cold:1", "x".repeat(100));
    // What a daemon instance publishes: a snapshot announcing hot:1 (one hour TTL).
    Namespace ns = Namespace.DEFAULT;
    ObjectNode snap = Wire.JSON.createObjectNode();
    snap.put("v", 1).put("instance", "bench").put("seq", 1).put("ts", 0.0).put("full", true)
        .put("final", false);
    ArrayNode hot = snap.putArray("hot");
    Wire.encodeKey("hot:1".getBytes(StandardCharsets.UTF_8), hot.addObject())
        .put("rate", 1e6).put("rule", "bench").put("ttl_ms", 3_600_000L);
    snap.putArray("cool");
    jedis.set(ns.snapshot("bench").getBytes(StandardCharsets.UTF_8), Wire.dumps(snap));
    jedis.zadd(ns.instances(), System.currentTimeMillis() / 1000.0, "bench");
    cache = HotCache.builder(jedis).build().start();
    if (!cache.hotset().isHot(KeyId.of("hot:1"))) {
      throw new IllegalStateException("hot:1 is not hot");
    }
  }

  @TearDown(Level.Trial)
  public void tearDown() throws Exception {
    cache.close();
    jedis.close();
    redis.destroy();
    redis.waitFor();
  }

  @Benchmark
  public String hotCacheGetHot() {
    return cache.get("hot:1");
  }

  @Benchmark
  public String hotCacheGetCold() {
    return cache.get("cold:1");
  }

  @Benchmark
  public String jedisGet() {
    return jedis.get("cold:1");
  }
}
