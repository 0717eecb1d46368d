package io.hotkeyd;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import redis.clients.jedis.BinaryJedisPubSub;
import redis.clients.jedis.BinaryJedisShardedPubSub;
import redis.clients.jedis.Connection;
import redis.clients.jedis.JedisCluster;
import redis.clients.jedis.JedisPooled;
import redis.clients.jedis.JedisPubSubBase;
import redis.clients.jedis.UnifiedJedis;
import redis.clients.jedis.exceptions.JedisException;
import redis.clients.jedis.util.JedisClusterCRC16;

/**
 * Keeps a {@link HotSet} current from the daemon's channel, on a background thread.
 *
 * <p>Start-up order closes the race between snapshot and stream: <b>subscribe first</b>, wait
 * for the confirmation, <b>then</b> read the snapshots; messages published meanwhile wait in
 * the socket and are applied afterwards, where every one with {@code seq <=} the snapshot's
 * is stale. The same order runs after every reconnect (with backoff), and reset listeners
 * (local caches) drop everything then. A gap in one instance's seq triggers a resync of that
 * instance from its snapshot; keys expire when their TTL runs out.
 *
 * <p>A subscription silent for {@code healthInterval} gets a PING on its connection; no reply
 * within as long again means the connection is half-open (a NAT or proxy dropped it without
 * a reset): it is closed and replaced, counted in {@link SubscriberStats#halfOpen}. Redis
 * refusing the credentials or the ACL (WRONGPASS, NOAUTH, NOPERM) stops the subscriber with a
 * {@link RedisAccessException} ({@link #error()}, and {@link #awaitReady} throws it) instead
 * of reconnecting forever.
 *
 * <p>With a sharded {@link Namespace} (the daemon's {@code --sharded-pubsub}) each channel has
 * its own SSUBSCRIBE connection and thread (the channels live in different slots): events,
 * invalidations and the watch heartbeats (strict mode follows them as over plain pub/sub); a
 * resubscribed invalidation channel resets the caches as a reconnect does. Sharded
 * subscriptions are not PINGed.
 *
 * <pre>{@code
 * try (Subscriber sub = Subscriber.builder(jedis).build().start()) {
 *   sub.hotset().addListener(new HotListener() { ... });
 * }
 * }</pre>
 */
public final class Subscriber extends SubscriberCore implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(Subscriber.class);

  private final UnifiedJedis jedis;
  private final long expireIntervalMillis;
  private final long resyncIntervalMillis;
  private final long healthIntervalNanos;
  private final Backoff backoff;
  private final double backoffBase;
  private final double backoffCap;
  private final boolean sharded;
  private final java.util.Set<ShardedPubSub> shardedSubs = java.util.concurrent.ConcurrentHashMap.newKeySet();
  private Thread invalidationThread;
  private Thread watchThread;
  private final AtomicBoolean stopped = new AtomicBoolean();
  private final CountDownLatch ready = new CountDownLatch(1);
  private final CountDownLatch stopLatch = new CountDownLatch(1);
  private final byte[] eventsChannel;
  private final byte[] invalidateChannel;
  private final byte[] watchChannel;
  private volatile PubSub pubsub;
  private volatile boolean connected;
  private volatile RedisAccessException error;
  private Thread thread;
  private ScheduledExecutorService timer;
  private ScheduledExecutorService health;

  private Subscriber(Builder b) {
    super(b.hotset != null ? b.hotset : new HotSet(b.clock, b.maxKeys), b.namespace,
        redisSnapshots(b.jedis, b.namespace), b.staleAfterSeconds);
    this.jedis = b.jedis;
    this.expireIntervalMillis = b.expireIntervalMillis;
    this.resyncIntervalMillis = b.resyncIntervalMillis;
    this.healthIntervalNanos = TimeUnit.MILLISECONDS.toNanos(b.healthIntervalMillis);
    this.backoff = new Backoff(b.backoffBase, b.backoffCap);
    this.backoffBase = b.backoffBase;
    this.backoffCap = b.backoffCap;
    this.sharded = namespace.sharded();
    if (sharded && !(jedis instanceof JedisCluster || jedis instanceof JedisPooled)) {
      throw new IllegalArgumentException(
          "sharded pub/sub needs a JedisPooled or a JedisCluster, not " + jedis.getClass().getName());
    }
    this.eventsChannel = namespace.channel().getBytes(StandardCharsets.UTF_8);
    this.invalidateChannel = namespace.invalidateChannel().getBytes(StandardCharsets.UTF_8);
    this.watchChannel = namespace.watchChannel().getBytes(StandardCharsets.UTF_8);
    setAuth(b.auth);
  }

  public static Builder builder(UnifiedJedis jedis) {
    return new Builder(jedis);
  }

  /** Options; {@link #build()} makes a stopped subscriber, {@link Subscriber#start()} runs it. */
  public static final class Builder {
    private final UnifiedJedis jedis;
    private Namespace namespace = Namespace.DEFAULT;
    private Clock clock = Clock.SYSTEM;
    private HotSet hotset;
    private int maxKeys = Limits.HOTSET_KEYS_MAX;
    private double staleAfterSeconds = Limits.INSTANCE_MAX_AGE_S;
    private long expireIntervalMillis = 50;
    private long resyncIntervalMillis = 60_000;
    private long healthIntervalMillis = 5_000;
    private MessageAuth auth;
    private double backoffBase = 0.05;
    private double backoffCap = 5.0;

    private Builder(UnifiedJedis jedis) {
      this.jedis = jedis;
    }

    public Builder namespace(Namespace ns) {
      this.namespace = ns;
      return this;
    }

    public Builder clock(Clock clock) {
      this.clock = clock;
      return this;
    }

    /** Feed this hot set (its clock wins over {@link #clock}). */
    public Builder hotset(HotSet hotset) {
      this.hotset = hotset;
      return this;
    }

    public Builder maxKeys(int maxKeys) {
      this.maxKeys = maxKeys;
      return this;
    }

    /** Instances whose heartbeat is older than this are ignored at bootstrap (seconds). */
    public Builder staleAfterSeconds(double s) {
      this.staleAfterSeconds = s;
      return this;
    }

    public Builder expireIntervalMillis(long ms) {
      this.expireIntervalMillis = ms;
      return this;
    }

    /** Periodic full resync from the snapshots; 0 disables it. */
    public Builder resyncIntervalMillis(long ms) {
      this.resyncIntervalMillis = ms;
      return this;
    }

    /**
     * After this long without a message the subscription is PINGed; no reply within as long
     * again means a half-open connection: it is closed and replaced (default 5 s; 0 disables).
     */
    public Builder healthIntervalMillis(long ms) {
      if (ms < 0) {
        throw new IllegalArgumentException("healthIntervalMillis must be >= 0");
      }
      this.healthIntervalMillis = ms;
      return this;
    }

    /** Reconnect backoff: first delay and cap, in seconds. */
    public Builder backoff(double baseSeconds, double capSeconds) {
      this.backoffBase = baseSeconds;
      this.backoffCap = capSeconds;
      return this;
    }

    /** Accept only messages signed with these keys (see {@link MessageAuth}). */
    public Builder auth(MessageAuth auth) {
      this.auth = auth;
      return this;
    }

    public Subscriber build() {
      return new Subscriber(this);
    }
  }

  // -------------------------------------------------------------- lifecycle

  public synchronized Subscriber start() {
    if (thread != null) {
      return this;
    }
    timer = Executors.newSingleThreadScheduledExecutor(r -> {
      Thread t = new Thread(r, "hotkeyd-subscriber-timer");
      t.setDaemon(true);
      return t;
    });
    timer.scheduleWithFixedDelay(
        this::expireSafely, expireIntervalMillis, expireIntervalMillis, TimeUnit.MILLISECONDS);
    if (resyncIntervalMillis > 0) {
      timer.scheduleWithFixedDelay(
          this::periodicResync, resyncIntervalMillis, resyncIntervalMillis, TimeUnit.MILLISECONDS);
    }
    if (healthIntervalNanos > 0 && !sharded) {
      // A thread of its own: a PING write or a socket close must never delay expiry.
      health = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "hotkeyd-subscriber-health");
        t.setDaemon(true);
        return t;
      });
      long every = Math.max(1, Math.min(100, TimeUnit.NANOSECONDS.toMillis(healthIntervalNanos) / 4));
      health.scheduleWithFixedDelay(this::checkHealth, every, every, TimeUnit.MILLISECONDS);
    }
    // Last: the loop may stop the timers (Redis refused us) as soon as it runs.
    thread = new Thread(() -> run(true, backoff), "hotkeyd-subscriber");
    thread.setDaemon(true);
    thread.start();
    if (sharded) {
      Backoff own = new Backoff(backoffBase, backoffCap);
      invalidationThread = new Thread(() -> run(false, own), "hotkeyd-subscriber-invalidate");
      invalidationThread.setDaemon(true);
      invalidationThread.start();
      // The heartbeats of the daemon's watch: a channel of its own slot, so a third
      // SSUBSCRIBE (without it strict mode never served a copy with sharded pub/sub).
      Backoff beats = new Backoff(backoffBase, backoffCap);
      watchThread = new Thread(() -> runSharded(watchChannel, beats), "hotkeyd-subscriber-watch");
      watchThread.setDaemon(true);
      watchThread.start();
    }
    return this;
  }

  /**
   * Wait until the first bootstrap is done; false on timeout.
   *
   * @throws RedisAccessException if Redis refused the credentials or the ACL (the subscriber
   *     has stopped)
   */
  public boolean awaitReady(long timeout, TimeUnit unit) throws InterruptedException {
    boolean done = ready.await(timeout, unit);
    RedisAccessException e = error;
    if (e != null) {
      throw e;
    }
    return done;
  }

  /** Why the subscriber stopped on its own (Redis refused it), or null while it runs. */
  public RedisAccessException error() {
    return error;
  }

  public boolean connected() {
    return connected;
  }

  @Override
  public void close() {
    if (!stopped.compareAndSet(false, true)) {
      return;
    }
    stopLatch.countDown();
    PubSub ps = pubsub;
    if (ps != null) {
      try {
        ps.unsubscribe();
      } catch (RuntimeException e) {
        LOG.debug("unsubscribe on close failed", e);
      }
    }
    for (ShardedPubSub sps : shardedSubs) {
      try {
        sps.sunsubscribe();
      } catch (RuntimeException e) {
        LOG.debug("sunsubscribe on close failed", e);
      }
    }
    if (timer != null) {
      timer.shutdownNow();
    }
    if (health != null) {
      health.shutdownNow();
    }
    for (Thread t : new Thread[] {thread, invalidationThread, watchThread}) {
      if (t != null) {
        try {
          t.join(2000);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
    }
    connected = false;
  }

  // ------------------------------------------------------------------ resync

  /** The snapshots in Redis: the instance registry, and one MGET for the snapshot keys. */
  private static SnapshotStore redisSnapshots(UnifiedJedis jedis, Namespace namespace) {
    return new SnapshotStore() {
      @Override
      public List<String> live(double sinceSeconds) {
        return new ArrayList<>(
            jedis.zrangeByScore(namespace.instances(), sinceSeconds, Double.POSITIVE_INFINITY));
      }

      @Override
      public List<byte[]> get(List<String> ids) {
        byte[][] keys = new byte[ids.size()][];
        for (int i = 0; i < keys.length; i++) {
          keys[i] = namespace.snapshot(ids.get(i)).getBytes(StandardCharsets.UTF_8);
        }
        // One MGET: the snapshot keys share the {prefix} hash tag (one cluster slot).
        return jedis.mget(keys);
      }
    };
  }

  // -------------------------------------------------------------------- loop

  /**
   * One subscription loop: both channels on one connection, or (sharded) one channel, since
   * each sharded channel lives on the node serving its slot and one SSUBSCRIBE cannot name
   * channels of different slots. The events loop owns the bootstrap.
   */
  private void run(boolean events, Backoff backoff) {
    while (!stopped.get()) {
      PubSub ps = null;
      ShardedPubSub sps = null;
      RuntimeException failure = null;
      try {
        if (!sharded) {
          ps = new PubSub();
          pubsub = ps;
          // blocks until unsubscribed (with sharded pub/sub the heartbeats have a thread of
          // their own: runSharded)
          subscribe(ps);
        } else {
          sps = new ShardedPubSub(events, backoff);
          shardedSubs.add(sps);
          if (!stopped.get()) {
            ssubscribe(sps, events ? eventsChannel : invalidateChannel); // blocks likewise
          }
        }
      } catch (RuntimeException e) {
        failure = e;
      } finally {
        if (events) {
          connected = false;
        }
        pubsub = null;
        if (sps != null) {
          shardedSubs.remove(sps);
        }
      }
      RuntimeException bootstrapFailure = ps != null ? ps.bootstrapFailure
          : sps != null ? sps.bootstrapFailure : null;
      Throwable refusal = RedisAccessException.refusal(bootstrapFailure != null ? bootstrapFailure : failure);
      if (refusal != null && !stopped.get()) {
        stop(refusal);
        break;
      }
      if (stopped.get()) {
        break;
      }
      // The subscription is gone and may miss invalidations: drop every local copy now,
      // not only once resubscribed (spec/failure.md, subscription_lost).
      invalidationsResubscribed();
      stats().lost.incrementAndGet();
      if (ps != null && ps.dead) {
        LOG.warn("hotkeyd subscription silent and no reply to PING within {} ms: connection "
            + "presumed half-open; reconnecting", TimeUnit.NANOSECONDS.toMillis(healthIntervalNanos));
      } else if (failure instanceof JedisException || failure instanceof IllegalStateException) {
        LOG.warn("hotkeyd subscription lost ({}); reconnecting", failure.getMessage());
      } else if (failure != null) {
        LOG.error("hotkeyd subscriber failed; restarting", failure);
      }
      try {
        stopLatch.await(backoff.nextDelayMillis(), TimeUnit.MILLISECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        break;
      }
    }
  }

  /**
   * The heartbeat subscription (sharded pub/sub): SSUBSCRIBE until stopped, reconnecting with
   * backoff. A gap only makes the heartbeats late, so strict mode reads Redis meanwhile: no
   * copy needs dropping here.
   */
  private void runSharded(byte[] channel, Backoff b) {
    while (!stopped.get()) {
      ShardedPubSub sps = new ShardedPubSub(false, b, true);
      shardedSubs.add(sps);
      RuntimeException failure = null;
      try {
        if (!stopped.get()) {
          ssubscribe(sps, channel); // blocks until unsubscribed or the connection fails
        }
      } catch (RuntimeException e) {
        failure = e;
      } finally {
        shardedSubs.remove(sps);
      }
      if (stopped.get()) {
        break;
      }
      Throwable refusal = RedisAccessException.refusal(failure);
      if (refusal != null) {
        LOG.warn("hotkeyd watch heartbeats refused ({}); strict mode reads Redis", refusal.getMessage());
      } else if (failure != null) {
        LOG.warn("hotkeyd watch subscription lost ({}); reconnecting", failure.getMessage());
      }
      try {
        stopLatch.await(b.nextDelayMillis(), TimeUnit.MILLISECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        break;
      }
    }
  }

  /** Redis refused us: record why, log it once, and stop (retrying cannot fix it). */
  private void stop(Throwable refusal) {
    error = new RedisAccessException("Redis refused the hotkeyd subscriber: " + refusal.getMessage()
        + " (check the password and the ACL: SUBSCRIBE on " + namespace.channel() + ", "
        + namespace.invalidateChannel() + " and " + namespace.watchChannel() + ", ZRANGEBYSCORE on " + namespace.instances() + ", MGET on the snapshots)",
        refusal);
    LOG.error("hotkeyd subscriber stopped: {}", error.getMessage());
    stopped.set(true);
    stopLatch.countDown();
    if (timer != null) {
      timer.shutdownNow();
    }
    if (health != null) {
      health.shutdownNow();
    }
    ready.countDown(); // awaitReady throws the error
  }

  /**
   * PING a subscription silent for the health interval; close it if the PING got no reply
   * within as long again (the blocked reader then fails and the loop reconnects).
   */
  private void checkHealth() {
    PubSub ps = pubsub;
    if (ps == null || ps.dead) {
      return;
    }
    Connection conn = connectionOf(ps);
    if (conn == null) {
      ps.heard(); // still connecting (the pool's own timeouts apply): the clock starts later
      return;
    }
    long now = System.nanoTime();
    long pinged = ps.pingedNanos;
    if (pinged != 0) {
      if (now - pinged > healthIntervalNanos) {
        ps.dead = true;
        stats.halfOpen.incrementAndGet();
        conn.disconnect(); // the blocked read fails; the loop logs it and reconnects
      }
    } else if (now - ps.heardNanos >= healthIntervalNanos) {
      ps.pingedNanos = now;
      try {
        ps.ping();
      } catch (RuntimeException e) {
        LOG.debug("PING on the subscription failed", e); // no reply: handled as above
      }
    }
  }

  /**
   * The connection under a subscription (null before it has one). Jedis keeps it private and
   * a blocked read cannot be interrupted, so closing a half-open one needs it; it is reached
   * by reflection, the one place this client does so.
   */
  private static Connection connectionOf(PubSub ps) {
    if (CLIENT_FIELD == null) {
      return null;
    }
    try {
      return (Connection) CLIENT_FIELD.get(ps);
    } catch (IllegalAccessException e) {
      return null;
    }
  }

  private static final java.lang.reflect.Field CLIENT_FIELD = clientField();

  private static java.lang.reflect.Field clientField() {
    try {
      java.lang.reflect.Field f = JedisPubSubBase.class.getDeclaredField("client");
      f.setAccessible(true);
      return f;
    } catch (ReflectiveOperationException | RuntimeException e) {
      LOG.error("this Jedis hides the subscription's connection: half-open detection is off", e);
      return null;
    }
  }

  /**
   * SUBSCRIBE to the three channels. On a Cluster, on the primary that owns the invalidation
   * channel's slot, where the daemon and the SDKs publish (Jedis would pick a random node:
   * a message published on another one crosses the cluster bus, whose links Redis 7.0 leaves
   * with Nagle's algorithm on, up to 40 ms later).
   */
  private void subscribe(PubSub ps) {
    if (jedis instanceof JedisCluster cluster) {
      try (Connection conn = cluster.getConnectionFromSlot(JedisClusterCRC16.getSlot(invalidateChannel))) {
        ps.proceed(conn, invalidateChannel, eventsChannel, watchChannel);
      }
    } else {
      jedis.subscribe(ps, eventsChannel, invalidateChannel, watchChannel);
    }
  }

  /** SSUBSCRIBE on the node serving the channel's slot (a Cluster) or on the one node. */
  private void ssubscribe(ShardedPubSub sps, byte[] channel) {
    if (jedis instanceof JedisCluster cluster) {
      cluster.ssubscribe(sps, channel);
    } else {
      try (Connection conn = ((JedisPooled) jedis).getPool().getResource()) {
        sps.proceed(conn, channel);
      }
    }
  }

  /** The start of a subscription: the events one bootstraps, the invalidation one resets caches. */
  private void confirmed(boolean events, Backoff b) {
    if (events) {
      bootstrap();
    } else {
      invalidationsResubscribed(); // invalidations may have been missed meanwhile
      b.reset();
    }
  }

  private void bootstrap() {
    onSubscribed();
    applySnapshots(readSnapshots(null));
    connected = true;
    backoff.reset();
    ready.countDown();
  }

  private void expireSafely() {
    try {
      hotset.expire();
    } catch (RuntimeException e) {
      LOG.error("hot-set expiry failed", e);
    }
  }

  private void periodicResync() {
    if (!connected) {
      return;
    }
    try {
      applySnapshots(readSnapshots(null));
    } catch (RuntimeException e) {
      LOG.warn("periodic resync failed: {}", e.getMessage());
    }
  }

  private final class PubSub extends BinaryJedisPubSub {
    private int confirmed;
    /** When the connection last said anything; when we PINGed it (0: no PING pending). */
    volatile long heardNanos = System.nanoTime();
    volatile long pingedNanos;
    /** Closed by the health check: no reply to PING. */
    volatile boolean dead;
    volatile RuntimeException bootstrapFailure;

    private void heard() {
      heardNanos = System.nanoTime();
      pingedNanos = 0;
    }

    @Override
    public void onPong(byte[] pattern) {
      heard();
    }

    @Override
    public void onSubscribe(byte[] channel, int subscribedChannels) {
      heard();
      if (++confirmed == 3) { // events, invalidate, watch
        bootstrapFailure = bootstrapOrFailure(true, backoff);
        if (bootstrapFailure != null) {
          unsubscribe();
        }
      }
    }

    @Override
    public void onMessage(byte[] channel, byte[] message) {
      heard();
      onData(channel, message);
    }
  }

  /** A sharded subscription to one channel (no PING: Jedis' sharded pub/sub has no pong). */
  private final class ShardedPubSub extends BinaryJedisShardedPubSub {
    private final boolean events;
    private final Backoff backoff;
    private final boolean watch; // the heartbeats: nothing to bootstrap or reset
    volatile RuntimeException bootstrapFailure;

    ShardedPubSub(boolean events, Backoff backoff) {
      this(events, backoff, false);
    }

    ShardedPubSub(boolean events, Backoff backoff, boolean watch) {
      this.events = events;
      this.backoff = backoff;
      this.watch = watch;
    }

    @Override
    public void onSSubscribe(byte[] channel, int subscribedChannels) {
      if (watch) {
        backoff.reset();
        return;
      }
      bootstrapFailure = bootstrapOrFailure(events, backoff);
      if (bootstrapFailure != null) {
        sunsubscribe();
      }
    }

    @Override
    public void onSMessage(byte[] channel, byte[] message) {
      onData(channel, message);
    }
  }

  /**
   * After a subscription is confirmed: null, or why it must be dropped (the snapshots could
   * not be read: reconnect with backoff, or stop if Redis refused us).
   */
  private RuntimeException bootstrapOrFailure(boolean events, Backoff b) {
    try {
      confirmed(events, b);
      return null;
    } catch (RuntimeException e) {
      if (RedisAccessException.refusal(e) == null) {
        LOG.warn("hotkeyd bootstrap failed ({}); reconnecting", e.getMessage());
      }
      return e;
    }
  }

  private void onData(byte[] channel, byte[] message) {
    if (Arrays.equals(channel, watchChannel)) {
      onHeartbeat(message);
      return;
    }
    if (!Arrays.equals(channel, eventsChannel)) {
      onInvalidation(message);
      return;
    }
    onEventMessage(message);
  }
}
