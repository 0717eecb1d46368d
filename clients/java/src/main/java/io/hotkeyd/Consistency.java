package io.hotkeyd;

/**
 * What a {@link HotCache} serves while the daemon's watch cannot vouch for a copy
 * (docs/consistency.md).
 */
public enum Consistency {
  /**
   * The default: a copy is served until its TTL, as without a watch; reads the watch did not
   * vouch for are counted in {@link WatchStats#lapsed()}.
   */
  AVAILABLE,
  /**
   * A copy is served only while the latest heartbeat of its node is under 300 ms old, up,
   * carries the epoch the copy was fetched under and says the key is armed; otherwise the read
   * goes to Redis and is not cached.
   */
  STRICT
}
