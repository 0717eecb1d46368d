import io.hotkeyd.CacheStats;
import io.hotkeyd.Consistency;
import io.hotkeyd.HotCache;
import io.hotkeyd.Namespace;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.FileWriter;
import java.io.InputStreamReader;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.JedisCluster;
import redis.clients.jedis.JedisPooled;
import redis.clients.jedis.UnifiedJedis;
import redis.clients.jedis.exceptions.JedisException;

/**
 * The Java stale-read app: reads hot keys through {@link HotCache} as a service would.
 * Protocol: tests/stale/apps/reader.py. {@code System.nanoTime()} is CLOCK_MONOTONIC on
 * Linux, the clock the other readers and the writers use. Run as a source file:
 * {@code java -cp <client jar and deps> StaleReader.java --url ...}.
 */
public final class StaleReader {
  private StaleReader() {}

  static long genOf(String v) {
    if (v == null) {
      return -1;
    }
    if (!v.startsWith("g:")) {
      return -2;
    }
    int end = v.indexOf(':', 2);
    try {
      return Long.parseLong(end < 0 ? v.substring(2) : v.substring(2, end));
    } catch (NumberFormatException e) {
      return -2;
    }
  }

  public static void main(String[] argv) throws Exception {
    Map<String, String> a = new HashMap<>(Map.of("--url", "", "--cluster", "", "--flash", "",
        "--rate", "2000", "--cold-keys", "0", "--namespace", "hotkeyd", "--mode", "available"));
    boolean sharded = false;
    for (int i = 0; i < argv.length; i += 2) {
      if (argv[i].equals("--sharded")) {
        sharded = true;
        i--;
      } else if (i + 1 < argv.length) {
        a.put(argv[i], argv[i + 1]);
      }
    }
    Consistency consistency;
    switch (a.get("--mode")) {
      case "available" -> consistency = Consistency.AVAILABLE;
      case "strict" -> consistency = Consistency.STRICT; // the SDK option of issue 25
      default -> {
        System.err.println("unknown mode " + a.get("--mode"));
        System.exit(2);
        return;
      }
    }
    String[] keys = a.get("--keys").split(",");
    String flash = "";
    long f0 = 0;
    long f1 = 0;
    if (!a.get("--flash").isEmpty()) {
      String[] p = a.get("--flash").split(",");
      flash = p[0];
      f0 = Long.parseLong(p[1]);
      f1 = Long.parseLong(p[2]);
    }
    double rate = Double.parseDouble(a.get("--rate"));
    int coldKeys = Integer.parseInt(a.get("--cold-keys"));
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
    AtomicBoolean stopped = new AtomicBoolean();
    try (jedis;
        BufferedWriter out = new BufferedWriter(new FileWriter(a.get("--log"), StandardCharsets.UTF_8), 1 << 16);
        HotCache cache = HotCache.builder(jedis)
            .namespace(Namespace.of(a.get("--namespace")).withSharded(sharded))
            .db(db).consistency(consistency).build().start()) {
      Thread commands = new Thread(() -> {
        try (BufferedReader in = new BufferedReader(
            new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
          String line;
          while ((line = in.readLine()) != null && !line.trim().equals("stop")) {
            // only "stop" is understood
          }
        } catch (Exception e) {
          System.err.println("commands: " + e);
        }
        stopped.set(true);
      }, "commands");
      commands.setDaemon(true);
      commands.start();
      System.out.println("{\"event\":\"ready\",\"lang\":\"java\"}");
      System.out.flush();
      long interval = (long) (1e9 / rate);
      long next = System.nanoTime();
      long reads = 0;
      long errors = 0;
      int n = keys.length;
      CacheStats st = cache.stats();
      for (long i = 0; !stopped.get(); i++) {
        long t0 = System.nanoTime();
        int idx = (int) (i % (n + 1));
        if (idx == n && !(!flash.isEmpty() && f0 <= t0 && t0 < f1)) {
          idx = (int) (i % n);
        }
        String key = idx < n ? keys[idx] : flash;
        long before = st.hits.sum() + st.staleHits.sum();
        long g;
        try {
          g = genOf(cache.get(key));
        } catch (JedisException e) {
          errors++;
          g = -2;
        }
        long t1 = System.nanoTime();
        int local = st.hits.sum() + st.staleHits.sum() > before ? 1 : 0;
        out.write(idx + " " + g + " " + t0 + " " + t1 + " " + local + "\n");
        reads++;
        if (coldKeys > 0 && i % 20 == 0) {
          try {
            cache.get("cold:" + (i / 20) % coldKeys);
          } catch (JedisException e) {
            errors++;
          }
        }
        next += interval;
        long d = next - System.nanoTime();
        if (d > 500_000L) {
          Thread.sleep(d / 1_000_000L, (int) (d % 1_000_000L));
        } else if (d < -1_000_000_000L) {
          next = System.nanoTime();
        }
      }
      out.flush();
      System.out.println("{\"event\":\"done\",\"lang\":\"java\",\"reads\":" + reads
          + ",\"errors\":" + errors + ",\"local_hits\":" + (st.hits.sum() + st.staleHits.sum()) + "}");
      System.out.flush();
    }
  }
}
