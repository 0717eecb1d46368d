package io.hotkeyd;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import io.hotkeyd.idempotency.Begin;
import io.hotkeyd.idempotency.IdempotencyGuard;
import io.hotkeyd.idempotency.IdempotencyKeyException;
import io.hotkeyd.idempotency.IdempotencyKeys;
import io.hotkeyd.idempotency.IdempotencyUnavailableException;
import io.hotkeyd.idempotency.Lease;
import io.hotkeyd.idempotency.LeaseLostException;
import io.hotkeyd.idempotency.Outcome;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.JedisPooled;
import redis.clients.jedis.StreamEntryID;
import redis.clients.jedis.resps.StreamEntry;

/** The idempotency guard: spec/vectors/idempotency.json on a real Redis, and the keep-alive. */
class IdempotencyTest {
  static RedisServer server;
  static JedisPooled jedis;
  static final JsonNode V;

  static {
    try {
      V = ConformanceTest.load("idempotency.json");
    } catch (java.io.IOException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  @BeforeAll
  static void start() throws Exception {
    server = new RedisServer();
    jedis = new JedisPooled("127.0.0.1", server.port);
  }

  @AfterAll
  static void stop() {
    jedis.close();
    server.close();
  }

  static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  @Test
  void luaInTheJarIsSpecLua() throws Exception {
    Path dir = Path.of(System.getProperty("hotkeyd.spec", "../../spec"), "lua");
    for (String n : List.of("begin", "complete", "extend", "release")) {
      String name = "idempotency_" + n + ".lua";
      try (InputStream in = IdempotencyGuard.class.getResourceAsStream("/io/hotkeyd/lua/" + name)) {
        assertArrayEquals(Files.readAllBytes(dir.resolve(name)), in.readAllBytes(), name);
      }
    }
  }

  @Test
  void digests() {
    for (JsonNode f : V.get("fingerprints")) {
      List<String> parts = new ArrayList<>();
      f.get("parts").forEach(p -> parts.add(p.asText()));
      assertEquals(f.get("digest").asText(), IdempotencyKeys.fingerprint(parts.toArray(String[]::new)));
    }
    for (JsonNode r : V.get("records")) {
      IdempotencyGuard g = IdempotencyGuard.builder(jedis)
          .namespace(Namespace.of(r.get("prefix").asText())).scope(r.get("scope").asText()).build();
      assertEquals(r.get("record").asText(), g.recordOf(r.get("key").asText()));
    }
  }

  static String fenced(Runnable call) {
    try {
      call.run();
      return "ok";
    } catch (LeaseLostException e) {
      return "lease_lost";
    } catch (IdempotencyUnavailableException e) {
      return "unavailable";
    }
  }

  @TestFactory
  List<DynamicTest> vectors() {
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode raw : V.get("cases")) {
      Map<String, JsonNode> c = new HashMap<>();
      V.get("defaults").fields().forEachRemaining(e -> c.put(e.getKey(), e.getValue()));
      raw.fields().forEachRemaining(e -> c.put(e.getKey(), e.getValue()));
      tests.add(DynamicTest.dynamicTest(c.get("name").asText(), () -> runCase(c)));
    }
    return tests;
  }

  static void runCase(Map<String, JsonNode> c) throws Exception {
    boolean up = c.get("redis").asText().equals("up");
    int port = up ? server.port : RedisServer.freePort();
    try (JedisPooled client = new JedisPooled(new HostAndPort("127.0.0.1", port),
        DefaultJedisClientConfig.builder().connectionTimeoutMillis(2000).build())) {
      if (up) {
        client.flushAll();
      }
      Namespace ns = Namespace.of(c.get("prefix").asText());
      Map<String, IdempotencyGuard> guards = new HashMap<>();
      Map<String, Lease> leases = new HashMap<>();
      for (JsonNode step : c.get("steps")) {
        String where = "step " + step;
        String scope = step.has("scope") ? step.get("scope").asText() : c.get("scope").asText();
        IdempotencyGuard g = guards.computeIfAbsent(scope, s -> IdempotencyGuard.builder(client)
            .lease(Duration.ofMillis(c.get("lease_ms").asLong()))
            .ttl(Duration.ofMillis(c.get("ttl_ms").asLong())).namespace(ns).scope(s)
            .auditMaxLen(c.get("audit_maxlen").asInt()).maxKeyLength(c.get("max_key_length").asInt())
            .failOpen(c.get("on_error").asText().equals("open")).build());
        JsonNode want = step.get("expect");
        switch (step.get("op").asText()) {
          case "sleep" -> Thread.sleep(step.get("ms").asLong());
          case "begin" -> {
            Begin b;
            try {
              b = g.begin(step.get("key").asText(), utf8(step.get("fingerprint").asText()));
            } catch (IdempotencyKeyException e) {
              assertEquals("key", want.path("error").asText(), where);
              continue;
            } catch (IdempotencyUnavailableException e) {
              assertEquals("unavailable", want.path("error").asText(), where);
              continue;
            }
            assertFalse(want.has("error"), where);
            assertEquals(want.get("outcome").asText(), b.outcome().name().toLowerCase(), where);
            if (want.has("takeover")) {
              assertEquals(want.get("takeover").asBoolean(), b.takeover(), where);
            }
            if (want.has("guarded")) {
              assertEquals(want.get("guarded").asBoolean(), b.lease().guarded(), where);
            }
            if (want.has("token_above")) {
              assertTrue(b.lease().token() > leases.get(want.get("token_above").asText()).token(), where);
            }
            if (want.has("retry_after_ms_max")) {
              long ms = b.retryAfter().toMillis();
              assertTrue(ms > 0 && ms <= want.get("retry_after_ms_max").asLong(), where);
            }
            if (want.has("result")) {
              assertEquals(want.get("result").asText(), new String(b.result(), StandardCharsets.UTF_8), where);
            }
            if (want.has("failed")) {
              assertEquals(want.get("failed").asBoolean(), b.failed(), where);
            }
            if (step.has("as") && b.lease() != null) {
              leases.put(step.get("as").asText(), b.lease());
            }
          }
          case "complete", "fail", "release", "extend" -> {
            Lease l = leases.get(step.get("lease").asText());
            byte[] res = utf8(step.path("result").asText(""));
            String got = switch (step.get("op").asText()) {
              case "complete" -> fenced(() -> g.complete(l, res));
              case "fail" -> fenced(() -> g.fail(l, res));
              case "release" -> fenced(() -> g.release(l));
              default -> fenced(() -> g.extend(l, null));
            };
            assertEquals(want.asText(), got, where);
          }
          case "record" -> {
            Map<String, String> rec = client.hgetAll(g.recordOf(step.get("key").asText()));
            if (want.path("absent").asBoolean()) {
              assertTrue(rec.isEmpty(), where);
              continue;
            }
            assertEquals(want.get("st").asText(), rec.get("st"), where);
            if (want.has("res")) {
              assertEquals(want.get("res").asText(), rec.get("res"), where);
            }
            if (want.has("fingerprint")) {
              assertEquals(IdempotencyKeys.fingerprint(want.get("fingerprint").asText()), rec.get("fp"), where);
            }
            if (want.has("token_of")) {
              assertEquals(Long.toString(leases.get(want.get("token_of").asText()).token()), rec.get("tok"), where);
            }
          }
          case "audit" -> {
            List<String> got = new ArrayList<>();
            for (StreamEntry e : client.xrange(g.auditStream(), (StreamEntryID) null, (StreamEntryID) null)) {
              got.add(e.getFields().get("ev"));
            }
            List<String> exp = new ArrayList<>();
            for (Iterator<JsonNode> it = want.elements(); it.hasNext(); ) {
              exp.add(it.next().asText());
            }
            assertEquals(exp, got, where);
          }
          default -> fail("unknown op " + step);
        }
      }
    }
  }

  @Test
  void keepAliveRenewsWhileOpenAndStopsWhenClosed() throws Exception {
    jedis.flushAll();
    IdempotencyGuard g = IdempotencyGuard.builder(jedis).lease(Duration.ofMillis(300))
        .ttl(Duration.ofMinutes(1)).build();
    Begin b = g.begin("long", new byte[0]);
    long beats;
    try (Lease lease = b.lease().keepAlive()) {
      Thread.sleep(800); // well past the lease
      assertEquals(Outcome.IN_PROGRESS, g.begin("long", new byte[0]).outcome());
      beats = lease.beats();
      assertTrue(beats >= 2, "beats " + beats);
    } // not completed: released
    assertTrue(jedis.hgetAll(g.recordOf("long")).isEmpty(), "close() released the key");
    Thread.sleep(300);
    assertTrue(b.lease().beats() <= beats + 1, "renewals went on after close()");

    // The old holder learns it lost the lease: its next renewal is refused.
    Begin first = g.begin("taken", new byte[0]);
    Thread.sleep(400);
    Begin second = g.begin("taken", new byte[0]);
    assertTrue(second.takeover());
    Lease stale = first.lease().keepAlive(Duration.ofMillis(50));
    long deadline = System.nanoTime() + 2_000_000_000L;
    while (!stale.lost() && System.nanoTime() < deadline) {
      Thread.sleep(10);
    }
    assertTrue(stale.lost());
    assertThrows(LeaseLostException.class, () -> stale.complete(utf8("stale")));
    try (Lease l = second.lease()) {
      l.complete(utf8("fresh"));
    }
    Begin again = g.begin("taken", new byte[0]);
    assertEquals(Outcome.DONE, again.outcome());
    assertEquals("fresh", new String(again.result(), StandardCharsets.UTF_8));
    assertNull(again.lease());
    g.close();
  }

  @Test
  void concurrentBeginsRunOnce() throws Exception {
    jedis.flushAll();
    IdempotencyGuard g = IdempotencyGuard.builder(jedis).build();
    java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(16);
    List<java.util.concurrent.Future<Outcome>> answers = new ArrayList<>();
    for (int i = 0; i < 50; i++) {
      answers.add(pool.submit(() -> g.begin("race", utf8("f")).outcome()));
    }
    int fresh = 0;
    int busy = 0;
    for (java.util.concurrent.Future<Outcome> f : answers) {
      Outcome o = f.get();
      fresh += o == Outcome.NEW ? 1 : 0;
      busy += o == Outcome.IN_PROGRESS ? 1 : 0;
    }
    pool.shutdown();
    assertEquals(1, fresh);
    assertEquals(49, busy);
  }

  @Test
  void keyLimitVectors() throws Exception {
    JsonNode cases = ConformanceTest.load("limits.json").get("idempotency_keys");
    assertTrue(cases.size() > 0);
    for (JsonNode c : cases) {
      String key = c.get("key").asText();
      if (c.get("error").asBoolean()) {
        assertThrows(IdempotencyKeyException.class,
            () -> IdempotencyKeys.checkKey(key, IdempotencyKeys.MAX_HEADER_KEY), key.length() + " chars");
      } else {
        assertEquals(key, IdempotencyKeys.checkKey(key, IdempotencyKeys.MAX_HEADER_KEY));
      }
    }
  }
}
