package io.hotkeyd;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Consumer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The I/O-free half of a subscriber: how messages, snapshots and gaps change the hot set.
 * {@link Subscriber} adds Redis; the conformance tests drive this class directly.
 */
public class SubscriberCore {
  private static final Logger LOG = LoggerFactory.getLogger(SubscriberCore.class);

  protected final HotSet hotset;
  protected final Namespace namespace;
  protected final SubscriberStats stats = new SubscriberStats();
  private final List<Consumer<byte[]>> invalidationListeners = new CopyOnWriteArrayList<>();
  private final List<Runnable> resetListeners = new CopyOnWriteArrayList<>();

  private volatile MessageAuth auth;

  public SubscriberCore(HotSet hotset, Namespace namespace) {
    this.hotset = hotset;
    this.namespace = namespace;
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
  public static final int MAX_MESSAGE_BYTES = 4 << 20;
  /** A message whose ts is further ahead of the wall clock than this (s) is suspect. */
  public static final double MAX_CLOCK_SKEW = 300.0;

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
