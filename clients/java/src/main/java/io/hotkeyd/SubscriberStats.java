package io.hotkeyd;

import java.util.concurrent.atomic.AtomicLong;

/** Counters of one subscriber (for tests and dashboards). */
public final class SubscriberStats {
  public final AtomicLong messages = new AtomicLong();
  public final AtomicLong applied = new AtomicLong();
  public final AtomicLong stale = new AtomicLong();
  public final AtomicLong gaps = new AtomicLong();
  public final AtomicLong gapsUnrecovered = new AtomicLong();
  public final AtomicLong resyncs = new AtomicLong();
  public final AtomicLong connects = new AtomicLong();
  public final AtomicLong reconnects = new AtomicLong();
  /** Subscriptions lost; each dropped every local copy at once (spec/failure.md). */
  public final AtomicLong lost = new AtomicLong();
  /**
   * Wall time (epoch ms) of the last valid notification, 0 if none: a daemon that stopped
   * shows as a growing age while its keys live out their TTL (spec/failure.md).
   */
  public final AtomicLong lastNotificationMillis = new AtomicLong();
  public final AtomicLong badMessages = new AtomicLong();
  /** Messages and snapshots dropped because they were unsigned or did not verify. */
  public final AtomicLong unsigned = new AtomicLong();
  /** Malformed entries left out of otherwise good messages. */
  public final AtomicLong badEntries = new AtomicLong();
  /** Well-formed messages not believed (ts far in the future, seq far ahead): dropped. */
  public final AtomicLong suspect = new AtomicLong();
  public final AtomicLong invalidations = new AtomicLong();
  /** Subscriptions closed because they stayed silent and did not answer PING (half-open). */
  public final AtomicLong halfOpen = new AtomicLong();

  @Override
  public String toString() {
    return "SubscriberStats{messages=" + messages + ", applied=" + applied + ", stale=" + stale
        + ", gaps=" + gaps + ", gapsUnrecovered=" + gapsUnrecovered + ", resyncs=" + resyncs
        + ", connects=" + connects + ", reconnects=" + reconnects + ", lost=" + lost + ", badMessages="
        + badMessages + ", badEntries=" + badEntries + ", suspect=" + suspect + ", invalidations=" + invalidations
        + ", halfOpen=" + halfOpen + "}";
  }
}
