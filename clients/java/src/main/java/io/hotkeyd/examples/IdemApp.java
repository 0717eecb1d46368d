package io.hotkeyd.examples;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.hotkeyd.idempotency.Begin;
import io.hotkeyd.idempotency.IdempotencyException;
import io.hotkeyd.idempotency.IdempotencyGuard;
import io.hotkeyd.idempotency.IdempotencyUnavailableException;
import io.hotkeyd.idempotency.Lease;
import io.hotkeyd.idempotency.LeaseLostException;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import redis.clients.jedis.JedisPooled;

/**
 * Drives the idempotency guard one request per stdin line, for the cross-language tests
 * (tests/interop/test_idempotency.py); protocol in clients/go/examples/idemapp.
 */
public final class IdemApp {
  private IdemApp() {}

  public static void main(String[] args) throws Exception {
    String url = "redis://127.0.0.1:6379/0";
    long leaseMs = 10_000;
    for (int i = 0; i + 1 < args.length; i += 2) {
      switch (args[i]) {
        case "--url" -> url = args[i + 1];
        case "--lease-ms" -> leaseMs = Long.parseLong(args[i + 1]);
        default -> throw new IllegalArgumentException("unknown option " + args[i]);
      }
    }
    ObjectMapper json = new ObjectMapper();
    try (JedisPooled jedis = new JedisPooled(URI.create(url));
        IdempotencyGuard guard = IdempotencyGuard.builder(jedis)
            .lease(Duration.ofMillis(leaseMs)).ttl(Duration.ofHours(1)).build()) {
      BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
      for (String line; (line = in.readLine()) != null; ) {
        ObjectNode out = json.createObjectNode();
        try {
          handle(guard, json.readTree(line), out);
        } catch (LeaseLostException e) {
          out.put("error", "lease_lost");
        } catch (IdempotencyUnavailableException e) {
          out.put("error", "unavailable");
        } catch (IdempotencyException | IllegalArgumentException e) {
          out.put("error", e.getMessage());
        }
        System.out.println(json.writeValueAsString(out));
        System.out.flush();
      }
    }
  }

  private static void handle(IdempotencyGuard guard, JsonNode req, ObjectNode out) {
    String op = req.path("op").asText();
    String key = req.path("key").asText();
    if (op.equals("begin")) {
      Begin b = guard.begin(key, req.path("fp").asText().getBytes(StandardCharsets.UTF_8));
      out.put("outcome", b.outcome().name().toLowerCase());
      switch (b.outcome()) {
        case NEW -> out.put("token", Long.toString(b.lease().token())).put("takeover", b.takeover());
        case DONE -> out.put("result", new String(b.result(), StandardCharsets.UTF_8))
            .put("failed", b.failed());
        case IN_PROGRESS -> out.put("retry_after_ms", b.retryAfter().toMillis());
        default -> { }
      }
      return;
    }
    Lease lease = guard.resume(key, Long.parseLong(req.path("token").asText()));
    byte[] result = req.path("result").asText("").getBytes(StandardCharsets.UTF_8);
    switch (op) {
      case "complete" -> lease.complete(result);
      case "fail" -> lease.fail(result);
      case "release" -> lease.release();
      case "extend" -> guard.extend(lease, null);
      default -> throw new IllegalArgumentException("unknown op " + op);
    }
    out.put("ok", true);
  }
}
