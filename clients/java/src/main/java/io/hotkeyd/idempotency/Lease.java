package io.hotkeyd.idempotency;

import java.time.Duration;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The right to run one operation, proven by a fencing token.
 *
 * <pre>{@code
 * Begin b = guard.begin("order-7f3a", body);
 * if (b.outcome() == Outcome.NEW) {
 *   try (Lease lease = b.lease().keepAlive()) {   // renewed in the background until closed
 *     byte[] result = placeOrder(lease.token());   // pass the token on to your own writes
 *     lease.complete(result);
 *   }                                             // not completed: released, a retry runs it
 * }
 * }</pre>
 *
 * <p>{@link #guarded()} is false only when the guard failed open (Redis unreachable):
 * nothing in Redis protects this run. Thread-safe.
 */
public final class Lease implements AutoCloseable {
  private final IdempotencyGuard guard;
  private final String key;
  private final String record;
  private final long token;
  private final String fingerprint;
  private final boolean guarded;
  private final AtomicLong beats = new AtomicLong();
  private final Object renewing = new Object();
  private volatile boolean finished;
  private volatile LeaseLostException lost;
  private ScheduledFuture<?> renewal;

  Lease(IdempotencyGuard guard, String key, String record, long token, String fingerprint,
      boolean guarded) {
    this.guard = guard;
    this.key = key;
    this.record = record;
    this.token = token;
    this.fingerprint = fingerprint;
    this.guarded = guarded;
  }

  public String key() {
    return key;
  }

  /** The Redis record ({@code <prefix>:idem:<digest>}). */
  public String record() {
    return record;
  }

  /** The fencing token: larger for every later holder of the key. */
  public long token() {
    return token;
  }

  public String fingerprint() {
    return fingerprint;
  }

  public boolean guarded() {
    return guarded;
  }

  /** Renewals done so far by {@link #keepAlive}. */
  public long beats() {
    return beats.get();
  }

  /** Whether a renewal was refused: another caller took over; stop working. */
  public boolean lost() {
    return lost != null;
  }

  /** Renews the lease every third of the guard's lease until {@link #close()}. */
  public Lease keepAlive() {
    return keepAlive(guard.lease().dividedBy(3));
  }

  /** Renews the lease every {@code every} until {@link #close()}; returns this lease. */
  public Lease keepAlive(Duration every) {
    if (every.isNegative() || every.isZero() || every.compareTo(guard.lease()) >= 0) {
      throw new IllegalArgumentException("every must be in (0, lease), got " + every);
    }
    if (!guarded) {
      return this;
    }
    synchronized (renewing) {
      if (renewal == null && !finished) {
        long ms = Math.max(1, every.toMillis());
        renewal = guard.scheduler().scheduleWithFixedDelay(this::beat, ms, ms,
            TimeUnit.MILLISECONDS);
      }
    }
    return this;
  }

  private void beat() {
    synchronized (renewing) {
      if (finished || lost != null) {
        return;
      }
      try {
        guard.extend(this, null);
        beats.incrementAndGet();
        guard.countRenewal();
      } catch (LeaseLostException e) {
        lost = e;
        renewal.cancel(false);
      } catch (IdempotencyException e) {
        // Redis down: try again at the next beat (the lease may run out meanwhile)
      }
    }
  }

  /** Stores {@code result} (DONE) and ends the lease; see {@link IdempotencyGuard#complete}. */
  public void complete(byte[] result) {
    stopRenewal();
    guard.complete(this, result);
  }

  /** Records a final failure that retries see too (e.g. payment declined). */
  public void fail(byte[] result) {
    stopRenewal();
    guard.fail(this, result);
  }

  /** Gives the key back: the next caller runs the operation. */
  public void release() {
    stopRenewal();
    guard.release(this);
  }

  void markFinished() {
    finished = true;
  }

  private void stopRenewal() {
    synchronized (renewing) { // waits for a renewal in flight: none runs after this
      if (renewal != null) {
        renewal.cancel(false);
      }
    }
  }

  /** Stops the renewal, and releases the key if it was neither completed nor released. */
  @Override
  public void close() {
    stopRenewal();
    if (!finished) {
      guard.abandon(this);
    }
  }
}
