package io.hotkeyd.examples;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.hotkeyd.CacheStats;
import io.hotkeyd.Consistency;
import io.hotkeyd.HotCache;
import io.hotkeyd.KeyId;
import io.hotkeyd.Namespace;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.JedisCluster;
import redis.clients.jedis.JedisPooled;
import redis.clients.jedis.UnifiedJedis;
import redis.clients.jedis.exceptions.JedisException;

/**
 * A service that reads one key through {@link HotCache} at a steady rate: the Java side of
 * the cross-language app protocol (tests/interop/apps.py). Arguments: {@code --url
 * redis://host:port[/db]} or {@code --cluster host:port,...}, {@code --key}, {@code --rate},
 * {@code --cold-keys}, {@code --namespace}, {@code --seconds}, {@code --sharded} (a flag). Stdout: JSON lines ({@code
 * ready}, {@code value}, {@code stats} every second, {@code wrote}, {@code done}); stdin:
 * {@code set <value>}, {@code stop}.
 */
public final class ReadApp {
  private static final ObjectMapper JSON = new ObjectMapper();

  private ReadApp() {}

  static synchronized void emit(ObjectNode o) {
    System.out.println(o.toString());
    System.out.flush();
  }

  static ObjectNode event(String name) {
    java.time.Instant now = java.time.Instant.now(); // when it happened (unix ms)
    return JSON.createObjectNode().put("event", name)
        .put("t", now.getEpochSecond() * 1000.0 + now.getNano() / 1e6);
  }

  public static void main(String[] argv) throws Exception {
    Map<String, String> a = new HashMap<>(Map.of("--url", "", "--cluster", "", "--key",
        "product:1", "--rate", "1000", "--cold-keys", "0", "--namespace", "hotkeyd",
        "--seconds", "3600", "--consistency", "available"));
    boolean sharded = false;
    for (int i = 0; i < argv.length; i += 2) {
      if (argv[i].equals("--sharded")) { // a flag: sharded pub/sub, as --sharded-pubsub
        sharded = true;
        i--;
      } else if (i + 1 < argv.length) {
        a.put(argv[i], argv[i + 1]);
      }
    }
    String key = a.get("--key");
    boolean strict = a.get("--consistency").equals("strict");
    double rate = Double.parseDouble(a.get("--rate"));
    int coldKeys = Integer.parseInt(a.get("--cold-keys"));
    double seconds = Double.parseDouble(a.get("--seconds"));
    UnifiedJedis jedis;
    int db = 0;
    if (!a.get("--cluster").isEmpty()) {
      Set<HostAndPort> nodes = new HashSet<>();
      for (String hp : a.get("--cluster").split(",")) {
        nodes.add(HostAndPort.from(hp));
      }
      jedis = new JedisCluster(nodes);
    } else {
      URI uri = URI.create(a.get("--url"));
      String path = uri.getPath();
      db = path == null || path.length() <= 1 ? 0 : Integer.parseInt(path.substring(1));
      jedis = new JedisPooled(uri);
    }
    try (jedis;
        HotCache cache = HotCache.builder(jedis)
            .namespace(Namespace.of(a.get("--namespace")).withSharded(sharded))
            .db(db).consistency(strict ? Consistency.STRICT : Consistency.AVAILABLE)
            .build().start()) {
      emit(event("ready").put("lang", "java"));
      Thread commands = new Thread(() -> {
        try (BufferedReader in = new BufferedReader(
            new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
          String line;
          while ((line = in.readLine()) != null) {
            if (line.startsWith("set ")) {
              cache.set(key, line.substring(4));
              emit(event("wrote").put("value", line.substring(4)));
            } else if (line.equals("stop")) {
              break;
            }
          }
        } catch (Exception e) {
          System.err.println("commands: " + e);
        }
      }, "commands");
      commands.setDaemon(true);
      commands.start();

      long interval = (long) (1e9 / rate);
      long end = System.nanoTime() + (long) (seconds * 1e9);
      long next = System.nanoTime();
      long lastStats = next;
      long reads = 0;
      long errors = 0;
      String last = "\\0never";
      double prevT = 0;
      KeyId id = KeyId.of(key, db);
      long misses = 0;
      boolean missing = false;
      for (long i = 0; commands.isAlive() && System.nanoTime() < end; i++) {
        try {
          String v = cache.get(key);
          if (strict) { // {"event":"source","local":...} when strict mode switches to/from Redis
            long m = cache.watchStats().strictMisses();
            boolean miss = m > misses;
            if (i == 0 || miss != missing) {
              emit(event("source").put("local", !miss));
            }
            missing = miss;
            misses = m;
          }
          java.time.Instant n = java.time.Instant.now();
          double nowT = n.getEpochSecond() * 1000.0 + n.getNano() / 1e6;
          if (!Objects.equals(v, last)) {
            last = v;
            // prev_t: when the previous read (still the old value) returned (unix ms)
            emit(event("value").put("value", v).put("prev_t", prevT));
          }
          prevT = nowT;
        } catch (JedisException e) {
          errors++;
        }
        reads++;
        if (coldKeys > 0 && i % 20 == 0) {
          try {
            cache.get("cold:" + (i / 20) % coldKeys);
          } catch (JedisException e) {
            errors++;
          }
        }
        long now = System.nanoTime();
        if (now - lastStats >= 1_000_000_000L) {
          lastStats = now;
          CacheStats st = cache.stats();
          emit(event("stats").put("reads", reads).put("errors", errors)
              .put("hot", cache.hotset().isHot(id))
              .put("local_hits", st.hits.sum() + st.staleHits.sum())
              .put("lapsed", cache.watchStats().lapsed())
              .put("strict_misses", cache.watchStats().strictMisses()));
        }
        next += interval;
        long d = next - System.nanoTime();
        if (d > 1_000_000L) {
          Thread.sleep(d / 1_000_000L, (int) (d % 1_000_000L));
        } else if (d < -1_000_000_000L) {
          next = System.nanoTime();
        }
      }
      CacheStats st = cache.stats();
      emit(event("done").put("reads", reads).put("errors", errors)
          .put("local_hits", st.hits.sum() + st.staleHits.sum()));
    }
  }
}
