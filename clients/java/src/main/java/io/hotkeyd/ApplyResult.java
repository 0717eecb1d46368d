package io.hotkeyd;

/** What {@link HotSet#apply} did with a message. */
public enum ApplyResult {
  APPLIED,
  /** seq already seen (duplicate, or covered by a newer snapshot): nothing changed. */
  STALE,
  /** seq jumped, or an unknown instance: resync that instance, then apply with force. */
  GAP
}
