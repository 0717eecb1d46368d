package io.hotkeyd;

import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import redis.clients.jedis.BuilderFactory;
import redis.clients.jedis.CommandArguments;
import redis.clients.jedis.CommandObject;
import redis.clients.jedis.Connection;
import redis.clients.jedis.JedisCluster;
import redis.clients.jedis.Pipeline;
import redis.clients.jedis.Protocol;
import redis.clients.jedis.Response;
import redis.clients.jedis.UnifiedJedis;
import redis.clients.jedis.exceptions.JedisConnectionException;
import redis.clients.jedis.params.SetParams;
import redis.clients.jedis.util.JedisClusterCRC16;

/**
 * Wraps the app's Jedis client ({@code JedisPooled}, {@code JedisCluster}, any {@code
 * UnifiedJedis}): reads of keys the daemon says are hot are served from a bounded local cache;
 * every other read goes to Redis unchanged. Writes through the cache broadcast an
 * invalidation, so every instance drops its copy. Reads served locally are reported to the
 * daemon (demand reports), so a key does not cool just because the cache absorbed its load.
 *
 * <pre>{@code
 * try (JedisPooled redis = new JedisPooled("localhost", 6379);
 *      HotCache cache = HotCache.builder(redis).build().start()) {
 *   String v = cache.get("item:1");   // local while item:1 is hot
 *   cache.set("item:1", "v2");        // SET, then invalidate everywhere
 * }
 * }</pre>
 *
 * <p>A copy lives for the {@code ttl_ms} of the rule that made its key hot (capped by {@code
 * maxTtl}), so the staleness a reader can see is bounded by that TTL even if every
 * invalidation were lost. Thread-safe; a hot hit takes no lock and does no I/O. Values
 * returned from the cache are shared: do not modify returned arrays or maps.
 */
public final class HotCache implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(HotCache.class);

  /** When writes publish an invalidation. */
  public enum Broadcast {
    /** Every write (correct even when instances disagree on what is hot). */
    ALWAYS,
    /** Only writes of keys this instance knows to be hot or has cached (cheaper, weaker). */
    KNOWN
  }

  private static final char GET_S = LocalCache.GET_TEXT;
  private static final char GET_B = LocalCache.GET_BYTES;
  private static final char HGET_S = 'h';
  private static final char HGET_B = 'H';
  private static final char HGETALL_S = 'a';
  private static final char HGETALL_B = 'A';
  private static final char CACHED = 'c';

  private final UnifiedJedis jedis;
  private final Subscriber subscriber;
  private final boolean ownsSubscriber;
  private final HotSet hotset;
  private final Map<KeyId, HotItem> hot;
  private final Clock clock;
  private final int db;
  private final Long maxTtlNanos;
  private final Broadcast broadcast;
  private final String origin;
  private final byte[] invalidateChannelBytes;
  private final Namespace namespace;
  private final long demandIntervalMillis;
  private final MessageAuth demandAuth; // the reporter key, or null: unsigned reports
  private final Duration startTimeout;
  private final CacheStats stats = new CacheStats();
  private final LocalCache local;
  private final AtomicLong demandSeq = new AtomicLong();
  private ScheduledExecutorService demandTimer;
  private volatile boolean closed;
  private final Watch.Gate gate;
  private final MessageAuth auth;

  private HotCache(Builder b) {
    this.jedis = b.jedis;
    this.ownsSubscriber = b.subscriber == null;
    this.subscriber =
        b.subscriber != null
            ? b.subscriber
            : Subscriber.builder(b.jedis).namespace(b.namespace).clock(b.clock).auth(b.auth)
                .build();
    this.hotset = subscriber.hotset();
    this.hot = hotset.items();
    this.clock = hotset.clock();
    this.namespace = subscriber.namespace();
    this.db = b.db;
    this.maxTtlNanos = b.maxTtl == null ? null : b.maxTtl.toNanos();
    this.broadcast = b.broadcast;
    this.origin = b.appId != null ? b.appId : defaultAppId();
    this.invalidateChannelBytes = namespace.invalidateChannel().getBytes(StandardCharsets.UTF_8);
    this.demandIntervalMillis = b.demandInterval.toMillis();
    this.demandAuth = b.demandAuthSet ? b.demandAuth : MessageAuth.reporterKeyFromEnv();
    this.startTimeout = b.startTimeout;
    this.local = new LocalCache(clock, b.maxEntries, b.maxBytes, b.staleFor.toNanos(),
        b.waitTimeout.toNanos(), stats, hot::get, GET_S, GET_B, HGETALL_S, HGETALL_B, CACHED);
    hotset.addListener(new HotListener() {
      @Override
      public void onCool(KeyId key) {
        local.invalidate(key);
      }
    });
    this.auth = b.auth;
    this.gate = new Watch.Gate(b.consistency, hotset, clock, b.auth,
        k -> local.invalidate(new KeyId(k, db)), local::clear);
    subscriber.addInvalidationListener(this::onInvalidation);
    subscriber.addHeartbeatListener(gate::onHeartbeat);
    subscriber.addResetListener(local::clear);
    subscriber.addResetListener(gate::reset);
  }

  public static Builder builder(UnifiedJedis jedis) {
    return new Builder(jedis);
  }

  /** Options of a {@link HotCache}. */
  public static final class Builder {
    private final UnifiedJedis jedis;
    private Subscriber subscriber;
    private Namespace namespace = Namespace.DEFAULT;
    private Clock clock = Clock.SYSTEM;
    private int db;
    private int maxEntries = 10_000;
    private long maxBytes = 32L << 20;
    private Duration maxTtl;
    private Duration staleFor = Duration.ofSeconds(1);
    private Duration waitTimeout = Duration.ofMillis(500);
    private Duration demandInterval = Duration.ofMillis(250);
    private Duration startTimeout = Duration.ofMillis(Limits.START_TIMEOUT_MS);
    private Broadcast broadcast = Broadcast.ALWAYS;
    private String appId;
    private MessageAuth auth;
    private MessageAuth demandAuth;
    private boolean demandAuthSet;
    private Consistency consistency = Consistency.AVAILABLE;

    private Builder(UnifiedJedis jedis) {
      this.jedis = jedis;
    }

    /** Share a subscriber (otherwise the cache creates and owns one). */
    public Builder subscriber(Subscriber s) {
      this.subscriber = s;
      return this;
    }

    public Builder namespace(Namespace ns) {
      this.namespace = ns;
      return this;
    }

    public Builder clock(Clock c) {
      this.clock = c;
      return this;
    }

    /** The Redis db the client reads (hot entries carry the db the daemon saw). */
    public Builder db(int db) {
      this.db = db;
      return this;
    }

    public Builder maxEntries(int n) {
      this.maxEntries = n;
      return this;
    }

    public Builder maxBytes(long n) {
      this.maxBytes = n;
      return this;
    }

    /** Cap on how long a copy lives; the rule's {@code ttl_ms} otherwise. */
    public Builder maxTtl(Duration d) {
      this.maxTtl = d;
      return this;
    }

    /** How long past its expiry a copy may be served while one caller refreshes it. */
    public Builder staleFor(Duration d) {
      this.staleFor = d;
      return this;
    }

    /** How long a caller with no copy waits for the refresh in flight. */
    public Builder waitTimeout(Duration d) {
      this.waitTimeout = d;
      return this;
    }

    /**
     * Bound of {@link #start()}: with Redis down or silent it throws {@link HotkeydException}
     * once this has passed ({@code start_timeout_ms} of spec/limits.json, 5 s).
     */
    public Builder startTimeout(Duration d) {
      if (d.isNegative() || d.isZero()) {
        throw new IllegalArgumentException("start timeout must be positive, got " + d);
      }
      this.startTimeout = d;
      return this;
    }

    /** Demand-report interval, 250 to 500 ms. */
    public Builder demandInterval(Duration d) {
      if (d.toMillis() < 250 || d.toMillis() > 500) {
        throw new IllegalArgumentException("demand interval must be 250..500 ms, got " + d);
      }
      this.demandInterval = d;
      return this;
    }

    public Builder broadcast(Broadcast b) {
      this.broadcast = b;
      return this;
    }

    /** This app instance's id (invalidation origin, demand reports); pid and random default. */
    public Builder appId(String id) {
      this.appId = id;
      return this;
    }

    /** Accept only signed notifications (the daemon's --auth-key-file; see MessageAuth). */
    public Builder auth(MessageAuth auth) {
      this.auth = auth;
      return this;
    }

    /**
     * Sign demand reports with this reporter key (the daemon's --demand-key-file; never its
     * signing key), or not at all with null. By default the key of
     * {@code HOTKEYD_DEMAND_KEY_FILE} or {@code HOTKEYD_DEMAND_KEY}, unsigned when neither is set.
     */
    public Builder demandAuth(MessageAuth reporterKey) {
      this.demandAuth = reporterKey;
      this.demandAuthSet = true;
      return this;
    }

    /**
     * {@link Consistency#AVAILABLE} (default) or {@link Consistency#STRICT}: whether a copy
     * is served while the daemon's watch cannot vouch for it (docs/consistency.md).
     */
    public Builder consistency(Consistency c) {
      this.consistency = java.util.Objects.requireNonNull(c, "consistency");
      return this;
    }

    public HotCache build() {
      return new HotCache(this);
    }
  }

  private static String defaultAppId() {
    return ManagementFactory.getRuntimeMXBean().getPid() + "-"
        + UUID.randomUUID().toString().substring(0, 8);
  }

  // --------------------------------------------------------------- lifecycle

  /**
   * Start the subscriber (if owned) and the demand reports; wait for the bootstrap, at most
   * the builder's {@code startTimeout} (spec/failure.md, start_redis_down).
   *
   * @throws HotkeydException Redis down or silent for that long; the subscriber it owns is
   *     stopped again
   */
  public HotCache start() {
    return start(startTimeout);
  }

  public synchronized HotCache start(Duration timeout) {
    if (demandTimer != null) {
      return this;
    }
    subscriber.start();
    try {
      if (!subscriber.awaitReady(timeout.toMillis(), TimeUnit.MILLISECONDS)) {
        if (ownsSubscriber) {
          subscriber.close(); // nothing keeps retrying behind a failed start
        }
        throw new HotkeydException(
            "hot-key subscriber not ready after " + timeout + " (is Redis up?)");
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new HotkeydException("interrupted while starting", e);
    }
    demandTimer = Executors.newSingleThreadScheduledExecutor(r -> {
      Thread t = new Thread(r, "hotkeyd-demand");
      t.setDaemon(true);
      return t;
    });
    demandTimer.scheduleAtFixedRate(this::reportDemandSafely, demandIntervalMillis,
        demandIntervalMillis, TimeUnit.MILLISECONDS);
    return this;
  }

  /** Stop what this cache owns (not the Jedis client it was given); sends a last report. */
  @Override
  public synchronized void close() {
    if (closed) {
      return;
    }
    closed = true;
    if (demandTimer != null) {
      demandTimer.shutdownNow();
      try {
        demandTimer.awaitTermination(1, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      reportDemandSafely();
    }
    if (ownsSubscriber) {
      subscriber.close();
    }
  }

  public CacheStats stats() {
    return stats;
  }

  public HotSet hotset() {
    return hotset;
  }

  public Subscriber subscriber() {
    return subscriber;
  }

  /** This instance's id (the origin of its invalidations, the app of its demand reports). */
  public String appId() {
    return origin;
  }

  /** Entries cached locally now. */
  public long localSize() {
    return local.estimatedSize();
  }

  /** Estimated bytes held locally (each entry counts at least maxBytes / maxEntries). */
  public long localWeight() {
    return local.weight();
  }

  // ------------------------------------------------------------------- reads

  /** GET; served locally while the key is hot. */
  public String get(String key) {
    KeyId id = new KeyId(Keys.utf8(key), db);
    HotItem item = hot.get(id);
    if (item == null) {
      return jedis.get(key);
    }
    LocalCache.Entry f = item.fastText;
    if (f != null && gate.quiet()) {
      long now = clock.nanoTime();
      if (f.expiresNanos() - now > 0 && item.expiresNanos - now > 0) {
        local.fastHit(item, GET_S, id);
        return (String) f.value();
      }
    }
    return hotRead(item, new LocalCache.CacheKey(GET_S, id, null), () -> jedis.get(key));
  }

  /** GET of a binary key; served locally while the key is hot. */
  public byte[] get(byte[] key) {
    KeyId id = new KeyId(key, db);
    HotItem item = hot.get(id);
    if (item == null) {
      return jedis.get(key);
    }
    LocalCache.Entry f = item.fastBytes;
    if (f != null && gate.quiet()) {
      long now = clock.nanoTime();
      if (f.expiresNanos() - now > 0 && item.expiresNanos - now > 0) {
        local.fastHit(item, GET_B, id);
        return (byte[]) f.value();
      }
    }
    return hotRead(item, new LocalCache.CacheKey(GET_B, id, null), () -> jedis.get(key));
  }

  /** HGET; served locally while the key is hot. */
  public String hget(String key, String field) {
    KeyId id = new KeyId(Keys.utf8(key), db);
    HotItem item = hot.get(id);
    if (item == null) {
      return jedis.hget(key, field);
    }
    return hotRead(item, new LocalCache.CacheKey(HGET_S, id, field), () -> jedis.hget(key, field));
  }

  public byte[] hget(byte[] key, byte[] field) {
    KeyId id = new KeyId(key, db);
    HotItem item = hot.get(id);
    if (item == null) {
      return jedis.hget(key, field);
    }
    return hotRead(item, new LocalCache.CacheKey(HGET_B, id, new KeyId(field, 0)),
        () -> jedis.hget(key, field));
  }

  /** HGETALL; served locally while the key is hot (an unmodifiable map). */
  public Map<String, String> hgetAll(String key) {
    KeyId id = new KeyId(Keys.utf8(key), db);
    HotItem item = hot.get(id);
    if (item == null) {
      return jedis.hgetAll(key);
    }
    return hotRead(item, new LocalCache.CacheKey(HGETALL_S, id, null),
        () -> Map.copyOf(jedis.hgetAll(key)));
  }

  public Map<byte[], byte[]> hgetAll(byte[] key) {
    KeyId id = new KeyId(key, db);
    HotItem item = hot.get(id);
    if (item == null) {
      return jedis.hgetAll(key);
    }
    return hotRead(item, new LocalCache.CacheKey(HGETALL_B, id, null),
        () -> java.util.Collections.unmodifiableMap(jedis.hgetAll(key)));
  }

  /** MGET; hot keys come from the local cache, the rest in one MGET. */
  public List<String> mget(String... keys) {
    List<KeyId> ids = new ArrayList<>(keys.length);
    for (String k : keys) {
      ids.add(new KeyId(Keys.utf8(k), db));
    }
    return mgetImpl(ids, GET_S, idx -> jedis.mget(select(keys, idx, new String[0])));
  }

  public List<byte[]> mget(byte[]... keys) {
    List<KeyId> ids = new ArrayList<>(keys.length);
    for (byte[] k : keys) {
      ids.add(new KeyId(k, db));
    }
    return mgetImpl(ids, GET_B, idx -> jedis.mget(select(keys, idx, new byte[0][])));
  }

  /**
   * {@code loader.get()} (e.g. a database read) cached while {@code key} is hot, single-flight.
   * Invalidate it after the underlying data changes with {@link #invalidate}.
   */
  public <T> T cached(Object key, Supplier<T> loader) {
    KeyId id = new KeyId(Keys.toBytes(key), db);
    HotItem item = hot.get(id);
    if (item == null) {
      return loader.get();
    }
    return hotRead(item, new LocalCache.CacheKey(CACHED, id, null), loader, false);
  }

  private <T> T hotRead(HotItem item, LocalCache.CacheKey ck, Supplier<T> read) {
    return hotRead(item, ck, read, true);
  }

  private <T> T hotRead(HotItem item, LocalCache.CacheKey ck, Supplier<T> read, boolean watched) {
    long now = clock.nanoTime();
    if (item.expiresNanos - now <= 0) {
      return read.get(); // announced, but its TTL ran out: cold
    }
    if (!watched) {
      gate.settle(ck.id(), now);
    } else if (!gate.quiet()) {
      if (gate.admit(ck, now)) {
        LocalCache.Entry e = local.fresh(ck, now);
        if (e != null) {
          item.localReads.increment();
          @SuppressWarnings("unchecked")
          T v = (T) e.value();
          return v;
        }
      }
      if (!gate.beforeFetch(ck, now)) {
        return read.get(); // strict, and the watch does not vouch: from Redis, not cached
      }
    }
    return local.load(ck, read, ttlNanos(item), item.localReads, now);
  }

  private interface IndexedRead<T> {
    List<T> read(int[] idx);
  }

  /**
   * MGET with the single-flight of {@link #get}: a hot key without a fresh copy is read here
   * only if no other caller (a {@code get} or another {@code mget}) is loading it; otherwise
   * its stale copy is served (within {@code staleFor}) or the other caller's value awaited
   * (up to {@code waitTimeout}, after this call's own MGET). Cold keys and the keys this call
   * leads go in one MGET.
   */
  @SuppressWarnings("unchecked")
  private <T> List<T> mgetImpl(List<KeyId> ids, char kind, IndexedRead<T> read) {
    int n = ids.size();
    Object[] out = new Object[n];
    int[] need = new int[n];
    int nNeed = 0;
    long now = clock.nanoTime();
    HotItem[] items = new HotItem[n];
    LocalCache.CacheKey[] keys = new LocalCache.CacheKey[n];
    LocalCache.Flight[] led = new LocalCache.Flight[n];
    LocalCache.Flight[] awaited = null;
    for (int i = 0; i < n; i++) {
      HotItem item = hot.get(ids.get(i));
      if (item != null && item.expiresNanos - now > 0) {
        LocalCache.CacheKey ck = new LocalCache.CacheKey(kind, ids.get(i), null);
        boolean quiet = gate.quiet();
        LocalCache.Entry e = quiet || gate.admit(ck, now) ? local.fresh(ck, now) : null;
        if (e == null && !quiet && !gate.beforeFetch(ck, now)) {
          need[nNeed++] = i; // strict, unwatched: from Redis, not cached
          continue;
        }
        if (e == null) {
          LocalCache.Begun b = local.begin(ck);
          if (b.leads()) {
            items[i] = item;
            keys[i] = ck;
            led[i] = b.flight();
          } else if ((e = local.stale(ck, now)) == null) {
            if (awaited == null) {
              awaited = new LocalCache.Flight[n];
            }
            awaited[i] = b.flight();
            items[i] = item;
            continue;
          }
        }
        if (e != null) {
          item.localReads.increment();
          out[i] = e.value();
          continue;
        }
      }
      need[nNeed++] = i;
    }
    if (nNeed > 0) {
      readInto(out, Arrays.copyOf(need, nNeed), read, items, keys, led);
    }
    if (awaited != null) {
      // Our own flights are done: waiting now cannot deadlock with another batch.
      nNeed = 0;
      for (int i = 0; i < n; i++) {
        if (awaited[i] != null) {
          Object v = local.await(awaited[i]);
          if (v == LocalCache.NO_VALUE) {
            need[nNeed++] = i; // the leader failed or is too slow: read through, uncached
          } else {
            items[i].localReads.increment();
            out[i] = v;
          }
        }
      }
      if (nNeed > 0) {
        readInto(out, Arrays.copyOf(need, nNeed), read, items, keys, new LocalCache.Flight[n]);
      }
    }
    List<T> result = new ArrayList<>(n);
    for (Object o : out) {
      result.add((T) o);
    }
    return result;
  }

  /** One MGET of {@code idx} into {@code out}, finishing (or failing) the flights led there. */
  private <T> void readInto(Object[] out, int[] idx, IndexedRead<T> read, HotItem[] items,
      LocalCache.CacheKey[] keys, LocalCache.Flight[] led) {
    List<T> values;
    try {
      values = read.read(idx);
    } catch (RuntimeException | Error ex) {
      for (int i : idx) {
        if (led[i] != null) {
          local.fail(keys[i], led[i], ex);
        }
      }
      throw ex;
    }
    for (int j = 0; j < idx.length; j++) {
      int i = idx[j];
      out[i] = values.get(j);
      if (led[i] != null) {
        local.finish(keys[i], led[i], values.get(j), ttlNanos(items[i]));
      }
    }
  }

  private static <K> K[] select(K[] keys, int[] idx, K[] empty) {
    K[] sel = Arrays.copyOf(empty, idx.length);
    for (int j = 0; j < idx.length; j++) {
      sel[j] = keys[idx[j]];
    }
    return sel;
  }

  private long ttlNanos(HotItem item) {
    long ttl = item.entry.ttlMs() * 1_000_000L;
    return maxTtlNanos == null ? ttl : Math.min(ttl, maxTtlNanos);
  }

  // ------------------------------------------------------------------ writes

  public String set(String key, String value) {
    return write(p -> p.set(key, value), () -> jedis.set(key, value), Keys.utf8(key));
  }

  public String set(String key, String value, SetParams params) {
    return write(p -> p.set(key, value, params), () -> jedis.set(key, value, params), Keys.utf8(key));
  }

  public String set(byte[] key, byte[] value) {
    return write(p -> p.set(key, value), () -> jedis.set(key, value), key);
  }

  public long del(String... keys) {
    return write(p -> p.del(keys), () -> jedis.del(keys), utf8All(keys));
  }

  public long del(byte[]... keys) {
    return write(p -> p.del(keys), () -> jedis.del(keys), keys);
  }

  public long incrBy(String key, long amount) {
    return write(p -> p.incrBy(key, amount), () -> jedis.incrBy(key, amount), Keys.utf8(key));
  }

  public long hset(String key, String field, String value) {
    return write(p -> p.hset(key, field, value), () -> jedis.hset(key, field, value), Keys.utf8(key));
  }

  public long hset(String key, Map<String, String> hash) {
    return write(p -> p.hset(key, hash), () -> jedis.hset(key, hash), Keys.utf8(key));
  }

  public long hdel(String key, String... fields) {
    return write(p -> p.hdel(key, fields), () -> jedis.hdel(key, fields), Keys.utf8(key));
  }

  public long expire(String key, long seconds) {
    return write(p -> p.expire(key, seconds), () -> jedis.expire(key, seconds), Keys.utf8(key));
  }

  /** Drop {@code keys} here and broadcast their invalidation (e.g. after a database write). */
  public void invalidate(Object... keys) {
    byte[][] kbs = new byte[keys.length][];
    for (int i = 0; i < keys.length; i++) {
      kbs[i] = Keys.toBytes(keys[i]);
    }
    try {
      publishInvalidation(kbs);
    } finally {
      dropLocal(kbs);
    }
  }

  /**
   * Run a write, then publish its invalidation: in one round trip (a pipeline) on a single
   * node, in two on a Cluster (PUBLISH has no key to route a cluster pipeline by).
   */
  private <T> T write(Function<Pipeline, Response<T>> piped, Supplier<T> direct, byte[]... keys) {
    boolean publish = broadcast == Broadcast.ALWAYS;
    if (!publish) {
      for (byte[] k : keys) {
        KeyId id = new KeyId(k, db);
        publish |= hot.containsKey(id) || local.contains(id);
      }
    }
    try {
      if (publish && !(jedis instanceof JedisCluster)) {
        Object pipe = jedis.pipelined();
        if (pipe instanceof Pipeline p) {
          try (p) {
            Response<T> r = piped.apply(p);
            p.sendCommand(namespace.sharded() ? Protocol.Command.SPUBLISH : Protocol.Command.PUBLISH,
                invalidateChannelBytes,
                invalidation(keys));
            p.sync();
            return r.get();
          }
        }
        if (pipe instanceof AutoCloseable c) {
          c.close();
        }
      }
      T result = direct.get();
      if (publish) {
        publishInvalidation(keys);
      }
      return result;
    } catch (Exception e) {
      if (e instanceof RuntimeException re) {
        throw re;
      }
      throw new HotkeydException("write failed", e);
    } finally {
      dropLocal(keys); // also when the write failed: its effect is unknown
    }
  }

  private void publishInvalidation(byte[][] keys) {
    publish(invalidateChannelBytes, invalidation(keys));
  }

  /** The invalidation of {@code keys}, signed with auth (apps with the key drop unsigned ones). */
  private byte[] invalidation(byte[][] keys) {
    byte[] p = Invalidation.encode(origin, Arrays.asList(keys));
    return auth == null ? p : auth.sign(p);
  }

  /** What the daemon's watch did for this cache, and the invalidation intake's counters. */
  public WatchStats watchStats() {
    return gate.stats();
  }

  /** AVAILABLE or STRICT. */
  public Consistency consistency() {
    return gate.strict ? Consistency.STRICT : Consistency.AVAILABLE;
  }

  /** PUBLISH, or SPUBLISH when the deployment uses sharded pub/sub. */
  private void publish(byte[] channel, byte[] payload) {
    if (!namespace.sharded() && jedis instanceof JedisCluster cluster) {
      // On the primary that owns the invalidation channel's slot, where every SDK subscribes:
      // Jedis sends a PUBLISH to any node, and from there it crosses the cluster bus (Nagle
      // on Redis 7.0's outgoing links: up to 40 ms more).
      try (Connection conn = cluster.getConnectionFromSlot(JedisClusterCRC16.getSlot(invalidateChannelBytes))) {
        conn.executeCommand(new CommandObject<>(
            new CommandArguments(Protocol.Command.PUBLISH).add(channel).add(payload), BuilderFactory.LONG));
      } catch (JedisConnectionException e) {
        jedis.publish(channel, payload); // the home node failed: any node, with Jedis' retries
      }
    } else if (!namespace.sharded()) {
      jedis.publish(channel, payload);
    } else if (jedis instanceof JedisCluster cluster) {
      cluster.spublish(channel, payload); // to the node serving the channel's slot
    } else {
      jedis.sendCommand(Protocol.Command.SPUBLISH, channel, payload);
    }
  }

  private void dropLocal(byte[][] keys) {
    for (byte[] k : keys) {
      local.invalidate(new KeyId(k, db));
    }
  }

  private static byte[][] utf8All(String[] keys) {
    byte[][] out = new byte[keys.length][];
    for (int i = 0; i < keys.length; i++) {
      out[i] = Keys.utf8(keys[i]);
    }
    return out;
  }

  // ----------------------------------------------------------- invalidations

  private void onInvalidation(byte[] payload) {
    if (!gate.onInvalidation(payload)) {
      stats.badInvalidations.increment();
      if (Long.bitCount(stats.badInvalidations.sum()) == 1) {
        LOG.warn("dropped an oversized, unsigned or malformed invalidation");
      }
    }
  }

  // ------------------------------------------------------------------ demand

  /** Publish one demand report per daemon instance for the reads served since the last one. */
  public void reportDemand() {
    Map<String, Map<KeyId, Long>> byInstance = new HashMap<>();
    hot.forEach((id, item) -> {
      long n = item.localReads.sumThenReset();
      if (n > 0 && item.owner != null) {
        byInstance.computeIfAbsent(item.owner, k -> new HashMap<>()).merge(id, n, Long::sum);
      }
    });
    if (byInstance.isEmpty()) {
      return;
    }
    int total = byInstance.size();
    long first = demandSeq.getAndAdd(total);
    double ts = clock.currentTimeMillis() / 1000.0;
    int maxBytes = Demand.MAX_BYTES - (demandAuth != null ? MessageAuth.SUFFIX_LEN : 0);
    for (Demand.Report r :
        Demand.encode(origin, first, ts, (int) demandIntervalMillis, byInstance, maxBytes)) {
      byte[] payload = demandAuth != null ? demandAuth.sign(r.payload()) : r.payload();
      publish(namespace.demandChannel(r.instance()).getBytes(StandardCharsets.UTF_8), payload);
      stats.demandMessages.increment();
      stats.demandReads.add(r.reads());
      stats.demandDropped.add(r.dropped());
    }
  }

  private void reportDemandSafely() {
    try {
      reportDemand();
    } catch (RuntimeException e) {
      LOG.warn("demand report failed: {}", e.getMessage());
    }
  }
}
