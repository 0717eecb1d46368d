package io.hotkeyd;

import java.util.concurrent.ThreadLocalRandom;

/** Exponential backoff with full jitter between {@code base} and {@code cap} (seconds). */
final class Backoff {
  private final double base;
  private final double cap;
  private int attempt;

  Backoff(double base, double cap) {
    this.base = base;
    this.cap = cap;
  }

  /** Milliseconds to wait before the next attempt. */
  synchronized long nextDelayMillis() {
    double ceiling = Math.min(cap, base * Math.pow(2, Math.min(attempt, 30)));
    attempt++;
    return (long) (1000 * ThreadLocalRandom.current().nextDouble(base / 2, Math.max(ceiling, base)));
  }

  synchronized void reset() {
    attempt = 0;
  }
}
