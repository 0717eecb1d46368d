package io.hotkeyd.idempotency;

import io.hotkeyd.Namespace;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BiConsumer;
import redis.clients.jedis.JedisCluster;
import redis.clients.jedis.UnifiedJedis;
import redis.clients.jedis.exceptions.JedisException;
import redis.clients.jedis.exceptions.JedisNoScriptException;

/**
 * The idempotency guard over a Jedis {@link UnifiedJedis} ({@code JedisPooled},
 * {@code JedisCluster}). Build one per application and share it; it is thread-safe.
 *
 * <pre>{@code
 * IdempotencyGuard guard = IdempotencyGuard.builder(new JedisPooled("127.0.0.1", 6379))
 *     .lease(Duration.ofSeconds(10)).ttl(Duration.ofHours(24)).build();
 * Begin b = guard.begin("order-7f3a", body);
 * switch (b.outcome()) {
 *   case NEW -> { try (Lease lease = b.lease().keepAlive()) { lease.complete(placeOrder()); } }
 *   case DONE -> reply(b.result());                     // replay the stored result as is
 *   case IN_PROGRESS -> retryLater(b.retryAfter());
 *   case MISMATCH -> reject();                          // same key, another request
 * }
 * }</pre>
 *
 * <p>A Redis failure throws {@link IdempotencyUnavailableException} (fail closed, the
 * default), or, with {@link Builder#failOpen(boolean) failOpen(true)}, answers NEW with an
 * unguarded lease (the operation runs, duplicates are possible).
 */
public final class IdempotencyGuard implements AutoCloseable {
  private static final Script BEGIN = Script.load("begin");
  private static final Script COMPLETE = Script.load("complete");
  private static final Script EXTEND = Script.load("extend");
  private static final Script RELEASE = Script.load("release");

  private final UnifiedJedis jedis;
  private final Duration lease;
  private final Duration ttl;
  private final Namespace namespace;
  private final String scope;
  private final int auditMaxLen;
  private final int maxKeyLength;
  private final boolean failOpen;
  private final BiConsumer<String, Exception> onError;
  private final IdempotencyStore store;
  private final Stats stats = new Stats();
  private volatile ScheduledExecutorService scheduler;

  /** Counters of one guard. */
  public static final class Stats {
    public final AtomicLong fresh = new AtomicLong();
    public final AtomicLong inProgress = new AtomicLong();
    public final AtomicLong done = new AtomicLong();
    public final AtomicLong mismatch = new AtomicLong();
    public final AtomicLong takeovers = new AtomicLong();
    public final AtomicLong leaseLost = new AtomicLong();
    public final AtomicLong badInput = new AtomicLong();
    public final AtomicLong unavailable = new AtomicLong();
    public final AtomicLong renewals = new AtomicLong();
    /** begin answered from the durable store (Redis had forgotten the result). */
    public final AtomicLong storeReplays = new AtomicLong();
    /** completions the durable store's unique key refused. */
    public final AtomicLong duplicates = new AtomicLong();
  }

  private IdempotencyGuard(Builder b) {
    this.jedis = b.jedis;
    this.lease = b.lease;
    this.ttl = b.ttl;
    this.namespace = b.namespace;
    this.scope = b.scope;
    this.auditMaxLen = b.auditMaxLen;
    this.maxKeyLength = b.maxKeyLength;
    this.failOpen = b.failOpen;
    this.onError = b.onError;
    this.store = b.store;
  }

  public static Builder builder(UnifiedJedis jedis) {
    return new Builder(jedis);
  }

  /** Settings of a guard; {@link #build()} checks them. */
  public static final class Builder {
    private final UnifiedJedis jedis;
    private Duration lease = Duration.ofSeconds(30);
    private Duration ttl = Duration.ofHours(24);
    private Namespace namespace = Namespace.DEFAULT;
    private String scope = "";
    private int auditMaxLen = 10_000;
    private int maxKeyLength = 1024;
    private boolean failOpen;
    private BiConsumer<String, Exception> onError = (op, e) -> {};
    private IdempotencyStore store;

    private Builder(UnifiedJedis jedis) {
      if (jedis == null) {
        throw new IllegalArgumentException("jedis must not be null");
      }
      this.jedis = jedis;
    }

    /** How long a PROCESSING record belongs to its holder (30 s): above the p99.9. */
    public Builder lease(Duration d) {
      this.lease = d;
      return this;
    }

    /** How long a record lives to be replayed (24 h; at least the lease). */
    public Builder ttl(Duration d) {
      this.ttl = d;
      return this;
    }

    public Builder namespace(Namespace ns) {
      this.namespace = ns;
      return this;
    }

    /** Separates key spaces (per service or route). */
    public Builder scope(String s) {
      this.scope = s;
      return this;
    }

    /** Cap of the audit stream {@code <prefix>:idem-audit} (10000; 0: none, for Cluster). */
    public Builder auditMaxLen(int n) {
      this.auditMaxLen = n;
      return this;
    }

    public Builder maxKeyLength(int n) {
      this.maxKeyLength = n;
      return this;
    }

    /** Run unguarded when Redis fails (default false: fail closed). */
    public Builder failOpen(boolean open) {
      this.failOpen = open;
      return this;
    }

    /** Hears every Redis failure (logs, metrics). */
    public Builder onError(BiConsumer<String, Exception> listener) {
      this.onError = listener;
      return this;
    }

    /**
     * Keeps every final result durably too (e.g. a {@link JdbcIdempotencyStore}): a result
     * Redis forgot is replayed from it, and a result whose record Redis lost is still
     * written there, its unique key fencing a second completion.
     */
    public Builder store(IdempotencyStore s) {
      this.store = s;
      return this;
    }

    public IdempotencyGuard build() {
      if (lease.toMillis() < 1 || lease.compareTo(Duration.ofDays(365)) > 0) {
        throw new IllegalArgumentException("lease must be 1 ms .. 1 year, got " + lease);
      }
      if (ttl.compareTo(lease) < 0) {
        throw new IllegalArgumentException("ttl (" + ttl + ") must be >= lease (" + lease
            + "): a record must outlive its lease, or a slow holder's retry runs twice");
      }
      if (auditMaxLen < 0) {
        throw new IllegalArgumentException("auditMaxLen must be >= 0, got " + auditMaxLen);
      }
      if (jedis instanceof JedisCluster && auditMaxLen > 0) {
        throw new IllegalArgumentException("on Redis Cluster the audit stream and the records "
            + "live in different slots: pass auditMaxLen(0) (records alone work on a cluster)");
      }
      return new IdempotencyGuard(this);
    }
  }

  public Duration lease() {
    return lease;
  }

  public Stats stats() {
    return stats;
  }

  /** The record of {@code key}: {@code <prefix>:idem:<digest>}. */
  public String recordOf(String key) {
    return namespace.prefix() + ":idem:" + IdempotencyKeys.recordDigest(scope, key);
  }

  /** The audit stream {@code <prefix>:idem-audit}. */
  public String auditStream() {
    return namespace.prefix() + ":idem-audit";
  }

  /**
   * A lease handed over from another process or language (a job queue, a worker): its key
   * and fencing token. The scripts check the token, so a stale hand-over is refused.
   */
  public Lease resume(String key, long token) {
    IdempotencyKeys.checkKey(key, maxKeyLength);
    return new Lease(this, key, recordOf(key), token, "", true);
  }

  /** Starts the operation of {@code key} with the fingerprint of {@code request}. */
  public Begin begin(String key, byte[] request) {
    try {
      IdempotencyKeys.checkKey(key, maxKeyLength);
    } catch (IdempotencyKeyException e) {
      stats.badInput.incrementAndGet();
      throw e;
    }
    String fp = IdempotencyKeys.fingerprint(request);
    String record = recordOf(key);
    List<?> r;
    try {
      r = BEGIN.run(jedis, keys(record), fp, Long.toString(ms(lease)), Long.toString(ms(ttl)),
          key, Integer.toString(auditMaxLen), "");
    } catch (JedisException e) {
      tolerate(e, "begin");
      stats.fresh.incrementAndGet();
      return new Begin(Outcome.NEW, new Lease(this, key, record, 0, fp, false), null, false,
          Duration.ZERO, false);
    }
    String kind = str(r.get(0));
    switch (kind) {
      case "new" -> {
        boolean takeover = "takeover".equals(str(r.get(2)));
        stats.fresh.incrementAndGet();
        if (takeover) {
          stats.takeovers.incrementAndGet();
        }
        Lease l = new Lease(this, key, record, Long.parseLong(str(r.get(1))), fp, true);
        Begin b = new Begin(Outcome.NEW, l, null, false, Duration.ZERO, takeover);
        return store == null ? b : fromStore(b);
      }
      case "busy" -> {
        stats.inProgress.incrementAndGet();
        long left = ((Number) r.get(2)).longValue();
        return new Begin(Outcome.IN_PROGRESS, null, null, false,
            Duration.ofMillis(Math.max(1, left)), false);
      }
      case "done", "failed" -> {
        stats.done.incrementAndGet();
        byte[] res = r.size() > 2 && r.get(2) instanceof byte[] b ? b : new byte[0];
        return new Begin(Outcome.DONE, null, res, "failed".equals(kind), Duration.ZERO, false);
      }
      case "mismatch" -> {
        stats.mismatch.incrementAndGet();
        return Begin.of(Outcome.MISMATCH);
      }
      default -> throw new IdempotencyException("unexpected reply from the begin script: " + kind);
    }
  }

  /**
   * The final result stored for {@code key} and the same request, read only (one HMGET), or
   * null when there is none (no record, still running, another request): unlike {@link
   * #begin} it never takes a lease. The HTTP filter reads records of the old unscoped key
   * space with it during the transition window.
   */
  public Begin peek(String key, byte[] request) {
    IdempotencyKeys.checkKey(key, maxKeyLength);
    List<byte[]> r;
    try {
      r = jedis.hmget(recordOf(key).getBytes(StandardCharsets.UTF_8),
          "st".getBytes(StandardCharsets.US_ASCII), "fp".getBytes(StandardCharsets.US_ASCII),
          "res".getBytes(StandardCharsets.US_ASCII));
    } catch (JedisException e) {
      tolerate(e, "peek");
      return null;
    }
    String st = r.get(0) == null ? "" : new String(r.get(0), StandardCharsets.US_ASCII);
    String fp = IdempotencyKeys.fingerprint(request);
    if (!(st.equals("D") || st.equals("F")) || r.get(1) == null
        || !fp.equals(new String(r.get(1), StandardCharsets.US_ASCII))) {
      return null;
    }
    byte[] res = r.get(2) == null ? new byte[0] : r.get(2);
    return new Begin(Outcome.DONE, null, res, st.equals("F"), Duration.ZERO, false);
  }

  /** Redis had no record (NEW): did it forget a final result the store has? */
  private Begin fromStore(Begin b) {
    Lease l = b.lease();
    StoredFinal stored;
    try {
      stored = store.get(IdempotencyKeys.recordDigest(scope, l.key()));
    } catch (RuntimeException e) {
      if (!failOpen) {
        abandon(l);
      }
      storeFailed(e, "store lookup");
      return b; // failing open: Redis still guards the key
    }
    if (stored == null) {
      return b;
    }
    stats.storeReplays.incrementAndGet();
    stats.fresh.decrementAndGet(); // counted once, as what it answers
    if (!stored.fingerprint().equals(l.fingerprint())) {
      abandon(l);
      stats.mismatch.incrementAndGet();
      return Begin.of(Outcome.MISMATCH);
    }
    try {
      writeRedis(l, stored.result(), stored.failed() ? "F" : "D", false); // Redis learns it
    } catch (IdempotencyException e) {
      // the store answers the next retry too
    }
    stats.done.incrementAndGet();
    return new Begin(Outcome.DONE, null, stored.result(), stored.failed(), Duration.ZERO, false);
  }

  private void storeFailed(RuntimeException e, String op) {
    stats.unavailable.incrementAndGet();
    onError.accept(op, e);
    if (!failOpen) {
      throw e instanceof IdempotencyException ie ? ie
          : new IdempotencyUnavailableException("idempotency store unavailable (" + op + ")", e);
    }
  }

  /**
   * Stores {@code result} (DONE) and ends the lease.
   *
   * @throws LeaseLostException the lease was taken over, or the record is gone and there is
   *     no store: NOT stored (with a store, a result whose record Redis lost is written to
   *     the store anyway: its unique key is then the fence)
   * @throws DuplicateCompletionException the store holds another completion of the key
   *     (the operation ran twice after Redis lost its record); the first is kept
   * @throws IdempotencyUnavailableException Redis or the store failed (closed)
   */
  public void complete(Lease l, byte[] result) {
    finish(l, result, "D");
  }

  /** Records a final failure that retries see too (e.g. payment declined). */
  public void fail(Lease l, byte[] result) {
    finish(l, result, "F");
  }

  private void finish(Lease l, byte[] result, String st) {
    byte[] res = result == null ? new byte[0] : result;
    if (store == null || !l.guarded()) {
      writeRedis(l, res, st, false);
      return;
    }
    try {
      writeRedis(l, res, st, false);
    } catch (LeaseLostException e) {
      if (!e.reason().equals("gone")) {
        throw e; // taken over by another holder: that one completes
      }
    }
    StoredFinal winner;
    try {
      winner = store.put(new StoredFinal(IdempotencyKeys.recordDigest(scope, l.key()), l.key(),
          l.fingerprint(), st.equals("F"), l.token(), res));
    } catch (RuntimeException e) {
      storeFailed(e, "store write");
      return;
    }
    if (winner.token() != l.token()) {
      try {
        writeRedis(l, winner.result(), winner.failed() ? "F" : "D", true);
      } catch (IdempotencyException e) {
        // gone: begin reads the store
      }
      stats.duplicates.incrementAndGet();
      throw new DuplicateCompletionException(l.key(), winner);
    }
  }

  private void writeRedis(Lease l, byte[] result, String st, boolean repair) {
    fenced(COMPLETE, "complete", l, keys(l.record()),
        bytes(Long.toString(l.token())), bytes(st), result,
        bytes(Long.toString(ms(ttl))), bytes(Integer.toString(auditMaxLen)),
        bytes(repair ? "repair" : ""));
  }

  /** Renews the lease for {@code d} (null: the configured lease) from now. */
  public void extend(Lease l, Duration d) {
    fenced(EXTEND, "extend", l, List.of(l.record()), bytes(Long.toString(l.token())),
        bytes(Long.toString(ms(d == null ? lease : d))));
  }

  /** Gives the key back (PROCESSING to NEW): the next caller runs it. */
  public void release(Lease l) {
    fenced(RELEASE, "release", l, keys(l.record()), bytes(Long.toString(l.token())),
        bytes(Integer.toString(auditMaxLen)));
  }

  /** Releases, ignoring a lost lease or an outage (the lease runs out anyway). */
  public void abandon(Lease l) {
    try {
      release(l);
    } catch (IdempotencyException e) {
      // the lease runs out on its own
    }
  }

  private void fenced(Script s, String op, Lease l, List<String> keys, byte[]... args) {
    if (!l.guarded()) {
      l.markFinished();
      return;
    }
    List<?> r;
    try {
      r = s.run(jedis, keys, args);
    } catch (JedisException e) {
      tolerate(e, op);
      return;
    }
    if (!op.equals("extend")) {
      l.markFinished(); // done, or refused for good: nothing left to release
    }
    if ("ok".equals(str(r.get(0)))) {
      return;
    }
    stats.leaseLost.incrementAndGet();
    throw new LeaseLostException(op, l.key(), l.token(), str(r.get(1)));
  }

  private void tolerate(JedisException e, String op) {
    stats.unavailable.incrementAndGet();
    onError.accept(op, e);
    if (!failOpen) {
      throw new IdempotencyUnavailableException(
          "idempotency guard unavailable (" + op + "): " + e.getMessage(), e);
    }
  }

  void countRenewal() {
    stats.renewals.incrementAndGet();
  }

  ScheduledExecutorService scheduler() {
    ScheduledExecutorService s = scheduler;
    if (s == null) {
      synchronized (this) {
        if (scheduler == null) {
          ScheduledThreadPoolExecutor p = new ScheduledThreadPoolExecutor(1, r -> {
            Thread t = new Thread(r, "hotkeyd-idempotency-keepalive");
            t.setDaemon(true);
            return t;
          });
          p.setRemoveOnCancelPolicy(true);
          scheduler = p;
        }
        s = scheduler;
      }
    }
    return s;
  }

  /** Stops the keep-alive thread (renewals end; leases run out on their own). */
  @Override
  public void close() {
    ScheduledExecutorService s = scheduler;
    if (s != null) {
      s.shutdownNow();
    }
  }

  private List<String> keys(String record) {
    return auditMaxLen > 0 ? List.of(record, auditStream()) : List.of(record);
  }

  private static long ms(Duration d) {
    return Math.max(1, d.toMillis());
  }

  private static byte[] bytes(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  private static String str(Object o) {
    return o instanceof byte[] b ? new String(b, StandardCharsets.ISO_8859_1) : String.valueOf(o);
  }

  /** One shared script: EVALSHA, and EVAL once when the server does not know it. */
  private record Script(byte[] src, byte[] sha) {
    static Script load(String name) {
      String path = "/io/hotkeyd/lua/idempotency_" + name + ".lua";
      try (InputStream in = IdempotencyGuard.class.getResourceAsStream(path)) {
        if (in == null) {
          throw new IllegalStateException("Lua script " + path + " is missing from the jar");
        }
        byte[] src = in.readAllBytes();
        byte[] sha = HexFormat.of().formatHex(MessageDigest.getInstance("SHA-1").digest(src))
            .getBytes(StandardCharsets.US_ASCII);
        return new Script(src, sha);
      } catch (IOException | NoSuchAlgorithmException e) {
        throw new IllegalStateException("cannot read Lua script " + path, e);
      }
    }

    List<?> run(UnifiedJedis jedis, List<String> keys, String... args) {
      byte[][] b = new byte[args.length][];
      for (int i = 0; i < args.length; i++) {
        b[i] = bytes(args[i]);
      }
      return run(jedis, keys, b);
    }

    List<?> run(UnifiedJedis jedis, List<String> keys, byte[]... args) {
      List<byte[]> k = new ArrayList<>(keys.size());
      for (String s : keys) {
        k.add(bytes(s));
      }
      List<byte[]> a = List.of(args);
      try {
        return (List<?>) jedis.evalsha(sha, k, a);
      } catch (JedisNoScriptException e) {
        return (List<?>) jedis.eval(src, k, a);
      }
    }
  }
}
