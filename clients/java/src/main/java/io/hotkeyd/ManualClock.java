package io.hotkeyd;

import java.util.concurrent.atomic.AtomicLong;

/** A clock that moves only when told to (tests, conformance vectors). */
public final class ManualClock implements Clock {
  private final AtomicLong nanos;
  private final AtomicLong epochMillis;

  public ManualClock(long startNanos, long epochMillis) {
    this.nanos = new AtomicLong(startNanos);
    this.epochMillis = new AtomicLong(epochMillis);
  }

  public ManualClock() {
    this(1_000_000_000_000L, 1_700_000_000_000L);
  }

  @Override
  public long nanoTime() {
    return nanos.get();
  }

  @Override
  public long currentTimeMillis() {
    return epochMillis.get();
  }

  public void advanceMillis(long ms) {
    nanos.addAndGet(ms * 1_000_000L);
    epochMillis.addAndGet(ms);
  }
}
