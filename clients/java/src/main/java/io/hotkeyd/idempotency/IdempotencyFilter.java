package io.hotkeyd.idempotency;

import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ReadListener;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletInputStream;
import jakarta.servlet.ServletOutputStream;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.WriteListener;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletRequestWrapper;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpServletResponseWrapper;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.Function;
import java.util.function.Predicate;

/**
 * A servlet {@link Filter} honouring the Idempotency-Key header (IETF draft "The
 * Idempotency-Key HTTP Header Field"), with the answers of the Python, Go and Node
 * middleware:
 *
 * <table>
 *   <caption>answers</caption>
 *   <tr><td>first request with a key</td><td>the servlet's response, stored when final</td></tr>
 *   <tr><td>retry after it finished</td><td>the stored response, plus
 *       {@code Idempotent-Replayed: true}</td></tr>
 *   <tr><td>retry while the first still runs</td><td>409 Conflict, Retry-After</td></tr>
 *   <tr><td>same key, other request</td><td>422 Unprocessable Content</td></tr>
 *   <tr><td>bad, repeated or (if required) missing key</td><td>400; body over maxBody: 413</td></tr>
 *   <tr><td>Redis down, failing closed</td><td>503 Service Unavailable, Retry-After</td></tr>
 * </table>
 *
 * <p>A 5xx, 408, 425 or 429 (or an exception) releases the key, so the client's retry runs
 * again. The lease is renewed while the servlet runs and the renewal stops when it
 * returns; the servlet finds it in the request attribute {@link #LEASE_ATTRIBUTE}. With
 * Spring Boot, register it as a {@code FilterRegistrationBean} bean.
 *
 * <p>Keys are scoped by caller: the digest of the Authorization header by default, or
 * {@link Policy#withUser}. Errors are RFC 9457 problems ({@code application/problem+json})
 * whose type links the docs. A 409's Retry-After is the lower of the holder's remaining
 * lease and the running median of the route's servlet time, in whole seconds, at least 1.
 */
public final class IdempotencyFilter implements Filter {
  /** Request attribute holding the {@link Lease} (for its fencing token). */
  public static final String LEASE_ATTRIBUTE = "hotkeyd.idempotency_lease";
  public static final String REPLAYED_HEADER = "Idempotent-Replayed";

  private final IdempotencyGuard guard;
  private final Policy policy;
  private final HandlerTimes times = new HandlerTimes(); // for 409's Retry-After

  /**
   * Which requests are guarded, and how.
   *
   * @param methods methods guarded when they carry the header
   * @param required requests that must carry a key (400 without one)
   * @param user the caller's identity (an authenticated user or tenant id): keys are
   *     separate per caller; null: the digest of the Authorization header names the caller
   *     (requests without one share one anonymous space)
   * @param header the request header carrying the key
   * @param maxBody largest request body accepted on a guarded request (bytes)
   * @param shared one key space for every caller (the old default): only for keys meant to
   *     be shared
   * @param legacyUnscoped the transition window after the upgrade from the unscoped
   *     default: a first request also looks up its key in the old unscoped space (one
   *     HMGET) and replays a final record of the same request found there; turn it off
   *     once the guard's TTL has passed since the upgrade
   */
  public record Policy(Set<String> methods, Predicate<HttpServletRequest> required,
      Function<HttpServletRequest, String> user, String header, int maxBody, boolean shared,
      boolean legacyUnscoped) {
    public static final Policy DEFAULT = new Policy(Set.of("POST", "PATCH", "PUT", "DELETE"),
        r -> false, null, "Idempotency-Key", 1 << 20, false, true);

    /** The five-field policy of earlier releases: scoped by caller, transition window on. */
    public Policy(Set<String> methods, Predicate<HttpServletRequest> required,
        Function<HttpServletRequest, String> user, String header, int maxBody) {
      this(methods, required, user, header, maxBody, false, true);
    }

    public Policy withRequired(Predicate<HttpServletRequest> p) {
      return new Policy(methods, p, user, header, maxBody, shared, legacyUnscoped);
    }

    public Policy withUser(Function<HttpServletRequest, String> u) {
      return new Policy(methods, required, u, header, maxBody, shared, legacyUnscoped);
    }

    public Policy withMaxBody(int bytes) {
      return new Policy(methods, required, user, header, bytes, shared, legacyUnscoped);
    }

    public Policy withShared(boolean s) {
      return new Policy(methods, required, user, header, maxBody, s, legacyUnscoped);
    }

    public Policy withLegacyUnscoped(boolean on) {
      return new Policy(methods, required, user, header, maxBody, shared, on);
    }
  }

  public IdempotencyFilter(IdempotencyGuard guard) {
    this(guard, Policy.DEFAULT);
  }

  public IdempotencyFilter(IdempotencyGuard guard, Policy policy) {
    this.guard = guard;
    this.policy = policy;
  }

  @Override
  public void doFilter(ServletRequest request, ServletResponse response, FilterChain chain)
      throws IOException, ServletException {
    if (!(request instanceof HttpServletRequest req)
        || !(response instanceof HttpServletResponse res)
        || !policy.methods().contains(req.getMethod().toUpperCase(Locale.ROOT))) {
      chain.doFilter(request, response);
      return;
    }
    List<String> raw = Collections.list(req.getHeaders(policy.header()));
    if (raw.isEmpty()) {
      if (policy.required().test(req)) {
        refuse(req, res, StoredResponse.error(400, "this route needs " + policy.header(), -1));
      } else {
        chain.doFilter(request, response);
      }
      return;
    }
    if (raw.size() > 1 || severalKeys(raw.get(0))) {
      refuse(req, res, StoredResponse.error(400,
          "send one " + policy.header() + " header, not several", -1));
      return;
    }
    String key;
    try {
      key = IdempotencyKeys.checkKey(unquote(raw.get(0)), IdempotencyKeys.MAX_HEADER_KEY);
    } catch (IdempotencyKeyException e) {
      refuse(req, res, StoredResponse.error(400, e.getMessage(), -1));
      return;
    }
    String legacy = null;
    if (policy.user() != null) {
      key = IdempotencyKeys.callerScope(null, policy.user().apply(req)) + ":" + key;
    } else if (!policy.shared()) {
      legacy = policy.legacyUnscoped() ? key : null;
      key = IdempotencyKeys.callerScope(req.getHeader("Authorization"), null) + ":" + key;
    }
    byte[] body = req.getInputStream().readNBytes(policy.maxBody() + 1);
    if (body.length > policy.maxBody()) {
      send(res, StoredResponse.error(413, "request body over " + policy.maxBody() + " bytes", -1));
      return;
    }
    String query = req.getQueryString() == null ? "" : req.getQueryString();
    byte[] fp = IdempotencyKeys.fingerprint(
        req.getMethod().toUpperCase(Locale.ROOT).getBytes(StandardCharsets.UTF_8),
        percentDecode(req.getRequestURI()), query.getBytes(StandardCharsets.UTF_8), body)
        .getBytes(StandardCharsets.US_ASCII);
    Begin b;
    try {
      b = guard.begin(key, fp);
      if (b.outcome() == Outcome.NEW && legacy != null && !b.takeover()) {
        Begin old;
        try {
          old = guard.peek(legacy, fp);
        } catch (IdempotencyException e) {
          guard.abandon(b.lease());
          throw e;
        }
        if (old != null) { // written before per-caller scopes: still replayed
          guard.abandon(b.lease());
          b = old;
        }
      }
    } catch (IdempotencyKeyException e) {
      send(res, StoredResponse.error(400, e.getMessage(), -1));
      return;
    } catch (IdempotencyException e) {
      send(res, StoredResponse.error(503, "idempotency check unavailable, retry later", 1));
      return;
    }
    switch (b.outcome()) {
      case DONE -> {
        StoredResponse r = StoredResponse.decode(b.result());
        List<Map.Entry<String, String>> h = new ArrayList<>(r.headers());
        h.add(Map.entry(REPLAYED_HEADER, "true"));
        send(res, new StoredResponse(r.status(), h, r.body()));
      }
      case IN_PROGRESS -> send(res, StoredResponse.error(409,
          "a request with this Idempotency-Key is still being processed",
          retryAfterSeconds(b.retryAfter(), times.median(req.getRequestURI()))));
      case MISMATCH -> send(res, StoredResponse.error(422,
          "this Idempotency-Key was used with a different request", -1));
      case NEW -> {
        long started = System.nanoTime();
        try {
          run(req, res, chain, b.lease(), body);
        } finally {
          times.add(req.getRequestURI(), (System.nanoTime() - started) / 1e9);
        }
      }
      default -> throw new IllegalStateException(b.outcome().toString());
    }
  }

  private void run(HttpServletRequest req, HttpServletResponse res, FilterChain chain,
      Lease lease, byte[] body) throws IOException, ServletException {
    Buffered out = new Buffered(res);
    try (Lease l = lease.keepAlive()) { // an exception: released by close()
      req.setAttribute(LEASE_ATTRIBUTE, l);
      chain.doFilter(new Replayable(req, body), out);
      StoredResponse r = out.stored();
      if (!isFinal(r.status())) {
        l.release();
      } else {
        try {
          l.complete(r.encode());
        } catch (IdempotencyException e) {
          List<Map.Entry<String, String>> h = new ArrayList<>(r.headers());
          h.add(Map.entry("Idempotency-Warning", "not recorded: "
              + (e instanceof LeaseLostException ? "LeaseLostError"
                  : e instanceof DuplicateCompletionException ? "DuplicateCompletionError"
                  : "IdempotencyUnavailable")));
          r = new StoredResponse(r.status(), h, r.body());
        }
      }
      send(res, r);
    }
  }

  /**
   * A 409's Retry-After: the lower of the lease left and the route's median handler time
   * ({@code medianSeconds} below 0: none yet), in whole seconds, at least 1.
   */
  public static long retryAfterSeconds(Duration leaseLeft, double medianSeconds) {
    double left = leaseLeft.toMillis() / 1000.0;
    double wait = medianSeconds < 0 ? left : Math.min(left, medianSeconds);
    return Math.max(1, (long) Math.ceil(wait));
  }

  /** A comma outside a quoted string: two field lines combined, or a list. */
  private static boolean severalKeys(String raw) {
    boolean quoted = false;
    for (int i = 0; i < raw.length(); i++) {
      char c = raw.charAt(i);
      if (c == '"') {
        quoted = !quoted;
      } else if (c == ',' && !quoted) {
        return true;
      }
    }
    return false;
  }

  /** A running median of each route's handler time (the last 51 runs). */
  static final class HandlerTimes {
    private static final int WINDOW = 51;
    private final Map<String, ArrayDeque<Double>> byPath = new HashMap<>();

    synchronized void add(String path, double seconds) {
      ArrayDeque<Double> d = byPath.computeIfAbsent(path, k -> new ArrayDeque<>());
      d.addLast(seconds);
      if (d.size() > WINDOW) {
        d.removeFirst();
      }
    }

    /** The median in seconds, or -1 before the route's first run. */
    synchronized double median(String path) {
      ArrayDeque<Double> d = byPath.get(path);
      if (d == null || d.isEmpty()) {
        return -1;
      }
      double[] s = d.stream().mapToDouble(Double::doubleValue).sorted().toArray();
      int m = s.length / 2;
      return s.length % 2 == 1 ? s[m] : (s[m - 1] + s[m]) / 2;
    }
  }

  static boolean isFinal(int status) {
    return status < 500 && status != 408 && status != 425 && status != 429;
  }

  private static String unquote(String raw) {
    String t = raw.strip();
    return t.length() >= 2 && t.startsWith("\"") && t.endsWith("\"")
        ? t.substring(1, t.length() - 1) : t;
  }

  /** The decoded path, as the other middleware hash it ({@code %2F} is "/", "+" stays). */
  private static byte[] percentDecode(String s) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    byte[] b = s.getBytes(StandardCharsets.UTF_8);
    for (int i = 0; i < b.length; i++) {
      if (b[i] == '%' && i + 2 < b.length
          && Character.digit(b[i + 1], 16) >= 0 && Character.digit(b[i + 2], 16) >= 0) {
        out.write(Character.digit(b[i + 1], 16) * 16 + Character.digit(b[i + 2], 16));
        i += 2;
      } else {
        out.write(b[i]);
      }
    }
    return out.toByteArray();
  }

  /**
   * Answers before the body was read: reads it first (up to maxBody), or the container
   * drops the connection and a client that reuses it sees it closed.
   */
  private void refuse(HttpServletRequest req, HttpServletResponse res, StoredResponse r)
      throws IOException {
    req.getInputStream().readNBytes(policy.maxBody() + 1);
    send(res, r);
  }

  private static void send(HttpServletResponse res, StoredResponse r) throws IOException {
    res.setStatus(r.status());
    for (Map.Entry<String, String> e : r.headers()) {
      if (e.getKey().equalsIgnoreCase("content-length")) {
        continue; // the container knows it from the body
      }
      res.addHeader(e.getKey(), e.getValue());
    }
    res.setContentLength(r.body().length);
    res.getOutputStream().write(r.body());
    res.flushBuffer();
  }

  /** The request with its body read already (the filter had to hash it). */
  private static final class Replayable extends HttpServletRequestWrapper {
    private final byte[] body;

    Replayable(HttpServletRequest req, byte[] body) {
      super(req);
      this.body = body;
    }

    @Override
    public ServletInputStream getInputStream() {
      ByteArrayInputStream in = new ByteArrayInputStream(body);
      return new ServletInputStream() {
        @Override
        public int read() {
          return in.read();
        }

        @Override
        public int read(byte[] b, int off, int len) {
          return in.read(b, off, len);
        }

        @Override
        public boolean isFinished() {
          return in.available() == 0;
        }

        @Override
        public boolean isReady() {
          return true;
        }

        @Override
        public void setReadListener(ReadListener l) {
          throw new UnsupportedOperationException("the body is buffered");
        }
      };
    }

    @Override
    public int getContentLength() {
      return body.length;
    }

    @Override
    public long getContentLengthLong() {
      return body.length;
    }
  }

  /** Buffers the servlet's response, to store it whole before anything is sent. */
  private static final class Buffered extends HttpServletResponseWrapper {
    private final ByteArrayOutputStream body = new ByteArrayOutputStream();
    private final TreeMap<String, List<String>> headers = new TreeMap<>();
    private int status = 200;
    private String charset = "UTF-8";
    private PrintWriter writer;

    Buffered(HttpServletResponse res) {
      super(res);
    }

    StoredResponse stored() {
      if (writer != null) {
        writer.flush();
      }
      List<Map.Entry<String, String>> h = new ArrayList<>();
      headers.forEach((k, vs) -> vs.forEach(v -> h.add(Map.entry(k, v))));
      return new StoredResponse(status, h, body.toByteArray());
    }

    @Override
    public void setStatus(int sc) {
      status = sc;
    }

    @Override
    public int getStatus() {
      return status;
    }

    @Override
    public void sendError(int sc) {
      status = sc;
    }

    @Override
    public void sendError(int sc, String msg) {
      status = sc;
      body.writeBytes(msg.getBytes(StandardCharsets.UTF_8));
    }

    @Override
    public void sendRedirect(String location) {
      status = 302;
      setHeader("location", location);
    }

    @Override
    public void setHeader(String name, String value) {
      headers.put(name.toLowerCase(Locale.ROOT), new ArrayList<>(List.of(value)));
    }

    @Override
    public void addHeader(String name, String value) {
      headers.computeIfAbsent(name.toLowerCase(Locale.ROOT), k -> new ArrayList<>()).add(value);
    }

    @Override
    public void setIntHeader(String name, int value) {
      setHeader(name, Integer.toString(value));
    }

    @Override
    public void addIntHeader(String name, int value) {
      addHeader(name, Integer.toString(value));
    }

    @Override
    public void setDateHeader(String name, long date) {
      setHeader(name, java.time.format.DateTimeFormatter.RFC_1123_DATE_TIME.format(
          java.time.ZonedDateTime.ofInstant(java.time.Instant.ofEpochMilli(date),
              java.time.ZoneOffset.UTC)));
    }

    @Override
    public void addDateHeader(String name, long date) {
      setDateHeader(name, date);
    }

    @Override
    public boolean containsHeader(String name) {
      return headers.containsKey(name.toLowerCase(Locale.ROOT));
    }

    @Override
    public String getHeader(String name) {
      List<String> v = headers.get(name.toLowerCase(Locale.ROOT));
      return v == null || v.isEmpty() ? null : v.get(0);
    }

    @Override
    public Collection<String> getHeaders(String name) {
      return headers.getOrDefault(name.toLowerCase(Locale.ROOT), List.of());
    }

    @Override
    public Collection<String> getHeaderNames() {
      return headers.keySet();
    }

    @Override
    public void setContentType(String type) {
      if (type != null) {
        setHeader("content-type", type);
        int i = type.toLowerCase(Locale.ROOT).indexOf("charset=");
        if (i >= 0) {
          charset = type.substring(i + 8).trim();
        }
      }
    }

    @Override
    public String getContentType() {
      return getHeader("content-type");
    }

    @Override
    public void setCharacterEncoding(String cs) {
      charset = cs;
    }

    @Override
    public String getCharacterEncoding() {
      return charset;
    }

    @Override
    public void setContentLength(int len) {}

    @Override
    public void setContentLengthLong(long len) {}

    @Override
    public void setBufferSize(int size) {}

    @Override
    public void flushBuffer() {}

    @Override
    public void resetBuffer() {
      body.reset();
    }

    @Override
    public void reset() {
      body.reset();
      headers.clear();
      status = 200;
    }

    @Override
    public boolean isCommitted() {
      return false;
    }

    @Override
    public ServletOutputStream getOutputStream() {
      return new ServletOutputStream() {
        @Override
        public void write(int b) {
          body.write(b);
        }

        @Override
        public void write(byte[] b, int off, int len) {
          body.write(b, off, len);
        }

        @Override
        public boolean isReady() {
          return true;
        }

        @Override
        public void setWriteListener(WriteListener l) {
          throw new UnsupportedOperationException("the response is buffered");
        }
      };
    }

    @Override
    public PrintWriter getWriter() {
      if (writer == null) {
        writer = new PrintWriter(new OutputStreamWriter(getOutputStream(), Charset.forName(charset)));
      }
      return writer;
    }
  }
}
