package io.hotkeyd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.hotkeyd.idempotency.Begin;
import io.hotkeyd.idempotency.IdempotencyFilter;
import io.hotkeyd.idempotency.IdempotencyGuard;
import io.hotkeyd.idempotency.IdempotencyKeys;
import io.hotkeyd.idempotency.StoredResponse;
import jakarta.servlet.DispatcherType;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.eclipse.jetty.ee10.servlet.FilterHolder;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import redis.clients.jedis.JedisPooled;

/**
 * The filter's parity with the other languages: spec/vectors/idempotency.json's "http"
 * section, and the caller scope, transition window, problems, comma-joined keys and
 * Retry-After in a real Jetty over a real Redis.
 */
class IdempotencyFilterParityTest {
  static RedisServer redis;
  static JedisPooled jedis;
  static Server jetty;
  static IdempotencyGuard guard;
  static String base;
  static final AtomicInteger RUNS = new AtomicInteger();
  static final HttpClient HTTP = HttpClient.newHttpClient();
  static final ObjectMapper JSON = new ObjectMapper();
  static volatile CountDownLatch slowStarted = new CountDownLatch(1);

  /** Counts its runs; a body with "slow" takes 0.6 s. */
  public static final class Orders extends HttpServlet {
    private static final long serialVersionUID = 1L;

    @Override
    protected void doPost(HttpServletRequest req, HttpServletResponse res) throws IOException {
      int n = RUNS.incrementAndGet();
      String body = new String(req.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      if (body.contains("slow")) {
        slowStarted.countDown();
        try {
          Thread.sleep(600);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
      res.setStatus(201);
      res.getWriter().write("{\"run\":" + n + "}");
    }
  }

  @BeforeAll
  static void start() throws Exception {
    redis = new RedisServer();
    jedis = new JedisPooled("127.0.0.1", redis.port);
    guard = IdempotencyGuard.builder(jedis).lease(Duration.ofSeconds(10))
        .ttl(Duration.ofMinutes(1)).build();
    jetty = new Server();
    ServerConnector conn = new ServerConnector(jetty);
    conn.setHost("127.0.0.1");
    jetty.addConnector(conn);
    ServletContextHandler ctx = new ServletContextHandler();
    ctx.addServlet(new ServletHolder(new Orders()), "/order");
    ctx.addServlet(new ServletHolder(new Orders()), "/shared/order");
    IdempotencyFilter.Policy shared = IdempotencyFilter.Policy.DEFAULT.withShared(true);
    ctx.addFilter(new FilterHolder(new IdempotencyFilter(guard)), "/order",
        EnumSet.of(DispatcherType.REQUEST));
    ctx.addFilter(new FilterHolder(new IdempotencyFilter(guard, shared)), "/shared/*",
        EnumSet.of(DispatcherType.REQUEST));
    jetty.setHandler(ctx);
    jetty.start();
    base = "http://127.0.0.1:" + conn.getLocalPort();
  }

  @AfterAll
  static void stop() throws Exception {
    jetty.stop();
    guard.close();
    jedis.close();
    redis.close();
  }

  static HttpResponse<String> post(String path, String key, String body, String auth)
      throws Exception {
    HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(base + path))
        .POST(HttpRequest.BodyPublishers.ofString(body)).header("Idempotency-Key", key);
    if (auth != null) {
      b.header("Authorization", auth);
    }
    return HTTP.send(b.build(), HttpResponse.BodyHandlers.ofString());
  }

  @Test
  void httpVectors() throws Exception {
    JsonNode h = ConformanceTest.load("idempotency.json").get("http");
    for (JsonNode s : h.get("scopes")) {
      String scoped = IdempotencyKeys.callerScope(s.path("authorization").asText(null),
          s.path("user").asText(null)) + ":" + s.get("key").asText();
      assertEquals(s.get("scoped_key").asText(), scoped);
      assertEquals(s.get("record").asText(),
          "hotkeyd:idem:" + IdempotencyKeys.recordDigest("", scoped));
    }
    for (JsonNode p : h.get("problems")) {
      StoredResponse r = StoredResponse.error(p.get("status").asInt(), p.get("detail").asText(), -1);
      assertEquals(Map.entry("content-type", h.get("content_type").asText()), r.headers().get(0));
      JsonNode got = JSON.readTree(r.body());
      assertEquals(h.get("problem_type").asText(), got.get("type").asText());
      assertEquals(p.get("title").asText(), got.get("title").asText());
      assertEquals(p.get("status").asInt(), got.get("status").asInt());
      assertEquals(p.get("detail").asText(), got.get("detail").asText());
    }
    for (JsonNode c : h.get("retry_after")) {
      double median = c.get("median_ms").isNull() ? -1 : c.get("median_ms").asDouble() / 1000;
      assertEquals(c.get("retry_after").asText(), Long.toString(IdempotencyFilter.retryAfterSeconds(
          Duration.ofMillis(c.get("lease_left_ms").asLong()), median)), c.toString());
    }
  }

  @Test
  void callerScopeTransitionProblemsAndRetryAfter() throws Exception {
    String alice = "Bearer alice";
    String a1 = post("/order", "k1", "a", alice).body();
    HttpResponse<String> a2 = post("/order", "k1", "a", alice);
    assertEquals(a1, a2.body());
    assertEquals("true", a2.headers().firstValue("Idempotent-Replayed").orElse(""));
    assertNotEquals(a1, post("/order", "k1", "a", "Bearer bob").body(), "bob got alice's");
    assertNotEquals(a1, post("/order", "k1", "a", null).body(), "anonymous got alice's");
    String s1 = post("/shared/order", "k2", "a", alice).body();
    assertEquals(s1, post("/shared/order", "k2", "a", "Bearer bob").body(), "a shared space");

    // A record of the unscoped default (written before the upgrade) still replays.
    byte[] fp = IdempotencyKeys.fingerprint("POST".getBytes(StandardCharsets.UTF_8),
        "/order".getBytes(StandardCharsets.UTF_8), new byte[0],
        "a".getBytes(StandardCharsets.UTF_8)).getBytes(StandardCharsets.US_ASCII);
    Begin old = guard.begin("legacy", fp);
    old.lease().complete(new StoredResponse(201, List.of(),
        "before the upgrade".getBytes(StandardCharsets.UTF_8)).encode());
    int before = RUNS.get();
    HttpResponse<String> lr = post("/order", "legacy", "a", alice);
    assertEquals("before the upgrade", lr.body());
    assertEquals("true", lr.headers().firstValue("Idempotent-Replayed").orElse(""));
    assertEquals(before, RUNS.get());

    HttpResponse<String> mis = post("/order", "k1", "other", alice);
    assertEquals(422, mis.statusCode());
    assertEquals("application/problem+json", mis.headers().firstValue("content-type").orElse(""));
    JsonNode p = JSON.readTree(mis.body());
    assertEquals(StoredResponse.PROBLEM_TYPE, p.get("type").asText());
    assertEquals("this Idempotency-Key was used with a different request", p.get("detail").asText());
    HttpResponse<String> two = post("/order", "\"k3\", \"k4\"", "a", alice);
    assertEquals(400, two.statusCode());
    assertEquals("send one Idempotency-Key header, not several",
        JSON.readTree(two.body()).get("detail").asText());

    // Retry-After: the median of the route's runs (about 0.6 s), not the 10 s lease.
    post("/order", "k5", "slow", alice);
    slowStarted = new CountDownLatch(1);
    CompletableFuture<HttpResponse<String>> first = CompletableFuture.supplyAsync(() -> {
      try {
        return post("/order", "k6", "slow", alice);
      } catch (Exception e) {
        throw new IllegalStateException(e);
      }
    });
    slowStarted.await(10, TimeUnit.SECONDS);
    HttpResponse<String> busy = post("/order", "k6", "slow", alice);
    assertEquals(409, busy.statusCode());
    assertEquals("1", busy.headers().firstValue("Retry-After").orElse(""));
    assertEquals(201, first.get().statusCode());
  }
}
