package io.hotkeyd.idempotency;

import java.time.Duration;

/**
 * The answer of {@link IdempotencyGuard#begin}.
 *
 * @param outcome see {@link Outcome}
 * @param lease set when the outcome is NEW (close it, or complete it)
 * @param result the stored result when the outcome is DONE
 * @param failed the stored result is a recorded failure ({@link Lease#fail})
 * @param retryAfter until the holder's lease runs out (IN_PROGRESS)
 * @param takeover NEW because an earlier holder's lease ran out (it may have crashed)
 */
public record Begin(
    Outcome outcome, Lease lease, byte[] result, boolean failed, Duration retryAfter,
    boolean takeover) {
  static Begin of(Outcome o) {
    return new Begin(o, null, null, false, Duration.ZERO, false);
  }
}
