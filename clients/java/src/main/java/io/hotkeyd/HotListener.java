package io.hotkeyd;

/**
 * Called when a key turns hot (not on re-announcements) or stops being hot (cool, full
 * replacement, TTL expiry). Runs on the subscriber's threads after the hot set's lock is
 * released; an exception is logged and swallowed.
 */
public interface HotListener {
  default void onHot(HotEntry entry) {}

  default void onCool(KeyId key) {}
}
