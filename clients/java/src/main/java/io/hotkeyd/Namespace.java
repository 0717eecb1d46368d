package io.hotkeyd;

/**
 * Redis names of one hotkeyd deployment (prefix {@code hotkeyd} by default); the twin of
 * Python's {@code hotkeyd.wire.Namespace}. Snapshot and registry keys share the hash tag
 * {@code {prefix}}, so they live in one Redis Cluster slot.
 *
 * <p>{@code sharded}: the channels use sharded pub/sub (SSUBSCRIBE/SPUBLISH, Redis 7+), as the
 * daemon's {@code --sharded-pubsub}; on a Cluster a message then goes to its channel's shard
 * only, not over the cluster bus to every node. Daemon and applications must agree.
 */
public record Namespace(String prefix, String channelOverride, boolean sharded) {
  public static final Namespace DEFAULT = new Namespace("hotkeyd", null, false);

  public Namespace {
    if (prefix == null || prefix.isEmpty()) {
      throw new IllegalArgumentException("namespace prefix must not be empty");
    }
  }

  public Namespace(String prefix, String channelOverride) {
    this(prefix, channelOverride, false);
  }

  public static Namespace of(String prefix) {
    return new Namespace(prefix, null, false);
  }

  /** The same names on sharded pub/sub (the daemon runs with {@code --sharded-pubsub}). */
  public Namespace withSharded(boolean on) {
    return new Namespace(prefix, channelOverride, on);
  }

  /** The events channel: {@code P:events}. */
  public String channel() {
    return channelOverride != null ? channelOverride : prefix + ":events";
  }

  /** The instance registry: {@code {P}:instances}, a sorted set scored by heartbeat. */
  public String instances() {
    return "{" + prefix + "}:instances";
  }

  /** The snapshot key of {@code instance}: {@code {P}:snapshot:<instance>}. */
  public String snapshot(String instance) {
    return "{" + prefix + "}:snapshot:" + instance;
  }

  /** The invalidation channel: {@code P:invalidate}. */
  public String invalidateChannel() {
    return prefix + ":invalidate";
  }

  /** The daemon's watch heartbeats, one per data node every 100 ms (docs/consistency.md). */
  public String watchChannel() {
    return prefix + ":watch";
  }

  /** The demand-report channel of a daemon instance: {@code P:demand:<instance>}. */
  public String demandChannel(String instance) {
    return prefix + ":demand:" + instance;
  }
}
