package io.hotkeyd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.hotkeyd.idempotency.IdempotencyFilter;
import io.hotkeyd.idempotency.IdempotencyGuard;
import io.hotkeyd.idempotency.Lease;
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

/** IdempotencyFilter in a real servlet container (Jetty), over a real Redis. */
class IdempotencyFilterTest {
  static RedisServer redis;
  static JedisPooled jedis;
  static Server jetty;
  static IdempotencyGuard guard;
  static String url;
  static final AtomicInteger RUNS = new AtomicInteger();
  static final AtomicInteger BOOMS = new AtomicInteger();
  static final HttpClient HTTP = HttpClient.newHttpClient();
  static final CountDownLatch SLOW_STARTED = new CountDownLatch(1);

  /** The app behind the filter: counts its runs, answers 201 with what it saw. */
  public static final class Orders extends HttpServlet {
    private static final long serialVersionUID = 1L;

    @Override
    protected void doPost(HttpServletRequest req, HttpServletResponse res) throws IOException {
      int n = RUNS.incrementAndGet();
      String body = new String(req.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      Lease lease = (Lease) req.getAttribute(IdempotencyFilter.LEASE_ATTRIBUTE);
      if (body.contains("slow")) {
        SLOW_STARTED.countDown();
        try {
          Thread.sleep(2000); // over three leases: only the keep-alive keeps it ours
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
      if (body.contains("boom") && BOOMS.incrementAndGet() == 1) {
        res.sendError(503);
        return;
      }
      res.setStatus(201);
      res.setContentType("application/json");
      res.getWriter().write("{\"run\":" + n + ",\"leased\":" + (lease != null && lease.token() > 0)
          + ",\"body\":\"" + body + "\"}");
    }
  }

  @BeforeAll
  static void start() throws Exception {
    redis = new RedisServer();
    jedis = new JedisPooled("127.0.0.1", redis.port);
    guard = IdempotencyGuard.builder(jedis).lease(Duration.ofMillis(600))
        .ttl(Duration.ofMinutes(1)).build();
    jetty = new Server();
    ServerConnector conn = new ServerConnector(jetty);
    conn.setHost("127.0.0.1");
    jetty.addConnector(conn);
    ServletContextHandler ctx = new ServletContextHandler();
    ctx.addServlet(new ServletHolder(new Orders()), "/order");
    IdempotencyFilter.Policy policy = IdempotencyFilter.Policy.DEFAULT
        .withRequired(r -> r.getRequestURI().equals("/order"));
    ctx.addFilter(new FilterHolder(new IdempotencyFilter(guard, policy)), "/*",
        EnumSet.of(DispatcherType.REQUEST));
    jetty.setHandler(ctx);
    jetty.start();
    url = "http://127.0.0.1:" + conn.getLocalPort() + "/order";
  }

  @AfterAll
  static void stop() throws Exception {
    jetty.stop();
    guard.close();
    jedis.close();
    redis.close();
  }

  static HttpResponse<String> post(String key, String body) throws Exception {
    HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(url))
        .POST(HttpRequest.BodyPublishers.ofString(body));
    if (key != null) {
      b.header("Idempotency-Key", key);
    }
    return HTTP.send(b.build(), HttpResponse.BodyHandlers.ofString());
  }

  @Test
  void replaysRefusesAndReleases() throws Exception {
    HttpResponse<String> r1 = post("k1", "a");
    assertEquals(201, r1.statusCode());
    assertTrue(r1.body().matches("\\{\"run\":\\d+,\"leased\":true,\"body\":\"a\"}"), r1.body());
    HttpResponse<String> r2 = post("k1", "a");
    assertEquals(201, r2.statusCode());
    assertEquals(r1.body(), r2.body());
    assertEquals("true", r2.headers().firstValue("Idempotent-Replayed").orElse(""));
    assertTrue(r2.headers().firstValue("content-type").orElse("").startsWith("application/json"));
    assertEquals(422, post("k1", "b").statusCode());
    assertEquals(400, post(null, "a").statusCode());
    assertEquals(400, post(" ", "a").statusCode());
    HttpResponse<String> two = HTTP.send(HttpRequest.newBuilder(URI.create(url))
        .POST(HttpRequest.BodyPublishers.ofString("a"))
        .header("Idempotency-Key", "k2").header("Idempotency-Key", "k3").build(),
        HttpResponse.BodyHandlers.ofString());
    assertEquals(400, two.statusCode(), "two keys");
    assertEquals(503, post("k4", "boom").statusCode());
    assertEquals(201, post("k4", "boom").statusCode(), "a 5xx releases the key");
  }

  @Test
  void slowServletKeepsItsLeaseAndRunsOnce() throws Exception {
    int before = RUNS.get();
    long renewals = guard.stats().renewals.get();
    CompletableFuture<HttpResponse<String>> first = CompletableFuture.supplyAsync(() -> {
      try {
        return post("k5", "slow");
      } catch (Exception e) {
        throw new IllegalStateException(e);
      }
    });
    assertTrue(SLOW_STARTED.await(10, TimeUnit.SECONDS), "the first request reached the servlet");
    for (int i = 0; i < 4; i++) {
      Thread.sleep(350);
      HttpResponse<String> r = post("k5", "slow");
      assertEquals(409, r.statusCode(), "retry while the first runs");
      assertEquals("1", r.headers().firstValue("Retry-After").orElse(""));
    }
    HttpResponse<String> slow = first.get();
    assertEquals(201, slow.statusCode());
    assertEquals(before + 1, RUNS.get(), "the slow servlet ran once");
    assertTrue(guard.stats().renewals.get() - renewals >= 2);
    assertEquals(slow.body(), post("k5", "slow").body());
    assertFalse(slow.headers().firstValue("Idempotency-Warning").isPresent());
  }
}
