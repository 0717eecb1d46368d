package io.hotkeyd;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;
import redis.clients.jedis.util.JedisClusterCRC16;

/**
 * The app side of the daemon's watch (docs/consistency.md): heartbeat decoding, the leases
 * kept per (instance, node), the invalidation intake, and the gate a {@link HotCache} asks
 * before serving or fetching a hot key. The decisions are pinned by spec/vectors/watch.json
 * (WatchVectorsTest), the same in every SDK. Times are nanoseconds of the cache's clock.
 */
final class Watch {
  private Watch() {}

  static final long LEASE_NANOS = Limits.get("watch_lease_ms") * 1_000_000L;
  static final long KEY_INTERVAL_NANOS = Limits.get("invalidation_key_interval_ms") * 1_000_000L;
  static final int INVALIDATION_BYTES_MAX = (int) Limits.get("invalidation_bytes_max");
  static final int INVALIDATION_KEYS_MAX = (int) Limits.get("invalidation_keys_max");

  /** One decoded heartbeat; {@code slots} null: a plain node covering every key. */
  record Heartbeat(String instance, String node, long epoch, boolean up, long armed, double ts, int[][] slots) {
    boolean covers(int slot) {
      if (slots == null) {
        return true;
      }
      for (int[] r : slots) {
        if (r[0] <= slot && slot <= r[1]) {
          return true;
        }
      }
      return false;
    }
  }

  private static long nonNeg(JsonNode o, String name, Long dflt) {
    JsonNode v = o.get(name);
    if (v == null && dflt != null) {
      return dflt;
    }
    if (v == null || !v.isIntegralNumber() || !v.canConvertToLong() || v.asLong() < 0 || v.asLong() > Wire.MAX_SEQ) {
      throw new WireException("heartbeat " + name + " must be an integer in [0, seq_max]");
    }
    return v.asLong();
  }

  private static String name(JsonNode o, String n) {
    JsonNode v = o.get(n);
    if (v == null || !v.isTextual() || v.asText().isEmpty()
        || v.asText().codePointCount(0, v.asText().length()) > Limits.NAME_CHARS_MAX) {
      throw new WireException("heartbeat " + n + " must be a string of 1.." + Limits.NAME_CHARS_MAX + " characters");
    }
    return v.asText();
  }

  /** Validate one heartbeat (already verified when auth is on); throws WireException. */
  static Heartbeat decode(byte[] payload, double nowS) {
    JsonNode o = Wire.parse(payload, "heartbeat");
    JsonNode v = o.get("v");
    if (!o.isObject() || v == null || !v.isInt() || v.asInt() != 1) {
      throw new WireException("heartbeat is not a v1 object");
    }
    JsonNode ts = o.get("ts");
    if (ts == null || !ts.isNumber() || !Double.isFinite(ts.asDouble()) || ts.asDouble() < 0) {
      throw new WireException("heartbeat ts must be a finite number >= 0");
    }
    if (ts.asDouble() > nowS + Limits.CLOCK_SKEW_S_MAX) {
      throw new WireException("heartbeat ts is too far ahead of this clock");
    }
    JsonNode up = o.get("up");
    if (up == null || !up.isBoolean()) {
      throw new WireException("heartbeat up must be a boolean");
    }
    int[][] slots = null;
    if (o.has("slots")) {
      JsonNode s = o.get("slots");
      if (!s.isArray()) {
        throw new WireException("heartbeat slots must be a list");
      }
      slots = new int[s.size()][];
      for (int i = 0; i < s.size(); i++) {
        JsonNode r = s.get(i);
        if (!r.isArray() || r.size() != 2 || !r.get(0).isInt() || !r.get(1).isInt()
            || r.get(0).asInt() < 0 || r.get(0).asInt() > r.get(1).asInt() || r.get(1).asInt() > 16383) {
          throw new WireException("bad slot range");
        }
        slots[i] = new int[] {r.get(0).asInt(), r.get(1).asInt()};
      }
    }
    return new Heartbeat(name(o, "instance"), name(o, "node"), nonNeg(o, "epoch", null),
        up.asBoolean(), nonNeg(o, "armed", 0L), ts.asDouble(), slots);
  }

  /** What a copy was fetched under: the instance and each covering node's epoch. */
  record Guard(String instance, List<Map.Entry<String, Long>> nodes) {}

  /** The latest heartbeat per (instance, node). */
  static final class Leases {
    private record Heard(Heartbeat hb, long at) {}

    final long leaseNanos;
    private final Map<String, Heard> latest = new ConcurrentHashMap<>();
    volatile boolean clustered;
    final AtomicLong heartbeats = new AtomicLong();
    final AtomicLong epochChanges = new AtomicLong();

    Leases(long leaseNanos) {
      this.leaseNanos = leaseNanos;
    }

    boolean seen() {
      return !latest.isEmpty();
    }

    /** Record a heartbeat; true when the node's epoch changed (drop every copy). */
    synchronized boolean heard(Heartbeat hb, long at) {
      heartbeats.incrementAndGet();
      if (hb.slots() != null) {
        clustered = true;
      }
      Heard prev = latest.put(hb.instance() + "\u0000" + hb.node(), new Heard(hb, at));
      if (prev != null && prev.hb().epoch() != hb.epoch()) {
        epochChanges.incrementAndGet();
        return true;
      }
      return false;
    }

    void forget() {
      latest.clear();
    }

    /** The guard of a read in {@code slot} beginning at {@code now}; null when unwatched. */
    Guard guard(int slot, List<Map.Entry<String, Long>> hot, long now) {
      for (Map.Entry<String, Long> h : hot) {
        List<Map.Entry<String, Long>> nodes = new ArrayList<>();
        boolean ok = true;
        for (Heard e : latest.values()) {
          Heartbeat hb = e.hb();
          if (!hb.instance().equals(h.getKey()) || !hb.covers(slot)) {
            continue;
          }
          if (!hb.up() || now - e.at() >= leaseNanos || hb.armed() < h.getValue()) {
            ok = false;
            break;
          }
          nodes.add(Map.entry(hb.node(), hb.epoch()));
        }
        if (ok && !nodes.isEmpty()) {
          nodes.sort(Map.Entry.comparingByKey());
          return new Guard(h.getKey(), List.copyOf(nodes));
        }
      }
      return null;
    }

    /** Every node of the guard is fresh, up, still covers the slot and carries its epoch. */
    boolean serves(Guard g, int slot, long now) {
      if (g == null) {
        return false;
      }
      for (Map.Entry<String, Long> n : g.nodes()) {
        Heard e = latest.get(g.instance() + "\u0000" + n.getKey());
        if (e == null || !e.hb().up() || e.hb().epoch() != n.getValue()
            || now - e.at() >= leaseNanos || !e.hb().covers(slot)) {
          return false;
        }
      }
      return true;
    }
  }

  /** Size cap, signature, per-key interval; early drops are deferred, never lost. */
  static final class Intake {
    private final MessageAuth auth;
    private final long intervalNanos;
    private final Map<KeyId, Long> last = new HashMap<>();
    final Map<KeyId, Long> pending = new ConcurrentHashMap<>();
    final AtomicLong applied = new AtomicLong();
    final AtomicLong deferred = new AtomicLong();
    final AtomicLong oversized = new AtomicLong();
    final AtomicLong unsigned = new AtomicLong();
    final AtomicLong bad = new AtomicLong();

    Intake(MessageAuth auth, long intervalNanos) {
      this.auth = auth;
      this.intervalNanos = intervalNanos;
    }

    /** The keys whose copies drop now; null when the message was dropped (counted). */
    synchronized List<byte[]> receive(byte[] payload, long now) {
      if (payload.length > INVALIDATION_BYTES_MAX) {
        oversized.incrementAndGet();
        return null;
      }
      if (auth != null) {
        byte[] body = auth.verify(payload);
        if (body == null) {
          unsigned.incrementAndGet();
          return null;
        }
        payload = body;
      }
      List<byte[]> keys;
      try {
        keys = Invalidation.decode(payload).keys();
      } catch (WireException e) {
        bad.incrementAndGet();
        return null;
      }
      if (keys.size() > INVALIDATION_KEYS_MAX) {
        oversized.incrementAndGet();
        return null;
      }
      List<byte[]> out = new ArrayList<>(keys.size());
      for (byte[] k : keys) {
        if (arrive(new KeyId(k, 0), now)) {
          out.add(k);
        }
      }
      return out;
    }

    private boolean arrive(KeyId k, long now) {
      Long at = pending.get(k);
      if (at != null) {
        if (at - now > 0) {
          return false; // coalesced into the deferred drop
        }
        pending.remove(k);
        applied(k, now);
        return true;
      }
      Long l = last.get(k);
      if (l == null || now - l >= intervalNanos) {
        applied(k, now);
        return true;
      }
      pending.put(k, l + intervalNanos);
      deferred.incrementAndGet();
      return false;
    }

    /** At a read of {@code k} (db 0 identity): true when its deferred drop applies now. */
    synchronized boolean due(KeyId k, long now) {
      Long at = pending.get(k);
      if (at == null || at - now > 0) {
        return false;
      }
      pending.remove(k);
      applied(k, now);
      return true;
    }

    private void applied(KeyId k, long at) {
      applied.incrementAndGet();
      if (last.size() >= 100_000) {
        last.values().removeIf(t -> t - (at - intervalNanos) <= 0);
      }
      last.put(k, at);
    }
  }

  /** A cache's consistency mode (the twin of hotkeyd.client.consistency.WatchGate). */
  static final class Gate {
    final boolean strict;
    final Leases leases = new Leases(LEASE_NANOS);
    final Intake intake;
    private final HotSet hotset;
    private final Clock clock;
    private final MessageAuth auth;
    private final Consumer<byte[]> drop;
    private final Runnable dropAll;
    private final Map<LocalCache.CacheKey, Guard> guards = new ConcurrentHashMap<>();
    final AtomicLong lapsed = new AtomicLong();
    final AtomicLong strictMisses = new AtomicLong();
    final AtomicLong unwatched = new AtomicLong();
    final AtomicLong badHeartbeats = new AtomicLong();

    Gate(Consistency mode, HotSet hotset, Clock clock, MessageAuth auth, Consumer<byte[]> drop, Runnable dropAll) {
      this.strict = mode == Consistency.STRICT;
      this.hotset = hotset;
      this.clock = clock;
      this.auth = auth;
      this.drop = drop;
      this.dropAll = dropAll;
      this.intake = new Intake(auth, KEY_INTERVAL_NANOS);
    }

    /** Available mode with no watch heard and nothing deferred: the fast path needs no check. */
    boolean quiet() {
      return !strict && !leases.seen() && intake.pending.isEmpty();
    }

    boolean onInvalidation(byte[] payload) {
      List<byte[]> keys = intake.receive(payload, clock.nanoTime());
      if (keys == null) {
        return false;
      }
      for (byte[] k : keys) {
        drop.accept(k);
      }
      return true;
    }

    void onHeartbeat(byte[] payload) {
      if (auth != null) {
        byte[] body = auth.verify(payload);
        if (body == null) {
          badHeartbeats.incrementAndGet();
          return;
        }
        payload = body;
      }
      Heartbeat hb;
      try {
        hb = decode(payload, System.currentTimeMillis() / 1000.0);
      } catch (WireException e) {
        badHeartbeats.incrementAndGet();
        return;
      }
      if (leases.heard(hb, clock.nanoTime())) {
        guards.clear();
        dropAll.run(); // the node's watch reconnected: a write in the gap may be unseen
      }
    }

    void reset() {
      leases.forget();
      guards.clear();
    }

    private int slot(KeyId id) {
      return leases.clustered ? JedisClusterCRC16.getSlot(id.key()) : 0;
    }

    /** May the local copy under {@code ck} (if any) be served now? */
    /** At any read of {@code id}: apply its deferred invalidation if its turn came. */
    void settle(KeyId id, long now) {
      if (!intake.pending.isEmpty() && intake.due(new KeyId(id.key(), 0), now)) {
        drop.accept(id.key());
      }
    }

    boolean admit(LocalCache.CacheKey ck, long now) {
      KeyId id = ck.id();
      settle(id, now);
      if (!strict && !leases.seen()) {
        return true;
      }
      if (leases.serves(guards.get(ck), slot(id), now)) {
        return true;
      }
      lapsed.incrementAndGet();
      return !strict;
    }

    /** Record the guard of a fetch beginning now; false: read Redis, do not cache. */
    boolean beforeFetch(LocalCache.CacheKey ck, long now) {
      if (!strict && !leases.seen()) {
        return true;
      }
      KeyId id = ck.id();
      Guard g = leases.guard(slot(id), hotset.hotSince(id), now);
      if (g == null) {
        guards.remove(ck);
        unwatched.incrementAndGet();
        if (strict) {
          strictMisses.incrementAndGet();
          return false;
        }
        return true;
      }
      if (!g.equals(guards.get(ck))) {
        if (strict) {
          drop.accept(id.key()); // a copy (or a fetch in flight) under an older guard must not stay
        }
        if (guards.size() >= 100_000) {
          guards.clear();
        }
        guards.put(ck, g);
      }
      return true;
    }

    WatchStats stats() {
      return new WatchStats(leases.heartbeats.get(), badHeartbeats.get(), leases.epochChanges.get(),
          lapsed.get(), strictMisses.get(), unwatched.get(), intake.applied.get(), intake.deferred.get(),
          intake.oversized.get(), intake.unsigned.get(), intake.bad.get());
    }
  }
}
