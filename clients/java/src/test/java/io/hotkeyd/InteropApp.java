package io.hotkeyd;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicLong;
import redis.clients.jedis.JedisPooled;

/**
 * A Java app for the cross-language end-to-end test (tests/interop): reads one key through
 * {@link HotCache} at a paced rate, as a user's app would, and speaks JSON lines.
 *
 * <p>Usage: {@code InteropApp <redis port> <namespace prefix> <key> <reads/s> <seconds>}.
 * Stdout: {@code {"ev":"ready"}}, {@code {"ev":"hot"|"cool"}} (the key in its hot set),
 * {@code {"ev":"progress","reads":N,"local":N}} every 200 ms, {@code
 * {"ev":"value","v":"...","t":ms}} when the value read changes, {@code {"ev":"wrote",...}},
 * {@code {"ev":"done"}}. Stdin: {@code set <value>} writes the key through the cache.
 */
public final class InteropApp {
  private InteropApp() {}

  static synchronized void emit(String json) {
    System.out.println(json);
    System.out.flush();
  }

  static String q(String s) {
    return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }

  public static void main(String[] args) throws Exception {
    int port = Integer.parseInt(args[0]);
    Namespace ns = Namespace.of(args[1]);
    String key = args[2];
    double rate = Double.parseDouble(args[3]);
    double seconds = Double.parseDouble(args[4]);
    KeyId id = KeyId.of(key);
    try (JedisPooled jedis = new JedisPooled("127.0.0.1", port);
        HotCache cache = HotCache.builder(jedis).namespace(ns).appId("java-app").build()) {
      cache.hotset().addListener(new HotListener() {
        @Override
        public void onHot(HotEntry e) {
          if (e.id().equals(id)) {
            emit("{\"ev\":\"hot\",\"t\":" + System.currentTimeMillis() + "}");
          }
        }

        @Override
        public void onCool(KeyId k) {
          if (k.equals(id)) {
            emit("{\"ev\":\"cool\",\"t\":" + System.currentTimeMillis() + "}");
          }
        }
      });
      cache.start();
      emit("{\"ev\":\"ready\"}");
      Thread commands = new Thread(() -> {
        try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
          String line;
          while ((line = in.readLine()) != null) {
            if (line.startsWith("set ")) {
              String v = line.substring(4);
              long t = System.currentTimeMillis();
              cache.set(key, v);
              emit("{\"ev\":\"wrote\",\"v\":" + q(v) + ",\"t\":" + t + "}");
            }
          }
        } catch (Exception e) {
          emit("{\"ev\":\"error\",\"what\":" + q(String.valueOf(e)) + "}");
        }
      }, "commands");
      commands.setDaemon(true);
      commands.start();

      long stepNanos = 5_000_000L; // 5 ms batches
      long perStep = Math.max(1, Math.round(rate * stepNanos / 1e9));
      long steps = (long) (seconds * 1e9 / stepNanos);
      AtomicLong reads = new AtomicLong();
      String last = null;
      long next = System.nanoTime();
      long nextProgress = next;
      for (long i = 0; i < steps; i++) {
        for (long j = 0; j < perStep; j++) {
          String v = cache.get(key);
          if (!Objects.equals(v, last)) {
            last = v;
            emit("{\"ev\":\"value\",\"v\":" + (v == null ? "null" : q(v)) + ",\"t\":"
                + System.currentTimeMillis() + "}");
          }
        }
        reads.addAndGet(perStep);
        long now = System.nanoTime();
        if (now >= nextProgress) {
          nextProgress = now + 200_000_000L;
          CacheStats s = cache.stats();
          emit("{\"ev\":\"progress\",\"reads\":" + reads.get() + ",\"local\":"
              + (s.hits.sum() + s.staleHits.sum()) + ",\"demand\":" + s.demandReads.sum()
              + ",\"t\":" + System.currentTimeMillis() + "}");
        }
        next += stepNanos;
        long sleep = next - System.nanoTime();
        if (sleep > 0) {
          Thread.sleep(sleep / 1_000_000L, (int) (sleep % 1_000_000L));
        }
      }
      emit("{\"ev\":\"done\",\"reads\":" + reads.get() + "}");
    }
  }
}
