package io.hotkeyd;

import java.util.concurrent.atomic.LongAdder;

/** One hot key as readers see it; lives in {@link HotSet#items()}. */
public final class HotItem {
  volatile HotEntry entry;
  /** Monotonic nanos after which the key is no longer hot. */
  volatile long expiresNanos;
  /** The instance that most recently announced the key: demand reports go there. */
  volatile String owner;
  /** Fast slots: the cached GET reply of this key (text, binary), owned by the local cache. */
  volatile LocalCache.Entry fastText;
  volatile LocalCache.Entry fastBytes;
  /** Reads served locally since the last demand report. */
  final LongAdder localReads = new LongAdder();

  HotItem(HotEntry entry, long expiresNanos, String owner) {
    this.entry = entry;
    this.expiresNanos = expiresNanos;
    this.owner = owner;
  }

  public HotEntry entry() {
    return entry;
  }

  public long expiresNanos() {
    return expiresNanos;
  }

  public String owner() {
    return owner;
  }
}
