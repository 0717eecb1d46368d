package io.hotkeyd;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Consumer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The I/O-free half of a subscriber: how messages, snapshots and gaps change the hot set.
 * {@link Subscriber} adds the Redis connection and a Redis {@link SnapshotStore}; the
 * conformance tests feed the same handler ({@link #onEventMessage}) with a map for a store.
 */
public class SubscriberCore {
  private static final Logger LOG = LoggerFactory.getLogger(SubscriberCore.class);

  protected final HotSet hotset;
  protected final Namespace namespace;
  protected final SubscriberStats stats = new SubscriberStats();
  private final List<Consumer<byte[]>> invalidationListeners = new CopyOnWriteArrayList<>();
  private final List<Runnable> resetListeners = new CopyOnWriteArrayList<>();
  private final List<Consumer<byte[]>> heartbeatListeners = new CopyOnWriteArrayList<>();

  private final SnapshotStore snapshots;
  private final double staleAfterSeconds;
  private volatile MessageAuth auth;

  /** Where a subscriber reads the daemons' snapshots (Redis in {@link Subscriber}). */
  public interface SnapshotStore {
    /** Ids of the instances whose last heartbeat is at or after {@code sinceSeconds} (unix s). */
    List<String> live(double sinceSeconds);

    /** The raw snapshots of {@code ids}, in order; null for an instance that has none. */
    List<byte[]> get(List<String> ids);
  }

  /** A store with no snapshot at all. */
  public static final SnapshotStore NO_SNAPSHOTS = new SnapshotStore() {
    @Override
    public List<String> live(double sinceSeconds) {
      return List.of();
    }

    @Override
    public List<byte[]> get(List<String> ids) {
      return new ArrayList<>(java.util.Collections.nCopies(ids.size(), (byte[]) null));
    }
  };

  public SubscriberCore(HotSet hotset, Namespace namespace) {
    this(hotset, namespace, NO_SNAPSHOTS, Limits.INSTANCE_MAX_AGE_S);
  }

  /**
   * A core that reads snapshots from {@code snapshots}, skipping instances whose heartbeat is
   * older than {@code staleAfterSeconds}.
   */
  public SubscriberCore(HotSet hotset, Namespace namespace, SnapshotStore snapshots,
      double staleAfterSeconds) {
    this.hotset = hotset;
    this.namespace = namespace;
    this.snapshots = snapshots;
    this.staleAfterSeconds = staleAfterSeconds;
  }

  /**
   * Handle one message of the events channel, as the live subscription does with each one:
   * parse it, apply it, and on a sequence gap read its instance's snapshot, apply that, then
   * the message. Problems with the content are counted and logged, never thrown.
   */
  public void onEventMessage(byte[] message) {
    Message msg = parse(message);
    if (msg != null) {
      stats.lastNotificationMillis.set(System.currentTimeMillis());
    }
    if (msg != null && onEvent(msg)) {
      List<Message> snaps;
      try {
        snaps = readSnapshots(msg.instance());
      } catch (RuntimeException e) {
        LOG.warn("resync of {} failed: {}", msg.instance(), e.getMessage());
        snaps = List.of();
      }
      afterResync(msg, snaps);
    }
  }

  /** Read the snapshots of live instances (or of one); a bad one is skipped and counted. */
  public List<Message> readSnapshots(String instance) {
    List<String> ids;
    if (instance != null) {
      ids = List.of(instance);
    } else {
      ids = snapshots.live(hotset.clock().currentTimeMillis() / 1000.0 - staleAfterSeconds);
    }
    if (ids.isEmpty()) {
      return List.of();
    }
    List<byte[]> raws = snapshots.get(ids);
    List<Message> out = new ArrayList<>();
    for (int i = 0; i < ids.size(); i++) {
      byte[] raw = raws.get(i);
      if (raw == null || (raw = verified(raw)) == null) {
        continue;
      }
      try {
        out.add(Message.parse(raw).asFull());
      } catch (WireException e) {
        stats.badMessages.incrementAndGet();
        LOG.warn("corrupt snapshot of instance {}: {}", ids.get(i), e.getMessage());
      }
    }
    return out;
  }

  /** Read only messages and snapshots signed with a shared key (null: accept unsigned). */
  public void setAuth(MessageAuth auth) {
    this.auth = auth;
  }

  /** The body of a signed message or snapshot, or null (counted) if it does not verify. */
  protected byte[] verified(byte[] data) {
    MessageAuth a = auth;
    if (a == null) {
      return data;
    }
    byte[] body = a.verify(data);
    if (body == null && Long.bitCount(stats.unsigned.incrementAndGet()) == 1) {
      LOG.warn("dropped an unsigned or forged message on {}", namespace.channel());
    }
    return body;
  }

  public HotSet hotset() {
    return hotset;
  }

  public Namespace namespace() {
    return namespace;
  }

  public SubscriberStats stats() {
    return stats;
  }

  /** {@code fn(payload)} for each message on the invalidation channel. */
  public void addInvalidationListener(Consumer<byte[]> fn) {
    invalidationListeners.add(fn);
  }

  /** {@code fn(payload)} for each message on the watch channel (the daemon's heartbeats). */
  public void addHeartbeatListener(Consumer<byte[]> fn) {
    heartbeatListeners.add(fn);
  }

  public void onHeartbeat(byte[] payload) {
    for (Consumer<byte[]> fn : heartbeatListeners) {
      try {
        fn.accept(payload);
      } catch (RuntimeException e) {
        LOG.error("heartbeat listener {} failed", fn, e);
      }
    }
  }

  /** {@code fn()} after every (re)subscription: invalidations may have been missed. */
  public void addResetListener(Runnable fn) {
    resetListeners.add(fn);
  }

  public void onSubscribed() {
    if (stats.connects.incrementAndGet() > 1) {
      stats.reconnects.incrementAndGet();
    }
    invalidationsResubscribed();
  }

  /** Run the reset listeners: the invalidation channel was (re)subscribed, some may be lost. */
  protected void invalidationsResubscribed() {
    for (Runnable fn : resetListeners) {
      try {
        fn.run();
      } catch (RuntimeException e) {
        LOG.error("reset listener {} failed", fn, e);
      }
    }
  }

  public void applySnapshots(List<Message> snapshots) {
    stats.resyncs.incrementAndGet();
    for (Message m : snapshots) {
      hotset.apply(m.asFull());
    }
  }

  /** Messages above this size are dropped unparsed. */
  public static final int MAX_MESSAGE_BYTES = Limits.MESSAGE_BYTES_MAX;
  /** A message whose ts is further ahead of the wall clock than this (s) is suspect. */
  public static final double MAX_CLOCK_SKEW = Limits.CLOCK_SKEW_S_MAX;

  /**
   * Parse a notification; null when malformed (counted in {@code badMessages}) or suspect
   * ({@code ts} too far in the future: counted in {@code suspect}). Malformed entries of a
   * good message are left out and counted in {@code badEntries}.
   */
  public Message parse(byte[] data) {
    stats.messages.incrementAndGet();
    Message msg;
    try {
      if (data.length > MAX_MESSAGE_BYTES) {
        throw new WireException("message of " + data.length + " bytes (limit " + MAX_MESSAGE_BYTES + ")");
      }
      data = verified(data);
      if (data == null) {
        return null;
      }
      msg = Message.parse(data);
    } catch (WireException e) {
      if (Long.bitCount(stats.badMessages.incrementAndGet()) == 1) {
        LOG.warn("bad notification on {}: {}", namespace.channel(), e.getMessage());
      }
      return null;
    }
    if (msg.skipped() > 0) {
      stats.badEntries.addAndGet(msg.skipped());
      LOG.debug("{} bad entries left out of a message of {}", msg.skipped(), msg.instance());
    }
    if (msg.ts() > hotset.clock().currentTimeMillis() / 1000.0 + MAX_CLOCK_SKEW) {
      suspect(msg, "its ts is in the future");
      return null;
    }
    return msg;
  }

  private void suspect(Message msg, String why) {
    if (Long.bitCount(stats.suspect.incrementAndGet()) == 1) {
      LOG.warn("suspect message for instance {} ignored: {} (seq {}, ts {}); forged?",
          msg.instance(), why, msg.seq(), msg.ts());
    }
  }

  /** Apply {@code msg}; true means: resync its instance, then {@link #afterResync}. */
  public boolean onEvent(Message msg) {
    ApplyResult res = hotset.apply(msg);
    if (res == ApplyResult.GAP) {
      if (hotset.lastSeq(msg.instance()) != null) {
        stats.gaps.incrementAndGet();
      }
      return true;
    }
    count(res);
    return false;
  }

  public void afterResync(Message msg, List<Message> snapshots) {
    applySnapshots(snapshots);
    for (Message snap : snapshots) {
      // The daemon writes its snapshot with (before) each message, so a real message is
      // never far ahead of the snapshot read after it.
      if (snap.instance().equals(msg.instance()) && msg.seq() - snap.seq() > hotset.maxSeqJump()) {
        suspect(msg, "its seq is far ahead of the snapshot's (" + snap.seq() + ")");
        return;
      }
    }
    ApplyResult res = hotset.apply(msg);
    if (res == ApplyResult.GAP) { // the snapshot lags too: accept, TTLs heal the rest
      stats.gapsUnrecovered.incrementAndGet();
      res = hotset.apply(msg, true);
    }
    count(res);
  }

  public void onInvalidation(byte[] payload) {
    stats.invalidations.incrementAndGet();
    for (Consumer<byte[]> fn : invalidationListeners) {
      try {
        fn.accept(payload);
      } catch (RuntimeException e) {
        LOG.error("invalidation listener {} failed", fn, e);
      }
    }
  }

  private void count(ApplyResult res) {
    if (res == ApplyResult.APPLIED) {
      stats.applied.incrementAndGet();
    } else {
      stats.stale.incrementAndGet();
    }
  }
}
