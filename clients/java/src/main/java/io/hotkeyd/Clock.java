package io.hotkeyd;

/** Time source, passed in (tests use {@link ManualClock}). */
public interface Clock {
  /** Monotonic nanoseconds: drives TTLs and intervals. */
  long nanoTime();

  /** Wall-clock milliseconds since the epoch: timestamps on the wire and heartbeats. */
  long currentTimeMillis();

  Clock SYSTEM =
      new Clock() {
        @Override
        public long nanoTime() {
          return System.nanoTime();
        }

        @Override
        public long currentTimeMillis() {
          return System.currentTimeMillis();
        }
      };
}
