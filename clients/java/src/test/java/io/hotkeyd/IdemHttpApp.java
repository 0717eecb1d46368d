package io.hotkeyd;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.hotkeyd.idempotency.IdempotencyFilter;
import io.hotkeyd.idempotency.IdempotencyGuard;
import jakarta.servlet.DispatcherType;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.Map;
import org.eclipse.jetty.ee10.servlet.FilterHolder;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import redis.clients.jedis.JedisPooled;

/**
 * The order API of clients/go/examples/idemhttp behind {@link IdempotencyFilter} in Jetty,
 * for the cross-language HTTP test (tests/interop/test_idempotency.py). A test-scope app:
 * Jetty is only a test dependency. Arguments: --url, --port, --prefix.
 */
public final class IdemHttpApp {
  private IdemHttpApp() {}

  public static void main(String[] args) throws Exception {
    Map<String, String> opt = new LinkedHashMap<>(Map.of(
        "--url", "redis://127.0.0.1:6379/0", "--port", "8080", "--prefix", "hotkeyd"));
    for (int i = 0; i + 1 < args.length; i += 2) {
      opt.put(args[i], args[i + 1]);
    }
    String prefix = opt.get("--prefix");
    JedisPooled jedis = new JedisPooled(URI.create(opt.get("--url")));
    IdempotencyGuard guard = IdempotencyGuard.builder(jedis).lease(Duration.ofSeconds(10))
        .namespace(Namespace.of(prefix)).build();
    ObjectMapper json = new ObjectMapper();
    HttpServlet orders = new HttpServlet() {
      private static final long serialVersionUID = 1L;

      @Override
      protected void doPost(HttpServletRequest req, HttpServletResponse res) throws IOException {
        String body = new String(req.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        long n = jedis.incr(prefix + ":orders");
        res.setStatus(201);
        res.setContentType("application/json");
        res.setHeader("X-App", "java");
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("order", n);
        out.put("lang", "java");
        out.put("request", body);
        res.getOutputStream().write((json.writeValueAsString(out) + "\n")
            .getBytes(StandardCharsets.UTF_8));
      }
    };
    Server jetty = new Server();
    ServerConnector conn = new ServerConnector(jetty);
    conn.setHost("127.0.0.1");
    conn.setPort(Integer.parseInt(opt.get("--port")));
    jetty.addConnector(conn);
    ServletContextHandler ctx = new ServletContextHandler();
    ctx.addServlet(new ServletHolder(orders), "/order");
    IdempotencyFilter.Policy policy = IdempotencyFilter.Policy.DEFAULT
        .withRequired(r -> r.getRequestURI().equals("/order")); // scoped by Authorization
    ctx.addFilter(new FilterHolder(new IdempotencyFilter(guard, policy)), "/*",
        EnumSet.of(DispatcherType.REQUEST));
    jetty.setHandler(ctx);
    jetty.start();
    System.out.println("{\"event\":\"ready\"}");
    System.out.flush();
    jetty.join();
  }
}
