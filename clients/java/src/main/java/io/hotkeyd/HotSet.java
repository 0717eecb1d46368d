package io.hotkeyd;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The set of hot keys, merged over daemon instances; the twin of Python's {@code HotSet}.
 *
 * <p>Each instance numbers its messages with {@code seq} (+1 per message). The set keeps, per
 * instance, the last applied seq and the keys it announced, and merges them into one
 * concurrent map {@code KeyId -> HotItem} that readers consult without locks. Writers
 * ({@link #apply}, {@link #expire}) serialize on the set's monitor.
 *
 * <p>A key is hot while at least one instance announced it and its {@code ttl_ms} has not run
 * out since that announcement.
 */
public final class HotSet {
  private static final Logger LOG = LoggerFactory.getLogger(HotSet.class);
  /** Instances holding no keys are forgotten after this long without a message. */
  private static final long FORGET_IDLE_NANOS = Limits.HOTSET_FORGET_IDLE_S * 1_000_000_000L;

  private final Clock clock;
  private final int maxKeys;
  private volatile long maxTtlMs = Limits.HOTSET_TTL_MS_MAX;
  private volatile int maxKeysPerInstance = Limits.HOTSET_KEYS_PER_INSTANCE_MAX;
  private volatile long maxSeqJump = Limits.SEQ_JUMP_MAX;
  private final AtomicLong clamped = new AtomicLong();
  private final ConcurrentHashMap<KeyId, HotItem> items = new ConcurrentHashMap<>();
  private final Map<String, Instance> instances = new HashMap<>();
  private final List<HotListener> listeners = new CopyOnWriteArrayList<>();
  private final AtomicLong dropped = new AtomicLong();
  private final AtomicLong callbackErrors = new AtomicLong();

  private static final class Instance {
    Long seq;
    double ts;
    boolean finalMsg;
    long seenNanos;
    Map<KeyId, Long> keys = new HashMap<>();
    Map<KeyId, Long> since = new HashMap<>(); // the seq of the announcement that made it hot
  }

  public HotSet(Clock clock, int maxKeys) {
    if (maxKeys < 1) {
      throw new IllegalArgumentException("maxKeys must be >= 1, got " + maxKeys);
    }
    this.clock = clock;
    this.maxKeys = maxKeys;
  }

  public HotSet(Clock clock) {
    this(clock, Limits.HOTSET_KEYS_MAX);
  }

  public Clock clock() {
    return clock;
  }

  /**
   * Bounds on what one message can do (a forged or buggy publisher): an announcement keeps a
   * key hot at most {@code maxTtlMs} (60 s by default; longer TTLs are cut and counted in
   * {@link #clamped()}); one instance holds at most {@code maxKeysPerInstance} keys; a
   * {@code seq} more than {@code maxSeqJump} ahead of what was applied is a gap, even in a
   * full message.
   */
  public HotSet limits(long maxTtlMs, int maxKeysPerInstance, long maxSeqJump) {
    this.maxTtlMs = Math.max(1, maxTtlMs);
    this.maxKeysPerInstance = maxKeysPerInstance;
    this.maxSeqJump = maxSeqJump;
    return this;
  }

  public long maxSeqJump() {
    return maxSeqJump;
  }

  /** Announcements whose TTL was cut to the maximum. */
  public long clamped() {
    return clamped.get();
  }

  // ------------------------------------------------------------------ readers

  /** Live map for lock-free lookups; check {@link HotItem#expiresNanos()} when it matters. */
  public Map<KeyId, HotItem> items() {
    return items;
  }

  /** The item of {@code id} if it is hot now, else null. Lock-free. */
  public HotItem get(KeyId id) {
    HotItem it = items.get(id);
    return it == null || it.expiresNanos - clock.nanoTime() <= 0 ? null : it;
  }

  public boolean isHot(KeyId id) {
    return get(id) != null;
  }

  /** Keys hot now (a copy). */
  public List<KeyId> keys() {
    long now = clock.nanoTime();
    List<KeyId> out = new ArrayList<>();
    items.forEach((k, it) -> {
      if (it.expiresNanos - now > 0) {
        out.add(k);
      }
    });
    return out;
  }

  public int size() {
    return items.size();
  }

  /** Announcements of new keys dropped because the set was full. */
  public long dropped() {
    return dropped.get();
  }

  public synchronized Long lastSeq(String instance) {
    Instance st = instances.get(instance);
    return st == null ? null : st.seq;
  }

  public void addListener(HotListener listener) {
    listeners.add(listener);
  }

  // ------------------------------------------------------------------ writers

  public ApplyResult apply(Message msg) {
    return apply(msg, false);
  }

  /**
   * Apply one message (or snapshot, which is a full message).
   *
   * @param force apply even across a gap (after a resync could not close it)
   * @return {@link ApplyResult#GAP} when the caller should resync the instance first;
   *     nothing changed then
   */
  public ApplyResult apply(Message msg, boolean force) {
    long now = clock.nanoTime();
    List<HotEntry> turnedHot = new ArrayList<>();
    List<KeyId> cooled = new ArrayList<>();
    synchronized (this) {
      Instance st = instances.get(msg.instance());
      if (msg.full()) {
        if (st != null && st.seq != null && !newerFull(st, msg)) {
          return ApplyResult.STALE;
        }
        if (st != null && st.seq != null && msg.seq() - st.seq > maxSeqJump && !force) {
          return ApplyResult.GAP;
        }
        if (st == null) {
          st = new Instance();
          instances.put(msg.instance(), st);
        }
        Map<KeyId, Long> old = st.keys;
        st.keys = new HashMap<>();
        announce(st, msg, now, turnedHot);
        for (KeyId k : old.keySet()) {
          if (!st.keys.containsKey(k)) {
            st.since.remove(k);
            withdraw(k, now, cooled);
          }
        }
      } else {
        if (st != null && st.seq != null && msg.seq() <= st.seq) {
          return ApplyResult.STALE;
        }
        boolean gap = st == null || st.seq == null || msg.seq() != st.seq + 1;
        if (gap && !force) {
          return ApplyResult.GAP;
        }
        if (st == null) {
          st = new Instance();
          instances.put(msg.instance(), st);
        }
        announce(st, msg, now, turnedHot);
        for (KeyId c : msg.cool()) {
          st.since.remove(c);
          if (st.keys.remove(c) != null) {
            withdraw(c, now, cooled);
          }
        }
      }
      st.seq = msg.seq();
      st.ts = msg.ts();
      st.finalMsg = msg.finalMsg();
      st.seenNanos = now;
    }
    notifyListeners(turnedHot, cooled);
    return ApplyResult.APPLIED;
  }

  /** Forget the seq of {@code instance}: its next message triggers a resync. */
  public synchronized void forgetInstance(String instance) {
    Instance st = instances.get(instance);
    if (st != null) {
      st.seq = null;
    }
  }

  /** Remove keys whose TTL ran out; returns how many cooled. Call periodically. */
  public int expire() {
    long now = clock.nanoTime();
    List<KeyId> cooled = new ArrayList<>();
    synchronized (this) {
      for (Instance st : instances.values()) {
        st.keys.values().removeIf(exp -> exp - now <= 0);
        st.since.keySet().retainAll(st.keys.keySet());
      }
      for (Map.Entry<KeyId, HotItem> e : items.entrySet()) {
        if (e.getValue().expiresNanos - now <= 0) {
          withdraw(e.getKey(), now, cooled);
        }
      }
      instances.values().removeIf(
          st -> st.keys.isEmpty() && (st.finalMsg || now - st.seenNanos >= FORGET_IDLE_NANOS));
    }
    notifyListeners(List.of(), cooled);
    return cooled.size();
  }

  /** Forget everything (onCool fires for every key). */
  public void clear() {
    List<KeyId> cooled;
    synchronized (this) {
      cooled = new ArrayList<>(items.keySet());
      items.clear();
      instances.clear();
    }
    notifyListeners(List.of(), cooled);
  }

  // ----------------------------------------------------------------- internal

  private void announce(Instance st, Message msg, long now, List<HotEntry> turnedHot) {
    for (HotEntry h : msg.hot()) {
      if (h.ttlMs() > maxTtlMs) {
        h = new HotEntry(h.id(), h.rate(), h.rule(), maxTtlMs, h.since(), h.kind());
        clamped.incrementAndGet();
      }
      if (!st.keys.containsKey(h.id()) && st.keys.size() >= maxKeysPerInstance) {
        dropped.incrementAndGet();
        continue;
      }
      long exp = now + Math.max(h.ttlMs(), 0) * 1_000_000L;
      HotItem item = items.get(h.id());
      if (item == null) {
        if (items.size() >= maxKeys) {
          dropped.incrementAndGet();
          continue;
        }
        items.put(h.id(), new HotItem(h, exp, msg.instance()));
        turnedHot.add(h);
      } else {
        item.entry = h;
        item.owner = msg.instance();
        item.expiresNanos = item.expiresNanos - now > 0 ? Math.max(item.expiresNanos, exp) : exp;
      }
      st.keys.put(h.id(), exp);
      st.since.putIfAbsent(h.id(), msg.seq());
    }
  }

  /**
   * (instance, seq of the announcement that made {@code id} hot there) per instance holding it
   * now, by instance name: what a strict read's guard checks the watch's armed against.
   */
  synchronized List<Map.Entry<String, Long>> hotSince(KeyId id) {
    long now = clock.nanoTime();
    List<Map.Entry<String, Long>> out = new ArrayList<>();
    for (Map.Entry<String, Instance> e : instances.entrySet()) {
      Long exp = e.getValue().keys.get(id);
      Long seq = e.getValue().since.get(id);
      if (exp != null && exp - now > 0 && seq != null) {
        out.add(Map.entry(e.getKey(), seq));
      }
    }
    out.sort(Map.Entry.comparingByKey());
    return out;
  }

  /** {@code key} lost one instance's claim: keep it while another still holds it. */
  private void withdraw(KeyId key, long now, List<KeyId> cooled) {
    long best = Long.MIN_VALUE;
    String owner = null;
    for (Map.Entry<String, Instance> e : instances.entrySet()) {
      Long exp = e.getValue().keys.get(key);
      if (exp != null && (owner == null || exp - best > 0)) {
        best = exp;
        owner = e.getKey();
      }
    }
    HotItem item = items.get(key);
    if (item == null) {
      return;
    }
    if (owner != null && best - now > 0) {
      item.expiresNanos = best;
      item.owner = owner;
    } else {
      items.remove(key);
      cooled.add(key);
    }
  }

  private void notifyListeners(List<HotEntry> turnedHot, List<KeyId> cooled) {
    if (turnedHot.isEmpty() && cooled.isEmpty()) {
      return;
    }
    for (HotEntry e : turnedHot) {
      for (HotListener l : listeners) {
        try {
          l.onHot(e);
        } catch (RuntimeException ex) {
          callbackFailed(l, ex);
        }
      }
    }
    for (KeyId k : cooled) {
      for (HotListener l : listeners) {
        try {
          l.onCool(k);
        } catch (RuntimeException ex) {
          callbackFailed(l, ex);
        }
      }
    }
  }

  private void callbackFailed(HotListener l, RuntimeException ex) {
    long n = callbackErrors.incrementAndGet();
    if (Long.bitCount(n) == 1) { // 1, 2, 4, 8 ...: rate-limited
      LOG.warn("hot-set listener {} failed ({} failures so far)", l, n, ex);
    }
  }

  /** A full message supersedes: higher seq, or lower seq with a later ts (restarted daemon). */
  private static boolean newerFull(Instance st, Message msg) {
    return msg.seq() > st.seq || (msg.seq() < st.seq && msg.ts() > st.ts);
  }
}
