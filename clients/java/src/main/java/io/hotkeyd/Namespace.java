package io.hotkeyd;

/**
 * Redis names of one hotkeyd deployment (prefix {@code hotkeyd} by default); the twin of
 * Python's {@code hotkeyd.wire.Namespace}. Snapshot and registry keys share the hash tag
 * {@code {prefix}}, so they live in one Redis Cluster slot.
 */
public record Namespace(String prefix, String channelOverride) {
  public static final Namespace DEFAULT = new Namespace("hotkeyd", null);

  public Namespace {
    if (prefix == null || prefix.isEmpty()) {
      throw new IllegalArgumentException("namespace prefix must not be empty");
    }
  }

  public static Namespace of(String prefix) {
    return new Namespace(prefix, null);
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

  /** The demand-report channel of a daemon instance: {@code P:demand:<instance>}. */
  public String demandChannel(String instance) {
    return prefix + ":demand:" + instance;
  }
}
